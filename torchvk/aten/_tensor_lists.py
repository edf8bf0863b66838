"""Tensor lists checked once and remembered: torch.optim's multi-tensor ops at a small host cost.

torch.optim calls the same `_foreach_*` and `_fused_*` ops on the same tensors every step (in new
Python lists). One multi-tensor launch (foreach.py) needs every tensor of a list to be a float32
tvk tensor on one device, dense, not overlapping another, shaped like the parameter at its
position, and it needs each tensor's address. Read from the tensors that is about 1 us a tensor
(each attribute of a tensor subclass costs ~0.2 us): 0.7 ms a step of AdamW over 60 parameters.

A list seen before costs about 0.3 us a tensor. Each tvk tensor has its own torch storage object
(a wrapper subclass's, without data), and every in-place change of a tensor's geometry or dtype
(`.data =`, resize_, t_(), as_strided_, torch.utils.swap_tensors) gives the tensor another one:
a list whose storage objects are the ones remembered (held here, so no new storage can take the
identity of a freed one) still has the geometry found when it was checked. Device buffers are
read on every call: resize_ of another view of the same storage moves its buffer, and
Storage.free frees one (FreedBufferError, as for any other use of the tensor).
"""
from __future__ import annotations

import operator
from collections import OrderedDict

import torch

from .._tensor import TVKTensor, is_dense

REMEMBERED = 256  # lists kept, least recently used dropped: a few per optimizer and parameter group
PARTNERS = 16     # other lists whose fit with a list is kept (fresh grads bring a new one every step)

_F32 = torch.float32
_storage_of = torch.Tensor.untyped_storage
_tvk_of = operator.attrgetter("_tvk")
_shape_of = operator.attrgetter("shape")
_dtype_of = operator.attrgetter("dtype")
_buffer_of = operator.attrgetter("_tvk.buffer")
_address_of = operator.attrgetter("address")
_freed = operator.attrgetter("freed")


class TensorList:
    """One list of tvk tensors as checked: fixed while its tensors' storage objects are `storages`.

    float32: all float32 on `device` (no other list is launched: the other facts serve those);
    dense: and each dense; disjoint: no two share memory; contiguous: each contiguous. offsets
    are in bytes from each tensor's device storage, whose identity `tvk_ids` holds (valid while
    the storage objects match: the same tensors, holding those storages)."""

    __slots__ = ("storages", "device", "shapes", "strides", "numels", "offsets", "tvk_ids", "float32", "dense",
                 "disjoint", "contiguous", "_buffer_addresses", "_addresses", "_fits")

    def __init__(self, storages, device, shapes, strides, numels, offsets, tvk_ids, float32, dense, disjoint,
                 contiguous):
        self.storages, self.device = storages, device
        self.shapes, self.strides, self.numels, self.offsets, self.tvk_ids = shapes, strides, numels, offsets, tvk_ids
        self.float32, self.dense, self.disjoint, self.contiguous = float32, dense, disjoint, contiguous
        self._buffer_addresses = self._addresses = None
        self._fits: dict = {}

    def addresses(self, tensors) -> tuple | None:
        """Each tensor's byte address now (None: one is no longer a tvk tensor)."""
        try:
            buffers = list(map(_buffer_of, tensors))
        except AttributeError:
            return None
        if any(map(_freed, buffers)):
            for b in buffers:
                b.check_alive()  # FreedBufferError
        now = list(map(_address_of, buffers))
        if now != self._buffer_addresses:
            self._buffer_addresses = now
            self._addresses = tuple(map(operator.add, now, self.offsets))
        return self._addresses

    def fits(self, other: TensorList) -> bool:
        """Whether one launch can take `other` beside this list, position by position: float32 on
        this list's device, each tensor of its partner's shape and strides, and none sharing
        memory with a tensor of this list but its partner (the launch runs all positions at once:
        a tensor read at one position while another writes it would race)."""
        fit = self._fits.get(other)
        if fit is None:
            if len(self._fits) >= PARTNERS:
                self._fits.clear()
            fit = self._fits[other] = _fits(self, other)
        return fit


