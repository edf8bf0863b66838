"""Strides of dense tensors, in elements (the kernels' views are address + shape + strides)."""
from __future__ import annotations


def contiguous_strides(shape) -> tuple[int, ...]:
    """Row-major strides of `shape`; a size-0 dim counts as 1 so every stride stays positive."""
    strides, acc = [], 1
    for s in reversed(tuple(shape)):
        strides.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(strides))
