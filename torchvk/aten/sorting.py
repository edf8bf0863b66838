"""sort, topk (tvk_kernels.kernels.sort) and cumsum, cumprod, logcumsumexp (tvk_kernels.kernels.scan);
from them: kthvalue, median, nanmedian, mode, cummax, cummin, searchsorted, bucketize, unique.

sort is always stable (torch's stable=True order, so results equal the CPU's, indices of ties
included); topk is the sort's first k columns. Other dims than the last are moved last with a
contiguous copy and moved back. Keys: float32 and int64; float16 sorts as float32, the other
integers and bool as int64 (exact both ways). Scans compute in float32 or int64 with torch's
dtypes: cumsum/cumprod of integers and bool give int64. Their backward formulas run through
aten.scatter.src and aten.flip (aten/indexing.py).
"""
from __future__ import annotations

import torch

from tvk_kernels.kernels import dim_index as dim_index_kernels
from tvk_kernels.kernels import scan as scan_kernels
from tvk_kernels.kernels import sort as sort_kernels

from ..op_registry import register
from .._tensor import new_tensor
from ._util import addr, dev
from .copies import cast, contig, copy_into, resize_
from .elementwise import require_floating
from .indexing import compact, compaction, scatter_src

aten = torch.ops.aten
_INTS = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)  # sorted and scanned as int64
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
    raise TypeError(f"TorchVK: {op} does not support dtype {t.dtype} (float32, float16, integers, bool)")


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
        sort_kernels.sort(dev(self), addr(keys), addr(vals), addr(idx), keys.numel() // n, n,
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
        scan_kernels.scan(dev(self), op, addr(x), addr(out), outer, shape[d], inner,
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
    require_floating("logcumsumexp_out_cpu", self)  # torch's NotImplementedError for integers and bool
    if self.dtype not in _FLOATS:
        raise RuntimeError(f"logcumsumexp(): expected floating point input, got {self.dtype}")
    return _scan("logsumexp", self, dim, self.dtype)


# ------------------------------------------------------------------ order statistics from the sort
def _kth_along(self, dim, k_row, keepdim):
    """(values, indices) of the k_row-th smallest entry (int64, keepdim shape, per row) along dim."""
    d = _dim(self, dim)
    x = self.reshape(1) if self.dim() == 0 else self
    vals, idx = sort(x, d)
    values, indices = torch.gather(vals, d, k_row), torch.gather(idx, d, k_row)
    if self.dim() == 0:
        return values.reshape(()), indices.reshape(())
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return values, indices


def _row_shape(self, d):
    shape = list(self.shape) or [1]
    shape[d] = 1
    return shape


@register(aten.kthvalue.default)
def kthvalue(self, k, dim=-1, keepdim=False):
    """The k-th smallest along dim (NaN counts as the largest, as in torch) and its index."""
    d = _dim(self, dim)
    n = self.shape[d] if self.dim() else 1
    if not 1 <= k <= n:
        raise IndexError(f"kthvalue(): selected number k out of range for dimension {dim} (k={k}, size {n})")
    k_row = torch.full(_row_shape(self, d), k - 1, dtype=torch.int64, device=self.device)
    return _kth_along(self, d, k_row, keepdim)


def _median(self, dim, keepdim, ignore_nan, op):
    """The lower median along dim: median propagates NaN (the first NaN's index), nanmedian skips
    NaNs (NaN only where a row is all NaN)."""
    d = _dim(self, dim)
    n = self.shape[d] if self.dim() else 1
    if n == 0:
        raise IndexError(f"{op}(): Expected reduction dim {dim} to have non-zero size.")
    if n > 1 << 24:
        raise NotImplementedError(f"TorchVK: {op} along a dim of {n} elements (more than 2**24) is not supported: "
                                  "its middle position is computed in float32")
    if self.dtype.is_floating_point:
        x = self if self.dim() else self.reshape(1)
        valid = aten.sum.dim_IntList(torch.logical_not(torch.isnan(x)), [d], True)
    else:
        valid = torch.full(_row_shape(self, d), n, dtype=torch.int64, device=self.device)
    # (valid - 1) // 2 for valid >= 0: halve in float32 (exact below 2**24), truncate to int64
    half = ((valid - 1).clamp(min=0).to(torch.float32) * 0.5).to(torch.int64)
    k_row = half if ignore_nan else torch.where(valid < n, valid, half)
    return _kth_along(self, d, k_row, keepdim)


@register(aten.median.dim)
def median_dim(self, dim, keepdim=False):
    return _median(self, dim, keepdim, False, "median")


@register(aten.nanmedian.dim)
def nanmedian_dim(self, dim, keepdim=False):
    return _median(self, dim, keepdim, True, "nanmedian")


@register(aten.median.default)
def median(self):
    if self.numel() == 0:
        return torch.full((), float("nan"), dtype=self.dtype, device=self.device)
    return _median(self.reshape(-1), 0, False, False, "median")[0]


@register(aten.nanmedian.default)
def nanmedian(self):
    if self.numel() == 0:
        return torch.full((), float("nan"), dtype=self.dtype, device=self.device)
    return _median(self.reshape(-1), 0, False, True, "nanmedian")[0]


@register(aten.kthvalue.values)
def kthvalue_out(self, k, dim=-1, keepdim=False, *, values, indices):
    return _into(values, indices, kthvalue(self, k, dim, keepdim))


@register(aten.median.dim_values)
def median_out(self, dim, keepdim=False, *, values, indices):
    return _into(values, indices, median_dim(self, dim, keepdim))


@register(aten.nanmedian.dim_values)
def nanmedian_out(self, dim, keepdim=False, *, values, indices):
    return _into(values, indices, nanmedian_dim(self, dim, keepdim))


# ------------------------------------------------------------------ cummax, cummin
def _running_best(self, d, is_max):
    """(values, indices) of the running max (min) along d: log2(n) doubling steps of elementwise
    ops. Ties take the later index and NaN beats everything (its last index), as torch's CPU."""
    n = self.shape[d]
    vals = self
    idx = torch.arange(n, device=self.device).view([n if k == d else 1 for k in range(self.dim())])
    idx = idx.expand(self.shape).contiguous()
    step = 1
    while step < n:
        a_v, a_i = vals.narrow(d, 0, n - step), idx.narrow(d, 0, n - step)  # the earlier run
        b_v, b_i = vals.narrow(d, step, n - step), idx.narrow(d, step, n - step)
        later = b_v >= a_v if is_max else b_v <= a_v
        if self.dtype.is_floating_point:
            later = torch.logical_or(torch.isnan(b_v), torch.logical_and(later, torch.logical_not(torch.isnan(a_v))))
        vals = torch.cat([vals.narrow(d, 0, step), torch.where(later, b_v, a_v)], d)
        idx = torch.cat([idx.narrow(d, 0, step), torch.where(later, b_i, a_i)], d)
        step *= 2
    return vals, idx


def _cum_helper(self, values, indices, dim, is_max):
    x = self.reshape(1) if self.dim() == 0 else self
    if x.numel():
        v, i = _running_best(x, _dim(x, dim), is_max)
        copy_into(values, v.view(values.shape))
        copy_into(indices, i.view(indices.shape))


@register(aten._cummax_helper.default)
def cummax_helper(self, values, indices, dim):
    _cum_helper(self, values, indices, dim, True)


@register(aten._cummin_helper.default)
def cummin_helper(self, values, indices, dim):
    _cum_helper(self, values, indices, dim, False)


# ------------------------------------------------------------------ searchsorted, bucketize
def _insertion_points(sorted_sequence, values, right, sorter, out_int32):
    """For each value, how many sequence entries sort before it (right: not after it), row by
    row. One stable sort of [values, sequence] per row (right: [sequence, values], so ties put
    the values after the entries): a value at sorted position p has p - (values before it)
    entries before it. O((N + M) log(N + M)); NaN sorts last, as torch's binary search finds."""
    seq = sorted_sequence if sorter is None else torch.gather(sorted_sequence, -1, sorter)
    if seq.dim() > 1 and list(seq.shape[:-1]) != list(values.shape[:-1]):
        raise RuntimeError(f"torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
                           f"dimensions of boundaries tensor and input value tensor must match, but we got "
                           f"boundaries tensor {list(seq.shape)} and input value tensor {list(values.shape)}")
    out_dtype = torch.int32 if out_int32 else torch.int64
    m = seq.shape[-1]
    rows = seq.reshape(-1, m) if seq.dim() > 1 else seq.reshape(1, m)
    vals = values.reshape(rows.shape[0], -1)
    n = vals.shape[1]
    if n == 0 or m == 0 or rows.shape[0] == 0:
        return torch.zeros(values.shape, dtype=out_dtype, device=values.device)
    common = torch.promote_types(seq.dtype, values.dtype)
    vals, rows = vals.to(common), rows.to(common)
    both = torch.cat([rows, vals], 1) if right else torch.cat([vals, rows], 1)
    first_value = m if right else 0  # where the values sit in `both`
    order = sort(both, 1)[1]
    is_value = torch.logical_and(order >= first_value, order < first_value + n)
    position = torch.arange(n + m, device=values.device).view(1, -1)
    entries_before = position - torch.cumsum(is_value, 1) + 1
    target = contig(torch.where(is_value, order - first_value, n))  # n: not a value, nothing written
    out = new_tensor([rows.shape[0], n], torch.int64, dev(values))
    src = contig(entries_before)
    dim_index_kernels.scatter(dev(values), addr(out), addr(src), addr(target), [rows.shape[0], n + m], 1, n, list(src.stride()),
               list(out.stride()), 8)  # int64 elements
    return cast(out, out_dtype).view(values.shape)


@register(aten.searchsorted.Tensor)
def searchsorted(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, got side of left "
                               "while right was True")
        right = side == "right"
    return _insertion_points(sorted_sequence, self, right, sorter, out_int32)


@register(aten.searchsorted.Scalar)
def searchsorted_scalar(sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    value = torch.full((), self, dtype=sorted_sequence.dtype, device=sorted_sequence.device)
    if sorted_sequence.dim() > 1:
        raise RuntimeError("torch.searchsorted(): input value can be a scalar only when boundaries tensor "
                           f"dimension is 1, but we got boundaries tensor dim({sorted_sequence.dim()})")
    return searchsorted(sorted_sequence, value, out_int32=out_int32, right=right, side=side, sorter=sorter)


@register(aten.bucketize.Tensor)
def bucketize(self, boundaries, *, out_int32=False, right=False):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim({boundaries.dim()})")
    return _insertion_points(boundaries, self, right, None, out_int32)


@register(aten.bucketize.Scalar)
def bucketize_scalar(self, boundaries, *, out_int32=False, right=False):
    value = torch.full((), self, dtype=boundaries.dtype, device=boundaries.device)
    return bucketize(value, boundaries, out_int32=out_int32, right=right)


# ------------------------------------------------------------------ unique (sync ops: the output size depends on data)
def _runs(values, return_inverse, return_counts, shape, order=None):
    """Runs of equal neighbours in the flat `values`: (one value per run, each element's run (in
    self's `shape`; `order` maps sorted positions back to self's), the length of each run). A
    sync op: one read of the run count; NaNs are all distinct, as in torch."""
    n = values.numel()
    starts_mask = torch.cat([torch.ones(1, dtype=torch.bool, device=values.device), values[1:] != values[:-1]])
    count, target = compaction(starts_mask)
    output = compact(values.view(n, 1), target, count).view(count)
    inverse = counts = torch.empty(0, dtype=torch.int64, device=values.device)
    if return_inverse:
        run = torch.cumsum(starts_mask, 0) - 1
        if order is not None:
            run = scatter_src(torch.empty_like(run), 0, order, run)
        inverse = run.view(shape)
    if return_counts:
        positions = torch.arange(n, device=values.device).view(n, 1)
        starts = compact(positions, target, count).view(count)
        ends = torch.cat([starts[1:], torch.full((1,), n, dtype=torch.int64, device=values.device)])
        counts = ends - starts
    return output, inverse, counts


def _empty_unique(self):
    none = torch.empty(0, dtype=torch.int64, device=self.device)
    return torch.empty(0, dtype=self.dtype, device=self.device), none.view(self.shape), none


@register(aten._unique2.default)
def unique2(self, sorted=True, return_inverse=False, return_counts=False):
    """torch.unique without dim: always sorted (allowed when sorted=False)."""
    if self.numel() == 0:
        return _empty_unique(self)
    values, order = sort(self.reshape(-1), 0)
    return _runs(values, return_inverse, return_counts, self.shape, order)


@register(aten._unique.default)
def unique(self, sorted=True, return_inverse=False):
    output, inverse, _ = unique2(self, sorted, return_inverse, False)
    return output, inverse


@register(aten.unique_consecutive.default)
def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
    if dim is not None:
        raise NotImplementedError("TorchVK: unique_consecutive with dim has no Vulkan implementation yet; "
                                  "use dim=None, or TVK_CPU_FALLBACK=1")
    if self.numel() == 0:
        return _empty_unique(self)
    return _runs(self.reshape(-1), return_inverse, return_counts, self.shape)


# ------------------------------------------------------------------ mode
@register(aten.mode.default)
def mode(self, dim=-1, keepdim=False):
    """The most frequent value along dim (the smallest on a tie) and the index of its last
    occurrence, as torch's CPU: sort (stable), measure each run of equal values with a running
    max of run starts, and take the first longest run."""
    d = _dim(self, dim)
    x = self.reshape(1) if self.dim() == 0 else self
    n = x.shape[d]
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    vals, idx = sort(x, d)
    position = torch.arange(n, device=self.device).view([n if k == d else 1 for k in range(x.dim())])
    position = position.expand(x.shape)
    starts = vals.narrow(d, 1, n - 1) != vals.narrow(d, 0, n - 1)
    starts = torch.cat([torch.ones(_row_shape(x, d), dtype=torch.bool, device=self.device), starts], d)
    run_start = _running_best(torch.where(starts, position, 0), d, True)[0]
    best = aten.max.dim(position - run_start, d, True)[1]  # the first of the longest runs' ends
    values, indices = torch.gather(vals, d, best), torch.gather(idx, d, best)
    if self.dim() == 0:
        return values.reshape(()), indices.reshape(())
    if not keepdim:
        values, indices = values.squeeze(d), indices.squeeze(d)
    return values, indices


@register(aten.mode.values)
def mode_out(self, dim=-1, keepdim=False, *, values, indices):
    return _into(values, indices, mode(self, dim, keepdim))
