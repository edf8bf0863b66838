"""convolution / convolution_backward (2-D, and 1-D as 2-D with H=1) on tvk_kernels.kernels.conv."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import conv as _C

from .._dispatch import register
from .._tensor import new_tensor
from ._util import addr, contig, dev

aten = torch.ops.aten


def _check(op, *ts):
    for t in ts:
        if t is not None and t.dtype != torch.float32:
            raise TypeError(f"TorchVK: {op} supports float32 only, not {t.dtype}")


def _check_bias_padding(weight, bias, padding):
    """torch's CPU checks that its meta kernel leaves out (a short bias would be read past its end)."""
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be 1-dimensional with "
                           f"{weight.shape[0]} elements, but got bias of size {list(bias.shape)} instead")


def _as2d(input, weight, stride, padding, dilation):
    """conv1d -> conv2d with a height of 1."""
    if input.dim() == 3:
        return (input.unsqueeze(2), weight.unsqueeze(2), [1] + list(stride), [0] + list(padding),
                [1] + list(dilation), True)
    return input, weight, list(stride), list(padding), list(dilation), False


def _pad(padding):
    padding = list(padding)
    return padding * 2 if len(padding) == 1 else padding


@register(aten.convolution.default)
def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, act=None):
    """aten.convolution; act="relu" (compiled mode's fusion only) applies ReLU in the same kernel."""
    _check("aten.convolution", input, weight, bias)
    if transposed:
        raise NotImplementedError("TorchVK: transposed convolution (aten.convolution with transposed=True) has no "
                                  "Vulkan kernel")
    if input.dim() not in (3, 4):
        raise NotImplementedError(f"TorchVK: aten.convolution supports 1-D and 2-D convolutions, got a "
                                  f"{input.dim()}-D input")
    _check_bias_padding(weight, bias, padding)
    x, w, stride, padding, dilation, one_d = _as2d(input, weight, stride, padding, dilation)
    x, w = contig(x), contig(w)
    b = contig(bias) if bias is not None else None
    shape = _C.conv2d_output_shape(tuple(x.shape), tuple(w.shape), stride, _pad(padding), dilation, groups)
    out = new_tensor(shape, torch.float32, dev(input))
    _C.conv2d_forward(dev(input), addr(x), addr(w), addr(b) if b is not None else 0, addr(out), tuple(x.shape),
                      tuple(w.shape), stride, _pad(padding), dilation, groups, act=act)
    return out.squeeze(2) if one_d else out


@register(aten.convolution_backward.default)
def convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    _check("aten.convolution_backward", grad_output, input, weight)
    if transposed:
        raise NotImplementedError("TorchVK: transposed convolution backward has no Vulkan kernel")
    one_d = input.dim() == 3
    g = grad_output.unsqueeze(2) if one_d else grad_output
    x, w, stride, padding, dilation, _ = _as2d(input, weight, stride, padding, dilation)
    g, x, w = contig(g), contig(x), contig(w)
    d = dev(input)
    gi = new_tensor(x.shape, torch.float32, d) if output_mask[0] else None
    gw = new_tensor(w.shape, torch.float32, d) if output_mask[1] else None
    gb = new_tensor([w.shape[0]], torch.float32, d) if output_mask[2] else None
    _C.conv2d_backward(d, addr(g), addr(x), addr(w), addr(gi) if gi is not None else None,
                       addr(gw) if gw is not None else None, addr(gb) if gb is not None else None,
                       tuple(x.shape), tuple(w.shape), stride, _pad(padding), dilation, groups)
    if one_d:
        gi = gi.squeeze(2) if gi is not None else None
        gw = gw.squeeze(2) if gw is not None else None
    return gi, gw, gb
