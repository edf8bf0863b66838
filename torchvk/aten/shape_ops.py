"""Shape, copy-of-view, scatter-into-view and small reduction-like ops, mostly torch's own
decompositions (torch._decomp) into ops the table has: data, not code.

`*_copy` ops are the view, then a contiguous copy; `*_scatter` ops are a clone and a copy into
the view. Written here: the ops whose decomposition needs a piece without a Vulkan kernel
(roll, the *_scatter ops, addbmm, put, histc), equal (a sync op: it reads one bool), and
index_add, index_copy, max_unpool, which check their indices before the decomposition. Every
piece runs on Vulkan; a missing piece raises (no CPU round trip).
"""
from __future__ import annotations

import math

import torch
from torch._decomp import decomposition_table

from ..op_registry import register, register_composite, register_decomposition
from ._index_check import check_index_range
from .copies import clone, copy_into

aten = torch.ops.aten

DECOMPOSED = (
    # the view, then a copy
    aten.alias_copy, aten.expand_copy, aten.permute_copy, aten.t_copy, aten.transpose_copy, aten.squeeze_copy,
    aten.unsqueeze_copy, aten.view_copy, aten.unbind_copy, aten.split_with_sizes_copy, aten.diagonal_copy,
    aten.as_strided_copy, aten.narrow_copy, aten.unfold_copy,
    # a clone, then a copy into the view (the functional overloads are kernels, below)
    aten.slice_scatter.out, aten.select_scatter.out, aten.diagonal_scatter.out, aten.as_strided_scatter.out,
    aten.unfold_backward,
    # rearrangements and small reductions built from other ops
    aten.diag_embed, aten.trace, aten.nansum, aten.aminmax, aten.vdot, aten.addmv, aten.take, aten.masked_fill.Scalar_out, aten.masked_fill.Tensor_out,
    aten.pixel_shuffle, aten.pixel_unshuffle, aten.channel_shuffle, aten.im2col, aten.col2im, aten.isin,
    aten.linalg_cross,
)
register_decomposition(*DECOMPOSED)


# ------------------------------------------------------------------ written here (torch's decomposition
# of these needs ops without a Vulkan kernel: fmod, floor_divide, prims.copy_to)
@register(aten.roll.default)
def roll(self, shifts, dims=()):
    """Each dim rotated by its shift: the two slices swapped (one cat per dim). No dims: the
    flattened tensor rolls, then takes self's shape back."""
    shifts, dims = list(shifts), list(dims)
    if not dims:
        if len(shifts) != 1:
            raise RuntimeError(f"roll: expected 1 shift when no dims are given, got {len(shifts)}")
        return roll(self.reshape(-1), shifts, [0]).view(self.shape)
    if len(shifts) != len(dims):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims: {len(dims)}")
    out = self
    for shift, dim in zip(shifts, dims):
        n = out.shape[dim]
        s = shift % n if n else 0
        if s:
            out = torch.cat([out.narrow(dim, n - s, s), out.narrow(dim, 0, n - s)], dim)
    return out if out is not self else clone(self)


def _into_view(self, src, view_of):
    """A clone of self with src copied into view_of(clone)."""
    out = clone(self)
    copy_into(view_of(out), src)
    return out


@register(aten.slice_scatter.default)
def slice_scatter(self, src, dim=0, start=None, end=None, step=1):
    return _into_view(self, src, lambda o: aten.slice.Tensor(o, dim, start, end, step))


@register(aten.select_scatter.default)
def select_scatter(self, src, dim, index):
    return _into_view(self, src, lambda o: aten.select.int(o, dim, index))


@register(aten.diagonal_scatter.default)
def diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    return _into_view(self, src, lambda o: aten.diagonal.default(o, offset, dim1, dim2))


@register(aten.as_strided_scatter.default)
def as_strided_scatter(self, src, size, stride, storage_offset=None):
    """The view's geometry counts in the contiguous clone of self, as in torch."""
    out = clone(self, memory_format=torch.contiguous_format)
    copy_into(aten.as_strided.default(out, size, stride, storage_offset), src)
    return out


@register(aten.equal.default)
def equal(self, other):
    """True when both have the same shape and values. A sync op: it reads one bool back."""
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    return bool(aten._local_scalar_dense.default(aten.all.default(aten.eq.Tensor(self, other))))


