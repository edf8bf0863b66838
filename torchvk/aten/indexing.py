"""flip and scatter with a general index, on tvk_kernels.kernels.dim_index.

These are what sort/topk and cumsum need for their backward: torch's formulas scatter the
gradient back by the sort indices (aten.scatter.src with a full index) and reverse-cumsum it
with aten.flip. aten.scatter.src here replaces misc.py's size-1-index version (this group is
imported after misc, see aten/__init__.py); scatter.value, scatter_add and gather stay there.
"""
from __future__ import annotations

import torch

from tvk_kernels.kernels import dim_index as _D

from .._dispatch import register
from .._tensor import new_tensor
from .copies import clone
from ._index_check import check_index_range
from ._util import addr, cast, contig_dtype, dev

aten = torch.ops.aten
# dtypes moved as raw bits; narrower ones travel as int32 or float32 (exact both ways)
_ELEM_BYTES = {torch.float32: 4, torch.int32: 4, torch.int64: 8}
_WIDEN = {torch.bool: torch.int32, torch.float16: torch.float32}


def _movable(t, op):
    if t.dtype in _ELEM_BYTES:
        return t
    if t.dtype in _WIDEN:
        return cast(t, _WIDEN[t.dtype])
    raise TypeError(f"TorchVK: {op} does not support dtype {t.dtype}")


@register(aten.flip.default)
def flip(self, dims):
    dims = [k % self.dim() for k in dims] if self.dim() else []  # torch has checked them
    x = _movable(self, "aten.flip")
    out = new_tensor(self.shape, x.dtype, dev(self))
    _D.flip(dev(self), addr(out), addr(x), list(x.shape), dims, list(x.stride()), list(out.stride()),
            _ELEM_BYTES[x.dtype])
    return cast(out, self.dtype)


@register(aten.scatter.src)
def scatter_src(self, dim, index, src):
    """out = self.clone(); out[c with c[dim] = index[c]] = src[c] for every element c of index."""
    d = dim % max(self.dim(), 1)
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"scatter(): Expected dtype int32/int64 for index, got {index.dtype}")
    if src.dtype != self.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype ({self.dtype} vs {src.dtype})")
    if index.dim() != self.dim() or src.dim() != self.dim():
        raise RuntimeError(f"Index tensor must have the same number of dimensions as self and src tensors "
                           f"(index {index.dim()}, self {self.dim()}, src {src.dim()})")
    shape = list(index.shape) or [1]
    self_shape, src_shape = list(self.shape) or [1], list(src.shape) or [1]
    for k, s in enumerate(shape):
        if s > src_shape[k] or (k != d and s > self_shape[k]):
            raise RuntimeError(f"Expected index {list(index.shape)} to be smaller than self {list(self.shape)} apart "
                               f"from dimension {d} and to be smaller size than src {list(src.shape)}")
    out = clone(self)
    if index.numel() == 0:
        return out
    check_index_range(index, self_shape[d], "scatter", "dim", d)
    idx = contig_dtype(index, torch.int64)
    moved = _movable(out, "aten.scatter")
    source = _movable(src, "aten.scatter")
    _D.scatter(dev(self), addr(moved), addr(source), addr(idx), shape, d, self_shape[d], list(source.stride()) or [1],
               list(moved.stride()) or [1], _ELEM_BYTES[moved.dtype])
    return cast(moved, self.dtype) if moved is not out else out
