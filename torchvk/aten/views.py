"""View ops: a new TVKTensor over the same Storage, geometry from torch's own meta kernels.

Each view op runs on a meta tensor with the same sizes, strides and storage offset,
so torch itself checks the arguments and computes the result geometry; the result
wraps the input's storage. No data moves, no kernel runs.
"""
from __future__ import annotations

import torch

from ..op_registry import register
from .._repeat import mark, offer
from .._tensor import TVKTensor, itemsize
from .copies import contig

aten = torch.ops.aten


def meta_of(t: TVKTensor) -> torch.Tensor:
    n = max(t._tvk.nbytes // itemsize(t.dtype), 1)
    base = torch.empty((n,), dtype=t.dtype, device="meta")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def _wrap_like(src: TVKTensor, m):
    if isinstance(m, torch.Tensor):
        return TVKTensor(src._tvk, m.shape, m.stride(), m.storage_offset(), m.dtype)
    return type(m)(_wrap_like(src, x) for x in m)


_view_geometry: dict = {}  # (op, geometry, arguments) -> the views' geometry, from torch's meta kernel once
_MAX_VIEW_GEOMETRY = 8192


def _frozen(x):
    return tuple(map(_frozen, x)) if isinstance(x, (list, tuple)) else x


def _geometry(m):
    if isinstance(m, torch.Tensor):
        return m.shape, m.stride(), m.storage_offset(), m.dtype
    return type(m), [_geometry(x) for x in m]


def _wrap_geometry(src: TVKTensor, g):
    if len(g) == 4:
        return TVKTensor(src._tvk, g[0], g[1], g[2], g[3])
    return g[0](_wrap_geometry(src, x) for x in g[1])


def _view_op(func):
    """A view's geometry comes from torch's meta kernel (its checks and errors); a repeated
    call with the same geometry and arguments reuses it (design note 23)."""
    def impl(self, *args, **kwargs):
        try:
            key = (self._geometry_key, self._byte_offset, self._tvk.nbytes, _frozen(args),
                   tuple(kwargs.items()) if kwargs else ())
            g = _geometries.get(key)
        except TypeError:  # an unhashable argument
            key = g = None
        if g is None:
            g = _geometry(func(meta_of(self), *args, **kwargs))
            if key is not None and len(_geometries) < _MAX_VIEW_GEOMETRY:
                _geometries[key] = g
        out = _wrap_geometry(self, g)
        if repeatable:
            offer(mark(), out, (self,), _SameGeometry(g, self._byte_offset))
        return out

    _geometries = _view_geometry.setdefault(func, {})
    repeatable = func is not aten.as_strided.default  # its geometry is checked against the storage's size too
    return impl


class _SameGeometry:
    """A view's repeat (torchvk/_repeat.py): the same geometry over the new input's storage. The key
    holds the input's sizes and strides, not its storage offset: the view's offsets move with it."""

    __slots__ = ("geometry", "byte_offset")

    def __init__(self, geometry, byte_offset):
        self.geometry, self.byte_offset = geometry, byte_offset

    def __call__(self, operands):
        src = operands[0]
        if src._byte_offset == self.byte_offset:
            return _wrap_geometry(src, self.geometry)
        shift = (src._byte_offset - self.byte_offset) // src._geometry_key[2].itemsize  # in elements
        return _wrap_geometry(src, _shifted(self.geometry, shift))


def _shifted(g, shift):
    if len(g) == 4:
        return g[0], g[1], g[2] + shift, g[3]
    return g[0], [_shifted(x, shift) for x in g[1]]


_VIEW_OPS = [
    aten.view.default, aten.as_strided.default, aten.expand.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.select.int, aten.slice.Tensor,
    aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.narrow.default,
    aten.unbind.int, aten.split.Tensor, aten.split_with_sizes.default, aten.chunk.default,
    aten.alias.default, aten._reshape_alias.default, aten.diagonal.default, aten.unfold.default,
    aten.view_as_real.default,
]
for _op in _VIEW_OPS:
    register(_op)(_view_op(_op))


@register(aten.detach.default, aten.lift_fresh.default)
def detach(self):
    size, stride, dtype, _ = self._geometry_key  # read from the tensor once, when it was made (_tensor.py)
    return TVKTensor(self._tvk, size, stride, self._byte_offset // dtype.itemsize, dtype)


@register(aten.view.dtype)
def view_dtype(self, dtype):
    return _wrap_like(self, aten.view.dtype(meta_of(self), dtype))


@register(aten._unsafe_view.default)  # a view where it can be one, else a copy (torch's reshape of a non-view)
def _unsafe_view(self, size):
    if self.is_contiguous():
        g = _geometry(aten.view.default(meta_of(self), size))
        out = _wrap_geometry(self, g)
        offer(mark(), out, (self,), _SameGeometry(g, self._byte_offset))  # a view: repeated as one
        return out
    c = contig(self)
    return _wrap_like(c, aten.view.default(meta_of(c), size))
