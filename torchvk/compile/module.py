"""`torchvk.compile(model)`: the compiled mode's entry point (a module, like torch.compile's)."""
from __future__ import annotations

import torch

from .._tensor import TVKTensor
from .trace import CallSpec, CompiledGraphs, signature


class CompiledModule(torch.nn.Module):
    """Calls `model` through compiled forward/backward programs, one per input signature.

    Called as the model is: positional and keyword arguments, tensors in tuples, lists and dicts,
    numbers, strings and None among them (traced as given); it returns what the model returns (a
    tensor, a tuple, a dict, a Hugging Face ModelOutput). A new batch size, dtype, train/eval mode,
    grad mode or non-tensor argument traces again (the cache key is the guard); parameters,
    state_dict and .to() are the wrapped model's (under `_orig_mod.`, as with torch.compile)."""

    def __init__(self, model: torch.nn.Module, *, fuse: bool = True, replay: bool = True):
        super().__init__()
        self._orig_mod = model
        self._fuse, self._replay = fuse, replay
        self._signatures: dict = {}

    def forward(self, *args, **kwargs):
        model = self._orig_mod
        named = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if b is not None]
        names = [n for n, _ in named]
        call = None
        if kwargs or not all(type(a) is TVKTensor for a in args):  # else: tensors positionally, the common case
            call = CallSpec(args, kwargs)
            args = call.tensors
        flat = [t for _, t in named] + list(args)
        for i, t in enumerate(flat):
            if not isinstance(t, TVKTensor):
                what = f"parameter/buffer {names[i]}" if i < len(names) else f"input {i - len(names)}"
                dev = t.device if isinstance(t, torch.Tensor) else type(t).__name__
                raise TypeError(f"torchvk.compile: {what} is {dev}, not a tvk tensor; compiled models take tensors "
                                "only, on the tvk device: call model.to('tvk') and move inputs with .to('tvk')")
        key = (model.training, tuple(names), call and call.key) + signature(flat)
        graphs = self._signatures.get(key)
        if graphs is None:
            graphs = self._signatures[key] = CompiledGraphs(model, names, flat, fuse=self._fuse, replay=self._replay,
                                                            call=call)
        return graphs.functional.rebuild_output(graphs(flat))

    def compile_stats(self) -> list:
        """Per traced signature: trace time, ops and kernels per graph, fusion, replay counters, peak bytes."""
        return [g.stats() for g in self._signatures.values()]


class WithLoss(torch.nn.Module):
    """forward(*inputs, target) -> loss_fn(model(*inputs), target): the loss and its backward join
    the compiled graphs instead of running as eager ops around them."""

    def __init__(self, model, loss_fn):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, *args):
        *inputs, target = args
        return self.loss_fn(self.model(*inputs), target)


def compile(model, *, loss_fn=None, fuse: bool = True, replay: bool = True) -> CompiledModule:
    """Compile a tvk module: forward and backward traced once per input signature by AOTAutograd,
    elementwise chains and matmul epilogues fused, each graph run as straight-line kernel calls
    and, from its second call, replayed from one recorded command buffer.

    loss_fn (e.g. F.cross_entropy): compile model and loss together; the result is called as
    `loss = compiled(x, target)` and `loss.backward()` runs one compiled backward graph."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError("torchvk.compile takes an nn.Module (compile the model, or pass loss_fn=; keep the optimizer "
                        "eager: torchvk.optim's fused steps are one kernel each)")
    if loss_fn is not None:
        model = WithLoss(model, loss_fn)
    return CompiledModule(model, fuse=fuse, replay=replay)
