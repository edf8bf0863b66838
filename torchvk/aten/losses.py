"""nll_loss forward/backward on tvk_kernels.kernels.loss (cross-entropy = _log_softmax + nll_loss)."""
from __future__ import annotations

import torch
from torch._decomp import decomposition_table

from tvk_kernels.kernels import index_check as index_check_kernels
from tvk_kernels.kernels import loss as loss_kernels

from ..op_registry import register, register_decomposition
from .._repeat import FreshOutputs, mark, offer
from .._tensor import new_tensor
from ._index_check import check_index_range
from ._util import addr, dev
from .copies import cast, contig_dtype, fill

aten = torch.ops.aten
_RED = {0: "none", 1: "mean", 2: "sum"}


def _prep(self, target, weight):
    x = contig_dtype(self, torch.float32)
    if x.dim() == 1:
        x = x.unsqueeze(0)
    t = contig_dtype(target, torch.int64).reshape(-1)
    w = contig_dtype(weight, torch.float32) if weight is not None else None
    return x, t, w


@register(aten.nll_loss_forward.default)
def nll_loss_forward(self, target, weight, reduction, ignore_index):
    if self.dim() > 2:
        raise NotImplementedError("TorchVK: aten.nll_loss_forward takes [N, C] or [C] input; use nll_loss2d shapes "
                                  "by flattening (N*H*W, C) first")
    begun = mark()
    x, t, w = _prep(self, target, weight)
    N, C = x.shape
    check_index_range(t, C, "nll_loss", "target", ignore=ignore_index)  # the kernel would skip such a row
    red = _RED[reduction]
    out = new_tensor([N] if red == "none" and self.dim() == 2 else [], torch.float32, dev(self))
    total = new_tensor([], torch.float32, dev(self))
    loss_kernels.nll_loss_forward(dev(self), addr(x), addr(t), addr(out), addr(total), N, C,
                        weight=addr(w) if w is not None else None, reduction=red, ignore_index=ignore_index)
    if red == "none":
        fill(total, 0.0)
    elif begun is not None and _in_place(self, target, weight):
        device, site = dev(self), index_check_kernels.site(dev(self), "nll_loss", "target")

        def record(operands, outputs):  # the target check and the loss
            (x, target, weight), (out, total) = operands, outputs
            if N:
                index_check_kernels.check_indices(device, addr(target), N, C, site, ignore=ignore_index)
            loss_kernels.nll_loss_forward(device, addr(x), addr(target), addr(out), addr(total), N, C,
                                          weight=None if weight is None else addr(weight), reduction=red,
                                          ignore_index=ignore_index)

        result = (out, total)
        offer(begun, result, (self, target, weight), FreshOutputs(result, record))
        return result
    return cast(out, self.dtype), cast(total, self.dtype)


@register(aten.nll_loss_backward.default)
def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight):
    begun = mark()
    x, t, w = _prep(self, target, weight)
    N, C = x.shape
    g = contig_dtype(grad_output, torch.float32)
    tw = contig_dtype(total_weight, torch.float32)
    gi = new_tensor([N, C], torch.float32, dev(self))
    loss_kernels.nll_loss_backward(dev(self), addr(g), addr(t), addr(tw), addr(gi), N, C,
                         weight=addr(w) if w is not None else None, reduction=_RED[reduction],
                         ignore_index=ignore_index)
    if begun is not None and _in_place(self, target, weight) and g is grad_output and tw is total_weight:
        device, red = dev(self), _RED[reduction]

        def record(operands, outputs):
            x, target, weight, grad_output, total_weight = operands
            loss_kernels.nll_loss_backward(device, addr(grad_output), addr(target), addr(total_weight), addr(outputs[0]),
                                           N, C, weight=None if weight is None else addr(weight), reduction=red,
                                           ignore_index=ignore_index)

        offer(begun, gi, (self, target, weight, grad_output, total_weight), FreshOutputs((gi,), record))
        return gi
    return cast(gi.view(self.shape), self.dtype)


def _in_place(self, target, weight) -> bool:
    """Whether the kernels read the loss's operands as they are: 2-d contiguous float32 input, contiguous int64
    targets and float32 class weights (no copy a repeat would skip)."""
    return self.dim() == 2 and self.dtype == torch.float32 and self.is_contiguous() and \
        target.dtype == torch.int64 and target.is_contiguous() and \
        (weight is None or (weight.dtype == torch.float32 and weight.is_contiguous()))


def cross_entropy_backward_from_log_probs(grad_output, log_probs, target, weight, reduction, ignore_index,
                                          total_weight):
    """_log_softmax_backward_data(nll_loss_backward(grad_output, log_probs, ...), log_probs, 1) in one
    kernel; nll_loss_backward's arguments. Compiled mode's fusion pass calls it (fusion.py)."""
    x, t, w = _prep(log_probs, target, weight)
    N, C = x.shape
    g = contig_dtype(grad_output, torch.float32)
    tw = contig_dtype(total_weight, torch.float32)
    gi = new_tensor([N, C], torch.float32, dev(log_probs))
    loss_kernels.cross_entropy_backward_from_log_probs(dev(log_probs), addr(g), addr(x), addr(t), addr(tw), addr(gi), N, C,
                                             weight=addr(w) if w is not None else None, reduction=_RED[reduction],
                                             ignore_index=ignore_index)
    return cast(gi.view(log_probs.shape), log_probs.dtype)


@register(aten.nll_loss2d_forward.default)
def nll_loss2d_forward(self, target, weight, reduction, ignore_index):
    """torch's decomposition (a gather and a where), after the target check of nll_loss."""
    check_index_range(target, self.shape[1], "nll_loss2d", "target", ignore=ignore_index)
    return decomposition_table[aten.nll_loss2d_forward.default](self, target, weight, reduction, ignore_index)


# composite losses from torch's decompositions (pointwise + reductions)
register_decomposition(aten.mse_loss.default, aten.mse_loss_backward.default, aten.l1_loss.default,
                       aten.smooth_l1_loss.default, aten.smooth_l1_loss_backward.default, aten.huber_loss.default,
                       aten.huber_loss_backward.default, aten.binary_cross_entropy.default,
                       aten.binary_cross_entropy_backward.default, aten.binary_cross_entropy_with_logits.default,
                       aten.nll_loss2d_backward.default)
