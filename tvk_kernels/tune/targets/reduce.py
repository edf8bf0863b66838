"""Reductions (kernels/reduce.py): sums of a [rows, cols] matrix over dim 1, dim 0 or both."""
from __future__ import annotations

import math

import numpy as np

from ...kernels.reduce import INPUT_DTYPE_CODES, defines, output_shape, plan, reduce, required_subgroup_size
from . import Case


class ReduceTarget:
    """What tvk-tune needs to tune reductions (see tvk_kernels/tune/targets/): sums of a
    [rows, cols] matrix over dim 1 (contiguous), dim 0 (strided) or both (None)."""

    family = "reduce"
    template = "reduce.comp"
    suites = {
        "suite": [
            {"rows": 4096, "cols": 1024, "dim": 1, "n": 4194304},
            {"rows": 4096, "cols": 1024, "dim": 0, "n": 4194304},
            {"rows": 1024, "cols": 4096, "dim": None, "n": 4194304},
            {"rows": 4096, "cols": 4096, "dim": None, "n": 16777216},  # a full sum past the others' loads in flight
            {"rows": 65536, "cols": 32, "dim": 1, "n": 2097152},
            {"rows": 64, "cols": 512, "dim": 1, "n": 32768},
            {"rows": 8, "cols": 4096, "dim": 0, "n": 32768},
        ],
        "tiny": [
            {"rows": 7, "cols": 1000, "dim": 1, "n": 7000},
            {"rows": 300, "cols": 70, "dim": 0, "n": 21000},
            {"rows": 100, "cols": 1000, "dim": None, "n": 100000},
        ],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        rows, cols, dim = shape["rows"], shape["cols"], shape.get("dim", 1)
        rng = np.random.default_rng(seed)
        host = [rng.standard_normal((rows, cols), dtype=np.float32) for _ in range(n_inputs + 1)]
        bufs = [device.upload(a) for a in host]
        oshape = output_shape((rows, cols), dim)
        out = device.allocator.alloc(4 * max(math.prod(oshape), 1))

        def run(params, i):
            reduce(device, "sum", bufs[i].address, out.address, (rows, cols), None, dim, params=params)

        def check(params):
            run(params, -1)
            got = device.download(out, np.float32, oshape).astype(np.float64)
            x = host[-1].astype(np.float64)
            axis = None if dim is None else dim
            err = np.abs(got - x.sum(axis))
            return bool(np.all(err <= 2e-6 * np.abs(x).sum(axis) + 1e-6)), float(np.max(err))

        return Case(device, shape, run, check, [bufs, out])

    @staticmethod
    def work(shape, params) -> list[dict]:
        """The launches of one sum as the runtime plans them (kernels/reduce.py plan): one pass, or a
        first pass over chunks of the reduced range writing partials and a second pass over those."""
        rows, cols, dim = shape["rows"], shape["cols"], shape.get("dim", 1)
        wg = params["WG"]
        n_out, n_red, strided = {1: (rows, cols, False), 0: (cols, rows, True)}.get(dim, (1, rows * cols, False))

        def launch(n_in, n_written, groups):
            return {"flops": n_in, "dram_bytes": 4 * (n_in + n_written), "lds_bytes": groups * wg * 8,
                    "groups": max(groups, 1), "invocations": wg, "lds_per_group": 4 * wg}

        _, _, groups, nsplit, _ = plan(params, n_out, n_red, strided)
        if nsplit == 1:
            return [launch(n_out * n_red, n_out, groups)]
        _, _, groups2, _, _ = plan(params, n_out, nsplit, n_out > 1, allow_split=False)  # partials [nsplit, n_out]
        return [launch(n_out * n_red, nsplit * n_out, groups * nsplit), launch(nsplit * n_out, n_out, groups2)]

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        """A float32 sum over the innermost dim, one pass (what the suite's first shape runs)."""
        return (defines(params, 0, 1, False, params["SUBGROUP"], idx64=True), (params["WG"], 1, 1),
                required_subgroup_size(params))

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds over one reduced dim (tune/carry_over.py): every
        op, input dtype and layout in one pass, and a split's first pass."""
        one_pass = [defines(params, op, 1, cols, params["SUBGROUP"] and not cols, code, idx64=True)
                    for op in range(6) for cols in (False, True) for code in INPUT_DTYPE_CODES.values()]
        return one_pass + [defines(params, op, 1, False, params["SUBGROUP"]) for op in range(6)]


TARGET = ReduceTarget()
