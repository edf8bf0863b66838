"""softmax / log_softmax and their backward on tvk_kernels.kernels.softmax."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import softmax as softmax_kernels

from ..op_registry import register
from .._repeat import mark, offer
from .._tensor import new_tensor
from ._util import addr, dev
from .copies import cast, contig_dtype

aten = torch.ops.aten


# torch's names for the dtypes its softmax has no kernel for
_TORCH_NAME = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
               torch.uint8: "Byte", torch.bool: "Bool"}


def _check(self, dim, log):
    """torch's errors: a dim out of range, an input that is not floating point."""
    n = max(self.dim(), 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    if not self.dtype.is_floating_point:
        name = _TORCH_NAME.get(self.dtype, str(self.dtype))
        raise NotImplementedError(f"\"{'log_' if log else ''}softmax\" not implemented for '{name}': softmax needs a "
                                  f"floating point input; convert it with .float() or pass dtype=torch.float32")


def _fwd(self, dim, half_to_float, log):
    _check(self, dim, log)
    x = contig_dtype(self, torch.float32)
    d, shape, axis = dev(self), tuple(x.shape), dim % max(x.dim(), 1)

    def run(operands):
        out = new_tensor(shape, torch.float32, d)
        if out.numel():
            softmax_kernels.softmax(d, addr(operands[0]), addr(out), shape or (1,), axis, log=log)
        return out

    begun = mark()
    result = cast(run((x,)), torch.float32 if half_to_float else self.dtype)
    offer(begun, result, (x,), run)  # kept where no cast came before or after (torchvk/_repeat.py)
    return result


def _bwd(grad_output, output, dim, input_dtype, log):
    g = contig_dtype(grad_output, torch.float32)
    y = contig_dtype(output, torch.float32)
    d, shape, axis = dev(y), tuple(y.shape), dim % max(y.dim(), 1)

    def run(operands):
        gi = new_tensor(shape, torch.float32, d)
        if gi.numel():
            softmax_kernels.softmax_backward(d, addr(operands[0]), addr(operands[1]), addr(gi), shape or (1,), axis,
                                             log=log)
        return gi

    begun = mark()
    result = cast(run((g, y)), input_dtype)
    offer(begun, result, (g, y), run)
    return result


@register(aten._softmax.default)
def _softmax(self, dim, half_to_float):
    return _fwd(self, dim, half_to_float, False)


@register(aten._log_softmax.default)
def _log_softmax(self, dim, half_to_float):
    return _fwd(self, dim, half_to_float, True)


@register(aten._softmax_backward_data.default)
def _softmax_backward_data(grad_output, output, dim, input_dtype):
    return _bwd(grad_output, output, dim, input_dtype, False)


@register(aten._log_softmax_backward_data.default)
def _log_softmax_backward_data(grad_output, output, dim, input_dtype):
    return _bwd(grad_output, output, dim, input_dtype, True)
