"""Softmax (kernels/softmax.py): the forward pass along the last dim and along dim 0."""
from __future__ import annotations

import numpy as np

from ...kernels.launch import pow2ceil
from ...kernels.reduce import required_subgroup_size
from ...kernels.softmax import defines, register_items, softmax
from . import Case


class SoftmaxTarget:
    """What tvk-tune needs to tune softmax (see tvk_kernels/tune/targets/): the forward pass
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
        moved = 12 * n  # forward x twice, y once (the loop form)
        if dim in (-1, 1):
            regs = register_items(wg, items, cols)
            if regs:  # the row in registers: x read once
                items, moved = regs, 8 * n
            t = min(wg, pow2ceil(-(-cols // items)))
            groups = -(-rows // (wg // t))
        else:
            groups = -(-cols // min(wg, pow2ceil(cols)))
        return {"flops": 6 * n, "dram_bytes": moved, "lds_bytes": groups * wg * 16, "groups": groups,
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
        return [defines(params, cols, log, bwd, params["SUBGROUP"] and not cols, regs)
                for cols in (False, True) for log in (False, True) for bwd in (False, True)
                for regs in ((False, True) if not cols else (False,))]


TARGET = SoftmaxTarget()
