"""Strides of dense tensors, in elements (the kernels' views are address + shape + strides)."""
from __future__ import annotations


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides of `shape`; a size-0 dim counts as 1 so every stride stays positive."""
    strides, acc = [], 1
    for s in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))


def vector_width(limit: int, contig_stride: int, addr: int, esize: int, other_strides) -> int:
    """The widest vector load (8, 4 or 2 elements, at most `limit`; else 1) along a dimension of
    stride `contig_stride` that keeps every start aligned: a unit stride, an address and every other
    stride divisible by the width."""
    if contig_stride != 1:
        return 1
    for v in (8, 4, 2):
        if v <= limit and addr % (v * esize) == 0 and all(s % v == 0 for s in other_strides):
            return v
    return 1
