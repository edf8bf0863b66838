"""triu / tril (masks from cached index vectors + where), and other small composites."""
from __future__ import annotations

import torch

from ..op_registry import register
from .._repeat import FreshOutputs, mark, offer
from .._tensor import from_cpu, itemsize, new_tensor
from .copies import KeptCopy, copies_into_fresh, device_copy, fill
from .elementwise import run

aten = torch.ops.aten
_index_cache: dict = {}


def index_vector(n: int, device):
    """A cached int64 tvk tensor [0, 1, ..., n-1] (uploaded once per size)."""
    key = (n, device.index)
    t = _index_cache.get(key)
    if t is None or t._tvk.buffer.freed:
        if len(_index_cache) > 64:
            _index_cache.clear()
        t = _index_cache[key] = from_cpu(torch.arange(n, dtype=torch.int64), device)
    return t


def _tri_mask(self, diagonal, lower):
    R, C = self.shape[-2], self.shape[-1]
    d = self._tvk.device
    rows = index_vector(R, d).view(R, 1)
    cols = index_vector(C, d).view(1, C)
    diff = run("sub", (cols, rows), dtype=torch.int64, scalars=(1,))
    return run("le" if lower else "ge", (diff, int(diagonal)), dtype=torch.bool)


@register(aten.tril.default)
def tril(self, diagonal=0):
    return run("where", (_tri_mask(self, diagonal, True), self, 0), dtype=self.dtype)


@register(aten.triu.default)
def triu(self, diagonal=0):
    return run("where", (_tri_mask(self, diagonal, False), self, 0), dtype=self.dtype)


@register(aten.tril_.default)
def tril_(self, diagonal=0):
    return run("where", (_tri_mask(self, diagonal, True), self, 0), out=self)


@register(aten.triu_.default)
def triu_(self, diagonal=0):
    return run("where", (_tri_mask(self, diagonal, False), self, 0), out=self)


# ------------------------------------------------------------------ view backward (zeros + copy into a view)
def _zeros(sizes, like):
    return fill(new_tensor(list(sizes), like.dtype, like._tvk.device), 0)


def _into_zeros(grad_output, input_sizes, view):
    """Zeros of input_sizes with grad_output copied into view(zeros), offered as the call's repeat (one fill, one
    copy) where the zeros were one buffer fill."""
    begun = mark()
    out = _zeros(input_sizes, grad_output)
    target = view(out)
    if begun is None or target.numel() == 0 or (out.numel() * itemsize(out.dtype)) % 4 or \
            grad_output._tvk.device is not out._tvk.device:
        device_copy(target, grad_output)
        return out
    record = copies_into_fresh([KeptCopy(target, grad_output)], zeroed=True)
    offer(begun, out, (grad_output,), FreshOutputs((out,), record))
    return out


@register(aten.select_backward.default)
def select_backward(grad_output, input_sizes, dim, index):
    return _into_zeros(grad_output, input_sizes, lambda out: out.select(dim, index))


@register(aten.slice_backward.default)
def slice_backward(grad_output, input_sizes, dim, start, end, step):
    return _into_zeros(grad_output, input_sizes, lambda out: aten.slice.Tensor(out, dim, start, end, step))


@register(aten.diagonal_backward.default)
def diagonal_backward(grad_output, input_sizes, offset, dim1, dim2):
    out = _zeros(input_sizes, grad_output)
    device_copy(out.diagonal(offset, dim1, dim2), grad_output)
    return out


@register(aten.isnan.default)
def isnan(self):
    if not self.dtype.is_floating_point:
        return run("ne", (self, self), dtype=torch.bool) if False else _zeros(self.shape, self).to(torch.bool)
    return run("ne", (self, self), dtype=torch.bool)


@register(aten.isinf.default)
def isinf(self):
    return run("eq", (run("abs", (self,)), float("inf")), dtype=torch.bool)


@register(aten.isneginf.default)
def isneginf(self):
    return run("eq", (self, float("-inf")), dtype=torch.bool)


@register(aten.isposinf.default)
def isposinf(self):
    return run("eq", (self, float("inf")), dtype=torch.bool)
