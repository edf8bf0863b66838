"""flip, scatter and gather with a general index (tvk_kernels.kernels.dim_index), scatter_add,
scatter_reduce, index_fill, advanced indexing x[idx] (aten.index.Tensor) with its backward
(aten.index_put), and the sync ops whose output size depends on data (nonzero, masked_select,
boolean-mask indexing): one read of the count, then kernels.

flip and scatter are what sort/topk and cumsum need for their backward. aten.scatter.src and
aten.gather here replace misc.py's size-1-index versions (this group is imported after misc,
see aten/__init__.py); scatter.value stays there. The sums (scatter_add, index_put with
accumulate=True) run on the deterministic embedding backward: no float atomics, the same bits
every run.
"""
from __future__ import annotations

import torch

from tvk_kernels.kernels import dim_index as dim_index_kernels

from ..op_registry import register
from .._tensor import TVKTensor, new_tensor
from .copies import cast, clone, contig, contig_dtype
from ._index_check import check_index_range
from ._util import addr, dev
from .embedding import embedding_dense_backward, index_select
from .misc import index_vector

aten = torch.ops.aten
# dtypes moved as raw bits; narrower ones travel as int32 or float32 (exact both ways)
_ELEM_BYTES = {torch.float32: 4, torch.int32: 4, torch.int64: 8}
_WIDEN = {torch.bool: torch.int32, torch.uint8: torch.int32, torch.int8: torch.int32, torch.int16: torch.int32,
          torch.float16: torch.float32}


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
    dim_index_kernels.flip(dev(self), addr(out), addr(x), list(x.shape), dims, list(x.stride()), list(out.stride()),
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
    dim_index_kernels.scatter(dev(self), addr(moved), addr(source), addr(idx), shape, d, self_shape[d], list(source.stride()) or [1],
               list(moved.stride()) or [1], _ELEM_BYTES[moved.dtype])
    return cast(moved, self.dtype) if moved is not out else out


def _same_dims(self, index, op):
    """self and index as torch sees them: a 0-dim tensor counts as 1-D."""
    if self.dim() == 0:
        self = self.reshape(1)
    if index.dim() == 0:
        index = index.reshape(1)
    if index.dim() != self.dim():
        raise RuntimeError(f"Index tensor must have the same number of dimensions as input tensor ({op})")
    return self, index


@register(aten.gather.default)
def gather(self, dim, index, *, sparse_grad=False):
    """out[c] = self[c with c[dim] = index[c]] for every element c of index (negative indices
    are errors, as in torch)."""
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"gather(): Expected dtype int32/int64 for index, got {index.dtype}")
    x, idx = _same_dims(self, index, "gather")
    d = dim % x.dim()
    for k in range(x.dim()):
        if k != d and idx.shape[k] > x.shape[k]:
            raise RuntimeError(f"Size does not match at dimension {k} expected index {list(index.shape)} to be no "
                               f"larger than self {list(self.shape)} apart from dimension {d}")
    moved = _movable(x, "aten.gather")
    out = new_tensor(list(idx.shape), moved.dtype, dev(self))
    if idx.numel():
        check_index_range(idx, x.shape[d], "gather", "dim", d)
        idx = contig_dtype(idx, torch.int64)
        dim_index_kernels.gather(dev(self), addr(out), addr(moved), addr(idx), list(idx.shape), d, x.shape[d], list(moved.stride()),
                  list(out.stride()), _ELEM_BYTES[moved.dtype])
    return cast(out, self.dtype).view(list(index.shape))


def _coordinate(n: int, k: int, ndim: int, device):
    """int64 [0, n) laid along dim k of an ndim-dim broadcastable shape."""
    shape = [1] * ndim
    shape[k] = n
    return index_vector(n, device).view(shape)


def _add_rows(self_rows, rows, values, op):
    """self_rows [P, R] + the sum of values[i] (rows [N, R]) into row rows[i] (int64 [N]), in a
    fixed order: float32 on the embedding backward kernel, int64 and int32 (exact) through
    scatter_reduce's segmented sum."""
    if values.dtype in (torch.int64, torch.int32) and values.dtype == self_rows.dtype:
        width = self_rows.shape[1]
        dest = rows.view(-1, 1) * width + _coordinate(width, 1, 2, dev(rows))
        out = scatter_reduce(self_rows.reshape(-1), 0, dest.reshape(-1), values.reshape(-1), "sum")
        return out.view(self_rows.shape)
    if values.dtype != torch.float32:
        raise NotImplementedError(f"TorchVK: {op} with accumulation supports float32, int64 and int32 values, "
                                  f"got {values.dtype}")
    sums = embedding_dense_backward(values, rows, self_rows.shape[0], -1, False)
    return self_rows + sums


