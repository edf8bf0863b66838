"""The workgroup-scope cooperative-matrix GEMM (kernels/matmul_coopmat2.py): fp16, only where a verified kernel runs."""
from __future__ import annotations

from ...kernels.matmul_coopmat2 import CoopMatmul2, verified
from ...kernels.matmul_plan import DTYPES
from .matmul import gemm_case
from .matmul_coopmat import CoopMatmulTarget


class CoopMatmul2Target:
    """What tvk-tune needs to tune the workgroup-scope kernel (see tvk_kernels/tune/targets/): the
    subgroup-scope kernel's fp16 suites and check, on a device with VK_NV_cooperative_matrix2."""

    family = CoopMatmul2.family
    template = CoopMatmul2.template
    suites = CoopMatmulTarget.suites
    work = staticmethod(CoopMatmulTarget.work)

    @staticmethod
    def unavailable(device) -> str | None:
        if verified(device) is None:
            return ("it has no verified workgroup-scope cooperative-matrix matmul (VK_NV_cooperative_matrix2 with "
                    "fp16 inputs, compiled by glslang >= 15)")
        return None

    def prepare(self, device, shape, n_inputs=3, seed=0):
        # fp32 accumulation, one fp16 rounding of the result, as the subgroup-scope kernel's check
        return gemm_case(device, shape, n_inputs, seed, "float16",
                         lambda want, scale: 2.0 ** -10 * abs(want) + 1e-5 * scale + 1e-3, kernel="coopmat2")

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Kernels one tuned parameter set builds (tune/carry_over.py): the GEMM and its split-K partials
        in every operand and output layout, aligned rows or not."""
        return [{"BM": params["BM"], "BN": params["BN"], "BK": params["BK"], "A_KMAJOR": ak, "B_NMAJOR": bn,
                 "C_NMAJOR": cn, "ALIGNED": al, "DTYPE": DTYPES["float16"][0], "MODE": mode}
                for mode in (0, 1) for ak in (1, 0) for bn in (1, 0) for cn in (1, 0) for al in (1, 0)]


TARGET = CoopMatmul2Target()
