"""triu / tril (masks from cached index vectors + where), and other small composites."""
from __future__ import annotations

import torch

from .._glue import register, register_decomposition
from .._tensor import from_cpu, new_tensor
from ._index_check import check_index_range
from .copies import device_copy, fill
from .elementwise import run
from .reductions import sum_dim

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


register_decomposition(aten.one_hot.default if hasattr(aten, "one_hot") else aten.tril.default)


# ------------------------------------------------------------------ view backward (zeros + copy into a view)
def _zeros(sizes, like):
    return fill(new_tensor(list(sizes), like.dtype, like._tvk.device), 0)


@register(aten.select_backward.default)
def select_backward(grad_output, input_sizes, dim, index):
    out = _zeros(input_sizes, grad_output)
    device_copy(out.select(dim, index), grad_output)
    return out


@register(aten.slice_backward.default)
def slice_backward(grad_output, input_sizes, dim, start, end, step):
    out = _zeros(input_sizes, grad_output)
    device_copy(aten.slice.Tensor(out, dim, start, end, step), grad_output)
    return out


@register(aten.diagonal_backward.default)
def diagonal_backward(grad_output, input_sizes, offset, dim1, dim2):
    out = _zeros(input_sizes, grad_output)
    device_copy(out.diagonal(offset, dim1, dim2), grad_output)
    return out


# ------------------------------------------------------------------ scatter along a dim of size-1 indices
def _index_hits(self, dim, index):
    """Bool mask over `self`'s dim: True where the position equals `index` (size 1 along dim)."""
    n = self.shape[dim]
    shape = [1] * self.dim()
    shape[dim] = n
    pos = index_vector(n, self._tvk.device).view(shape)
    return run("eq", (pos, index), dtype=torch.bool)


def _scatter_one(self, dim, index, src):
    """out = self with out[..., index, ...] = src along `dim`, for index/src of size 1 along dim
    (what max/min/argmax-style backward and gather-of-one use): an index compare and a where."""
    if self.dim() == 0:  # torch treats a 0-dim self (and its 0-dim index and src) as 1-D
        one = src.reshape(1) if isinstance(src, torch.Tensor) else src
        return _scatter_one(self.reshape(1), _wrap_dim(dim, 0), index.reshape(1), one).view([])
    dim = _wrap_dim(dim, self.dim())
    if index.shape[dim] != 1 or any(i != s for d, (i, s) in enumerate(zip(index.shape, self.shape)) if d != dim):
        raise NotImplementedError(f"TorchVK: aten.scatter supports an index of size 1 along dim {dim} covering the "
                                  f"other dims (got index {list(index.shape)} for self {list(self.shape)})")
    check_index_range(index, self.shape[dim], "scatter", "dim", dim)
    hit = _index_hits(self, dim, index)
    return run("where", (hit, src, self), dtype=self.dtype)


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


@register(aten.scatter.src)
def scatter_src(self, dim, index, src):
    return _scatter_one(self, dim, index, src)


@register(aten.scatter.value)
def scatter_value(self, dim, index, value):
    return _scatter_one(self, dim, index, value)


@register(aten.gather.default)
def gather(self, dim, index, *, sparse_grad=False):
    """gather of one element along dim (index of size 1 there): a masked sum over the dim."""
    if index.numel() == 0:
        return new_tensor(list(index.shape), self.dtype, self._tvk.device)
    if self.dim() == 0 or index.dim() == 0:  # torch treats a 0-dim self or index as 1-D
        flat = gather(self.reshape(-1) if self.dim() == 0 else self, dim,
                      index.reshape(-1) if index.dim() == 0 else index)
        return flat.view(list(index.shape))
    dim = _wrap_dim(dim, self.dim())
    if index.dim() != self.dim():
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    if index.shape[dim] != 1:
        raise NotImplementedError(f"TorchVK: aten.gather supports an index of size 1 along dim {dim}, "
                                  f"got {list(index.shape)}")
    for d in range(self.dim()):  # the result has the index's shape: other dims may be shorter than self's
        if d != dim and index.shape[d] != self.shape[d]:
            if index.shape[d] > self.shape[d]:
                raise RuntimeError(f"Size does not match at dimension {d} expected index {list(index.shape)} to be no "
                                   f"larger than self {list(self.shape)} apart from dimension {dim}")
            self = self.narrow(d, 0, index.shape[d])
    check_index_range(index, self.shape[dim], "gather", "dim", dim)
    hit = _index_hits(self, dim, index)
    picked = run("where", (hit, self, 0), dtype=self.dtype)
    return sum_dim(picked, [dim], True, dtype=self.dtype)


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