@register(aten.scatter_add.default)
def scatter_add(self, dim, index, src):
    """out = self; out[c with c[dim] = index[c]] += src[c] for every element c of index, summed
    in a fixed order (deterministic, no atomics). float32."""
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"scatter(): Expected dtype int32/int64 for index, got {index.dtype}")
    if src.dtype != self.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype ({self.dtype} vs {src.dtype})")
    x, idx = _same_dims(self, index, "scatter_add")
    s = src.reshape(1) if src.dim() == 0 else src
    d = dim % x.dim()
    if idx.numel() == 0:
        return clone(self)
    check_index_range(idx, x.shape[d], "scatter_add", "dim", d)
    lin = _destinations(x, idx, d)
    for k in range(x.dim()):  # src may be larger than index: its leading part is used
        s = s.narrow(k, 0, idx.shape[k])
    out = _add_rows(x.reshape(-1, 1), lin.reshape(-1), s.reshape(-1, 1), "aten.scatter_add")
    return out.view(list(self.shape))


def _contiguous_strides(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.insert(0, acc)
        acc *= n
    return strides


# ------------------------------------------------------------------ x[idx]: aten.index.Tensor, aten.index_put
def _index_plan(self, indices, op):
    """Advanced indexing as one row lookup: self with its indexed dims moved first and merged,
    [P, R], and the row of each result element, int64 of the indices' broadcast shape B.
    Returns (rows, lin, perm, B, front, dims): perm puts the indexed dims `dims` first; the
    result is [B, the other dims] when `front`, else B sits where the indexed dims were (they
    are adjacent)."""
    if len(indices) > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()} (got {len(indices)})")
    dims = [d for d, i in enumerate(indices) if i is not None]
    for i in indices:
        if i is not None and i.dtype not in (torch.int64, torch.int32):
            raise IndexError(f"tensors used as indices must be long, int, byte or bool tensors (got {i.dtype})")
    wrapped = []
    for d in dims:
        i, n = indices[d], self.shape[d]
        i = torch.where(i < 0, i + n, i) if i.dtype == torch.int64 else torch.where(i < 0, i + n, i).long()
        check_index_range(i, n, op, "index", d)  # a bad negative one is reported after wrapping
        wrapped.append(i)
    wrapped = torch.broadcast_tensors(*wrapped)
    B = list(wrapped[0].shape)
    rest = [d for d in range(self.dim()) if d not in dims]
    lin, acc = None, 1
    for d, i in zip(reversed(dims), reversed(wrapped)):
        term = i * acc if acc != 1 else i
        lin = term if lin is None else lin + term
        acc *= self.shape[d]
    perm = dims + rest
    width = 1
    for d in rest:
        width *= self.shape[d]
    rows = self.permute(perm).reshape(acc, width)
    front = dims != list(range(dims[0], dims[-1] + 1))
    return rows, lin.reshape(-1), perm, B, front, dims


def _result_order(ndim_b, dims, rest_count, front):
    """The permutation taking [B, other dims] to the result's dim order."""
    order = list(range(ndim_b + rest_count))
    if front or dims[0] == 0:
        return order
    before = dims[0]  # other dims in front of the indexed ones
    return order[ndim_b:ndim_b + before] + order[:ndim_b] + order[ndim_b + before:]


@register(aten.index.Tensor)
def index_tensor(self, indices):
    """x[i0, i1, ...] with integer index tensors (None for a full slice), broadcast together;
    negative indices count from the end; an index out of range raises IndexError at the next
    sync point. A boolean mask index is a sync op: its nonzero() reads the count back."""
    indices = _expand_bool_indices(self, indices)
    if all(i is None for i in indices):
        return clone(self)
    rows, lin, perm, B, front, dims = _index_plan(self, indices, "index")
    rest_sizes = [self.shape[d] for d in perm[len(dims):]]
    picked = index_select(rows, 0, lin).view(B + rest_sizes)
    order = _result_order(len(B), dims, len(rest_sizes), front)
    return clone(picked.permute(order)) if order != list(range(len(order))) else picked


