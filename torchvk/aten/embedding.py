"""embedding and embedding_dense_backward on tvk_kernels.kernels.embedding."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import embedding as embedding_kernels
from tvk_kernels.kernels import index_check as index_check_kernels

from ..op_registry import register
from .._repeat import FreshOutputs, mark, offer
from .._tensor import new_tensor
from ._index_check import check_index_range
from ._util import addr, dev
from .copies import cast, contig, contig_dtype

aten = torch.ops.aten


def _weight(w):
    if w.dtype != torch.float32:
        raise TypeError(f"TorchVK: aten.embedding supports float32 weights, not {w.dtype}")
    if w.stride(1) != 1 and w.shape[1] > 1:
        w = contig(w)
    return w


@register(aten.embedding.default)
def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if indices.dtype not in (torch.int64, torch.int32):  # torch's own check; some meta kernels skip it
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.dtype} instead (while checking arguments for embedding)")
    begun = mark()
    check_index_range(indices, weight.shape[0], "embedding", "rows")
    out = _lookup(weight, indices)
    if begun is not None and _in_place(indices) and (weight.stride(1) == 1 or weight.shape[1] <= 1):
        device, (rows, width), weight_stride = dev(weight), weight.shape, weight.stride(0)
        site = index_check_kernels.site(device, "embedding", "rows")

        def record(operands, outputs):  # the index check and the lookup
            (weight, indices), n = operands, operands[1].numel()
            if n:
                index_check_kernels.check_indices(device, addr(indices), n, rows, site)
            embedding_kernels.embedding_forward(device, addr(weight), addr(indices), addr(outputs[0]), n, rows, width,
                                                weight_stride=weight_stride)

        offer(begun, out, (weight, indices), FreshOutputs((out,), record))
    return out


def _in_place(indices) -> bool:
    """Whether the kernels read the indices as they are (contiguous int64): no copy a repeat would skip."""
    return indices.dtype == torch.int64 and indices.is_contiguous()


def _lookup(weight, indices):
    """weight[indices] for a 2-D float32 weight; an index outside the rows gives a zero row (callers check)."""
    w = _weight(weight)
    idx = contig_dtype(indices, torch.int64)
    V, D = w.shape
    n = idx.numel()
    out = new_tensor(list(indices.shape) + [D], torch.float32, dev(weight))
    embedding_kernels.embedding_forward(dev(weight), addr(w), addr(idx), addr(out), n, V, D, weight_stride=w.stride(0))
    return out


@register(aten.embedding_dense_backward.default)
def embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    if scale_grad_by_freq:
        raise NotImplementedError("TorchVK: aten.embedding_dense_backward with scale_grad_by_freq=True has no "
                                  "Vulkan kernel")
    begun = mark()
    D = grad_output.shape[-1]
    g = contig_dtype(grad_output, torch.float32)
    idx = contig_dtype(indices, torch.int64)
    gw = new_tensor([num_weights, D], torch.float32, dev(grad_output))
    padding = None if padding_idx is None or padding_idx < 0 else padding_idx
    embedding_kernels.embedding_backward(dev(grad_output), addr(g), addr(idx), addr(gw), idx.numel(), num_weights, D,
                                         padding_idx=padding)
    if begun is not None and g is grad_output and idx is indices:
        device = dev(grad_output)

        def record(operands, outputs):
            grad_output, indices = operands
            embedding_kernels.embedding_backward(device, addr(grad_output), addr(indices), addr(outputs[0]),
                                                 indices.numel(), num_weights, D, padding_idx=padding)

        offer(begun, gw, (grad_output, indices), FreshOutputs((gw,), record))
    return cast(gw, grad_output.dtype)


@register(aten.index_select.default)
def index_select(self, dim, index):
    """An embedding lookup over `self` viewed as [size(dim), everything else]."""
    if index.dim() > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    if index.dtype not in (torch.int64, torch.int32):
        raise RuntimeError(f"index_select(): Expected dtype int32 or int64 for index, got {index.dtype}")
    if self.dim() == 0:
        if index.numel() != 1:
            raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index.numel()} value(s)")
        _wrap_dim(dim, 0)
        return index_select(self.reshape(1), 0, index.reshape(1)).view([])
    d = _wrap_dim(dim, self.dim())
    size = self.shape[d]
    if size == 0 and index.numel():
        raise RuntimeError("index_select(): self indexing axis dim should be positive")
    check_index_range(index, size, "index_select", "rows")
    moved = self.movedim(d, 0)
    rest = list(moved.shape[1:])
    if index.numel() == 0 or moved.numel() == 0:
        return new_tensor(list(self.shape[:d]) + [index.numel()] + list(self.shape[d + 1:]), self.dtype, dev(self))
    rows = contig(moved.reshape(size, -1))
    if rows.element_size() in (4, 8):  # the bits move as they are: exact for int32/int64/float64 too
        picked = _lookup(rows.view(torch.float32), index.reshape(-1)).view(self.dtype)
    else:  # 1- and 2-byte dtypes are exact in float32
        picked = cast(_lookup(cast(rows, torch.float32), index.reshape(-1)), self.dtype)
    return contig(picked.view([index.numel()] + rest).movedim(0, d))


def _wrap_dim(dim: int, ndim: int) -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n
