"""The matrix-vector kernel (kernels/gemv.py), run through matmul() with N == 1."""
from __future__ import annotations

import numpy as np

from ...kernels import dtypes
from ...kernels.gemv import Gemv, defines, split_threads
from ...kernels.matmul import matmul
from . import Case


class GemvTarget:
    """What tvk-tune needs to tune the matrix-vector kernel (see tvk_kernels/tune/targets/):
    y = W x through matmul() with N == 1; "layout" k: W contiguous along K (x @ W^T of a linear
    layer's forward), m: contiguous along the rows (W^T x, its backward)."""

    family = Gemv.family
    template = Gemv.template
    suites = {
        "suite": [{"M": 4096, "K": 4096, "batch": 1, "layout": "k"}, {"M": 4096, "K": 4096, "batch": 1, "layout": "m"},
                  {"M": 4776, "K": 2006, "batch": 1, "layout": "m"}, {"M": 4776, "K": 2006, "batch": 1, "layout": "k"},
                  {"M": 16384, "K": 128, "batch": 1, "layout": "k"}, {"M": 256, "K": 65536, "batch": 1, "layout": "k"},
                  {"M": 512, "K": 512, "batch": 1, "layout": "m"}, {"M": 1024, "K": 1024, "batch": 32, "layout": "k"}],
        "tiny": [{"M": 300, "K": 200, "batch": 1, "layout": "k"}, {"M": 300, "K": 200, "batch": 1, "layout": "m"},
                 {"M": 20, "K": 3000, "batch": 1, "layout": "k"}],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        M, K, batch = shape["M"], shape["K"], shape.get("batch", 1)
        m_major = shape.get("layout", "k") == "m"
        rng = np.random.default_rng(seed)
        # an M-major W is stored transposed and read through its strides
        host = [(rng.standard_normal((batch, K, M) if m_major else (batch, M, K), dtype=np.float32),
                 rng.standard_normal((batch, K), dtype=np.float32)) for _ in range(n_inputs + 1)]
        sa = (M * K, 1, M) if m_major else (M * K, K, 1)
        bufs = [(device.upload(w), device.upload(x)) for w, x in host]
        out = device.allocator.alloc(4 * batch * M)

        def run(params, i):
            w, x = bufs[i]
            matmul(device, w.address, x.address, out.address, M, 1, K, batch=batch, a_strides=sa,
                   b_strides=(K, 1, 0), params=params)

        def check(params):
            run(params, -1)
            got = device.download(out, np.float32, (batch, M)).astype(np.float64)
            W, x = host[-1][0].astype(np.float64), host[-1][1].astype(np.float64)
            W = np.swapaxes(W, 1, 2) if m_major else W
            want = np.einsum("bmk,bk->bm", W, x)
            scale = np.einsum("bmk,bk->bm", np.abs(W), np.abs(x))
            err = np.abs(got - want)
            return bool(np.all(err <= 1e-5 * scale + 1e-6)), float(err.max()) if err.size else 0.0

        return Case(device, shape, run, check, [bufs, out])

    @staticmethod
    def work(shape, params) -> dict:
        M, K, batch = shape["M"], shape["K"], shape.get("batch", 1)
        wg = params["WG"]
        threads, rows = split_threads(params, M, K, batch, params["VEC"], shape.get("layout", "k") == "m")
        groups = batch * -(-M // rows)
        return {"flops": 2 * batch * M * K, "dram_bytes": 4 * batch * (M * K + K + M),
                "lds_bytes": groups * wg * 16 * 2 * max(threads.bit_length() - 1, 1), "groups": groups,
                "invocations": wg, "lds_per_group": wg * 16}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        return defines(params), (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Kernels one tuned parameter set builds (tune/carry_over.py): every storage dtype, both
        layouts, at the config's load width and the scalar fallback (x scalar too in the K-major one)."""
        codes = [dtypes.DTYPES[n].code for n in ("float32", "float16", "bfloat16")]
        out = []
        for code in codes:
            for vec in sorted({params["VEC"], 1}):
                out.append(defines(params, dtype_id=code, mmajor=True, vec_w=vec, vec_x=1))
                out += [defines(params, dtype_id=code, vec_w=vec, vec_x=x) for x in sorted({vec, 1})]
        return out


TARGET = GemvTarget()
