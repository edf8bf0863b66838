"""The kernel shapes one training step of a model launches (tvk-tune --model pkg.module:factory).

The model is built by calling the factory, moved to "tvk", and run forward, through a loss and
backward (no optimizer step) on random inputs, under a ShapeRecorder (record.py).
"""
from __future__ import annotations

import importlib

from .record import ShapeRecorder

LOSSES = ("cross_entropy", "mse")


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


def record_training_step(spec: str, input_shape, loss: str = "cross_entropy", target_shape=None,
                         device_index: int | None = None) -> dict:
    """{family: [tuner shape, ...]} of one forward, loss and backward of the model on tvk.

    cross_entropy: integer targets below the output's last dim (the classes), of target_shape or
    the output's shape without its class dim (dim 1, the last of a 2-d output); mse: zeros of the
    output's shape (or target_shape)."""
    # lazy: torch and torchvk only for --model: tvk_kernels (and the rest of tvk-tune) works without torch
    import torch
    import torchvk  # noqa: F401  (registers the "tvk" device)

    if loss not in LOSSES:
        raise ValueError(f"--loss {loss!r}: choose one of {', '.join(LOSSES)}")
    factory = load_factory(spec)
    device = torch.device("tvk") if device_index is None else torch.device("tvk", device_index)
    model = factory()
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"--model {spec!r}: the factory returned a {type(model).__name__}, not a torch.nn.Module")
    model = model.to(device).train()
    x = torch.randn(*input_shape).to(device)
    with ShapeRecorder() as recorder:
        out = model(x)
        if loss == "cross_entropy":  # torch's layout: classes along dim 1 ((N, C) or (N, C, d1, ...)), or (C,)
            classes = out.shape[1] if out.dim() >= 2 else out.shape[0]
            shape = tuple(target_shape) if target_shape else (*out.shape[:1], *out.shape[2:])[:max(out.dim() - 1, 0)]
            y = torch.randint(0, classes, shape).to(device)
            value = torch.nn.functional.cross_entropy(out, y)
        else:
            value = torch.nn.functional.mse_loss(out, torch.zeros(target_shape or out.shape).to(device))
        value.backward()
        torch.tvk.synchronize(device)  # the step's errors surface here, not in the tuner
    return recorder.shapes
