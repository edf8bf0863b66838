"""What the tuner can tune: per kernel family, its shape suites, how to run one candidate,
how to check it against a reference, and the work it does (for the static RDNA1 model).

A target's `prepare(device, shape)` returns a Case holding several input sets (rotated
while timing) and a reference computed on the host. `Case.run(params, i)` records the
candidate on input set i; `Case.check(params)` runs it on a fresh input set and compares.
A target may have `unavailable(device)`: why this device cannot run it (None: it can);
tvk-tune then skips it and says why.
"""
from __future__ import annotations

import numpy as np


class Case:
    def __init__(self, device, shape, run, check, buffers):
        """buffers: the DeviceBuffers the case allocated, nested in tuples/lists as convenient."""
        self.device, self.shape = device, shape
        self.run, self.check, self.buffers = run, check, buffers

    def free(self):
        def walk(x):
            if isinstance(x, (list, tuple)):
                for y in x:
                    walk(y)
            else:
                x.free()

        walk(self.buffers)


class ElementwiseTarget:
    family = "elementwise"
    template = "elementwise_binary.comp"
    suites = {"suite": [{"n": 4096}, {"n": 1 << 20}, {"n": 1 << 24}], "tiny": [{"n": 1000}, {"n": 70_000}]}

    def prepare(self, device, shape, n_inputs=3, seed=0) -> Case:
        from ..kernels.elementwise import binary

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
        from ..kernels.elementwise import binary_defines

        return binary_defines(params, "add", params["VEC"]), (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): every op, each vector width."""
        from ..kernels.elementwise import BINARY_OPS, binary_defines

        return [binary_defines(params, op, vec) for op in BINARY_OPS for vec in {params["VEC"], 1}]


TARGETS = {t.family: t for t in (ElementwiseTarget(),)}


def register(target):
    TARGETS[target.family] = target
    return target


def unavailable(target, device) -> str | None:
    """Why `device` cannot run `target` (None: it can)."""
    check = getattr(target, "unavailable", None)
    return check(device) if check is not None else None


def load_optional_targets():
    """Targets of kernel families whose modules define one (`TUNE_TARGET`)."""
    import importlib

    for module in ("elementwise", "rng", "matmul", "matmul_coopmat", "gemv", "conv", "conv_depthwise", "pool", "reduce", "softmax",
                   "norm", "sort", "scan", "attention"):
        try:
            mod = importlib.import_module(f"..kernels.{module}", __package__)
        except ImportError:
            continue
        target = getattr(mod, "TUNE_TARGET", None)
        if target is not None:
            register(target)
    return TARGETS
