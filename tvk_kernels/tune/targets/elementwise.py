"""The contiguous float32 binary kernel (kernels/elementwise.py `binary`): a vector add."""
from __future__ import annotations

import numpy as np

from ...kernels.elementwise import BINARY_OPS, binary, binary_defines
from . import Case


class ElementwiseTarget:
    family = "elementwise"
    template = "elementwise_binary.comp"
    suites = {"suite": [{"n": 4096}, {"n": 1 << 20}, {"n": 1 << 24}], "tiny": [{"n": 1000}, {"n": 70_000}]}

    def prepare(self, device, shape, n_inputs=3, seed=0) -> Case:
        n = shape["n"]
        rng = np.random.default_rng(seed)
        host = [(rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)) for _ in range(n_inputs + 1)]
        bufs = [(device.upload(a), device.upload(b)) for a, b in host]
        out = device.allocator.alloc(4 * n)

        def run(params, i):
            a, b = bufs[i]
            binary(device, "add", a, b, out, n, params=params)

        def check(params):
            a, b = bufs[-1]  # the set never used for timing
            binary(device, "add", a, b, out, n, params=params)
            got = device.download(out, np.float32, (n,))
            want = host[-1][0] + host[-1][1]
            return bool(np.array_equal(got, want)), float(np.max(np.abs(got - want))) if n else 0.0

        return Case(device, shape, run, check, [bufs, out])

    @staticmethod
    def work(shape, params) -> dict:
        n = shape["n"]
        return {"flops": n, "dram_bytes": 12 * n, "lds_bytes": 0, "groups": -(-n // (params["WG"] * params["VEC"] * params["ITEMS"])),
                "invocations": params["WG"], "lds_per_group": 0}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        """(defines, local size, subgroup size) to compile a candidate for static analysis."""
        return binary_defines(params, "add", params["VEC"]), (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): every op, each vector width."""
        return [binary_defines(params, op, vec) for op in BINARY_OPS for vec in {params["VEC"], 1}]


TARGET = ElementwiseTarget()
