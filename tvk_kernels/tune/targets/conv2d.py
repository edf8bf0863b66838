"""The implicit-GEMM conv (kernels/conv.py): forward, grad-input and grad-weight, checked against numpy."""
from __future__ import annotations

import math

import numpy as np

from ...kernels.conv import (conv2d_backward_input, conv2d_backward_weight, conv2d_forward, reference_conv2d,
                             reference_conv2d_backward)
from ...kernels.conv_family import DIRS, Conv2d, gemm_defines, gemm_dims, tune_shape
from ...kernels.conv_geometry import conv2d_output_shape, geometry
from ...search_space import search_space, with_derived
from . import Case


def _suite(x, w, stride=1, padding=0, dilation=1, groups=1):
    return [tune_shape(d, x, w, stride, padding, dilation, groups) for d in DIRS]


class Conv2dTarget:
    """What tvk-tune needs to tune the implicit-GEMM conv (see tvk_kernels/tune/targets/).
    A shape is tune_shape(direction, ...); candidates are checked against numpy."""

    family = Conv2d.family
    template = Conv2d.template
    dtype = "float32"  # the storage the candidates run in
    tolerance = 1e-4  # of the largest reference magnitude (at least 1)
    suites = {
        "suite": (_suite((8, 64, 56, 56), (64, 64, 3, 3), 1, 1) + _suite((8, 128, 28, 28), (128, 128, 3, 3), 1, 1)
                  + _suite((8, 256, 14, 14), (256, 256, 3, 3), 1, 1) + _suite((8, 64, 56, 56), (128, 64, 1, 1), 2)
                  + _suite((8, 3, 112, 112), (32, 3, 3, 3), 2, 1)  # depthwise shapes: conv2d_depthwise's target
                  + _suite((32, 16, 16, 16), (8, 16, 3, 3), 1, 1)
                  # the experiments' models at their benchmark batch sizes (MNIST CNN b256, CIFAR CNN b128)
                  + _suite((256, 1, 28, 28), (32, 1, 3, 3), 1, 1) + _suite((256, 32, 14, 14), (64, 32, 3, 3), 1, 1)
                  + _suite((128, 3, 32, 32), (32, 3, 3, 3), 1, 1) + _suite((128, 32, 32, 32), (32, 32, 3, 3), 1, 1)
                  + _suite((128, 32, 16, 16), (64, 32, 3, 3), 1, 1) + _suite((128, 64, 16, 16), (64, 64, 3, 3), 1, 1)
                  + _suite((128, 64, 8, 8), (128, 64, 3, 3), 1, 1)),
        "tiny": (_suite((2, 1, 28, 28), (8, 1, 3, 3), 1, 1) + _suite((2, 8, 14, 14), (16, 8, 3, 3), 1, 1)
                 + _suite((2, 3, 32, 32), (16, 3, 3, 3), 1, 1)),
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        direction = shape["dir"]
        xs, ws = tuple(shape["x"]), tuple(shape["w"])
        geo = (shape["stride"], shape["padding"], shape["dilation"], shape["groups"])
        out_shape = conv2d_output_shape(xs, ws, *geo)
        rng = np.random.default_rng(seed)
        host = [tuple(rng.standard_normal(s).astype(self.dtype) for s in (xs, ws, out_shape))
                for _ in range(n_inputs + 1)]
        bufs = [tuple(device.upload(a) for a in h) for h in host]
        result_shape = {"fwd": out_shape, "bwd_input": xs, "bwd_weight": ws}[direction]
        out = device.allocator.alloc(np.dtype(self.dtype).itemsize * math.prod(result_shape))

        def run(params, i):
            x, w, go = bufs[i]
            if direction == "fwd":
                conv2d_forward(device, x, w, None, out, xs, ws, *geo, params=params, dtype=self.dtype)
            elif direction == "bwd_input":
                conv2d_backward_input(device, go, w, out, xs, ws, *geo, params=params, dtype=self.dtype)
            else:
                conv2d_backward_weight(device, go, x, out, xs, ws, *geo, params=params, dtype=self.dtype)

        ref = []

        def check(params):
            run(params, n_inputs)  # the set never used for timing
            got = device.download(out, self.dtype, result_shape).astype(np.float64)
            if not ref:
                x, w, go = host[-1]
                if direction == "fwd":
                    ref.append(reference_conv2d(x, w, None, *geo))
                else:
                    gi, gw = reference_conv2d_backward(go, x, w, *geo)
                    ref.append(gi if direction == "bwd_input" else gw)
            err = float(np.abs(got - ref[0]).max()) if got.size else 0.0
            return bool(err <= self.tolerance * max(1.0, float(np.abs(ref[0]).max()))), err

        return Case(device, shape, run, check, [bufs, out])

    @staticmethod
    def work(shape, params) -> dict:
        d = with_derived(search_space(Conv2d.family), params)
        g, (n, oc, oh, ow) = geometry(shape["x"], shape["w"], shape["stride"], shape["padding"], shape["dilation"],
                                       shape["groups"])
        M, N, K = gemm_dims(shape["dir"], g)
        tm, tn = math.ceil(M / params["BM"]), math.ceil(N / params["BN"])
        groups = g["groups"] * tm * tn
        steps = math.ceil(K / params["BK"])
        return {
            "flops": 2 * g["groups"] * M * N * K,
            "dram_bytes": 4 * g["groups"] * (M * K * tn + K * N * tm + M * N),
            "lds_bytes": groups * steps * (4 * params["BK"] * (params["BM"] + params["BN"])
                                           + d["WG"] * params["BK"] * (params["TM"] + params["TN"]) * 4),
            "groups": groups, "invocations": d["WG"], "lds_per_group": d["shared_bytes"],
        }

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        wg = with_derived(search_space(Conv2d.family), params)["WG"]
        return gemm_defines(0, params, wg), (wg, 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Every define set the family builds from one tuned parameter set (tune/carry_over.py)."""
        wg = with_derived(search_space(Conv2d.family), params)["WG"]
        return [gemm_defines(d, params, wg) for d in DIRS.values()]


TARGET = Conv2dTarget()
