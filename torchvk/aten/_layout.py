"""The memory layout torch gives a fresh elementwise result: the inputs' (TensorIterator's rule).

torch allocates `x.t() + 1` transposed like x.t(), so `(x.t() + 1).t()` is contiguous and
`.view(-1)` works; a contiguous result would make that view fail on tvk where it works on CUDA
and the CPU, and a compiled graph traced with torch's layouts would view our results wrongly.
The dimensions are ordered by the inputs' strides, innermost first, the first input deciding
(broadcast dimensions skipped, ties between equal strides broken by size, then by the next
input), exactly as TensorIterator's reorder_dimensions; the result is dense in that order.
"""
from __future__ import annotations


def result_strides(shape: tuple, inputs) -> tuple | None:
    """Element strides of a dense result of `shape` laid out like `inputs` (tensors broadcasting to
    it), or None when that is the contiguous layout (the common case, decided cheaply)."""
    nd = len(shape)
    strided = [t for t in inputs if t.dim() and not t.is_contiguous()]
    if nd < 2 or not strided:
        return None
    ops = []
    for t in inputs:  # each input's strides over the result's dims, 0 where it broadcasts
        if not t.dim():
            continue
        lead = nd - t.dim()
        ops.append([0] * lead + [0 if t.shape[i] == 1 and shape[lead + i] != 1 else t.stride(i)
                                 for i in range(t.dim())])

    def should_swap(d0: int, d1: int) -> int:
        for st in ops:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return 1 if s0 > s1 else -1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(nd - 1, -1, -1))  # innermost first
    for i in range(1, nd):  # insertion sort with ambiguous comparisons, as TensorIterator's
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = should_swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    strides, step = [0] * nd, 1
    for d in perm:
        strides[d] = step
        step *= max(shape[d], 1)
    contiguous, step = [0] * nd, 1
    for d in range(nd - 1, -1, -1):
        contiguous[d] = step
        step *= max(shape[d], 1)
    same = all(s == c for s, c, n in zip(strides, contiguous, shape) if n != 1)
    return None if same else tuple(strides)
