"""adaptive_max_pool2d and 3d (1-D through 2d) for any output size, and their backward.

Output cell i covers input positions [floor(i * n / o), ceil((i + 1) * n / o)) along each
spatial dim. Every window is padded to the largest one by repeating its last position, which
changes no max and no first-max index; the windows are gathered with one x[..., cells] and
reduced with max.dim. The backward sums the gradient into the inputs the indices name
(scatter_add: deterministic).
"""
from __future__ import annotations

import math

import torch

from ..op_registry import register

aten = torch.ops.aten


def _windows(n_in: int, n_out: int) -> list[list[int]]:
    """For each output cell, its input positions, padded to one length by repeating the last."""
    spans = [range(i * n_in // n_out, -(-(i + 1) * n_in // n_out)) for i in range(n_out)]
    width = max(len(s) for s in spans)
    return [list(s) + [s[-1]] * (width - len(s)) for s in spans]


def _window_cells(spatial, output_size) -> torch.Tensor:
    """int64 [cells, window]: the flat input position of each slot of each output cell's window
    (a small constant table built on the host)."""
    nd = len(spatial)
    flat, stride = 0, 1
    for k in reversed(range(nd)):
        w = torch.tensor(_windows(spatial[k], output_size[k]), dtype=torch.int64)
        shape = [1] * (2 * nd)
        shape[k], shape[nd + k] = w.shape
        flat = flat + w.view(shape) * stride
        stride *= spatial[k]
    return flat.reshape(math.prod(output_size), -1)


def _adaptive_max_pool(self, output_size, nd, op):
    if self.dim() not in (nd + 1, nd + 2):
        raise RuntimeError(f"{op}(): Expected {nd + 1}D or {nd + 2}D tensor, but got {self.dim()}D")
    for k in range(1, self.dim()):
        if self.shape[k] == 0:
            raise RuntimeError(f"{op}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(self.shape)} with dimension {k} being empty")
    lead, spatial, output_size = list(self.shape[:-nd]), list(self.shape[-nd:]), list(output_size)
    if 0 in output_size:
        return (torch.empty(lead + output_size, dtype=self.dtype, device=self.device),
                torch.empty(lead + output_size, dtype=torch.int64, device=self.device))
    cells = _window_cells(spatial, output_size).to(self.device)
    x = self.reshape(lead + [math.prod(spatial)])
    picked = aten.index.Tensor(x, [None] * len(lead) + [cells.reshape(-1)]).view(lead + list(cells.shape))
    values, slot = aten.max.dim(picked, -1)
    indices = torch.gather(cells.expand(lead + list(cells.shape)), -1, slot.unsqueeze(-1)).squeeze(-1)
    return values.view(lead + output_size), indices.view(lead + output_size)


def _adaptive_max_pool_backward(grad_output, self, indices, nd):
    lead = list(self.shape[:-nd])
    zeros = torch.zeros(lead + [math.prod(self.shape[-nd:])], dtype=grad_output.dtype, device=self.device)
    grad = aten.scatter_add.default(zeros, len(lead), indices.reshape(lead + [-1]), grad_output.reshape(lead + [-1]))
    return grad.view(self.shape)


@register(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(self, output_size):
    return _adaptive_max_pool(self, output_size, 2, "adaptive_max_pool2d")


@register(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(self, output_size):
    return _adaptive_max_pool(self, output_size, 3, "adaptive_max_pool3d")


@register(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad_output, self, indices):
    return _adaptive_max_pool_backward(grad_output, self, indices, 2)


@register(aten.adaptive_max_pool3d_backward.default)
def adaptive_max_pool3d_backward(grad_output, self, indices):
    return _adaptive_max_pool_backward(grad_output, self, indices, 3)
