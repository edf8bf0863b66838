"""The direct depthwise conv kernels (kernels/conv_depthwise.py): MobileNetV2's and EfficientNet's layers."""
from __future__ import annotations

from ...kernels.conv_depthwise import DIRS, DepthwiseConv, defines, tune_shape
from ...kernels.conv_geometry import geometry
from ...search_space import search_space, with_derived
from .conv2d import Conv2dTarget


def _suite(n, c, hw, k=3, stride=1, mult=1):
    return [tune_shape(d, (n, c, hw, hw), (c * mult, 1, k, k), stride, k // 2, 1, c) for d in DIRS]


class DepthwiseConvTarget:
    """What tvk-tune needs to tune the depthwise kernels (tvk_kernels/tune/targets/): MobileNetV2's
    and EfficientNet's depthwise layers; candidates are checked against conv.py's numpy reference."""

    family = DepthwiseConv.family
    template = DepthwiseConv.template
    dtype, tolerance = Conv2dTarget.dtype, Conv2dTarget.tolerance  # conv2d's cases (prepare)
    suites = {
        "suite": (_suite(32, 32, 112) + _suite(32, 96, 112, stride=2) + _suite(32, 144, 56)
                  + _suite(32, 144, 56, stride=2) + _suite(32, 192, 28) + _suite(32, 576, 14, stride=2)
                  + _suite(32, 960, 7) + _suite(32, 240, 28, k=5) + _suite(32, 672, 14, k=5, stride=2)),
        "tiny": _suite(2, 8, 14) + _suite(2, 6, 9, k=5, stride=2, mult=2),
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        return Conv2dTarget.prepare(self, device, shape, n_inputs, seed)

    @staticmethod
    def work(shape, params) -> dict:
        g, (n, oc, oh, ow) = geometry(shape["x"], shape["w"], shape["stride"], shape["padding"],
                                      shape["dilation"], shape["groups"])
        taps, xs, outs = g["kh"] * g["kw"], n * g["ic"] * g["h"] * g["w"], n * oc * oh * ow
        d = with_derived(search_space(DepthwiseConv.family), params)
        if shape["dir"] == "bwd_weight":
            groups = oc * -(-taps // params["TAPS"])
            lds, lds_group = groups * d["shared_bytes"] * 2, d["shared_bytes"]
        else:
            groups = -(-(outs if shape["dir"] == "fwd" else xs) // (params["WG"] * params["ITEMS"]))
            lds, lds_group = 0, 0
        return {"flops": 2 * outs * taps, "dram_bytes": 4 * (xs + outs + oc * taps), "lds_bytes": lds,
                "groups": groups, "invocations": params["WG"], "lds_per_group": lds_group}

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        return defines(0, params), (params["WG"], 1, 1), None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Every define set the family builds from one tuned parameter set (tune/carry_over.py)."""
        return [defines(d, params) for d in DIRS.values()]


TARGET = DepthwiseConvTarget()
