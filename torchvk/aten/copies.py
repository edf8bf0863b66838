"""Copies: CPU <-> tvk transfers, device copies and casts, clone, fill and zero."""
from __future__ import annotations

import struct
import types

import torch

from tvk_kernels.kernels import elementwise as elementwise_kernels

from ..op_registry import register, register_backend
from .._repeat import FreshOutputs, mark, offer
from .._storage import alloc_storage, check_dtype, get_device, span_elements
from .._tensor import (is_dense, TVKTensor, contiguous_strides, from_cpu, itemsize, new_tensor, to_cpu,
                       upload_into)
from ._util import operand
from .promotion import fill_value

aten = torch.ops.aten


def _range(t):
    """A shim for stream.copy/fill: (block, offset) of the view's first byte."""
    buf = t._tvk.buffer
    buf.check_alive()
    return types.SimpleNamespace(block=buf.block, offset=buf.offset + t.storage_offset() * itemsize(t.dtype), size=0)


def device_copy(dst: TVKTensor, src: TVKTensor):
    """dst <- src on the device; src broadcasts to dst's shape, dtypes may differ."""
    if src._tvk.device is not dst._tvk.device:
        raise RuntimeError(f"copy between tvk devices {src.device} and {dst.device} is not supported")
    if dst.numel() == 0:
        return dst
    if src.dtype == dst.dtype and src.shape == dst.shape and dst.is_contiguous() and src.is_contiguous():
        if src._tvk is dst._tvk and src.storage_offset() == dst.storage_offset():
            return dst
        dev = dst._tvk.device
        dev.stream.copy(_range(src), _range(dst), dst.numel() * itemsize(dst.dtype))
        return dst
    elementwise_kernels.copy(dst._tvk.device, operand(src), operand(dst))  # broadcast, cast, any strides
    return dst


class KeptCopy:
    """A device copy into a fresh output, worked out once (device_copy's choice of a buffer copy or the
    copy kernel, with its plan) and recorded again for other tensors of the same geometry: the repeats
    of casts, clones and cat (torchvk/_repeat.py). Made by the first copy, which it records."""

    __slots__ = ("device", "byte_offset", "nbytes", "family", "plan", "values")

    def __init__(self, dst: TVKTensor, src: TVKTensor):
        self.device, self.byte_offset = dst._tvk.device, dst._byte_offset
        self.nbytes = dst.numel() * itemsize(dst.dtype)
        if src.dtype == dst.dtype and src.shape == dst.shape and dst.is_contiguous() and src.is_contiguous():
            self.family = None  # a buffer copy
        else:  # a cast, a broadcast or a strided view: the copy kernel
            self.family, self.plan = elementwise_kernels.planned(self.device, "copy", (operand(src),), operand(dst))
            self.values = elementwise_kernels.scalar_values(self.plan, "copy", (), ())
        self(src, dst._tvk.buffer)

    def __call__(self, src: TVKTensor, buffer):
        """src into its place in `buffer` (the output's DeviceBuffer)."""
        if self.family is None:
            self.device.stream.copy(_range(src), buffer, self.nbytes, 0, self.byte_offset)
        else:
            source = src._tvk.buffer
            source.check_alive()
            elementwise_kernels.record(self.device, self.family, self.plan, "copy",
                                       [source.address + src._byte_offset, buffer.address + self.byte_offset],
                                       self.values)


def copies_into_fresh(copies: list, zeroed: bool = False):
    """The kernel work of a repeat (FreshOutputs) whose one output is filled by copies of its operands (a cast,
    a clone, cat), zeroed first where `zeroed` (a view's backward: zeros, the gradient copied into the view)."""

    def record(operands, outputs):
        out = outputs[0]
        buffer = out._tvk.buffer
        if zeroed:  # as fill() zeroes a fresh contiguous tensor of 4-byte multiples: one buffer fill
            out._tvk.device.stream.fill(buffer, 0, out.numel() * itemsize(out.dtype))
        for src, copy in zip(operands, copies):
            copy(src, buffer)

    return record


def copy_offered(out: TVKTensor, src: TVKTensor) -> TVKTensor:
    """device_copy into a fresh `out`, offered as the call's repeat (torchvk/_repeat.py)."""
    begun = mark()
    if begun is None or out.numel() == 0 or src._tvk.device is not out._tvk.device:
        return device_copy(out, src)  # no dispatch listening (compiled programs), nothing to copy, or refused
    offer(begun, out, (src,), FreshOutputs((out,), copies_into_fresh([KeptCopy(out, src)])))
    return out


