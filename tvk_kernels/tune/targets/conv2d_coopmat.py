"""fp16 convolution on cooperative matrices (kernels/conv_coopmat.py): the conv2d shapes in float16, only where
the device's matrices passed the route's check."""
from __future__ import annotations

import math

import numpy as np

from ...kernels.conv import (check_coopmat, conv2d_backward_input, conv2d_backward_weight, conv2d_forward,
                             reference_conv2d, reference_conv2d_backward)
from ...kernels.conv_coopmat import Conv2dCoopmat, has_16x16x16
from ...kernels.conv_family import DIRS, gemm_defines, gemm_dims
from ...kernels.conv_geometry import conv2d_output_shape, geometry
from ...kernels.launch import family
from . import Case
from .conv2d import Conv2dTarget


class Conv2dCoopmatTarget:
    """What tvk-tune needs to tune the cooperative-matrix conv: conv2d's suites in float16, each candidate
    checked against float64 at fp16 accuracy (fp32 sums, one rounding)."""

    family = Conv2dCoopmat.family
    template = Conv2dCoopmat.template
    suites = Conv2dTarget.suites

    @staticmethod
    def unavailable(device) -> str | None:
        if not has_16x16x16(device):
            return "it has no 16x16x16 fp16 cooperative matrices (VK_KHR_cooperative_matrix)"
        if not family(device, Conv2dCoopmat).routed(check_coopmat):
            return "its cooperative-matrix conv failed the check against numpy"
        return None

    def prepare(self, device, shape, n_inputs=3, seed=0):
        direction = shape["dir"]
        xs, ws = tuple(shape["x"]), tuple(shape["w"])
        geo = (shape["stride"], shape["padding"], shape["dilation"], shape["groups"])
        out_shape = conv2d_output_shape(xs, ws, *geo)
        rng = np.random.default_rng(seed)
        host = [tuple(rng.standard_normal(s).astype(np.float16) for s in (xs, ws, out_shape))
                for _ in range(n_inputs + 1)]
        bufs = [tuple(device.upload(a) for a in h) for h in host]
        result_shape = {"fwd": out_shape, "bwd_input": xs, "bwd_weight": ws}[direction]
        out = device.allocator.alloc(2 * math.prod(result_shape))

        def run(params, i):
            x, w, go = bufs[i]
            if direction == "fwd":
                conv2d_forward(device, x, w, None, out, xs, ws, *geo, params=params, dtype="float16")
            elif direction == "bwd_input":
                conv2d_backward_input(device, go, w, out, xs, ws, *geo, params=params, dtype="float16")
            else:
                conv2d_backward_weight(device, go, x, out, xs, ws, *geo, params=params, dtype="float16")

        ref = []

        def check(params):
            run(params, n_inputs)  # the set never used for timing
            got = device.download(out, np.float16, result_shape).astype(np.float64)
            if not ref:
                x, w, go = host[-1]
                if direction == "fwd":
                    ref.append(reference_conv2d(x, w, None, *geo))
                else:
                    gi, gw = reference_conv2d_backward(go, x, w, *geo)
                    ref.append(gi if direction == "bwd_input" else gw)
            err = float(np.abs(got - ref[0]).max()) if got.size else 0.0
            return bool(err <= 2.0 ** -9 * max(1.0, float(np.abs(ref[0]).max()))), err

        return Case(device, shape, run, check, [bufs, out])

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