@register(aten.index_put.default)
def index_put(self, indices, values, accumulate=False):
    """out = self; out[indices] = values (or += with accumulate=True: summed in a fixed order, no
    atomics, float32). Duplicate indices without accumulate: one of the values wins, as in torch.
    A boolean mask index (x[mask] = v) is a sync op: its nonzero() reads the count back."""
    indices = _expand_bool_indices(self, indices)
    if all(i is None for i in indices):
        full = values.expand(self.shape)
        return self + full if accumulate else clone(full.to(self.dtype))
    rows, lin, perm, B, front, dims = _index_plan(self, indices, "index_put")
    rest_sizes = [self.shape[d] for d in perm[len(dims):]]
    order = _result_order(len(B), dims, len(rest_sizes), front)
    result_shape = [(B + rest_sizes)[k] for k in order]
    inverse = [order.index(k) for k in range(len(order))]
    if lin.numel() == 0:
        return clone(self)
    vals = values.to(self.dtype).expand(result_shape).permute(inverse).reshape(lin.numel(), rows.shape[1])
    if accumulate:
        out_rows = _add_rows(rows, lin, vals, "aten.index_put")
    else:
        out_rows = scatter_src(rows, 0, lin.view(-1, 1).expand(vals.shape).contiguous(), vals)
    back = [perm.index(k) for k in range(self.dim())]
    return clone(out_rows.view([self.shape[d] for d in perm]).permute(back))


@register(aten.scatter.value)
def scatter_value(self, dim, index, value):
    """scatter.src with src filled with value (any index shape, any dim)."""
    src = torch.full(list(index.shape), value, dtype=self.dtype, device=self.device)
    return scatter_src(self, dim, index, src)


@register(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(self, dim, index, value):
    """out = self; out.select(dim, i) = value for every i of the 1-D (or 0-dim) index."""
    if index.dim() > 1:
        raise IndexError(f"index_fill_(): Index is supposed to be a vector, got {index.dim()} dims")
    x = self.reshape(1) if self.dim() == 0 else self
    d = dim % x.dim()
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise RuntimeError(f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                               f"{value.dim()} dimension(s).")
        if type(value) is TVKTensor:
            fill = value.to(self.dtype)
        else:  # a CPU 0-dim tensor: a number
            fill = torch.full((), value.item(), dtype=self.dtype, device=self.device)
    else:
        fill = torch.full((), value, dtype=self.dtype, device=self.device)
    out = index_put(x, [None] * d + [index.reshape(-1)], fill)
    return out.view(self.shape)


# ------------------------------------------------------------------ sync ops: the output size depends on data
def compaction(mask_flat):
    """(count, target) for a flat bool mask: target[i] is the output slot of a set mask[i] (its
    rank among the set ones) and `count` (out of range: the kernel writes nothing) elsewhere.
    One sync: count is read back."""
    ranks = torch.cumsum(mask_flat, 0)
    count = int(aten._local_scalar_dense.default(ranks[-1])) if mask_flat.numel() else 0
    return count, torch.where(mask_flat, ranks - 1, count)


def compact(values_2d, target, count, fill=None):
    """out [count, W]: row target[i] of out = row i of values_2d [N, W] (rows whose target is
    `count` or more are dropped); rows no target reaches hold `fill` (None: left unset)."""
    n, w = values_2d.shape
    moved = _movable(values_2d, "compaction")
    if fill is None:
        out = new_tensor([count, w], moved.dtype, dev(target))
    else:
        out = torch.full([count, w], fill, dtype=moved.dtype, device=values_2d.device)
    if count and w:
        src = contig(moved)
        idx = contig(target.view(n, 1).expand(n, w))
        dim_index_kernels.scatter(dev(target), addr(out), addr(src), addr(idx), [n, w], 0, count, list(src.stride()),
                   list(out.stride()), _ELEM_BYTES[moved.dtype])
    return cast(out, values_2d.dtype)


def _coordinates(self):
    """int64 [numel, ndim]: the coordinates of each element of self, in row-major order."""
    ndim = self.dim()
    return torch.stack([_coordinate(self.shape[k], k, ndim, dev(self)).expand(self.shape).reshape(-1)
                        for k in range(ndim)], 1)


@register(aten.nonzero.default)
def nonzero(self):
    """The coordinates [count, ndim] of the non-zero elements, in row-major order. A sync op: one
    read of the count sizes the output, then kernels only."""
    mask = self if self.dtype == torch.bool else aten.ne.Scalar(self, 0)
    count, target = compaction(mask.reshape(-1))
    ndim = self.dim()
    if ndim == 0:
        return new_tensor([count, 0], torch.int64, dev(self))
    return compact(_coordinates(self), target, count)


@register(aten.nonzero_static.default)
def nonzero_static(self, *, size, fill_value=-1):
    """nonzero's first `size` rows, padded with fill_value: no sync (the size is given)."""
    if size < 0:
        raise RuntimeError(f"nonzero_static: 'size' must be an non-negative integer, but got {size}")
    mask = self if self.dtype == torch.bool else aten.ne.Scalar(self, 0)
    flat = mask.reshape(-1)
    ndim = self.dim()
    if ndim == 0 or flat.numel() == 0:
        return torch.full([size, ndim], fill_value, dtype=torch.int64, device=self.device)
    target = torch.where(flat, torch.cumsum(flat, 0) - 1, size)
    return compact(_coordinates(self), target, size, fill_value)


@register(aten.masked_select.default)
def masked_select(self, mask):
    """self's elements where mask (broadcast together) is True, flattened. A sync op: one read of
    the count sizes the output."""
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
    x, m = torch.broadcast_tensors(self, mask)
    count, target = compaction(m.reshape(-1))
    return compact(x.reshape(-1, 1), target, count).view(count)


@register(aten.masked_scatter.default)
def masked_scatter(self, mask, source):
    """out = self; the elements where mask is True take source's first elements in row-major
    order. Too few source elements raise (at the next sync point)."""
    if mask.dtype != torch.bool:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype {mask.dtype}")
    if source.dtype != self.dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but got {self.dtype} "
                           f"and {source.dtype}")
    m = mask.expand(self.shape).reshape(-1)
    ranks = torch.cumsum(m, 0)
    pick = torch.where(m, ranks - 1, -1)
    check_index_range(pick, source.numel(), "masked_scatter: expected source to have at least as many elements "
                      "as ones in mask", "assert", ignore=-1)
    if source.numel() == 0:
        return clone(self)
    taken = index_select_flat(source.reshape(-1), torch.clamp(pick, min=0))
    return torch.where(m, taken, self.reshape(-1)).view(self.shape)


