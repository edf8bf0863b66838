"""softmax / log_softmax along any dim of a contiguous float32 tensor (templates/softmax.comp).

    softmax(device, in_addr, out_addr, shape, dim, log=False, params=None)
    softmax_backward(device, grad_addr, out_addr, grad_in_addr, shape, dim, log=False, params=None)

The tensor is viewed as [outer, n, inner] around `dim`. inner == 1 (the last dim, the common
case) runs T adjacent threads per row with a subgroup or shared-memory reduction; inner > 1
gives adjacent rows to adjacent threads so loads stay coalesced. Forward is max-subtracted
(online max and rescaled sum in one pass, then a writing pass). Backward takes the forward
output: softmax dx = y * (g - sum(g*y)); log_softmax dx = g - exp(y) * sum(g).
"""
from __future__ import annotations

import math
import struct

from .launch import Family, family, grid_1d, loop_budget_params, pow2ceil, powers_of_two, record_shape
from .reduce import required_subgroup_size, use_subgroups

_PUSH = struct.Struct("<QQQQIIII")


class Softmax(Family):
    family = "softmax"
    template = "softmax.comp"

    def check_config(self, params: dict) -> dict:
        return powers_of_two(self.family, params, "WG")


def defines(params: dict, cols: bool, log: bool, backward: bool, subgroup: bool) -> dict:
    """The defines of one softmax kernel (the runtime and the tuner target build them here)."""
    return {"COLS": int(cols), "ITEMS": params["ITEMS"], "LOG": int(log), "BWD": int(backward),
            "SUBGROUP": int(subgroup)}


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
        record_shape(fam.family, {"rows": rows, "cols": n, "dim": -1, "n": rows * n} if inner == 1
                     else {"rows": n, "cols": inner, "dim": 0, "n": rows * n})
    prm = fam.resolve({"n": rows * n}, params)
    cols = inner > 1
    if not cols:
        prm = loop_budget_params(fam, {"n": rows * n}, prm, n, passes=2)
    wg, items = int(prm["WG"]), int(prm["ITEMS"])
    if cols:
        g_rows = min(wg, pow2ceil(rows))
        t = wg // g_rows
    else:
        t = min(wg, pow2ceil(-(-n // items)))
        g_rows = wg // t
    kernel = defines(prm, cols, bool(log), bwd, not cols and use_subgroups(device, prm))
    pipe = fam.variant(kernel, wg, _PUSH.size, shared_bytes=4 * wg, subgroup_size=required_subgroup_size(prm))
    groups = grid_1d(-(-rows // g_rows), device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, groups, _PUSH.pack(x, y, g, dx, rows, n, inner, t.bit_length() - 1),
                           ("log_softmax" if log else "softmax") + ("_backward" if bwd else ""))


def softmax(device, in_addr: int, out_addr: int, shape, dim: int = -1, log: bool = False, params: dict | None = None):
    """out = softmax(x, dim) (log_softmax when log); x, out contiguous float32 of `shape`."""
    _run(device, in_addr, out_addr, 0, 0, shape, dim, log, False, params)


def log_softmax(device, in_addr: int, out_addr: int, shape, dim: int = -1, params: dict | None = None):
    _run(device, in_addr, out_addr, 0, 0, shape, dim, True, False, params)


def softmax_backward(device, grad_addr: int, out_addr: int, grad_in_addr: int, shape, dim: int = -1,
                     log: bool = False, params: dict | None = None):
    """grad_in from grad_out (grad_addr) and the forward output (out_addr), all contiguous float32."""
    _run(device, 0, out_addr, grad_addr, grad_in_addr, shape, dim, log, True, params)


class SoftmaxTarget:
    """What tvk-tune needs to tune softmax (see tvk_kernels/tune/targets.py): the forward pass
    of a [rows, cols] tensor along dim (-1: the last-dim path, 0: the strided path)."""

    family = "softmax"
    template = "softmax.comp"
    suites = {
        "suite": [
            {"rows": 4096, "cols": 1024, "dim": -1, "n": 4194304},
            {"rows": 256, "cols": 8192, "dim": -1, "n": 2097152},
            {"rows": 65536, "cols": 32, "dim": -1, "n": 2097152},
            {"rows": 64, "cols": 512, "dim": -1, "n": 32768},
            {"rows": 1024, "cols": 1024, "dim": 0, "n": 1048576},
        ],
        "tiny": [
            {"rows": 7, "cols": 1000, "dim": -1, "n": 7000},
            {"rows": 300, "cols": 70, "dim": 0, "n": 21000},
        ],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        import numpy as np

        from ..tune.targets import Case

        rows, cols, dim = shape["rows"], shape["cols"], shape.get("dim", -1)
        rng = np.random.default_rng(seed)
        host = [rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(n_inputs + 1)]
        bufs = [device.upload(a) for a in host]
        out = device.allocator.alloc(4 * rows * cols)

        def run(params, i):
            softmax(device, bufs[i].address, out.address, (rows, cols), dim, params=params)

        def check(params):
            run(params, -1)
            got = device.download(out, np.float32, (rows, cols)).astype(np.float64)
            x = host[-1].astype(np.float64)
            e = np.exp(x - x.max(dim, keepdims=True))
            want = e / e.sum(dim, keepdims=True)
            err = np.abs(got - want)
            return bool(np.all(err <= 1e-5 * want + 1e-7)), float(err.max())

        return Case(device, shape, run, check, [bufs, out])

    @staticmethod
    def work(shape, params) -> dict:
        rows, cols, dim = shape["rows"], shape["cols"], shape.get("dim", -1)
        wg, items = params["WG"], params["ITEMS"]
        n = rows * cols
        if dim in (-1, 1):
            t = min(wg, pow2ceil(-(-cols // items)))
            groups = -(-rows // (wg // t))
        else:
            groups = -(-cols // min(wg, pow2ceil(cols)))
        return {"flops": 6 * n, "dram_bytes": 12 * n, "lds_bytes": groups * wg * 16, "groups": groups,
                "invocations": wg, "lds_per_group": 4 * wg}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        """The last-dim softmax forward (the suite's common path)."""
        return (defines(params, False, False, False, params["SUBGROUP"]), (params["WG"], 1, 1),
                required_subgroup_size(params))

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): both layouts, softmax
        and log_softmax, forward and backward."""
        return [defines(params, cols, log, bwd, params["SUBGROUP"] and not cols)
                for cols in (False, True) for log in (False, True) for bwd in (False, True)]


TUNE_TARGET = SoftmaxTarget()
