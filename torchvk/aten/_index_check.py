"""Index validation for the ops that take indices: a kernel checks them on the device and the
first bad one is raised at the next sync point (tvk_kernels/kernels/index_check.py)."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import index_check as index_check_kernels

from ._util import addr, dev
from .copies import contig_dtype


def check_index_range(indices, bound: int, op: str, kind: str, dim: int | None = None, ignore: int | None = None):
    """Raise, at the next sync point, if a value of the tvk integer tensor `indices` is outside
    [0, bound) and is not `ignore`. kind picks torch's wording and exception type (one of
    tvk_kernels.kernels.index_check._KINDS): "rows" (IndexError: embedding, index_select), "dim"
    (RuntimeError: gather, scatter), "target" (IndexError: nll_loss), "class" (one_hot),
    "index" (IndexError: x[idx]), "assert" (aten._assert_async)."""
    n = indices.numel()
    if n == 0:
        return
    if indices.dtype not in (torch.int64, torch.int32) or not indices.is_contiguous():
        indices = contig_dtype(indices, torch.int64)
    device = dev(indices)
    index_check_kernels.check_indices(device, addr(indices), n, bound, index_check_kernels.site(device, op, kind, dim),
                      int32=indices.dtype == torch.int32, ignore=ignore)
