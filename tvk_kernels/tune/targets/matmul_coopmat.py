"""The cooperative-matrix GEMM (kernels/matmul_coopmat.py): fp16, only where a verified kernel runs."""
from __future__ import annotations

from ...kernels.matmul_coopmat import CoopMatmul, verified
from ...kernels.matmul_plan import DTYPES
from .matmul import gemm_case


class CoopMatmulTarget:
    """What tvk-tune needs to tune the cooperative-matrix kernel (see tvk_kernels/tune/targets/):
    fp16 GEMMs, checked against float64 at fp16 accuracy. Only a device with a verified kernel tunes it."""

    family = CoopMatmul.family
    template = CoopMatmul.template
    suites = {
        "suite": [{"M": 1024, "N": 1024, "K": 1024, "batch": 1}, {"M": 2048, "N": 2048, "K": 2048, "batch": 1},
                  {"M": 4096, "N": 4096, "K": 4096, "batch": 1}, {"M": 256, "N": 256, "K": 256, "batch": 1},
                  {"M": 512, "N": 512, "K": 512, "batch": 1},
                  # a linear layer's forward (x @ W^T) and backward (grad^T @ x): layout buckets .nt, .tn
                  {"M": 4096, "N": 4096, "K": 1024, "batch": 1, "layout": "nt"},
                  {"M": 512, "N": 2048, "K": 2048, "batch": 1, "layout": "nt"},
                  {"M": 2048, "N": 2048, "K": 4096, "batch": 1, "layout": "tn"},
                  {"M": 2048, "N": 2048, "K": 512, "batch": 1, "layout": "tn"},
                  {"M": 2048, "N": 2048, "K": 2048, "batch": 1, "layout": "tt"},
                  # attention: scores q @ k^T and probs @ v, 16 sequences x 8 heads of 128 tokens
                  {"M": 128, "N": 128, "K": 64, "batch": 128, "layout": "nt"},
                  {"M": 128, "N": 64, "K": 128, "batch": 128, "layout": "nn"}],
        "tiny": [{"M": 64, "N": 64, "K": 64, "batch": 1}, {"M": 200, "N": 136, "K": 96, "batch": 1, "layout": "nt"}],
    }

    @staticmethod
    def unavailable(device) -> str | None:
        if verified(device) is None:
            return "it has no verified cooperative-matrix matmul (VK_KHR_cooperative_matrix with fp16 inputs)"
        return None

    def prepare(self, device, shape, n_inputs=3, seed=0):
        # fp32 accumulation, one fp16 rounding of the result: 2^-11 of |C| and a little of the sum's scale
        return gemm_case(device, shape, n_inputs, seed, "float16",
                         lambda want, scale: 2.0 ** -10 * abs(want) + 1e-5 * scale + 1e-3, kernel="coopmat")

    @staticmethod
    def work(shape, params) -> dict:
        M, N, K, batch = shape["M"], shape["N"], shape["K"], shape.get("batch", 1)
        return {"flops": 2 * batch * M * N * K, "dram_bytes": 2 * batch * (M * K + K * N + M * N)}

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Kernels one tuned parameter set builds (tune/carry_over.py): the GEMM and its split-K partials
        in every layout at each load width, on the 16x16x16 matrix shape (the one pick_shape prefers, every
        vendor's) at the subgroup sizes GPUs run it with; the device's shape and subgroup are not recorded."""
        c = {"STAGES": 2, **params}
        return [{"MS": 16, "NS": 16, "KS": 16, "SG_M": c["SG_M"], "SG_N": c["SG_N"], "FM": c["FM"], "FN": c["FN"],
                 "BK": c["BK"], "PAD": c["PAD"], "STAGES": c["STAGES"], "SUBGROUP_SIZE": sg, "VEC_A": vec,
                 "VEC_B": vec, "A_KMAJOR": int(ak), "B_NMAJOR": int(bn), "DTYPE": DTYPES["float16"][0], "MODE": mode}
                for mode in (0, 1) for sg in (32, 64) for ak in (True, False) for bn in (True, False)
                for vec in (8, 1)]


TARGET = CoopMatmulTarget()
