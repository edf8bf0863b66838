"""Scans (kernels/scan.py): float32 cumsum along contiguous rows or down columns."""
from __future__ import annotations

import numpy as np

from ...kernels.scan import CARRY, OPS, SCAN, defines, scan, threads_per_row
from . import Case


class ScanTarget:
    """What tvk-tune needs to tune scans (see tvk_kernels/tune/targets/): float32 cumsum of a
    [rows, cols] matrix along dim 1 (contiguous rows) or dim 0 (one thread per column)."""

    family = "scan"
    template = "scan.comp"
    suites = {
        "suite": [
            {"rows": 4096, "cols": 1024, "dim": 1, "n": 4194304},
            {"rows": 4, "cols": 1 << 20, "dim": 1, "n": 4194304},
            {"rows": 4096, "cols": 1024, "dim": 0, "n": 4194304},
            {"rows": 64, "cols": 512, "dim": 1, "n": 32768},
        ],
        "tiny": [
            {"rows": 7, "cols": 1000, "dim": 1, "n": 7000},
            {"rows": 1, "cols": 100000, "dim": 1, "n": 100000},
            {"rows": 300, "cols": 70, "dim": 0, "n": 21000},
        ],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        rows, cols, dim = shape["rows"], shape["cols"], shape.get("dim", 1)
        rng = np.random.default_rng(seed)
        host = [rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(n_inputs + 1)]
        bufs = [device.upload(a) for a in host]
        out = device.allocator.alloc(4 * rows * cols)
        geometry = (rows, cols, 1) if dim == 1 else (1, rows, cols)

        def run(params, i):
            scan(device, "sum", bufs[i].address, out.address, *geometry, params=params)

        def check(params):
            run(params, -1)
            got = device.download(out, np.float32, (rows, cols)).astype(np.float64)
            x = host[-1].astype(np.float64)
            err = np.abs(got - np.cumsum(x, dim))
            return bool(np.all(err <= 1e-5 * np.cumsum(np.abs(x), dim) + 1e-6)), float(err.max())

        return Case(device, shape, run, check, [bufs, out])

    @staticmethod
    def work(shape, params) -> dict:
        rows, cols, dim = shape["rows"], shape["cols"], shape.get("dim", 1)
        wg, items = params["WG"], params["ITEMS"]
        n = rows * cols
        if dim == 1:
            t = threads_per_row(cols, 1, 1, wg, items)
            groups = -(-rows // (wg // t))
            if groups < params["TARGET_GROUPS"] and cols >= params["SPLIT_MIN"]:
                groups *= min(-(-params["TARGET_GROUPS"] // groups), max(1, cols // max(params["SPLIT_MIN"] // 4, 1)))
        else:
            t, groups = 1, -(-cols // wg)
        steps = max(t.bit_length() - 1, 0)
        return {"flops": n * (1 + 2 * steps // items), "dram_bytes": 8 * n, "lds_bytes": 8 * n * steps // items,
                "groups": groups, "invocations": wg, "lds_per_group": 4 * wg}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        """An int64 cumsum (the kernel the static model has always compiled for this family)."""
        return defines(params, OPS["sum"], True, SCAN), (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): every op and dtype, both passes."""
        return [defines(params, op, int64, mode) for op in OPS.values() for int64 in (False, True)
                for mode in (SCAN, CARRY) if not (int64 and op == OPS["logsumexp"])]


TARGET = ScanTarget()
