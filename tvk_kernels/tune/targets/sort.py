"""The sort (kernels/sort.py): float32 rows sorted ascending, in a workgroup and with global passes."""
from __future__ import annotations

import numpy as np

from ...kernels.sort import GLOBAL, LOCAL, defines, log2ceil, sort
from . import Case


class SortTarget:
    """What tvk-tune needs to tune the sort (see tvk_kernels/tune/targets/): float32 rows of
    `cols` sorted ascending (rows that fit a workgroup, and long rows with global passes)."""

    family = "sort"
    template = "sort.comp"
    suites = {
        "suite": [
            {"rows": 4096, "cols": 1000, "n": 4096000},
            {"rows": 64, "cols": 65536, "n": 4194304},
            {"rows": 65536, "cols": 32, "n": 2097152},
            {"rows": 16, "cols": 1000, "n": 16000},
        ],
        "tiny": [
            {"rows": 7, "cols": 1000, "n": 7000},
            {"rows": 3, "cols": 5000, "n": 15000},
        ],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        rows, cols = shape["rows"], shape["cols"]
        rng = np.random.default_rng(seed)
        host = [rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(n_inputs + 1)]
        bufs = [device.upload(a) for a in host]
        vals, idx = device.allocator.alloc(4 * rows * cols), device.allocator.alloc(8 * rows * cols)

        def run(params, i):
            sort(device, bufs[i].address, vals.address, idx.address, rows, cols, params=params)

        def check(params):
            run(params, -1)
            want = np.argsort(host[-1], axis=1, kind="stable")
            got = device.download(idx, np.int64, (rows, cols))
            ok = np.array_equal(got, want) and np.array_equal(
                device.download(vals, np.float32, (rows, cols)), np.take_along_axis(host[-1], want, 1))
            return bool(ok), float(np.count_nonzero(got != want))

        return Case(device, shape, run, check, [bufs, vals, idx])

    @staticmethod
    def work(shape, params) -> dict:
        rows, cols = shape["rows"], shape["cols"]
        elems, wg = params["ELEMS"], params["WG"]
        nlog = log2ceil(cols)
        total = rows << nlog
        elog = min(log2ceil(elems), log2ceil(total))
        e = 1 << elog
        steps_local = min(nlog, elog) * (min(nlog, elog) + 1) // 2
        extra = max(nlog - elog, 0)
        global_steps = extra * (extra + 1) // 2  # per merge stage: the flip step and strides >= E
        local_passes = 1 + extra
        cmp = total // 2 * (steps_local + extra * elog + global_steps)
        return {"flops": 4 * cmp, "dram_bytes": 16 * total * (local_passes + global_steps),
                "lds_bytes": 16 * cmp, "groups": -(-total // e), "invocations": wg, "lds_per_group": 8 * e}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        """The int64-key shared-memory sort (the kernel the static model has always compiled for this family)."""
        return defines(params, LOCAL, True), (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): both modes, both key types."""
        return [defines(params, mode, key64) for mode in (LOCAL, GLOBAL) for key64 in (False, True)]


TARGET = SortTarget()
