"""The packed-fp16 GEMM (kernels/matmul_packed_f16.py): fp16 GEMMs on f16vec2 arithmetic, any device with shaderFloat16."""
from __future__ import annotations

import math

from ...kernels.matmul_packed_f16 import PackedMatmul, defines, error_bound
from ...search_space import search_space, with_derived
from .matmul import gemm_case
from .matmul_coopmat import CoopMatmulTarget


class PackedMatmulTarget:
    """What tvk-tune needs to tune the packed-fp16 kernel (see tvk_kernels/tune/targets/): the
    cooperative-matrix kernel's fp16 suites, checked against the kernel's stated error bound."""

    family = PackedMatmul.family
    template = PackedMatmul.template
    suites = CoopMatmulTarget.suites

    @staticmethod
    def work(shape, params) -> dict:
        """The static RDNA1 model's counts. Its peak is fp32 FMAs; a packed FMA instruction does two, and a
        fold is one instruction per output per CHAIN: counted as the fp32 FLOPs of as many instructions."""
        M, N, K, batch = shape["M"], shape["N"], shape["K"], shape.get("batch", 1)
        d = with_derived(search_space(PackedMatmul.family), params)
        tm, tn = math.ceil(M / params["BM"]), math.ceil(N / params["BN"])
        groups = batch * tm * tn
        steps = math.ceil(K / params["BK"])
        return {
            "flops": batch * M * N * K + 2 * batch * M * N * math.ceil(K / params["CHAIN"]),
            "dram_bytes": 2 * batch * (M * K * tn + K * N * tm + M * N),
            "lds_bytes": groups * steps * (2 * params["BK"] * (params["BM"] + params["BN"])  # stores
                                           + d["WG"] * params["BK"] * (params["TM"] + params["TN"]) * 2),  # reads
            "groups": groups, "invocations": d["WG"], "lds_per_group": d["shared_bytes"],
        }

    @staticmethod
    def unavailable(device) -> str | None:
        if not device.facts.features.get("shader_float16"):
            return "it has no fp16 arithmetic (shaderFloat16)"
        return None

    def prepare(self, device, shape, n_inputs=3, seed=0):
        # the template's error bound at the search space's longest CHAIN, of sum |a b| per output
        bound = error_bound(max(search_space(self.family)["params"]["CHAIN"]["values"]))
        return gemm_case(device, shape, n_inputs, seed, "float16", lambda want, scale: bound * scale + 1e-6,
                         kernel="packed_f16")

    @staticmethod
    def static_defines(params):
        """What the static RDNA1 model compiles: the NN GEMM at the config's load width."""
        wg = with_derived(search_space(PackedMatmul.family), params)["WG"]
        return defines(params), (wg, 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Kernels one tuned parameter set builds (tune/carry_over.py): the GEMM and its split-K partials in
        every layout, at the config's load width and the scalar fallback."""
        return [defines(params, mode=mode, a_kmajor=ak, b_nmajor=bn, vec_a=vec, vec_b=vec)
                for mode in (0, 1) for ak in (True, False) for bn in (True, False) for vec in sorted({params["VEC"], 1})]


TARGET = PackedMatmulTarget()
