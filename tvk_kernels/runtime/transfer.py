"""Host <-> device copies through host-visible staging buffers, ordered on the stream."""
from __future__ import annotations

import numpy as np

from .memory import DeviceBuffer
from .vk import ffi


def upload(device, array, out: DeviceBuffer | None = None) -> DeviceBuffer:
    """Copy a numpy array (any layout) into a new (or the given) device buffer. No wait."""
    src = np.ascontiguousarray(array)
    nbytes = src.nbytes
    dst = out if out is not None else device.allocator.alloc(nbytes)
    if nbytes:
        staging = device.staging.alloc(nbytes)
        ffi.memmove(ffi.cast("char*", staging.block.mapped) + staging.offset, ffi.from_buffer(src), nbytes)
        device.stream.keep_alive(staging)  # freed once the copy has run (first: a Ctrl-C may come between)
        device.stream.copy(staging, dst, nbytes)
    return dst


def download(device, buf: DeviceBuffer, dtype, shape) -> np.ndarray:
    """Copy a device buffer back to a new numpy array; waits for the stream."""
    buf.check_alive()
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    out = np.empty(shape, dtype=dtype)
    if nbytes:
        staging = device.staging.alloc(nbytes)
        device.stream.keep_alive(staging)  # not freed before the copy has run, even if the wait is interrupted
        device.stream.copy(buf, staging, nbytes)
        device.stream.synchronize()
        ffi.memmove(ffi.from_buffer(out), ffi.cast("char*", staging.block.mapped) + staging.offset, nbytes)
    return out
