"""Device storage for tvk tensors: one DeviceBuffer shared by every view of it.

A tvk tensor is a wrapper tensor subclass (`TVKTensor`) with torch's real sizes,
strides, storage offset and dtype, plus a `_tvk` attribute pointing at a `Storage`.
Views make a new wrapper over the same `Storage`; nothing is copied. Kernels get
`storage.address + storage_offset * itemsize` as a byte address.
"""
from __future__ import annotations

import numpy as np
import torch

from tvk_kernels import errors as _errors
from tvk_kernels.runtime.device import Device, default_index
from tvk_kernels.runtime.vk import ffi


class OutOfMemoryError(_errors.OutOfMemoryError, torch.OutOfMemoryError):
    """TorchVK's out-of-memory error as a torch.OutOfMemoryError, for when tvk_kernels was imported
    before torch (then the runtime's own class is not one)."""


# every allocation, scratch buffers inside tvk_kernels included, raises a torch.OutOfMemoryError
if not issubclass(_errors.OutOfMemoryError, torch.OutOfMemoryError):
    from tvk_kernels.runtime.memory import Allocator

    Allocator.oom_error = OutOfMemoryError


# ------------------------------------------------------------------- dtypes
_NP = {
    torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: np.uint16, torch.int64: np.int64,
    torch.int32: np.int32, torch.bool: np.bool_, torch.uint8: np.uint8, torch.int8: np.int8, torch.int16: np.int16,
}
STORAGE_DTYPES = frozenset(_NP)


def np_dtype(dtype):
    return _NP[dtype]


def supported_dtypes(device: Device | None = None) -> tuple:
    dev = device or get_device()
    f = dev.facts.features
    out = [torch.float32, torch.int64, torch.bool, torch.int32]
    if f.get("storage_16bit"):  # 16-bit words in memory, computed in float32 (no fp16/bf16 arithmetic needed)
        out += [torch.float16, torch.bfloat16, torch.int16]  # int16: computed in int32
    if f.get("storage_8bit"):  # bytes in memory, computed in int32
        out += [torch.uint8, torch.int8]
    return tuple(out)


_checked: dict = {}


# may exist where the device lacks 8-bit storage (torch makes empty uint8 buffers internally); kernels refuse it there
_STORAGE_ONLY = (torch.uint8,)


def check_dtype(dtype, op: str):
    ok = _checked.get(dtype)
    if ok is None:
        ok = _checked[dtype] = dtype in supported_dtypes() or dtype in _STORAGE_ONLY
    if not ok:
        names = ", ".join(str(d).replace("torch.", "") for d in supported_dtypes())
        raise TypeError(f"TorchVK does not support dtype {dtype} (op {op}); supported on "
                        f"{get_device().facts.name}: {names}. Convert with .float() / .long() first.")


# ------------------------------------------------------------------- devices
_current = [None]


def current_index() -> int:
    if _current[0] is None:
        _current[0] = default_index()
    return _current[0]


def set_current_index(index: int) -> None:
    _current[0] = index


def get_device(index: int | None = None) -> Device:
    return Device.get(current_index() if index is None else index)


def torch_device(index: int | None = None) -> torch.device:
    return torch.device("tvk", current_index() if index is None else index)


# ------------------------------------------------------------------- storage
class Storage:
    """A device buffer shared by all views; `nbytes` is what the tensors may touch."""

    __slots__ = ("buffer", "nbytes", "device", "__weakref__")

    def __init__(self, buffer, nbytes: int, device: Device):
        self.buffer, self.nbytes, self.device = buffer, nbytes, device

    @property
    def address(self) -> int:
        return self.buffer.address

    def check(self):
        self.buffer.check_alive()

    def free(self):
        """Release the buffer now (later use of any tensor on it raises FreedBufferError)."""
        self.buffer.free()

    def __repr__(self):
        return f"<tvk Storage {self.nbytes} B {self.buffer!r}>"


def alloc_storage(nbytes: int, device: Device | None = None) -> Storage:
    dev = device or get_device()
    return Storage(dev.allocator.alloc(max(int(nbytes), 1)), int(nbytes), dev)


def span_elements(size, stride, offset: int = 0) -> int:
    """How many elements from the storage start a tensor with this geometry needs."""
    if size and min(size) < 0:  # torch's check and message (else: "numel: integer multiplication overflow")
        bad = next(s for s in size if s < 0)
        raise RuntimeError(f"Trying to create tensor with negative dimension {bad}: {list(size)}")
    n = offset + 1
    for s, st in zip(size, stride):
        if s == 0:
            return 0
        n += (s - 1) * st
    return n


# ------------------------------------------------------------------- host copies
def upload_bytes(storage: Storage, src: np.ndarray, byte_offset: int = 0):
    """Copy a contiguous numpy array into storage at byte_offset (recorded, no wait)."""
    src = np.ascontiguousarray(src)
    n = src.nbytes
    if not n:
        return
    storage.check()
    dev = storage.device
    staging = dev.staging.alloc(n)
    ffi.memmove(ffi.cast("char*", staging.block.mapped) + staging.offset, ffi.from_buffer(src), n)
    dev.stream.keep_alive(staging)  # before the copy: a Ctrl-C between must not free what the copy reads
    dev.stream.copy(staging, storage.buffer, n, 0, byte_offset)


_readbacks = [0]


def readback_count() -> int:
    """How many downloads ran so far (_repeat.py: a call that read device data back is not repeated)."""
    return _readbacks[0]


def download_bytes(storage: Storage, byte_offset: int, nbytes: int) -> np.ndarray:
    """Read nbytes from storage at byte_offset; waits for the stream."""
    storage.check()
    _readbacks[0] += 1
    out = np.empty(nbytes, dtype=np.uint8)
    if nbytes:
        dev = storage.device
        staging = dev.staging.alloc(nbytes)
        # held by the stream until the copy has run: freed sooner (a Ctrl-C in the wait), the next
        # upload would write its data there and the copy overwrite it
        dev.stream.keep_alive(staging)
        dev.stream.copy(storage.buffer, staging, nbytes, byte_offset, 0)
        dev.stream.synchronize()
        ffi.memmove(ffi.from_buffer(out), ffi.cast("char*", staging.block.mapped) + staging.offset, nbytes)
    return out
