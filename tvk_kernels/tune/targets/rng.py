"""The RNG kernel (kernels/rng.py): float32 uniform_, checked bit for bit against the host's Philox."""
from __future__ import annotations

import numpy as np

from ...kernels.rng import DTYPE_CODES, MODES, defines, philox_words, uniform_
from . import Case


class RngTarget:
    """What tvk-tune needs to tune the RNG kernel (see tvk_kernels/tune/targets/): float32 uniform_
    of n elements, checked bit for bit against the host's Philox."""

    family = "rng"
    template = "elementwise_rng.comp"
    suites = {"suite": [{"n": 4096}, {"n": 1 << 20}, {"n": 1 << 24}], "tiny": [{"n": 1000}, {"n": 70_000}]}

    def prepare(self, device, shape, n_inputs=3, seed=0):
        n = shape["n"]
        outs = [device.allocator.alloc(4 * n) for _ in range(n_inputs + 1)]

        def run(params, i):
            uniform_(device, outs[i], n, seed=seed, offset=i % len(outs), params=params)

        def check(params):
            run(params, -1)
            want = (philox_words(seed, len(outs) - 1, n) >> 8).astype(np.float32) / np.float32(1 << 24)
            got = device.download(outs[-1], np.float32, (n,))
            return bool(np.array_equal(got, want)), float(np.max(np.abs(got - want)))

        return Case(device, shape, run, check, outs)

    @staticmethod
    def work(shape, params) -> dict:
        n = shape["n"]
        return {"flops": 40 * n, "dram_bytes": 4 * n, "lds_bytes": 0, "groups": -(-n // (4 * params["WG"])),
                "invocations": params["WG"], "lds_per_group": 0}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        """float32 uniform_ (what the suite times)."""
        return defines("uniform", "float32", False), (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): every mode and dtype, both seed sources."""
        return [defines(mode, dtype, seed_buf) for mode in MODES for dtype in DTYPE_CODES for seed_buf in (False, True)]


TARGET = RngTarget()