@register(aten.addbmm.default)
def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """beta * self + alpha * (sum over the batch of batch1[i] @ batch2[i])."""
    summed = aten.sum.dim_IntList(aten.bmm.default(batch1, batch2), [0])
    if alpha != 1:
        summed = summed * alpha
    if beta == 0:  # torch ignores self (even its NaNs) when beta is 0
        return summed.expand(torch.broadcast_shapes(self.shape, summed.shape)).clone()
    return summed + (self * beta if beta != 1 else self)


@register(aten.put.default)
def put(self, index, source, accumulate=False):
    """self.flatten()[index] = source (or += with accumulate), negative indices from the end;
    an index out of range raises like torch (at the next sync point)."""
    if index.numel() != source.numel():
        raise RuntimeError(f"put_(): Expected source and index to have the same number of elements, but got "
                           f"source.numel() = {source.numel()}, index.numel() = {index.numel()}")
    if self.numel() == 0 and index.numel():
        raise IndexError("put_(): Tried to put elements into an empty tensor")
    flat = aten.index_put.default(self.reshape(-1), [index.reshape(-1)], source.reshape(-1), accumulate)
    return flat.view(self.shape)


@register(aten.put_.default)
def put_(self, index, source, accumulate=False):
    copy_into(self, put(self, index, source, accumulate))
    return self


@register_composite(aten.histc.default, traced=True)  # compiled mode traces its pieces too: torch's
def histc(self, bins=100, min=0, max=0):  # meta for the fake CPU tensors traced there refuses integers
    """Counts of self's elements in `bins` equal-width bins over [min, max] (the data's range when
    min == max); elements outside are ignored, max falls in the last bin; the counts have self's
    dtype. Integers bin in exact integer arithmetic, (x - min) * bins // (max - min), with min and max
    truncated to the dtype first, as CUDA does (transformers' MoE layers count tokens per expert
    with an int32 histc off the CPU); 16-bit floats bin in float32. Summed with the deterministic
    scatter_add (no atomics)."""
    if bins <= 0:
        raise RuntimeError(f"torch.histc(): bins must be > 0, but got {bins} for dimension 0")
    if min > max:
        raise RuntimeError(f"torch.histc(): max must be larger than min, got min {min} and max {max}")
    if self.dtype in (torch.float16, torch.bfloat16):
        return histc(self.to(torch.float32), bins, min, max).to(self.dtype)
    integer = not self.dtype.is_floating_point and self.dtype not in (torch.bool, torch.complex64)
    if self.dtype != torch.float32 and not integer:
        raise NotImplementedError(f"TorchVK: histc supports float32, float16, bfloat16 and integer tensors, "
                                  f"got {self.dtype}")
    x = self.reshape(-1).to(torch.int64) if integer else self.reshape(-1)
    if integer:
        min, max = int(min), int(max)  # the dtype's conversion, before the two are compared
    if min == max and x.numel():
        lo, hi = aten.amin.default(x), aten.amax.default(x)  # device scalars: no sync
        same = lo == hi
        lo, hi = torch.where(same, lo - 1, lo), torch.where(same, hi + 1, hi)
    else:  # an empty self with min == max: torch widens the range by 1 each side
        widen = 1 if min == max else 0
        lo = torch.full((), min - widen, dtype=x.dtype, device=self.device)
        hi = torch.full((), max + widen, dtype=x.dtype, device=self.device)
    inside = torch.logical_and(x >= lo, x <= hi)
    # the bin of x (x >= lo): truncating the non-negative position is its floor
    if integer:
        position = torch.div((x - lo) * bins, hi - lo, rounding_mode="floor").clamp(max=bins - 1)
    else:
        position = ((x - lo) / (hi - lo) * bins).to(torch.int64).clamp(max=bins - 1)
    target = torch.where(inside, position, 0)
    count_dtype = torch.int64 if integer else torch.float32  # the sums scatter_add has; 8- and 16-bit counts wrap
    counts = torch.zeros(bins, dtype=count_dtype, device=self.device)
    counts = aten.scatter_add.default(counts, 0, target, inside.to(count_dtype))
    return counts if count_dtype == self.dtype else counts.to(self.dtype)


