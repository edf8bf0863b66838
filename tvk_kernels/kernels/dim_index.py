"""Elements moved along dims, bits unchanged (templates/dim_index.comp): scatter and gather by
an index along one dim, and flip.

    scatter(device, out_addr, src_addr, index_addr, shape, dim, bound, src_strides, out_strides, elem_bytes)
    gather(device, out_addr, src_addr, index_addr, shape, dim, bound, src_strides, out_strides, elem_bytes)
    flip(device, out_addr, src_addr, shape, dims, src_strides, out_strides, elem_bytes)

scatter: for each element c of the int64 index (contiguous, `shape`), out[c with c[dim] =
index[c]] = src[c]; out has `bound` elements along dim; an index outside [0, bound) writes
nothing (check indices first: kernels/index_check.py). gather: the mirror, out[c] = src[c with
c[dim] = index[c]]; src has `bound` elements along dim; a bad index leaves out[c] unwritten.
flip: out[c] = src[c reversed along `dims`], shape = both tensors' shape. Elements are 4 or 8 bytes, moved as raw bits; strides in
elements. One invocation per element, a fixed workgroup size: nothing to tune (no tuning/ file).
"""
from __future__ import annotations

import math
import struct

from .launch import Family, family, grid_1d, workgroup_size
from .strides import contiguous_strides

MAX_DIMS = 6
WG = 256  # threads a workgroup, where the device's workgroups hold them (launch.workgroup_size)
_PUSH = struct.Struct(f"<QQQ4I{3 * MAX_DIMS}I")
SCATTER, FLIP, GATHER = 0, 1, 2


class DimIndex(Family):
    family = "dim_index"
    template = "dim_index.comp"


def _collapse(shape, strides: list, keep: set):
    """Drop size-1 dims and merge neighbours contiguous in every stride list, except the dims in
    `keep` (each stays a dim of its own) -> (shape, strides, new positions of `keep`)."""
    dims = [d for d in range(len(shape)) if shape[d] != 1 or d in keep]
    out_shape, out_strides, where = [], [[] for _ in strides], {}
    for d in dims:
        mergeable = out_shape and d not in keep and prev not in keep and all(
            st[prev] == st[d] * shape[d] for st in strides)
        if mergeable:
            out_shape[-1] *= shape[d]
            for o, st in zip(out_strides, strides):
                o[-1] = st[d]
        else:
            out_shape.append(shape[d])
            for o, st in zip(out_strides, strides):
                o.append(st[d])
            if d in keep:
                where[d] = len(out_shape) - 1
        prev = d
    return out_shape, out_strides, where


def _launch(device, mode, elem_bytes, out_addr, src_addr, index_addr, shape, strides, dim, bound, mask, n):
    if len(shape) > MAX_DIMS:
        raise ValueError(f"dim_index: {len(shape)} dims remain after merging contiguous ones; at most {MAX_DIMS} "
                         "are supported. Make the tensors contiguous.")
    if elem_bytes not in (4, 8):
        raise ValueError(f"dim_index: elements of {elem_bytes} bytes are not supported (4 or 8)")
    pad = MAX_DIMS - len(shape)
    sizes = [1] * pad + list(shape)
    src_st, out_st = ([0] * pad + list(st) for st in strides)
    push = _PUSH.pack(out_addr, src_addr, index_addr, n, dim + pad, bound, mask << pad, *sizes, *src_st, *out_st)
    wg = workgroup_size(device, WG)
    groups = grid_1d(-(-n // wg), device.facts.max_workgroup_count[0])
    pipe = family(device, DimIndex).variant({"MODE": mode, "ELEM_BYTES": elem_bytes}, wg, _PUSH.size)
    device.stream.dispatch(pipe, groups, push, {SCATTER: "scatter", FLIP: "flip", GATHER: "gather"}[mode])


def _check_span(shape, *strides):
    for st in strides:
        if 1 + sum((s - 1) * t for s, t in zip(shape, st)) >= 1 << 32:
            raise ValueError(f"dim_index: a view of shape {list(shape)} spans 2**32 elements or more; split it")


def scatter(device, out_addr, src_addr, index_addr, shape, dim, bound, src_strides, out_strides, elem_bytes):
    _by_index(device, SCATTER, out_addr, src_addr, index_addr, shape, dim, bound, src_strides, out_strides, elem_bytes)


def gather(device, out_addr, src_addr, index_addr, shape, dim, bound, src_strides, out_strides, elem_bytes):
    _by_index(device, GATHER, out_addr, src_addr, index_addr, shape, dim, bound, src_strides, out_strides, elem_bytes)


def _by_index(device, mode, out_addr, src_addr, index_addr, shape, dim, bound, src_strides, out_strides, elem_bytes):
    shape = [int(s) for s in shape]
    n = math.prod(shape)
    if n == 0:
        return
    _check_span(shape, src_strides, out_strides)
    index_strides = list(contiguous_strides(shape))  # the index tensor is contiguous
    cshape, (src_st, out_st, _), where = _collapse(shape, [list(src_strides), list(out_strides), index_strides], {dim})
    _launch(device, mode, elem_bytes, out_addr, src_addr, index_addr, cshape, (src_st, out_st), where[dim],
            int(bound), 0, n)


def flip(device, out_addr, src_addr, shape, dims, src_strides, out_strides, elem_bytes):
    shape = [int(s) for s in shape]
    n = math.prod(shape)
    if n == 0:
        return
    _check_span(shape, src_strides, out_strides)
    flipped = {d for d in dims if shape[d] > 1}
    # flipped dims stay apart from unflipped ones; two neighbouring flipped dims could merge, but
    # keeping each apart is simpler and leaves at most 2 * len(flipped) + 1 dims
    cshape, (src_st, out_st), where = _collapse(shape, [list(src_strides), list(out_strides)], flipped)
    mask = 0
    for d in flipped:
        mask |= 1 << where[d]
    _launch(device, FLIP, elem_bytes, out_addr, src_addr, 0, cshape, (src_st, out_st), 0, 0, mask, n)
