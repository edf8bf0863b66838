"""embedding and embedding_dense_backward on tvk_kernels.kernels.embedding."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import embedding as _Em

from .._dispatch import register, register_decomposition
from .._tensor import new_tensor
from ._util import addr, cast, contig, contig_dtype, dev

aten = torch.ops.aten


def _weight(w):
    if w.dtype != torch.float32:
        raise TypeError(f"TorchVK: aten.embedding supports float32 weights, not {w.dtype}")
    if w.stride(1) != 1 and w.shape[1] > 1:
        w = contig(w)
    return w


@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    w = _weight(weight)
    idx = contig_dtype(indices, torch.int64)
    V, D = w.shape
    n = idx.numel()
    out = new_tensor(list(indices.shape) + [D], torch.float32, dev(weight))
    _Em.embedding_forward(dev(weight), addr(w), addr(idx), addr(out), n, V, D, weight_stride=w.stride(0))
    return out


@register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        raise NotImplementedError("TorchVK: aten.embedding_dense_backward with scale_grad_by_freq=True has no "
                                  "Vulkan kernel")
    D = grad_output.shape[-1]
    g = contig_dtype(grad_output, torch.float32)
    idx = contig_dtype(indices, torch.int64)
    gw = new_tensor([num_weights, D], torch.float32, dev(grad_output))
    _Em.embedding_backward(dev(grad_output), addr(g), addr(idx), addr(gw), idx.numel(), num_weights, D,
                           padding_idx=None if padding_idx is None or padding_idx < 0 else padding_idx)
    return cast(gw, grad_output.dtype)


@register(aten.index_select.default)
def index_select(self, dim, index):
    """index_select along dim 0 of a 2-D float32 tensor is an embedding lookup; other cases decompose."""
    if self.dim() == 2 and dim % 2 == 0 and self.dtype == torch.float32:
        return embedding(self, index.reshape(-1))
    if self.dim() == 1 and self.dtype == torch.float32:
        return embedding(self.unsqueeze(1), index.reshape(-1)).view(-1)
    d = dim % self.dim()
    moved = self.movedim(d, 0)
    flat = moved.reshape(moved.shape[0], -1)
    out = embedding(cast(flat, torch.float32), index.reshape(-1))
    out = out.view([index.numel()] + list(moved.shape[1:])).movedim(0, d)
    return cast(contig(out), self.dtype)
