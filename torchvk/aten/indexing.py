"""flip, scatter and gather with a general index (tvk_kernels.kernels.dim_index), scatter_add,
and advanced indexing x[idx] (aten.index.Tensor) with its backward (aten.index_put).

flip and scatter are what sort/topk and cumsum need for their backward. aten.scatter.src and
aten.gather here replace misc.py's size-1-index versions (this group is imported after misc,
see aten/__init__.py); scatter.value stays there. The sums (scatter_add, index_put with
accumulate=True) run on the deterministic embedding backward: no float atomics, the same bits
every run.
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
        _D.gather(dev(self), addr(out), addr(moved), addr(idx), list(idx.shape), d, x.shape[d], list(moved.stride()),
                  list(out.stride()), _ELEM_BYTES[moved.dtype])
    return cast(out, self.dtype).view(list(index.shape))


def _coordinate(n: int, k: int, ndim: int, device):
    """int64 [0, n) laid along dim k of an ndim-dim broadcastable shape."""
    from .misc import index_vector

    shape = [1] * ndim
    shape[k] = n
    return index_vector(n, device).view(shape)


def _add_rows(self_rows, rows, values, op):
    """self_rows [P, R] + the sum of values[i] (rows [N, R]) into row rows[i] (int64 [N]), in a
    fixed order (the embedding backward kernel)."""
    from .embedding import embedding_dense_backward

    if values.dtype != torch.float32:
        raise NotImplementedError(f"TorchVK: {op} with accumulation supports float32 values, got {values.dtype}")
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
    # where each index element lands in x (contiguous, flattened): its coordinates, dim d replaced
    strides = _contiguous_strides(list(x.shape))
    lin = idx * strides[d]
    for k in range(x.dim()):
        if k != d:
            lin = lin + _coordinate(idx.shape[k], k, x.dim(), dev(self)) * strides[k]
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
        if i is not None and i.dtype in (torch.bool, torch.uint8):
            raise NotImplementedError(f"TorchVK: {op} with a boolean mask index needs nonzero (a sync) and is not "
                                      "supported; use torch.where(mask, x, other), or integer index tensors")
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
    sync point."""
    indices = list(indices)
    if all(i is None for i in indices):
        return clone(self)
    rows, lin, perm, B, front, dims = _index_plan(self, indices, "index")
    from .embedding import index_select

    rest_sizes = [self.shape[d] for d in perm[len(dims):]]
    picked = index_select(rows, 0, lin).view(B + rest_sizes)
    order = _result_order(len(B), dims, len(rest_sizes), front)
    return clone(picked.permute(order)) if order != list(range(len(order))) else picked


@register(aten.index_put.default)
def index_put(self, indices, values, accumulate=False):
    """out = self; out[indices] = values (or += with accumulate=True: summed in a fixed order, no
    atomics, float32). Duplicate indices without accumulate: one of the values wins, as in torch."""
    indices = list(indices)
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
