"""fp16 convolution on cooperative matrices (kernels/conv_coopmat.py): the conv2d shapes in float16, only where
the device's matrices passed the route's check."""
from __future__ import annotations

import math

from ...kernels.conv import check_coopmat
from ...kernels.conv_coopmat import Conv2dCoopmat, has_16x16x16
from ...kernels.conv_family import DIRS, gemm_defines, gemm_dims
from ...kernels.conv_geometry import geometry
from ...kernels.launch import family
from .conv2d import Conv2dTarget


class Conv2dCoopmatTarget(Conv2dTarget):
    """What tvk-tune needs to tune the cooperative-matrix conv: conv2d's suites and cases in float16, each
    candidate checked against float64 at fp16 accuracy (fp32 sums, one rounding)."""

    family = Conv2dCoopmat.family
    template = Conv2dCoopmat.template
    dtype = "float16"
    tolerance = 2.0 ** -9
    static_defines = None  # no RDNA1 statistics: GPUs without cooperative matrices never run it

    @staticmethod
    def unavailable(device) -> str | None:
        if not has_16x16x16(device):
            return "it has no 16x16x16 fp16 cooperative matrices (VK_KHR_cooperative_matrix)"
        if not family(device, Conv2dCoopmat).routed(check_coopmat):
            return "its cooperative-matrix conv failed the check against numpy"
        return None

    @staticmethod
    def work(shape, params) -> dict:
        g, _ = geometry(shape["x"], shape["w"], shape["stride"], shape["padding"], shape["dilation"], shape["groups"])
        M, N, K = gemm_dims(shape["dir"], g)
        tm, tn = math.ceil(M / params["BM"]), math.ceil(N / params["BN"])
        return {"flops": 2 * g["groups"] * M * N * K,
                "dram_bytes": 2 * g["groups"] * (M * K * tn + K * N * tm + M * N)}

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Kernels one tuned parameter set builds (tune/carry_over.py): each direction, its output in fp16 or as
        split-K's fp32 partials, at the subgroup sizes GPUs run it with (the device's own is not recorded)."""
        out = []
        for sg in (32, 64):
            wg = (params["BM"] // (16 * params["FM"])) * (params["BN"] // (16 * params["FN"])) * sg
            tile = {"BM": params["BM"], "BN": params["BN"], "BK": params["BK"], "TM": params["FM"],
                    "TN": params["FN"], "PAD": params["PAD"]}
            for d in DIRS.values():
                for partials in (False, True):
                    out.append({**gemm_defines(d, tile, wg, None, "float16", partials), "COOPMAT": 1,
                                "SUBGROUP_SIZE": sg, "EMULATE": 0})
        return out


TARGET = Conv2dCoopmatTarget()
