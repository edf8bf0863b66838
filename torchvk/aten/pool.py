"""max / avg / adaptive-avg 2-D pooling and their backward on tvk_kernels.kernels.pool: float32,
float16 and bfloat16 planes read and written in place (16-bit storage, float32 arithmetic)."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import pool as pool_kernels

from ..op_registry import register
from .._repeat import FreshOutputs, mark, offer
from .._tensor import new_tensor
from ._util import DTYPE_NAME, addr, dev
from .copies import cast, contig

aten = torch.ops.aten


def _x4(x, op):
    if x.dtype not in DTYPE_NAME:
        raise TypeError(f"TorchVK: {op} supports float32, float16 and bfloat16, not {x.dtype}")
    if x.dim() == 3:
        return contig(x.unsqueeze(0)), True
    if x.dim() != 4:
        raise NotImplementedError(f"TorchVK: {op} takes (N, C, H, W) or (C, H, W) input")
    return contig(x), False


def _stride(kernel_size, stride):
    return kernel_size if stride is None or len(stride) == 0 else stride


def _grad4(grad_output, x, sq):
    """grad_output as the kernels read it: (N, C, H, W), contiguous, in the input's dtype (the gradient
    of a pooling is in its input's dtype)."""
    return contig(cast(grad_output.unsqueeze(0) if sq else grad_output, x.dtype))


def _offer(begun, result, used, record):
    """Offer the call's kernel work as its repeat. `used`: the tensors the kernels read; the dispatcher keeps
    the offer only where they are the call's own arguments (no copy or 3-d view in between)."""
    offer(begun, result, used, FreshOutputs(result if isinstance(result, tuple) else (result,), record))
    return result


@register(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    begun = mark()
    x, sq = _x4(self, "max_pool2d")
    stride = _stride(kernel_size, stride)
    shape = pool_kernels.pool2d_output_shape(tuple(x.shape), kernel_size, stride, padding, dilation, ceil_mode)
    out = new_tensor(shape, x.dtype, dev(x))
    idx = new_tensor(shape, torch.int64, dev(x))
    device, planes, dtype = dev(x), tuple(x.shape), DTYPE_NAME[x.dtype]  # the closure holds no tensor

    def record(operands, outputs):
        pool_kernels.max_pool2d(device, addr(operands[0]), addr(outputs[0]), addr(outputs[1]), planes, kernel_size,
                                stride, padding, dilation, ceil_mode, dtype=dtype)

    record((x,), (out, idx))
    if sq:
        return out.squeeze(0), idx.squeeze(0)
    return _offer(begun, (out, idx), (x,), record)


@register(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices):
    begun = mark()
    x, sq = _x4(self, "max_pool2d backward")
    g = _grad4(grad_output, x, sq)
    idx = contig(indices.unsqueeze(0) if sq else indices)
    gi = new_tensor(x.shape, x.dtype, dev(x))
    device, planes, dtype = dev(x), tuple(x.shape), DTYPE_NAME[x.dtype]

    def record(operands, outputs):
        pool_kernels.max_pool2d_backward(device, addr(operands[0]), addr(operands[2]), addr(outputs[0]), planes,
                                         kernel_size, _stride(kernel_size, stride), padding, dilation, ceil_mode,
                                         dtype=dtype)

    record((g, x, idx), (gi,))
    if sq:
        return gi.squeeze(0)
    return _offer(begun, gi, (g, x, idx), record)


@register(aten.avg_pool2d.default)
def avg_pool2d(self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    begun = mark()
    x, sq = _x4(self, "avg_pool2d")
    stride = _stride(kernel_size, stride)
    shape = pool_kernels.pool2d_output_shape(tuple(x.shape), kernel_size, stride, padding, 1, ceil_mode)
    out = new_tensor(shape, x.dtype, dev(x))
    device, planes, dtype = dev(x), tuple(x.shape), DTYPE_NAME[x.dtype]

    def record(operands, outputs):
        pool_kernels.avg_pool2d(device, addr(operands[0]), addr(outputs[0]), planes, kernel_size, stride, padding,
                                ceil_mode, count_include_pad, divisor_override, dtype=dtype)

    record((x,), (out,))
    if sq:
        return out.squeeze(0)
    return _offer(begun, out, (x,), record)


@register(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    begun = mark()
    x, sq = _x4(self, "avg_pool2d backward")
    g = _grad4(grad_output, x, sq)
    gi = new_tensor(x.shape, x.dtype, dev(x))
    device, planes, dtype = dev(x), tuple(x.shape), DTYPE_NAME[x.dtype]

    def record(operands, outputs):
        pool_kernels.avg_pool2d_backward(device, addr(operands[0]), addr(outputs[0]), planes, kernel_size,
                                         _stride(kernel_size, stride), padding, ceil_mode, count_include_pad,
                                         divisor_override, dtype=dtype)

    record((g,), (gi,))
    if sq:
        return gi.squeeze(0)
    return _offer(begun, gi, (g,), record)


@register(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(self, output_size):
    begun = mark()
    x, sq = _x4(self, "adaptive_avg_pool2d")
    shape = pool_kernels.adaptive_output_shape(tuple(x.shape), output_size)
    out = new_tensor(shape, x.dtype, dev(x))
    device, planes, dtype = dev(x), tuple(x.shape), DTYPE_NAME[x.dtype]

    def record(operands, outputs):
        pool_kernels.adaptive_avg_pool2d(device, addr(operands[0]), addr(outputs[0]), planes, output_size, dtype=dtype)

    record((x,), (out,))
    if sq:
        return out.squeeze(0)
    return _offer(begun, out, (x,), record)


@register(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_pool2d_backward(grad_output, self):
    begun = mark()
    x, sq = _x4(self, "adaptive_avg_pool2d backward")
    g = _grad4(grad_output, x, sq)
    gi = new_tensor(x.shape, x.dtype, dev(x))
    device, planes, pooled, dtype = dev(x), tuple(x.shape), tuple(g.shape[2:]), DTYPE_NAME[x.dtype]

    def record(operands, outputs):
        pool_kernels.adaptive_avg_pool2d_backward(device, addr(operands[0]), addr(outputs[0]), planes, pooled,
                                                  dtype=dtype)

    record((g,), (gi,))
    if sq:
        return gi.squeeze(0)
    return _offer(begun, gi, (g,), record)
