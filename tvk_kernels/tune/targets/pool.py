"""Pooling (kernels/pool.py): max, avg and adaptive avg, forward and backward, bit for bit against the default."""
from __future__ import annotations

import math

import numpy as np

from ...kernels.pool import (OPS, Pool, adaptive_avg_pool2d, adaptive_avg_pool2d_backward, adaptive_output_shape,
                             avg_pool2d, avg_pool2d_backward, defines, max_pool2d, max_pool2d_backward,
                             pool2d_output_shape)
from . import Case


class PoolTarget:
    """What tvk-tune needs to tune pooling (see tvk_kernels/tune/targets/). A shape names the
    op (max, avg, adaptive), the direction and the geometry; `n` (elements the kernel runs
    over) and `dir` are the bucket names. WG and ITEMS only change the thread mapping, so a
    candidate must reproduce the default config's result bit for bit (the default is checked
    against torch by tests/test_pool.py)."""

    family = Pool.family
    template = Pool.template

    @staticmethod
    def shape(op, direction, x, kernel=None, stride=None, padding=0, output_size=None) -> dict:
        if op == "adaptive":
            out = adaptive_output_shape(x, output_size)
        else:
            out = pool2d_output_shape(x, kernel, stride, padding)
        n = math.prod(out) if direction == "fwd" else math.prod(x)
        return {"op": op, "dir": direction, "n": n, "window": 0, "x": list(x), "kernel": kernel, "stride": stride,
                "padding": padding, "output_size": output_size}

    def prepare(self, device, shape, n_inputs=3, seed=0):
        op, direction, xs = shape["op"], shape["dir"], tuple(shape["x"])
        k, s, p, osz = shape["kernel"], shape["stride"], shape["padding"], shape["output_size"]
        out_shape = adaptive_output_shape(xs, osz) if op == "adaptive" else pool2d_output_shape(xs, k, s, p)
        rng = np.random.default_rng(seed)
        host = [(rng.standard_normal(xs, dtype=np.float32), rng.standard_normal(out_shape, dtype=np.float32))
                for _ in range(n_inputs + 1)]
        bufs = [(device.upload(x), device.upload(go)) for x, go in host]
        nout, nin = math.prod(out_shape), math.prod(xs)
        out = device.allocator.alloc(4 * nout)
        idx = device.allocator.alloc(8 * nout)
        gin = device.allocator.alloc(4 * nin)
        if op == "max":  # the backward reads the forward's indices
            max_pool2d(device, bufs[-1][0], out, idx, xs, k, s, p)

        def run(params, i):
            x, go = bufs[i]
            if op == "max":
                if direction == "fwd":
                    max_pool2d(device, x, out, idx, xs, k, s, p, params=params)
                else:
                    max_pool2d_backward(device, go, idx, gin, xs, k, s, p, params=params)
            elif op == "avg":
                if direction == "fwd":
                    avg_pool2d(device, x, out, xs, k, s, p, params=params)
                else:
                    avg_pool2d_backward(device, go, gin, xs, k, s, p, params=params)
            elif direction == "fwd":
                adaptive_avg_pool2d(device, x, out, xs, osz, params=params)
            else:
                adaptive_avg_pool2d_backward(device, go, gin, xs, osz, params=params)

        result = (out, out_shape) if direction == "fwd" else (gin, xs)
        ref = []

        def once(params):
            run(params, n_inputs)
            return device.download(result[0], np.float32, result[1])

        def check(params):
            if not ref:
                ref.append(once(None))
            got = once(params)
            err = float(np.abs(got - ref[0]).max()) if got.size else 0.0
            return bool(np.array_equal(got, ref[0])), err

        return Case(device, shape, run, check, [bufs, out, idx, gin])

    @staticmethod
    def work(shape, params) -> dict:
        n = shape["n"]
        return {"flops": n * 9, "dram_bytes": 8 * n + 4 * math.prod(shape["x"]), "lds_bytes": 0,
                "groups": -(-n // (params["WG"] * params["ITEMS"])), "invocations": params["WG"], "lds_per_group": 0}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        return defines("max_fwd", params), (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): every op."""
        return [defines(op, params) for op in OPS]


def pool_suite(x):
    """Each op and direction a suite tunes, on an input of shape x (tests take a small one)."""
    sh = PoolTarget.shape
    return [sh("max", d, x, 3, 2, 1) for d in ("fwd", "bwd")] + [sh("max", d, x, 2, 2) for d in ("fwd", "bwd")] \
        + [sh("avg", d, x, 3, 2, 1) for d in ("fwd", "bwd")] + [sh("adaptive", d, x, output_size=(1, 1))
                                                                 for d in ("fwd", "bwd")]


PoolTarget.suites = {"suite": pool_suite((32, 64, 112, 112)) + pool_suite((8, 32, 28, 28)),
                     "tiny": pool_suite((2, 8, 28, 28))}


TARGET = PoolTarget()
