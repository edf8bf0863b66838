"""Inclusive scans along one dim: cumsum, cumprod, logcumsumexp (templates/scan.comp).

    scan(device, op, in_addr, out_addr, outer, n, inner, in_strides=None, dtype="float32",
         params=None)

op: "sum", "prod", "logsumexp" (float32 only). The input is the view [outer, n, inner] with
in_strides (elements, default contiguous) and is scanned along n; the output is contiguous
[outer, n, inner] and may be the input itself. dtype: float32 or int64 (integers wrap on
overflow, like torch's int64).

How: each row (one (outer, inner) pair) is scanned by T threads of one workgroup in chunks of
T * ITEMS elements with a running carry (a shared-memory scan of the thread totals per chunk).
T follows from the shape: up to WG threads on a row along the last dim, one thread per row when
the rows are adjacent in memory (a scan along an outer dim), so loads are coalesced. When too
few workgroups would run (fewer than TARGET_GROUPS) and rows are at least SPLIT_MIN long, each
row is split into spans scanned in parallel; their totals are scanned (the same function,
recursively) and a second pass adds each span's prefix: two more reads and writes of the data.
"""
from __future__ import annotations

import struct

from .launch import Family, family, grid_1d, pow2ceil, powers_of_two

OPS = {"sum": 0, "prod": 1, "logsumexp": 2}
_DTYPES = {"float32": 4, "int64": 8}
_PUSH = struct.Struct("<QQQ9I")
COLS_MIN = 32  # rows adjacent in memory, at least this many: one thread per row
MAX_SPAN_CHUNKS = 2048  # chunks one workgroup walks in one span (see scan())
SCAN, CARRY = 0, 1  # MODE: scan (each span), add each span's carry (a split row's second pass)


class Scan(Family):
    family = "scan"
    template = "scan.comp"

    def check_config(self, params: dict) -> dict:
        return powers_of_two(self.family, params, "WG")

    def kernel(self, params: dict, op: int, int64: bool, mode: int):
        wg = params["WG"]
        acc_bytes = 8 if int64 or op == OPS["logsumexp"] else 4  # logsumexp: (max, sum) pairs
        return self.variant(defines(params, op, int64, mode), wg, _PUSH.size, shared_bytes=wg * acc_bytes)


def defines(params: dict, op: int, int64: bool, mode: int) -> dict:
    """The defines of one scan kernel (the runtime and the tuner target build them here)."""
    return {"OP": op, "INT64": int(int64), "MODE": mode, "ITEMS": params["ITEMS"]}


def threads_per_row(n: int, inner: int, inner_stride: int, wg: int, items: int) -> int:
    if inner >= COLS_MIN and inner_stride == 1:
        return 1
    return min(wg, pow2ceil(-(-max(n, 1) // items)))


def scan(device, op: str, in_addr: int, out_addr: int, outer: int, n: int, inner: int, in_strides=None,
         dtype: str = "float32", params: dict | None = None):
    """out = inclusive scan of the [outer, n, inner] view at in_addr along n (out: contiguous)."""
    if op not in OPS:
        raise ValueError(f"unknown scan {op!r}; one of {sorted(OPS)}")
    if dtype not in _DTYPES or (op == "logsumexp" and dtype != "float32"):
        allowed = "float32" if op == "logsumexp" else "float32, int64"
        raise ValueError(f"scan {op}: dtype {dtype!r} is not supported ({allowed})")
    if dtype == "int64" and not device.facts.features.get("shader_int64"):
        raise ValueError(f"{device.facts.name} has no 64-bit integers in shaders; int64 scans cannot run there")
    outer, n, inner = int(outer), int(n), int(inner)
    strides = (n * inner, inner, 1) if in_strides is None else tuple(int(s) for s in in_strides)
    if any(s < 0 for s in strides):
        raise ValueError("scan: negative strides are not supported")
    rows = outer * inner
    if rows == 0 or n == 0:
        return
    span_in = 1 + (outer - 1) * strides[0] + (n - 1) * strides[1] + (inner - 1) * strides[2]
    if max(span_in, rows * n) >= 1 << 32:
        raise ValueError(f"scan: the view [{outer}, {n}, {inner}] spans 2**32 elements or more; split it")
    fam = family(device, Scan)
    prm = fam.resolve({"n": rows * n}, params)
    wg, items = int(prm["WG"]), int(prm["ITEMS"])
    t = threads_per_row(n, inner, strides[2], wg, items)
    groups = -(-rows // (wg // t))
    nsplit, span, chunk = 1, n, t * items
    target, split_min = int(prm["TARGET_GROUPS"]), int(prm["SPLIT_MIN"])
    if groups < target and n >= split_min:
        nsplit = min(-(-target // groups), max(1, n // max(split_min // 4, 1)), 65535)
    # a workgroup walks at most MAX_SPAN_CHUNKS chunks, some 2 + log2(T) loop steps each, well inside
    # llvmpipe's loop budget (device_limits.DRIVER_LOOP_LIMITS: past it the span's tail went unwritten)
    nsplit = max(nsplit, -(-n // (MAX_SPAN_CHUNKS * chunk)))
    if nsplit > 1:
        if nsplit > device.facts.max_workgroup_count[2]:
            raise ValueError(f"scan: rows of {n} elements need {nsplit} spans, past the device's "
                             f"{device.facts.max_workgroup_count[2]} workgroups in z; split the scan")
        span = -(-(-(-n // nsplit)) // chunk) * chunk  # whole chunks
        nsplit = -(-n // span)
    opc, int64 = OPS[op], dtype == "int64"
    grid = grid_1d(groups, device.facts.max_workgroup_count[0])
    part = device.allocator.alloc(rows * nsplit * _DTYPES[dtype]) if nsplit > 1 else None
    part_addr = part.address if part is not None else 0
    push = _PUSH.pack(in_addr, out_addr, part_addr, rows, n, inner, t.bit_length() - 1, span, nsplit, *strides)
    device.stream.dispatch(fam.kernel(prm, opc, int64, SCAN), (grid[0], grid[1], nsplit), push, "scan")
    if part is None:
        return
    scan(device, op, part_addr, part_addr, rows, nsplit, 1, dtype=dtype, params=params)
    device.stream.dispatch(fam.kernel(prm, opc, int64, CARRY), (grid[0], grid[1], nsplit - 1), push, "scan.carry")
    device.stream.keep_alive(part)