def copy_into(dst: TVKTensor, src):
    """dst (tvk, any view) <- src (CPU or tvk tensor, broadcastable, any dtype)."""
    if isinstance(src, TVKTensor):
        return device_copy(dst, src)
    if not isinstance(src, torch.Tensor):
        src = torch.as_tensor(src)
    src = src.detach()
    if src.device.type != "cpu":
        src = src.cpu()
    if src.dtype != dst.dtype:
        src = src.to(dst.dtype)
    if src.shape != dst.shape:
        src = src.expand(dst.shape)
    if dst.numel() == 0:
        return dst
    if dst.is_contiguous():
        upload_into(dst, src.contiguous())
    else:
        tmp = new_tensor(dst.shape, dst.dtype, dst._tvk.device)
        upload_into(tmp, src.contiguous())
        device_copy(dst, tmp)
    return dst


@register(aten.copy_.default, cross_device=True)
def copy_(self, src, non_blocking=False):
    if isinstance(self, TVKTensor):
        copy_into(self, src)
        return self
    # self on CPU, src on tvk
    self.copy_(to_cpu(src))
    return self


@register(aten.copy.default, cross_device=True)
def copy(self, src, non_blocking=False):
    """The functional copy_ (compiled graphs hold it where code copied into a view): a new tensor of
    self's geometry holding src broadcast to it."""
    if not isinstance(self, TVKTensor):  # self on the CPU, src on tvk
        return self.clone().copy_(to_cpu(src))
    out = new_tensor(self.shape, self.dtype, self._tvk.device, self.stride() if is_dense(self) else None,
                     op="aten.copy")
    copy_into(out, src)  # every element: src broadcasts to self's shape
    return out


@register_backend(aten._copy_from.default, cross_device=True)
def _copy_from(self, dst, non_blocking=False):
    if isinstance(dst, TVKTensor):
        copy_into(dst, self)
    else:
        dst.copy_(to_cpu(self))
    return dst


@register_backend(aten._copy_from_and_resize.default, cross_device=True)
def _copy_from_and_resize(self, dst):
    if isinstance(dst, TVKTensor):
        resize_(dst, self.shape)
        copy_into(dst, self)
    else:
        dst.resize_(self.shape)
        dst.copy_(to_cpu(self))
    return dst


@register(aten._to_copy.default, cross_device=True)
def _to_copy(self, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False,
             memory_format=None):
    target = torch.device(device) if device is not None else self.device
    dtype = dtype or self.dtype
    if target.type == "cpu":
        out = to_cpu(self) if isinstance(self, TVKTensor) else self.clone()
        if out.dtype != dtype:
            out = out.to(dtype)
        if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
            out = out.contiguous(memory_format=memory_format)
        return out
    if target.type != "tvk":
        raise RuntimeError(f"TorchVK cannot copy a tvk tensor to device {target}; go through .cpu() first")
    dev = get_device(target.index) if target.index is not None else (
        self._tvk.device if isinstance(self, TVKTensor) else get_device())
    check_dtype(dtype, "aten._to_copy")
    if not isinstance(self, TVKTensor):
        return from_cpu(self, dev, dtype)
    if memory_format in (None, torch.preserve_format) and is_dense(self):
        out = new_tensor(self.shape, dtype, dev, self.stride(), op="aten._to_copy")
    else:
        mf = torch.contiguous_format if memory_format in (None, torch.preserve_format) else memory_format
        stride = torch.empty(self.shape, device="meta", memory_format=mf).stride()
        out = new_tensor(self.shape, dtype, dev, stride, op="aten._to_copy")
    return copy_offered(out, self)


# a sparse tensor's .to("tvk") builds it from tvk index and value tensors with these ops
_SPARSE_BUILDERS = [getattr(aten, name).default for name in (
    "_sparse_compressed_tensor_unsafe", "_sparse_csr_tensor_unsafe", "_sparse_csc_tensor_unsafe",
    "_sparse_bsr_tensor_unsafe", "_sparse_bsc_tensor_unsafe", "_sparse_coo_tensor_with_dims_and_tensors")
    if hasattr(aten, name)]


@register(*_SPARSE_BUILDERS)
def sparse_tensor(*args, layout=None, **kwargs):
    raise TypeError(f"TorchVK supports only strided (dense) tensors, not {layout or 'sparse'} ones; "
                    f"convert with .to_dense() before moving the tensor to tvk")


@register(aten.clone.default)
def clone(self, *, memory_format=None):
    if memory_format in (None, torch.preserve_format) and is_dense(self):
        out = new_tensor(self.shape, self.dtype, self._tvk.device, self.stride(), op="aten.clone")
    else:
        mf = torch.contiguous_format if memory_format in (None, torch.preserve_format) else memory_format
        stride = torch.empty(self.shape, device="meta", memory_format=mf).stride()
        out = new_tensor(self.shape, self.dtype, self._tvk.device, stride, op="aten.clone")
    return copy_offered(out, self)


