"""Stable sort along the last dim of a [rows, n] view (templates/sort.comp).

    sort(device, in_addr, values_addr, indices_addr, rows, n, dtype="float32", descending=False,
         k=None, row_stride=None, params=None)

Writes the first k (default n) sorted columns of each row: values (the input's dtype) and int64
indices, both contiguous [rows, k]. Keys are float32 or int64. The order is torch's stable one:
equal keys keep their input order, -0.0 equals 0.0, NaN is the largest value (last ascending,
first descending). topk is this with k < n.

How: each row is padded to N = 2^ceil(log2 n) and sorted by a bitonic network. Rows of up to
ELEMS padded elements sort in one dispatch, several rows per workgroup, in shared memory. A
longer row is first sorted in ELEMS-blocks, then each merge stage k = 2*ELEMS, ..., N runs its
steps of stride >= ELEMS as global passes (one dispatch each, one pair per invocation) and the
rest in shared memory: log2(N/ELEMS) * (log2(N/ELEMS) + 3) / 2 + 1 dispatches in all, each
reading and writing the whole (padded) row. Slow parts: a row just over a power of two does up
to twice the work; long rows (beyond ELEMS) pay those global passes; topk sorts the whole row.
"""
from __future__ import annotations

import struct

from .launch import Family, family, grid_1d, powers_of_two

_PUSH = struct.Struct("<QQQQQ10I")
FROM_INPUT, TO_OUTPUT, DESCENDING = 1, 2, 4
LOCAL, GLOBAL = 0, 1  # MODE: steps in shared memory, one global compare-exchange step
_KEY_BYTES = {"float32": 4, "int64": 8}


class Sort(Family):
    family = "sort"
    template = "sort.comp"

    def kernel(self, params: dict, mode: int, key64: bool):
        shared = params["ELEMS"] * ((8 if key64 else 4) + 4) if mode == LOCAL else 0
        return self.variant(defines(params, mode, key64), params["WG"], _PUSH.size, shared_bytes=shared)

    def check_config(self, params: dict) -> dict:
        # ELEMS >= 2 * WG (a pair per thread and step) is a constraint of tuning/sort.json
        return powers_of_two(self.family, params, "ELEMS", "WG")


def defines(params: dict, mode: int, key64: bool) -> dict:
    """The defines of one sort kernel (the runtime and the tuner target build them here)."""
    return {"MODE": mode, "KEY64": int(key64), "ELEMS": params["ELEMS"]}


def log2ceil(n: int) -> int:
    return max(int(n) - 1, 0).bit_length()


def sort(device, in_addr: int, values_addr: int, indices_addr: int, rows: int, n: int, dtype: str = "float32",
         descending: bool = False, k: int | None = None, row_stride: int | None = None,
         params: dict | None = None):
    """Sort each row of the [rows, n] view at in_addr (contiguous along n, rows row_stride elements
    apart, default n); write its first k columns to values_addr / indices_addr ([rows, k])."""
    if dtype not in _KEY_BYTES:
        raise ValueError(f"sort: dtype {dtype!r} is not supported (float32, int64); cast the keys first")
    if dtype == "int64" and not device.facts.features.get("shader_int64"):
        raise ValueError(f"{device.facts.name} has no 64-bit integers in shaders; int64 keys cannot be sorted there")
    rows, n = int(rows), int(n)
    k = n if k is None else int(k)
    row_stride = n if row_stride is None else int(row_stride)
    if not 0 <= k <= n:
        raise ValueError(f"sort: k={k} must be in [0, n={n}]")
    if rows <= 0 or k == 0:
        return
    nlog = log2ceil(n)
    total = rows << nlog
    if total >= 1 << 32 or (rows - 1) * row_stride + n >= 1 << 32:
        raise ValueError(f"sort: {rows} rows of {n} (padded to {1 << nlog}) need 2**32 elements or more; "
                         "sort fewer rows at a time")
    fam = family(device, Sort)
    prm = fam.resolve({"n": rows * n}, params)
    elems, wg = int(prm["ELEMS"]), int(prm["WG"])
    key64 = dtype == "int64"
    desc = DESCENDING if descending else 0
    elog = min(log2ceil(elems), log2ceil(total))
    max_x = device.facts.max_workgroup_count[0]

    def local(flags, klo, khi, skey=0, sidx=0):
        push = _PUSH.pack(in_addr, values_addr, indices_addr, skey, sidx, rows, n, k, row_stride, nlog, elog,
                          klo, khi, 0, flags | desc)
        groups = -(-total // (1 << elog))
        device.stream.dispatch(fam.kernel(prm, LOCAL, key64), grid_1d(groups, max_x), push, "sort.local")

    if nlog <= elog:  # whole rows fit a workgroup: one dispatch
        local(FROM_INPUT | TO_OUTPUT, 1, nlog)
        return
    skey = device.allocator.alloc(total * _KEY_BYTES[dtype])
    sidx = device.allocator.alloc(total * 4)
    pairs = total // 2

    def global_step(stage, stride):
        push = _PUSH.pack(in_addr, values_addr, indices_addr, skey.address, sidx.address, rows, n, k, row_stride,
                          nlog, elog, stage, stage, stride, desc)
        device.stream.dispatch(fam.kernel(prm, GLOBAL, key64), grid_1d(-(-pairs // wg), max_x), push, "sort.global")

    local(FROM_INPUT, 1, elog, skey.address, sidx.address)
    for stage in range(elog + 1, nlog + 1):
        global_step(stage, 0)
        stride = 1 << (stage - 2)
        while stride >= 1 << elog:
            global_step(stage, stride)
            stride >>= 1
        local(TO_OUTPUT if stage == nlog else 0, stage, stage, skey.address, sidx.address)
    device.stream.keep_alive(skey)
    device.stream.keep_alive(sidx)
