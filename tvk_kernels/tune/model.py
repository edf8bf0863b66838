"""The kernel launches of one training step of a model (tvk-tune --model, tvk-bench shapes).

The model is built by calling the factory, moved to "tvk", and run forward, through a loss,
backward and an optimizer step on random inputs, under a ShapeRecorder (record.py).
"""
from __future__ import annotations

import importlib

from .record import ShapeRecorder

LOSSES = ("cross_entropy", "token_cross_entropy", "mse")
OPTIMIZERS = ("adamw", "sgd", "none")


def load_factory(spec: str):
    """The callable named by "pkg.module:factory"; ValueError naming what is missing otherwise."""
    form = "expected --model pkg.module:factory, a module importable from here and a callable in it returning an nn.Module"
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--model {spec!r}: {form}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"--model {spec!r}: cannot import module {module_name!r} ({e}); {form} "
                         "(is its folder on PYTHONPATH?)") from None
    factory = module
    for part in attr.split("."):
        try:
            factory = getattr(factory, part)
        except AttributeError:
            raise ValueError(f"--model {spec!r}: module {module_name!r} has no attribute {attr!r}; {form}") from None
    if not callable(factory):
        raise ValueError(f"--model {spec!r}: {module_name}.{attr} is a {type(factory).__name__}, not callable; {form}")
    return factory


def record_step(model, x, loss_of, optimizer=None) -> ShapeRecorder:
    """The recorder of one training step of `model` (on tvk) on input `x`: loss_of(output) -> the
    loss, its backward, then optimizer.step() (None: no optimizer step). The step's errors surface
    here (a synchronize at its end)."""
    import torch  # lazy: tvk_kernels (and the rest of tvk-tune) works without torch

    with ShapeRecorder() as recorder:
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        loss_of(model(x)).backward()
        if optimizer is not None:
            optimizer.step()
        torch.tvk.synchronize(x.device)
    return recorder


def record_training_step(spec: str, input_shape, loss: str = "cross_entropy", target_shape=None,
                         device_index: int | None = None, input_high: int | None = None,
                         optimizer: str = "none") -> ShapeRecorder:
    """The recorder of one forward, loss, backward (and optimizer step) of the model on tvk.

    The input: random normal floats of input_shape, or random integers below input_high (token ids).
    cross_entropy: integer targets below the output's dim 1 (the classes), of target_shape or the
    output's shape without its class dim (dim 1, the last of a 2-d output); token_cross_entropy:
    the classes along the output's last dim (a language model's logits); mse: zeros of the output's
    shape (or target_shape). optimizer: "adamw", "sgd" (torch.optim's defaults, lr 1e-3) or "none"."""
    # lazy: torch and torchvk only for --model: tvk_kernels (and the rest of tvk-tune) works without torch
    import torch
    import torch.nn.functional as F
    import torchvk  # noqa: F401  (registers the "tvk" device)

    if loss not in LOSSES:
        raise ValueError(f"--loss {loss!r}: choose one of {', '.join(LOSSES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"--optimizer {optimizer!r}: choose one of {', '.join(OPTIMIZERS)}")
    factory = load_factory(spec)
    device = torch.device("tvk") if device_index is None else torch.device("tvk", device_index)
    model = factory()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"--model {spec!r}: the factory returned a {type(model).__name__}, not a torch.nn.Module")
    model = model.to(device).train()
    x = (torch.randn(*input_shape) if input_high is None else torch.randint(0, input_high, tuple(input_shape))).to(device)
    opt = {"adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}.get(optimizer)

    def loss_of(out):
        if loss == "mse":
            return F.mse_loss(out, torch.zeros(target_shape or out.shape).to(device))
        if loss == "token_cross_entropy":
            y = torch.randint(0, out.shape[-1], tuple(target_shape) if target_shape else out.shape[:-1])
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1).to(device))
        # torch's layout: classes along dim 1 ((N, C) or (N, C, d1, ...)), or (C,)
        classes = out.shape[1] if out.dim() >= 2 else out.shape[0]
        shape = tuple(target_shape) if target_shape else (*out.shape[:1], *out.shape[2:])[:max(out.dim() - 1, 0)]
        return F.cross_entropy(out, torch.randint(0, classes, shape).to(device))

    return record_step(model, x, loss_of, opt(model.parameters(), lr=1e-3) if opt else None)