def _unpool(op):
    """max_unpool: torch's decomposition (an index_put), after checking that every index lies in
    the output plane: index_put would wrap a negative one into a silent wrong result."""
    def impl(self, indices, output_size, *args):
        size = math.prod(output_size)
        check_index_range(indices, size, f"{op}: Found an invalid max index (output volumes are of size "
                          f"{'x'.join(map(str, output_size))})", "assert")
        return decompose(self, indices, output_size, *args)

    decompose = decomposition_table.get(getattr(aten, op).default)
    if decompose is not None:  # else (an older torch) the op stays missing
        register(getattr(aten, op).default)(impl)


_unpool("max_unpool2d")
_unpool("max_unpool3d")


def _index_along_dim(op, overload, kind):
    """index_add, index_copy: torch's decomposition (an index_put), after checking the index:
    torch raises on a negative one, which index_put would wrap into a silent wrong result."""
    def impl(self, dim, index, *args, **kwargs):
        d = dim % max(self.dim(), 1)
        check_index_range(index, self.shape[d] if self.dim() else 1, f"{op}_()", kind, d)
        return decompose(self, dim, index, *args, **kwargs)

    decompose = decomposition_table.get(overload)
    if decompose is not None:  # else (an older torch) the op stays missing
        register(overload)(impl)


_index_along_dim("index_add", aten.index_add.default, "dim")
_index_along_dim("index_copy", aten.index_copy.default, "index")


def _histogram_counts(x, pos, inside, weight, bins):
    """hist[b] = the sum of weight (or 1) over the elements of x in bin b (pos, where inside)."""
    w = torch.ones_like(x) if weight is None else weight.reshape(-1)
    w = torch.where(inside, w, torch.zeros((), dtype=w.dtype, device=w.device))
    counts = torch.zeros(bins, dtype=x.dtype, device=x.device)
    return aten.scatter_add.default(counts, 0, torch.where(inside, pos, 0), w)


def _histogram_result(hist, edges, density):
    if density:
        hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return hist, edges


def _check_histogram(self, weight, op):
    if self.dtype != torch.float32:
        raise NotImplementedError(f"TorchVK: {op} supports float32, got {self.dtype}")
    if weight is not None and weight.shape != self.shape:
        raise RuntimeError(f"{op}(): if weight tensor is provided it should have the same shape as the input "
                           f"tensor excluding its innermost dimension, but got input with shape {list(self.shape)} "
                           f"and weight with shape {list(weight.shape)}")


@register(aten.histogram.bin_ct)
def histogram(self, bins=100, *, range=None, weight=None, density=False):
    """(hist, bin_edges) over `bins` equal bins of range (the data's range when None: a sync op,
    it reads the min and max). Each element's bin is interpolated, then corrected against the
    edges on either side, as torch's CPU; max falls in the last bin. float32."""
    _check_histogram(self, weight, "torch.histogram")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for dimension 0")
    x = self.reshape(-1)
    if range is not None:
        lo, hi = float(range[0]), float(range[1])
    elif x.numel():
        lo, hi = torch.stack([aten.amin.default(x), aten.amax.default(x)]).cpu().tolist()
    else:
        lo, hi = 0.0, 1.0
    if lo > hi:
        raise RuntimeError(f"torch.histogram(): max must be larger than min, but got min {lo} max {hi}")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    edges = torch.linspace(lo, hi, bins + 1, dtype=self.dtype, device=self.device)
    guess = ((x - lo) * bins / (hi - lo)).clamp(0, bins - 1).to(torch.int64)
    pos = guess - (x < edges[guess]).long() + (x >= edges[guess + 1]).long()
    pos = pos.clamp(0, bins - 1)
    inside = torch.logical_and(x >= edges[0], x <= edges[-1])
    return _histogram_result(_histogram_counts(x, pos, inside, weight, bins), edges, density)


@register(aten.histogram.bins_tensor)
def histogram_edges(self, bins, *, weight=None, density=False):
    """(hist, bins) over the given increasing edges: each element's bin found by comparing it with
    every edge (searchsorted)."""
    _check_histogram(self, weight, "torch.histogram")
    if bins.dim() != 1 or bins.numel() < 2:
        raise RuntimeError(f"torch.histogram(): bins tensor should have one dimension and at least 2 elements, "
                           f"but got {list(bins.shape)}")
    x, n = self.reshape(-1), bins.numel() - 1
    pos = (torch.searchsorted(bins, x, right=True) - 1).clamp(0, n - 1)
    inside = torch.logical_and(x >= bins[0], x <= bins[-1])
    return _histogram_result(_histogram_counts(x, pos, inside, weight, n), bins.clone(), density)
