"""Upsampling (nearest, nearest-exact, bilinear) and reflect / replicate padding, forward and
backward, on tvk_kernels.kernels.resample. Inputs are made contiguous (N, C, H, W) stacks of planes."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import resample as resample_kernels

from ..op_registry import register
from ._util import addr, dev, empty, need_float
from .copies import contig

aten = torch.ops.aten


def _planes(t, op, spatial: int):
    """(contiguous t, number of planes, (H, W)); 1-d ops see each row as a plane of height 1."""
    need_float(t, op)
    t = contig(t)
    lead = t.shape[:-spatial]
    planes = 1
    for s in lead:
        planes *= s
    hw = tuple(t.shape[-2:]) if spatial == 2 else (1, t.shape[-1])
    return t, planes, hw


def _vec_size(x, output_size, scale_factors):
    """upsample_*.vec's output size, as torch computes it (floor of in * scale)."""
    if output_size is not None:
        return list(output_size)
    return [int(float(s) * f) for s, f in zip(x.shape[2:], scale_factors)]


def _plane_size(size, spatial):
    """An output or input size's last `spatial` dims as (H, W); 1-d sizes are rows of height 1."""
    size = tuple(int(s) for s in size[-spatial:])
    return size if spatial == 2 else (1, size[0])


def _upsample(x, out_size, mode, op, scales, align_corners=False, spatial=2):
    x, planes, in_hw = _planes(x, op, spatial)
    out_hw = _plane_size(out_size, spatial)
    out = empty((*x.shape[:-spatial], *out_hw[2 - spatial:]), x.dtype, dev(x), op=op)
    s = _scales(mode, in_hw, out_hw, scales if spatial == 2 else (None, scales[0]), align_corners)
    resample_kernels.forward(dev(x), mode, addr(x), addr(out), planes, in_hw, out_hw, s, align_corners=align_corners)
    return out


def _upsample_backward(grad, out_size, input_size, mode, op, scales, align_corners=False, spatial=2):
    g, planes, _ = _planes(grad, op, spatial)
    in_hw, out_hw = _plane_size(input_size, spatial), _plane_size(out_size, spatial)
    gi = empty(tuple(int(s) for s in input_size), g.dtype, dev(g), op=op)
    s = _scales(mode, in_hw, out_hw, scales if spatial == 2 else (None, scales[0]), align_corners)
    resample_kernels.backward(dev(g), mode, addr(g), addr(gi), planes, in_hw, out_hw, s, align_corners=align_corners)
    return gi


def _scales(mode, in_hw, out_hw, scales, align_corners):
    if mode == resample_kernels.BILINEAR:
        return tuple(resample_kernels.linear_scale(i, o, align_corners, s) for i, o, s in zip(in_hw, out_hw, scales))
    return tuple(resample_kernels.nearest_scale(i, o, s) for i, o, s in zip(in_hw, out_hw, scales))


@register(aten.upsample_nearest2d.default, traced_whole=True)
def upsample_nearest2d(self, output_size, scales_h=None, scales_w=None):
    return _upsample(self, output_size, resample_kernels.NEAREST, "upsample_nearest2d", (scales_h, scales_w))


@register(aten.upsample_nearest2d.vec, traced_whole=True)
def upsample_nearest2d_vec(input, output_size, scale_factors):
    scales = scale_factors if scale_factors is not None else (None, None)
    return upsample_nearest2d(input, _vec_size(input, output_size, scale_factors), *scales)


@register(aten.upsample_nearest2d_backward.default)
def upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, resample_kernels.NEAREST, "upsample_nearest2d_backward",
                              (scales_h, scales_w))


@register(aten._upsample_nearest_exact2d.default, traced_whole=True)
def upsample_nearest_exact2d(self, output_size, scales_h=None, scales_w=None):
    return _upsample(self, output_size, resample_kernels.NEAREST_EXACT, "upsample_nearest_exact2d", (scales_h, scales_w))


@register(aten._upsample_nearest_exact2d.vec, traced_whole=True)
def upsample_nearest_exact2d_vec(input, output_size, scale_factors):
    scales = scale_factors if scale_factors is not None else (None, None)
    return upsample_nearest_exact2d(input, _vec_size(input, output_size, scale_factors), *scales)


@register(aten._upsample_nearest_exact2d_backward.default)
def upsample_nearest_exact2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, resample_kernels.NEAREST_EXACT,
                              "upsample_nearest_exact2d_backward", (scales_h, scales_w))


@register(aten.upsample_bilinear2d.default, traced_whole=True)
def upsample_bilinear2d(self, output_size, align_corners, scales_h=None, scales_w=None):
    return _upsample(self, output_size, resample_kernels.BILINEAR, "upsample_bilinear2d", (scales_h, scales_w), align_corners)


@register(aten.upsample_bilinear2d.vec, traced_whole=True)
def upsample_bilinear2d_vec(input, output_size, align_corners, scale_factors):
    scales = scale_factors if scale_factors is not None else (None, None)
    return upsample_bilinear2d(input, _vec_size(input, output_size, scale_factors), align_corners, *scales)


