"""softmax / log_softmax along any dim of a contiguous float32 tensor (templates/softmax.comp).

    softmax(device, in_addr, out_addr, shape, dim, log=False, params=None)
    softmax_backward(device, grad_addr, out_addr, grad_in_addr, shape, dim, log=False, params=None)

The tensor is viewed as [outer, n, inner] around `dim`. inner == 1 (the last dim, the common
case) runs T adjacent threads per row with a subgroup or shared-memory reduction; inner > 1
gives adjacent rows to adjacent threads so loads stay coalesced. Forward is max-subtracted: a row
of up to WG x REGS_MAX_ITEMS elements (inner == 1) is read once into registers (max, sum of exp,
write); longer rows take an online max and rescaled sum in one pass, then a writing pass. Backward takes the forward
output: softmax dx = y * (g - sum(g*y)); log_softmax dx = g - exp(y) * sum(g).
"""
from __future__ import annotations

import math
import struct

from .kept_calls import kept_call
from .launch import Family, family, grid_1d, loop_budget_params, pow2ceil, powers_of_two, record_shape, recording
from .reduce import required_subgroup_size, use_subgroups

_PUSH = struct.Struct("<QQQQIIII")


class Softmax(Family):
    family = "softmax"
    template = "softmax.comp"

    def check_config(self, params: dict) -> dict:
        return powers_of_two(self.family, params, "WG")


REGS_MAX_ITEMS = 16  # a row up to WG threads x this many elements is kept in registers (REGS)


def defines(params: dict, cols: bool, log: bool, backward: bool, subgroup: bool, regs: bool = False) -> dict:
    """The defines of one softmax kernel (the runtime and the tuner target build them here); REGS only
    where set, so the loop kernels stay the SPIR-V they were tuned as."""
    return {"COLS": int(cols), "ITEMS": params["ITEMS"], "LOG": int(log), "BWD": int(backward),
            "SUBGROUP": int(subgroup), **({"REGS": 1} if regs else {})}


def register_items(wg: int, items: int, n: int) -> int | None:
    """ITEMS of the kernel that keeps a row of n elements in registers (REGS): the tuned ITEMS, or
    more where WG threads need more for the row; None where a row needs over REGS_MAX_ITEMS a thread."""
    need = max(items, pow2ceil(-(-n // wg)))
    return need if need <= REGS_MAX_ITEMS else None


def _run(device, x, y, g, dx, shape, dim, log, bwd, params):
    shape = tuple(int(s) for s in shape)
    nd = max(len(shape), 1)
    if not -nd <= dim < nd:
        raise IndexError(f"dim {dim} out of range for a {len(shape)}-d tensor")
    dim %= nd
    if not shape:
        shape = (1,)
    outer, n, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    rows = outer * inner
    if rows == 0 or n == 0:
        return
    fam = family(device, Softmax)
    if inner == 1 or outer == 1:  # SoftmaxTarget's [rows, cols] along dim -1 or 0; other views are not recorded
        if recording():
            record_shape(fam.family, {"rows": rows, "cols": n, "dim": -1, "n": rows * n} if inner == 1
                         else {"rows": n, "cols": inner, "dim": 0, "n": rows * n},
                         direction="backward" if bwd else "forward", op="log_softmax" if log else "softmax")
    prm = fam.resolve({"n": rows * n}, params)
    cols = inner > 1
    if not cols:
        prm = loop_budget_params(fam, {"n": rows * n}, prm, n, passes=2)
    wg, items = int(prm["WG"]), int(prm["ITEMS"])
    regs = None if cols else register_items(wg, items, n)
    if cols:
        g_rows = min(wg, pow2ceil(rows))
        t = wg // g_rows
    else:
        items = regs or items
        t = min(wg, pow2ceil(-(-n // items)))
        g_rows = wg // t
    kernel = defines({**prm, "ITEMS": items}, cols, bool(log), bwd, not cols and use_subgroups(device, prm),
                     regs is not None)
    pipe = fam.variant(kernel, wg, _PUSH.size, shared_bytes=4 * wg, subgroup_size=required_subgroup_size(prm))
    groups = grid_1d(-(-rows // g_rows), device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, groups, _PUSH.pack(x, y, g, dx, rows, n, inner, t.bit_length() - 1),
                           ("log_softmax" if log else "softmax") + ("_backward" if bwd else ""))


@kept_call('in_addr', 'out_addr')
def softmax(device, in_addr: int, out_addr: int, shape, dim: int = -1, log: bool = False, params: dict | None = None):
    """out = softmax(x, dim) (log_softmax when log); x, out contiguous float32 of `shape`."""
    _run(device, in_addr, out_addr, 0, 0, shape, dim, log, False, params)


@kept_call('in_addr', 'out_addr')
def log_softmax(device, in_addr: int, out_addr: int, shape, dim: int = -1, params: dict | None = None):
    _run(device, in_addr, out_addr, 0, 0, shape, dim, True, False, params)


@kept_call('grad_addr', 'out_addr', 'grad_in_addr')
def softmax_backward(device, grad_addr: int, out_addr: int, grad_in_addr: int, shape, dim: int = -1,
                     log: bool = False, params: dict | None = None):
    """grad_in from grad_out (grad_addr) and the forward output (out_addr), all contiguous float32."""
    _run(device, 0, out_addr, grad_addr, grad_in_addr, shape, dim, log, True, params)
