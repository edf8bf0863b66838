"""sort, topk (tvk_kernels.kernels.sort) and cumsum, cumprod, logcumsumexp (tvk_kernels.kernels.scan).

sort is always stable (torch's stable=True order, so results equal the CPU's, indices of ties
included); topk is the sort's first k columns. Other dims than the last are moved last with a
contiguous copy and moved back. Keys: float32 and int64; float16 sorts as float32, int32 and
bool as int64 (exact both ways). Scans compute in float32 or int64 with torch's dtypes:
cumsum/cumprod of integers and bool give int64. Their backward formulas run through
aten.scatter.src and aten.flip (aten/indexing.py).
"""
from __future__ import annotations

import torch

from tvk_kernels.kernels import scan as _Sc
from tvk_kernels.kernels import sort as _S

from .._dispatch import register
from .._tensor import new_tensor
from ._util import addr, cast, contig, dev

aten = torch.ops.aten
_INTS = (torch.bool, torch.int32, torch.int64)  # the integer dtypes tvk casts between
_FLOATS = (torch.float32, torch.float16)


def _dim(t, dim) -> int:
    ndim = max(t.dim(), 1)
    if not -ndim <= dim < ndim:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but got {dim})")
    return dim % ndim


def _key_dtype(t, op):
    if t.dtype in _FLOATS:
        return torch.float32
    if t.dtype in _INTS:
        return torch.int64
    raise TypeError(f"TorchVK: {op} does not support dtype {t.dtype} (float32, float16, int64, int32, bool)")


def _sorted(self, dim, descending, k, op):
    """(values, int64 indices) of the first k entries of each row along dim, sorted (stable)."""
    d = _dim(self, dim)
    key_dtype = _key_dtype(self, op)
    x = self.movedim(d, -1) if self.dim() else self.reshape(1)
    n = x.shape[-1]
    out_shape = list(x.shape[:-1]) + [k]
    vals = new_tensor(out_shape, key_dtype, dev(self))
    idx = new_tensor(out_shape, torch.int64, dev(self))
    if vals.numel():
        keys = contig(cast(x, key_dtype))
        _S.sort(dev(self), addr(keys), addr(vals), addr(idx), keys.numel() // n, n,
                "float32" if key_dtype == torch.float32 else "int64", descending, k)
    vals = cast(vals, self.dtype)
    if not self.dim():
        return vals.reshape(()), idx.reshape(())
    return contig(vals.movedim(-1, d)), contig(idx.movedim(-1, d))


@register(aten.sort.default)
def sort(self, dim=-1, descending=False):
    n = self.shape[_dim(self, dim)] if self.dim() else 1
    return _sorted(self, dim, descending, n, "aten.sort")


@register(aten.sort.stable)
def sort_stable(self, *, stable=None, dim=-1, descending=False):
    return sort(self, dim, descending)


@register(aten.topk.default)
def topk(self, k, dim=-1, largest=True, sorted=True):
    """The k largest (smallest) along dim, always in sorted order (allowed when sorted=False)."""
    n = self.shape[_dim(self, dim)] if self.dim() else 1
    if not 0 <= k <= n:
        raise RuntimeError(f"selected index k out of range (k={k}, size {n} along dim {dim})")
    return _sorted(self, dim, largest, k, "aten.topk")


# out= variants: their overload names ("values", "values_stable") are not the "out" that the
# dispatcher's generic out path recognises
def _into(values, indices, result):
    from .copies import copy_into, resize_

    for dst, src in zip((values, indices), result):
        if tuple(dst.shape) != tuple(src.shape):
            resize_(dst, src.shape)
        copy_into(dst, src)
    return values, indices


@register(aten.sort.values)
def sort_out(self, dim=-1, descending=False, *, values, indices):
    return _into(values, indices, sort(self, dim, descending))


@register(aten.sort.values_stable)
def sort_stable_out(self, *, stable=None, dim=-1, descending=False, values, indices):
    return _into(values, indices, sort(self, dim, descending))


@register(aten.topk.values)
def topk_out(self, k, dim=-1, largest=True, sorted=True, *, values, indices):
    return _into(values, indices, topk(self, k, dim, largest, sorted))


# ------------------------------------------------------------------ scans
def _scan(op, self, dim, out_dtype):
    d = _dim(self, dim)
    compute = torch.int64 if out_dtype in _INTS else torch.float32
    if out_dtype not in _INTS + _FLOATS:
        raise TypeError(f"TorchVK: cumulative {op} does not support dtype {out_dtype}")
    x = contig(cast(cast(self, out_dtype), compute))  # torch casts to the result dtype first
    shape = list(x.shape) or [1]
    outer = 1
    for s in shape[:d]:
        outer *= s
    inner = 1
    for s in shape[d + 1:]:
        inner *= s
    out = new_tensor(self.shape, compute, dev(self))
    if out.numel():
        _Sc.scan(dev(self), op, addr(x), addr(out), outer, shape[d], inner,
                 dtype="int64" if compute == torch.int64 else "float32")
    return cast(out, out_dtype)


def _int_to_int64(self, dtype):
    if dtype is not None:
        return dtype
    return torch.int64 if self.dtype in _INTS else self.dtype


@register(aten.cumsum.default)
def cumsum(self, dim, *, dtype=None):
    return _scan("sum", self, dim, _int_to_int64(self, dtype))


@register(aten.cumprod.default)
def cumprod(self, dim, *, dtype=None):
    return _scan("prod", self, dim, _int_to_int64(self, dtype))


@register(aten.logcumsumexp.default)
def logcumsumexp(self, dim):
    if self.dtype not in _FLOATS:
        raise RuntimeError(f"logcumsumexp(): expected floating point input, got {self.dtype}")
    return _scan("logsumexp", self, dim, self.dtype)