def index_select_flat(values, index):
    """values[index] for 1-D tvk tensors, index int64 in range."""
    return index_select(values, 0, index)


def _expand_bool_indices(self, indices):
    """Boolean masks in an index list become one int64 index per dim they cover (nonzero, a sync)."""
    out, d = [], 0
    for i in indices:
        if i is not None and i.dtype in (torch.bool, torch.uint8):
            for k in range(i.dim()):
                if d + k >= self.dim() or i.shape[k] != self.shape[d + k]:
                    raise IndexError(f"The shape of the mask {list(i.shape)} at index {k} does not match the shape "
                                     f"of the indexed tensor {list(self.shape)} at index {d + k}")
            coords = nonzero(i if i.dtype == torch.bool else aten.ne.Scalar(i, 0))
            out.extend(coords.select(1, k) for k in range(i.dim()))
            d += i.dim()
        else:
            out.append(i)
            d += 1
    return out


# ------------------------------------------------------------------ scatter_reduce, index_reduce
def _destinations(x, idx, d):
    """Where each element of idx lands in x (contiguous, flattened): its coordinates with dim d
    replaced by its value; int64 of idx's shape."""
    strides = _contiguous_strides(list(x.shape))
    lin = idx * strides[d]
    for k in range(x.dim()):
        if k != d:
            lin = lin + _coordinate(idx.shape[k], k, x.dim(), dev(x)) * strides[k]
    return lin


def _segmented_scan(segments, values, combine):
    """Running combine(earlier, later) of values within runs of equal `segments` (1-D, sorted):
    log2(n) doubling steps of elementwise ops; each run's last entry holds the run's total."""
    n, step = values.numel(), 1
    while step < n:
        same = segments[step:] == segments[:-step]
        joined = torch.where(same, combine(values[:-step], values[step:]), values[step:])
        values = torch.cat([values[:step], joined])
        step *= 2
    return values


def _segment_ends(lin_sorted, values_sorted, bound):
    """out [bound] (x's flat size): the last value of each run of equal destinations in
    lin_sorted lands at that destination; other slots hold garbage (callers mask with `hit`)."""
    n = lin_sorted.numel()
    last = torch.cat([lin_sorted[:-1] != lin_sorted[1:], lin_sorted.new_ones(1, dtype=torch.bool)])
    target = torch.where(last, lin_sorted, bound)
    moved = _movable(values_sorted, "aten.scatter_reduce")
    out = new_tensor([bound], moved.dtype, dev(lin_sorted))
    src, idx = contig(moved), contig(target)
    dim_index_kernels.scatter(dev(idx), addr(out), addr(src), addr(idx), [n], 0, bound, [1], [1], _ELEM_BYTES[moved.dtype])
    return cast(out, values_sorted.dtype)