def contig(t: TVKTensor) -> TVKTensor:
    """t if it is contiguous, else a contiguous copy of it."""
    if t.is_contiguous():
        return t
    out = new_tensor(t.shape, t.dtype, t._tvk.device)
    return device_copy(out, t)


def cast(t: TVKTensor, dtype) -> TVKTensor:
    """t in dtype (t itself if it has that dtype already)."""
    if t.dtype == dtype:
        return t
    out = new_tensor(t.shape, dtype, t._tvk.device)
    return device_copy(out, t)


def contig_dtype(t: TVKTensor, dtype) -> TVKTensor:
    return contig(cast(t, dtype))


# ------------------------------------------------------------------ fill / zero
def _pattern(value, dtype):
    """32-bit fill pattern for vkCmdFillBuffer, or None if the value cannot be one."""
    if dtype == torch.float32:
        return struct.unpack("<I", struct.pack("<f", float(value)))[0]
    if dtype == torch.int32:
        return int(value) & 0xFFFFFFFF
    if dtype in (torch.bool, torch.uint8, torch.int8):
        b = (int(bool(value)) if dtype == torch.bool else int(value)) & 0xFF
        return b * 0x01010101
    if dtype == torch.int16:
        h = int(value) & 0xFFFF
        return h | (h << 16)
    if dtype in (torch.float16, torch.bfloat16):
        h = torch.tensor([float(value)], dtype=dtype).view(torch.int16).item() & 0xFFFF
        return h | (h << 16)
    if dtype == torch.int64:
        v = int(value)
        if v in (0, -1):
            return v & 0xFFFFFFFF
    return None


def fill(t: TVKTensor, value):
    """t[...] = value."""
    if t.numel() == 0:
        return t
    if isinstance(value, torch.Tensor):
        value = value.item()
    value = fill_value(value, t.dtype)  # torch's conversion: checked (300 into uint8 raises), half types rounded
    nbytes = t.numel() * itemsize(t.dtype)
    rng = _range(t) if t.is_contiguous() else None
    pat = _pattern(value, t.dtype)
    if rng is not None and pat is not None and rng.offset % 4 == 0 and nbytes % 4 == 0:
        t._tvk.device.stream.fill(rng, pat, nbytes)
        return t
    elementwise_kernels.fill(t._tvk.device, operand(t), value)
    return t


@register(aten.fill_.Scalar)
def fill_scalar(self, value):
    return fill(self, value)


@register(aten.fill_.Tensor)
def fill_tensor(self, value):
    if isinstance(value, TVKTensor):
        return device_copy(self, value.expand(self.shape) if value.dim() else value.reshape([1] * self.dim()).expand(self.shape))
    return fill(self, value.to(self.dtype).item())  # a tensor converts as a copy does: wrapping


@register(aten.zero_.default)
def zero_(self):
    return fill(self, 0)


@register(aten.lift_fresh_copy.default)
def lift_fresh_copy(self):
    return clone(self)


@register(aten._local_scalar_dense.default)
def _local_scalar_dense(self):
    return to_cpu(self).item()


@register(aten.is_pinned.default)
def is_pinned(self, device=None):
    return False


@register(aten.resize_.default)
def resize_(self, size, memory_format=None):
    """torch's resize_: the new size with contiguous strides (or memory_format's) at the same
    storage offset. A storage too small grows in place, keeping its bytes, so every view of
    it sees the same memory afterwards, as on CPU; new elements are uninitialised."""
    size = [int(s) for s in size]
    if tuple(self.shape) == tuple(size) and memory_format is None:
        return self
    if memory_format in (None, torch.preserve_format, torch.contiguous_format):
        stride = contiguous_strides(size)
    else:
        stride = torch.empty(size, device="meta", memory_format=memory_format).stride()
    needed = span_elements(size, stride, self.storage_offset()) * itemsize(self.dtype)
    if needed > self._tvk.nbytes:
        _grow_storage(self._tvk, needed)
    self.data = TVKTensor(self._tvk, size, stride, self.storage_offset(), self.dtype)
    return self


def _grow_storage(storage, nbytes: int):
    """Give storage a larger buffer holding its old bytes (recorded copy; the old buffer
    lives until the copy has run)."""
    old = storage.buffer
    old.check_alive()
    new = alloc_storage(nbytes, storage.device).buffer
    if storage.nbytes:
        stream = storage.device.stream
        stream.copy(old, new, storage.nbytes)
        stream.keep_alive(old)
    storage.buffer, storage.nbytes = new, nbytes

