"""The tiled GEMM (kernels/matmul.py, matmul_plan.py), and the GEMM case matmul_coopmat's target shares."""
from __future__ import annotations

import math

import numpy as np

from ...errors import InvalidConfigError
from ...kernels.matmul import matmul
from ...kernels.matmul_plan import DTYPES, MODE_GEMM, MODE_PARTIAL, Matmul, defines
from ...search_space import search_space, with_derived
from . import Case


class MatmulTarget:
    """What tvk-tune needs to tune the tiled kernel (see tvk_kernels/tune/targets/)."""

    family = Matmul.family
    template = Matmul.template
    suites = {
        "suite": [{"M": 128, "N": 128, "K": 128, "batch": 1}, {"M": 512, "N": 512, "K": 512, "batch": 1},
                  {"M": 1024, "N": 1024, "K": 1024, "batch": 1}, {"M": 2048, "N": 2048, "K": 2048, "batch": 1},
                  {"M": 4096, "N": 1024, "K": 1024, "batch": 1}, {"M": 64, "N": 64, "K": 8192, "batch": 1},
                  {"M": 16, "N": 128, "K": 4096, "batch": 1}, {"M": 256, "N": 256, "K": 64, "batch": 8},
                  # a linear layer's forward (x @ W^T) and backward (grad^T @ x): layout buckets .nt, .tn
                  {"M": 512, "N": 2048, "K": 2048, "batch": 1, "layout": "nt"},
                  {"M": 2048, "N": 2048, "K": 512, "batch": 1, "layout": "tn"},
                  {"M": 4096, "N": 1024, "K": 1024, "batch": 1, "layout": "nt"},
                  {"M": 1024, "N": 1024, "K": 1024, "batch": 1, "layout": "tt"},
                  # attention: scores q @ k^T and probs @ v, 32 sequences x 8 heads
                  {"M": 64, "N": 64, "K": 32, "batch": 256, "layout": "nt"},
                  {"M": 64, "N": 32, "K": 64, "batch": 256, "layout": "nn"}],
        "tiny": [{"M": 64, "N": 64, "K": 64, "batch": 1}, {"M": 200, "N": 136, "K": 96, "batch": 1},
                 {"M": 8, "N": 8, "K": 2048, "batch": 1}, {"M": 72, "N": 40, "K": 48, "batch": 1, "layout": "tn"},
                 {"M": 16, "N": 16, "K": 8, "batch": 16, "layout": "nt"}],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        return gemm_case(device, shape, n_inputs, seed, "float32", lambda want, scale: 1e-5 * scale + 1e-6)

    @staticmethod
    def work(shape, params) -> dict:
        M, N, K, batch = shape["M"], shape["N"], shape["K"], shape.get("batch", 1)
        d = with_derived(search_space(Matmul.family), params)
        tm, tn = math.ceil(M / params["BM"]), math.ceil(N / params["BN"])
        groups = batch * tm * tn
        steps = math.ceil(K / params["BK"])
        return {
            "flops": 2 * batch * M * N * K,
            "dram_bytes": 4 * batch * (M * K * tn + K * N * tm + M * N),
            "lds_bytes": groups * steps * (4 * params["BK"] * (params["BM"] + params["BN"])  # stores
                                           + d["WG"] * params["BK"] * (params["TM"] + params["TN"]) * 4),  # reads
            "groups": groups, "invocations": d["WG"], "lds_per_group": d["shared_bytes"],
        }

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        wg = with_derived(search_space(Matmul.family), params)["WG"]
        return defines(params), (wg, 1, 1), params.get("SUBGROUP") or None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Kernels one tuned parameter set builds (tune/carry_over.py): the GEMM and its split-K
        partials, every storage dtype and layout, at the config's load width and the scalar fallback."""
        return [defines(params, mode=mode, dtype_id=code, a_kmajor=ak, b_nmajor=bn, vec_a=vec, vec_b=vec)
                for mode in (MODE_GEMM, MODE_PARTIAL) for code, _ in DTYPES.values()
                for ak in (True, False) for bn in (True, False) for vec in sorted({params["VEC"], 1})]


def gemm_case(device, shape, n_inputs, seed, dtype: str, tolerance, kernel: str | None = None):
    """The tuner's Case of one GEMM shape: random operands of `dtype`, a transposed one
    stored transposed and read through its strides; the check compares with float64 and allows
    tolerance(want, |A| @ |B|) per element, and raises InvalidConfigError unless `kernel` ran."""
    M, N, K, batch = shape["M"], shape["N"], shape["K"], shape.get("batch", 1)
    a_t, b_t = (c == "t" for c in shape.get("layout", "nn"))
    npdt = np.float32 if dtype == "float32" else np.float16
    rng = np.random.default_rng(seed)
    host = [(rng.standard_normal((batch, K, M) if a_t else (batch, M, K), dtype=np.float32).astype(npdt),
             rng.standard_normal((batch, N, K) if b_t else (batch, K, N), dtype=np.float32).astype(npdt))
            for _ in range(n_inputs + 1)]
    sa = (M * K, 1, M) if a_t else (M * K, K, 1)
    sb = (K * N, 1, K) if b_t else (K * N, N, 1)
    bufs = [(device.upload(a), device.upload(b)) for a, b in host]
    out = device.allocator.alloc(np.dtype(npdt).itemsize * batch * M * N)

    def call(params, i):
        a, b = bufs[i]
        return matmul(device, a.address, b.address, out.address, M, N, K, batch=batch, a_strides=sa, b_strides=sb,
                      dtype=dtype, params=params)

    def check(params):
        info = call(params, -1)
        if kernel is not None and info["kernel"] != kernel:
            raise InvalidConfigError(f"the {kernel} kernel did not run ({info['kernel']})")
        got = device.download(out, npdt, (batch, M, N)).astype(np.float64)
        A, B = host[-1][0].astype(np.float64), host[-1][1].astype(np.float64)
        A, B = (np.swapaxes(A, 1, 2) if a_t else A), (np.swapaxes(B, 1, 2) if b_t else B)
        want = A @ B
        err = np.abs(got - want)
        return bool(np.all(err <= tolerance(want, np.abs(A) @ np.abs(B)))), float(err.max()) if err.size else 0.0

    return Case(device, shape, call, check, [bufs, out])


TARGET = MatmulTarget()