@register(aten.scatter_reduce.two)
def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
    """out = self; each element src[c] joins out[c with c[dim] = index[c]] under reduce ("sum",
    "mean", "amax", "amin", "prod"). With include_self=False a slot that some index reaches
    forgets self's value. Sums are deterministic (no atomics); amax, amin and prod sort the
    destinations (stable) and combine each run with a segmented scan (NaN propagates)."""
    if reduce not in ("sum", "mean", "amax", "amin", "prod"):
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if index.dtype != torch.int64:
        raise RuntimeError(f"scatter_reduce(): Expected dtype int64 for index, got {index.dtype}")
    if src.dtype != self.dtype:
        raise RuntimeError(f"scatter_reduce(): Expected self.dtype to be equal to src.dtype ({self.dtype} vs "
                           f"{src.dtype})")
    x, idx = _same_dims(self, index, "scatter_reduce")
    s = src.reshape(1) if src.dim() == 0 else src
    d = dim % x.dim()
    if idx.numel() == 0:
        return clone(self)
    if reduce == "mean" and self.dtype != torch.float32:
        raise NotImplementedError(f"TorchVK: scatter_reduce 'mean' supports float32, got {self.dtype}")
    check_index_range(idx, x.shape[d], "scatter_reduce", "dim", d)
    for k in range(x.dim()):  # src may be larger than index: its leading part is used
        s = s.narrow(k, 0, idx.shape[k])
    lin = _destinations(x, idx, d).reshape(-1)
    flat_self, vals = x.reshape(-1), s.reshape(-1)
    ones = torch.ones(lin.numel(), 1, dtype=torch.float32, device=self.device)
    hits = _add_rows(torch.zeros(flat_self.numel(), 1, device=self.device), lin, ones, "scatter_reduce").view(-1)
    hit = hits > 0
    base = flat_self if include_self else torch.where(hit, torch.zeros((), dtype=self.dtype, device=self.device),
                                                        flat_self)
    if reduce == "mean" or (reduce == "sum" and self.dtype == torch.float32):
        out = _add_rows(base.view(-1, 1), lin, vals.reshape(-1, 1), "scatter_reduce").view(-1)
        if reduce == "mean":
            out = torch.where(hit, out / (hits + 1 if include_self else hits), flat_self)
        return out.view(self.shape)
    combine = {"sum": torch.add, "amax": torch.maximum, "amin": torch.minimum, "prod": torch.mul}[reduce]
    lin_sorted, by_dest = aten.sort.stable(lin, stable=True)
    picked = _segment_ends(lin_sorted, _segmented_scan(lin_sorted, vals[by_dest], combine), flat_self.numel())
    if include_self:
        picked = combine(picked, flat_self)
    out = torch.where(hit, picked, flat_self)
    return out.view(self.shape)


@register(aten.index_reduce.default)
def index_reduce(self, dim, index, source, reduce, *, include_self=True):
    """scatter_reduce along dim with the 1-D index spread over source's other dims."""
    if index.dim() > 1:
        raise IndexError(f"index_reduce_(): Index is supposed to be a vector, got {index.dim()} dims")
    d = dim % max(self.dim(), 1)
    if source.dim() and index.numel() != source.shape[d]:
        raise IndexError(f"index_reduce_(): Number of indices ({index.numel()}) should be equal to "
                         f"source.size(dim) ({source.shape[d]})")
    check_index_range(index, self.shape[d] if self.dim() else 1, "index_reduce", "rows")  # torch's IndexError
    shape = [1] * max(source.dim(), 1)
    shape[d] = -1
    spread = index.reshape(shape).expand(source.shape if source.dim() else [1]).contiguous()
    return scatter_reduce(self, dim, spread, source, reduce, include_self=include_self)


_SCATTER_REDUCE = {"add": "sum", "multiply": "prod"}


@register(aten.scatter.reduce)
def scatter_reduce_src(self, dim, index, src, *, reduce):
    """scatter(..., reduce='add' | 'multiply'): scatter_reduce's sum or prod, self included."""
    if reduce not in _SCATTER_REDUCE:
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    return scatter_reduce(self, dim, index, src, _SCATTER_REDUCE[reduce])


@register(aten.scatter.value_reduce)
def scatter_reduce_value(self, dim, index, value, *, reduce):
    src = torch.full(list(index.shape), value, dtype=self.dtype, device=self.device)
    return scatter_reduce_src(self, dim, index, src, reduce=reduce)
