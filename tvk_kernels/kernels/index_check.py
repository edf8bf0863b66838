"""Index validation (templates/index_check.comp): out-of-range indices are errors, never zeros.

Ops that take indices (embedding, index_select, gather, scatter, nll_loss targets) launch
`check_indices` before their own kernel. It writes the first index outside [0, bound) to the
device's error word, and the host raises it at its next sync point (runtime/error_word.py):
nothing waits at the op, so a valid call costs one kernel launch. The op's own kernel still
runs and reads nothing out of bounds; its result is garbage that the error stops anyone using.

Indices are contiguous int64 or int32 (buffers or device addresses). A fixed grid of WG-wide
workgroups strides over the indices, so there is nothing to tune (no tuning/ file).

The errors use torch's exception types: IndexError where torch raises it (embedding,
index_select, nll_loss), RuntimeError otherwise (gather, scatter); both are OutOfRangeError.
"""
from __future__ import annotations

import struct

from ..errors import TVKError
from .launch import Family, address, family, grid_1d

_PUSH = struct.Struct("<QQqqIII")
WG = 128
MAX_GROUPS = 1024  # enough to fill a GPU; more indices are strided over
CHUNK = 1 << 30  # indices per launch: the kernel counts in 32 bits
_WHERE = (" TorchVK checks indices on the GPU and reports the first bad one at the next sync point (.item(), .cpu(), "
          "printing, synchronize), which may be after the op; TVK_LAUNCH_BLOCKING=1 raises at the op itself.")


class OutOfRangeError(TVKError):
    """An index a kernel found outside its valid range [0, bound); raised at the next sync point."""

    def __init__(self, message: str, op: str, value: int, bound: int):
        super().__init__(message)
        self.op, self.value, self.bound = op, value, bound


class OutOfRangeIndexError(OutOfRangeError, IndexError):
    """The same, for the ops where torch raises IndexError."""


# kind -> (exception class, message); torch's own wording comes first
_KINDS = {
    "rows": (OutOfRangeIndexError, "index out of range in self: {op} got index {value}, but only indices in "
                                   "[0, {bound}) select a row."),
    "dim": (OutOfRangeError, "index {value} is out of bounds for dimension {dim} with size {bound} ({op})."),
    "target": (OutOfRangeIndexError, "Target {value} is out of bounds: {op} takes class indices in [0, {bound}) "
                                     "(or ignore_index)."),
    "class": (OutOfRangeError, "Class values must be non-negative and smaller than num_classes: {op} got {value}, "
                               "num_classes is {bound}."),
    "index": (OutOfRangeIndexError, "index {value} is out of bounds for dimension {dim} with size {bound} ({op})."),
    "assert": (OutOfRangeError, "{op}"),  # aten._assert_async: op is the assert's message
}


class IndexCheck(Family):
    family = "index_check"
    template = "index_check.comp"


def site(device, op: str, kind: str, dim: int | None = None) -> int:
    """The error-word site of (op, kind, dim): what the error will say. kind: a key of _KINDS."""
    return device.errors.site((op, kind, dim), _explain)


def _explain(key, value: int, bound: int) -> OutOfRangeError:
    op, kind, dim = key
    cls, text = _KINDS[kind]
    return cls(text.format(op=op, value=value, bound=bound, dim=dim) + _WHERE, op, value, bound)


def check_indices(device, indices, n: int, bound: int, site_id: int, *, int32: bool = False,
                  ignore: int | None = None):
    """Report (at the next sync point) the first of n indices outside [0, bound) and not `ignore`."""
    pipe = family(device, IndexCheck).variant({"INDEX_BITS": 32 if int32 else 64}, WG, _PUSH.size)
    base, size = address(indices), 4 if int32 else 8
    word, skip = device.errors.address, 0 if ignore is None else ignore
    for start in range(0, n, CHUNK):
        count = min(n - start, CHUNK)
        groups = grid_1d(min((count + WG - 1) // WG, MAX_GROUPS), device.facts.max_workgroup_count[0])
        push = _PUSH.pack(base + start * size, word, bound, skip, count, site_id, ignore is not None)
        device.stream.dispatch(pipe, groups, push, "index_check")
