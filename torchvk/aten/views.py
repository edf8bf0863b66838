"""View ops: a new TVKTensor over the same Storage, geometry from torch's own meta kernels.

Each view op runs on a meta tensor with the same sizes, strides and storage offset,
so torch itself checks the arguments and computes the result geometry; the result
wraps the input's storage. No data moves, no kernel runs.
"""
from __future__ import annotations

import torch

from .._dispatch import register
from .._tensor import TVKTensor, itemsize

aten = torch.ops.aten


def meta_of(t: TVKTensor) -> torch.Tensor:
    n = max(t._tvk.nbytes // itemsize(t.dtype), 1)
    base = torch.empty((n,), dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def _wrap_like(src: TVKTensor, m):
    if isinstance(m, torch.Tensor):
        return TVKTensor(src._tvk, m.shape, m.stride(), m.storage_offset(), m.dtype)
    return type(m)(_wrap_like(src, x) for x in m)


def _view_op(func):
    def impl(self, *args, **kwargs):
        return _wrap_like(self, func(meta_of(self), *args, **kwargs))

    return impl


_VIEW_OPS = [
    aten.view.default, aten._unsafe_view.default, aten.as_strided.default, aten.expand.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.select.int, aten.slice.Tensor,
    aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.narrow.default,
    aten.unbind.int, aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default,
    aten.alias.default, aten._reshape_alias.default, aten.diagonal.default, aten.unfold.default,
    aten.view_as_real.default if hasattr(aten, "view_as_real") else aten.alias.default,
]
for _op in _VIEW_OPS:
    register(_op)(_view_op(_op))


@register(aten.detach.default, aten.lift_fresh.default)
def detach(self):
    return TVKTensor(self._tvk, self.shape, self.stride(), self.storage_offset(), self.dtype)


@register(aten.view.dtype)
def view_dtype(self, dtype):
    return _wrap_like(self, aten.view.dtype(meta_of(self), dtype))


@register(aten._unsafe_view.default)
def _unsafe_view(self, size):
    if self.is_contiguous():
        return _wrap_like(self, aten.view.default(meta_of(self), size))
    from .copies import contiguous

    c = contiguous(self)
    return _wrap_like(c, aten.view.default(meta_of(c), size))