def _fits(a: TensorList, b: TensorList) -> bool:
    if len(b.numels) != len(a.numels) or not b.float32 or b.device is not a.device or b.shapes != a.shapes:
        return False
    if b.strides != a.strides and any(sb != sa and n > 1 for sb, sa, n in zip(b.strides, a.strides, b.numels)):
        return False
    written = set(a.tvk_ids)
    return written.isdisjoint(b.tvk_ids) or all(
        tvk not in written or (tvk == partner and offset == partner_offset)
        for tvk, offset, partner, partner_offset in zip(b.tvk_ids, b.offsets, a.tvk_ids, a.offsets))


def _disjoint(tvk_ids, offsets, shapes, strides, numels, itemsize: int) -> bool:
    """No two tensors share a byte (by the spans they reach in their device storages)."""
    if len(set(tvk_ids)) == len(tvk_ids):  # each in its own storage (the usual case)
        return True
    spans = sorted((tvk, off, off + itemsize * (1 + sum((n - 1) * s for n, s in zip(shape, stride))))
                   for tvk, off, shape, stride, numel in zip(tvk_ids, offsets, shapes, strides, numels) if numel)
    return all(not (a[0] == b[0] and b[1] < a[2]) for a, b in zip(spans, spans[1:]))


_remembered: OrderedDict = OrderedDict()  # storage objects -> TensorList


def checked(tensors) -> TensorList | None:
    """The remembered checks of a list of tvk tensors, made on first sight (None: empty, or an
    element that is not a tvk tensor; such a list is not remembered)."""
    try:
        storages = tuple(map(_storage_of, tensors))
    except (TypeError, RuntimeError):  # None or a number in the list, a tensor without storage
        return None
    found = _remembered.get(storages)
    if found is not None:
        _remembered.move_to_end(storages)
        return found
    if not storages or not all(type(t) is TVKTensor for t in tensors):
        return None
    # read once per list (C-level maps: each attribute of a tensor subclass costs ~0.2 us)
    tvks = list(map(_tvk_of, tensors))
    device = tvks[0].device
    float32 = set(map(_dtype_of, tensors)) == {_F32} and all(s.device is device for s in tvks)
    shapes, strides = tuple(map(_shape_of, tensors)), tuple(map(torch.Tensor.stride, tensors))
    numels, tvk_ids = tuple(map(torch.Tensor.numel, tensors)), tuple(map(id, tvks))
    itemsize = 4 if float32 else tensors[0].element_size()
    offsets = tuple(o * itemsize for o in map(torch.Tensor.storage_offset, tensors))
    contiguous = list(map(torch.Tensor.is_contiguous, tensors))
    found = TensorList(storages, device, shapes, strides, numels, offsets, tvk_ids, float32=float32,
                       dense=float32 and all(c or is_dense(t) for c, t in zip(contiguous, tensors)),
                       disjoint=_disjoint(tvk_ids, offsets, shapes, strides, numels, itemsize),
                       contiguous=all(contiguous))
    return _remember(found)


def remember_outputs(tensors, like: TensorList) -> TensorList:
    """Remember tensors just made with `like`'s shapes and strides (fresh float32 storages), the
    outputs of an op that later ops take: their checks are known without reading them back."""
    found = TensorList(tuple(map(_storage_of, tensors)), like.device, like.shapes, like.strides, like.numels,
                       (0,) * len(tensors), tuple(map(id, map(_tvk_of, tensors))), float32=True, dense=True,
                       disjoint=True, contiguous=like.contiguous)
    return _remember(found)


def _remember(found: TensorList) -> TensorList:
    _remembered[found.storages] = found
    if len(_remembered) > REMEMBERED:
        _remembered.popitem(last=False)
    return found