@register(aten.upsample_bilinear2d_backward.default)
def upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, scales_h=None,
                                 scales_w=None):
    return _upsample_backward(grad_output, output_size, input_size, resample_kernels.BILINEAR, "upsample_bilinear2d_backward",
                              (scales_h, scales_w), align_corners)


# 1-d (N, C, L): the same kernels on rows of height 1
@register(aten.upsample_nearest1d.default, traced_whole=True)
def upsample_nearest1d(self, output_size, scales=None):
    return _upsample(self, output_size, resample_kernels.NEAREST, "upsample_nearest1d", (scales,), spatial=1)


@register(aten.upsample_nearest1d.vec, traced_whole=True)
def upsample_nearest1d_vec(input, output_size, scale_factors):
    scales = scale_factors if scale_factors is not None else (None,)
    return upsample_nearest1d(input, _vec_size(input, output_size, scale_factors), *scales)


@register(aten.upsample_nearest1d_backward.default)
def upsample_nearest1d_backward(grad_output, output_size, input_size, scales=None):
    return _upsample_backward(grad_output, output_size, input_size, resample_kernels.NEAREST, "upsample_nearest1d_backward",
                              (scales,), spatial=1)


@register(aten._upsample_nearest_exact1d.default, traced_whole=True)
def upsample_nearest_exact1d(self, output_size, scales=None):
    return _upsample(self, output_size, resample_kernels.NEAREST_EXACT, "upsample_nearest_exact1d", (scales,), spatial=1)


@register(aten._upsample_nearest_exact1d.vec, traced_whole=True)
def upsample_nearest_exact1d_vec(input, output_size, scale_factors):
    scales = scale_factors if scale_factors is not None else (None,)
    return upsample_nearest_exact1d(input, _vec_size(input, output_size, scale_factors), *scales)


@register(aten._upsample_nearest_exact1d_backward.default)
def upsample_nearest_exact1d_backward(grad_output, output_size, input_size, scales=None):
    return _upsample_backward(grad_output, output_size, input_size, resample_kernels.NEAREST_EXACT,
                              "upsample_nearest_exact1d_backward", (scales,), spatial=1)


@register(aten.upsample_linear1d.default, traced_whole=True)
def upsample_linear1d(self, output_size, align_corners, scales=None):
    return _upsample(self, output_size, resample_kernels.BILINEAR, "upsample_linear1d", (scales,), align_corners, spatial=1)


@register(aten.upsample_linear1d.vec, traced_whole=True)
def upsample_linear1d_vec(input, output_size, align_corners, scale_factors):
    scales = scale_factors if scale_factors is not None else (None,)
    return upsample_linear1d(input, _vec_size(input, output_size, scale_factors), align_corners, *scales)


@register(aten.upsample_linear1d_backward.default)
def upsample_linear1d_backward(grad_output, output_size, input_size, align_corners, scales=None):
    return _upsample_backward(grad_output, output_size, input_size, resample_kernels.BILINEAR, "upsample_linear1d_backward",
                              (scales,), align_corners, spatial=1)


# ------------------------------------------------------------------ padding
def _pads(padding, spatial):
    """torch's (left, right[, top, bottom]) -> ((top, left), added rows, added columns)."""
    left, right = int(padding[0]), int(padding[1])
    top, bottom = (int(padding[2]), int(padding[3])) if spatial == 2 else (0, 0)
    return (top, left), top + bottom, left + right


def _pad(self, padding, mode, spatial, op):
    x, planes, in_hw = _planes(self, op, spatial)
    pads, dh, dw = _pads(padding, spatial)
    out_hw = (in_hw[0] + dh, in_hw[1] + dw)
    out = empty((*x.shape[:-spatial], *out_hw[2 - spatial:]), x.dtype, dev(x), op=op)
    resample_kernels.forward(dev(x), mode, addr(x), addr(out), planes, in_hw, out_hw, pads=pads)
    return out


def _pad_backward(grad_output, self, padding, mode, spatial, op):
    g, planes, out_hw = _planes(grad_output, op, spatial)
    pads, dh, dw = _pads(padding, spatial)
    in_hw = (out_hw[0] - dh, out_hw[1] - dw)
    gi = empty(tuple(self.shape), g.dtype, dev(g), op=op)
    resample_kernels.backward(dev(g), mode, addr(g), addr(gi), planes, in_hw, out_hw, pads=pads)
    return gi


def _pad_ops(mode, name, spatial):
    fwd, bwd = getattr(aten, name).default, getattr(aten, name + "_backward").default
    register(fwd)(lambda self, padding: _pad(self, padding, mode, spatial, name))
    register(bwd)(lambda grad_output, self, padding: _pad_backward(grad_output, self, padding, mode, spatial,
                                                                   name + "_backward"))


for _mode, _kind in ((resample_kernels.REFLECT, "reflection"), (resample_kernels.REPLICATE, "replication")):
    for _spatial in (1, 2):
        _pad_ops(_mode, f"{_kind}_pad{_spatial}d", _spatial)
