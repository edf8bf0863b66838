"""Resampling of (planes, H, W) stacks (templates/resample.comp): nearest and bilinear
upsampling, reflect and replicate padding, each forward and backward.

    forward(device, mode, src_addr, dst_addr, planes, in_hw, out_hw, scales=(1, 1), pads=(0, 0), align_corners=False)
    backward(device, mode, grad_out_addr, grad_in_addr, planes, in_hw, out_hw, scales=..., pads=..., align_corners=...)

Both tensors are contiguous float32. `scales` are torch's per-axis float32 scales (see
nearest_scale / linear_scale), `pads` the (top, left) padding (negative crops). The backward is
a gather (each input element sums the outputs that read it): no atomics, deterministic.
One invocation per element written, a fixed workgroup size: nothing to tune (no tuning/ file).
"""
from __future__ import annotations

import struct

import numpy as np

from .launch import Family, family, grid_1d, workgroup_size

NEAREST, BILINEAR, REFLECT, REPLICATE, NEAREST_EXACT = 0, 1, 2, 3, 4
NAMES = {NEAREST: "upsample_nearest", BILINEAR: "upsample_bilinear", REFLECT: "reflection_pad",
         REPLICATE: "replication_pad", NEAREST_EXACT: "upsample_nearest_exact"}
WG = 256  # threads a workgroup, where the device's workgroups hold them (launch.workgroup_size)
_PUSH = struct.Struct("<QQI2i2i2f2i")


class Resample(Family):
    family = "resample"
    template = "resample.comp"


def defines(mode: int, backward: bool, align_corners: bool) -> dict:
    """The template's defines for one mode and direction (align_corners matters to bilinear only)."""
    return {"MODE": mode, "BACKWARD": int(backward), "ALIGN_CORNERS": int(align_corners and mode == BILINEAR)}


def nearest_scale(in_size: int, out_size: int, scale) -> float:
    """torch's compute_scales_value<float>: 1 / scale_factor when one was given, else in / out."""
    if scale is not None and scale > 0:
        return float(np.float32(1.0 / scale))
    return float(np.float32(in_size) / np.float32(out_size))


def linear_scale(in_size: int, out_size: int, align_corners: bool, scale) -> float:
    """torch's area_pixel_compute_scale<float>."""
    if align_corners:
        return float(np.float32(in_size - 1) / np.float32(out_size - 1)) if out_size > 1 else 0.0
    return nearest_scale(in_size, out_size, scale)


def _run(device, mode, backward, src, dst, planes, in_hw, out_hw, scales, pads, align_corners):
    in_h, in_w = (int(s) for s in in_hw)
    out_h, out_w = (int(s) for s in out_hw)
    n = planes * (in_h * in_w if backward else out_h * out_w)
    if n == 0:
        return
    if max(planes * in_h * in_w, planes * out_h * out_w) >= 1 << 31:
        raise ValueError(f"{NAMES[mode]}: a tensor of 2**31 elements or more is not supported; split the batch")
    push = _PUSH.pack(src, dst, n, in_h, in_w, out_h, out_w, *(float(s) for s in scales), *(int(p) for p in pads))
    wg = workgroup_size(device, WG)
    groups = grid_1d(-(-n // wg), device.facts.max_workgroup_count[0])
    pipe = family(device, Resample).variant(defines(mode, backward, align_corners), wg, _PUSH.size)
    device.stream.dispatch(pipe, groups, push, NAMES[mode] + ("_backward" if backward else ""))


def forward(device, mode, src_addr, dst_addr, planes, in_hw, out_hw, scales=(1.0, 1.0), pads=(0, 0),
            align_corners=False):
    _run(device, mode, False, src_addr, dst_addr, planes, in_hw, out_hw, scales, pads, align_corners)


def backward(device, mode, grad_out_addr, grad_in_addr, planes, in_hw, out_hw, scales=(1.0, 1.0), pads=(0, 0),
             align_corners=False):
    _run(device, mode, True, grad_out_addr, grad_in_addr, planes, in_hw, out_hw, scales, pads, align_corners)
