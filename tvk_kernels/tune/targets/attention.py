"""Attention (kernels/attention.py): forward and backward, checked against a float64 reference."""
from __future__ import annotations

import numpy as np

from ...kernels.attention import (MAX_HEAD, Attention, attention_backward, attention_forward, head_pad,
                                  kernel_defines, shared_bytes)
from . import Case


class AttentionTarget:
    """What tvk-tune needs to tune attention (see tvk_kernels/tune/targets/): forward and backward.
    The static RDNA1 path compiles the heaviest kernel, dK/dV at head dim 128 with a mask and
    dropout (tests/test_attention.py compiles every kernel of the chosen configs)."""

    family = Attention.family
    template = Attention.template
    suites = {
        "suite": [
            {"batch": 8, "heads": 8, "lq": 1024, "lk": 1024, "head": 64},
            {"batch": 4, "heads": 8, "lq": 512, "lk": 512, "head": 128},
            {"batch": 2, "heads": 4, "lq": 4096, "lk": 4096, "head": 64},
        ],
        "tiny": [
            {"batch": 1, "heads": 2, "lq": 33, "lk": 47, "head": 40},
            {"batch": 1, "heads": 1, "lq": 20, "lk": 20, "head": 96},
        ],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        """A case runs the forward and the backward (both parameter sets are timed); the check
        compares O and dV with a float64 reference."""
        b, h, lq, lk, d = (shape[k] for k in ("batch", "heads", "lq", "lk", "head"))
        rng = np.random.default_rng(seed)
        sizes = ((b, h, lq, d), (b, h, lk, d), (b, h, lk, d), (b, h, lq, d))  # q, k, v, dO
        host = [[rng.standard_normal(s, dtype=np.float32) for s in sizes] for _ in range(n_inputs + 1)]
        bufs = [[device.upload(a) for a in arrays] for arrays in host]
        alloc = device.allocator.alloc
        out, dq = alloc(4 * b * h * lq * d), alloc(4 * b * h * lq * d)
        dk, dv = alloc(4 * b * h * lk * d), alloc(4 * b * h * lk * d)
        lse, delta = alloc(4 * b * h * lq), alloc(4 * b * h * lq)
        geometry, scale = (b, h, h, lq, lk, d), 1.0 / d ** 0.5

        def run(params, i):
            q, k, v, d_o = bufs[i]
            attention_forward(device, q, k, v, out, lse, geometry, scale=scale, params=params)
            attention_backward(device, q, k, v, out, d_o, lse, dq, dk, dv, geometry, scale=scale, delta=delta,
                               params=params)

        def check(params):
            run(params, -1)
            q, k, v, d_o = (a.astype(np.float64) for a in host[-1])
            s = q @ k.swapaxes(-1, -2) * scale
            e = np.exp(s - s.max(-1, keepdims=True))
            probs = e / e.sum(-1, keepdims=True)
            worst = 0.0
            for buf, want in ((out, probs @ v), (dv, probs.swapaxes(-1, -2) @ d_o)):
                got = device.download(buf, np.float32, want.shape).astype(np.float64)
                worst = max(worst, float(np.max(np.abs(got - want) / (1 + np.abs(want)))))
            return worst <= 1e-4, worst

        return Case(device, shape, run, check, [bufs, out, dq, dk, dv, lse, delta])

    @staticmethod
    def work(shape, params) -> dict:
        b, h, lq, lk, d = (shape[k] for k in ("batch", "heads", "lq", "lk", "head"))
        br, bc, tpr = params["BR"], params["BC"], params["TPR"]
        groups = b * h * -(-lq // br)
        tiles = -(-lk // bc)
        return {"flops": 4 * b * h * lq * lk * d, "dram_bytes": 4 * b * h * (2 * lq * d + groups // (b * h) * 2 * lk * d),
                "lds_bytes": groups * tiles * (2 * bc * d * 4 + br * bc * 4) * (1 + d // tpr),
                "groups": groups, "invocations": br * tpr, "lds_per_group": shared_bytes(0, br, bc, head_pad(d))}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        defines, wg, _ = kernel_defines(3, params, MAX_HEAD, "float32", "float", False, True)
        return defines, (wg, 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """The kernels one tuned parameter set builds (tune/carry_over.py): forward, delta, dQ and dK/dV at
        head dims 64 and 128, fp32 and fp16 (packed fp16 where the thread's dims come in pairs), with no
        mask, a bool mask with causal, and a float mask with dropout."""
        out = []
        for head in (64, 128):
            for dtype in ("float32", "float16"):
                for features in ((None, False, False), ("bool", True, False), ("float", False, True)):
                    for kernel in (0, 1, 2, 3):
                        tpr = params["TPR"] if kernel in (0, 1) else params["BTPR"]
                        packed = dtype == "float16" and head % (2 * tpr) == 0
                        for pk in sorted({False, packed}):
                            out.append(kernel_defines(kernel, params, head, dtype, *features, packed=pk)[0])
        return out


TARGET = AttentionTarget()
