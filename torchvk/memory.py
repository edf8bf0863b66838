"""Memory API: the device allocator's counters, its cap and its cache."""
from __future__ import annotations

import math
import numbers

import torch

from tvk_kernels.runtime.device import Device
from tvk_kernels.runtime.instance import _memory as _heaps_and_types
from tvk_kernels.runtime.memory import parse_bytes

from ._storage import get_device


def _alloc(device=None):
    if isinstance(device, (torch.device, str)):
        device = torch.device(device).index
    return get_device(device).allocator


def set_memory_limit(nbytes=None, device=None):
    """Cap the bytes TorchVK reserves from the driver (None: no cap). Also TVK_MEMORY_LIMIT."""
    if isinstance(nbytes, str):
        try:
            nbytes = parse_bytes(nbytes)
        except ValueError as e:
            raise ValueError(f"set_memory_limit: {e}, or None for no cap") from None
    if nbytes is not None:
        if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Real):
            raise TypeError(f"set_memory_limit takes a byte count, a size like '512M', or None for no cap; "
                            f"got {nbytes!r}")
        if not math.isfinite(nbytes):  # int() of it would fail with a message that names no limit
            raise ValueError(f"set_memory_limit: a memory limit must be a finite byte count, not {nbytes}; "
                             f"pass None for no cap")
        if nbytes < 0:
            raise ValueError(f"set_memory_limit: a memory limit cannot be negative (got {nbytes} bytes); "
                             f"pass a byte count >= 0, or None for no cap")
    _alloc(device).set_limit(nbytes)


def get_memory_limit(device=None):
    return _alloc(device).limit


def memory_allocated(device=None) -> int:
    """Bytes in live tvk buffers (frees queued by other threads counted: stats() does them first)."""
    return _alloc(device).stats()["allocated"]


def max_memory_allocated(device=None) -> int:
    return _alloc(device).peak_allocated


def memory_reserved(device=None) -> int:
    """Bytes held from the driver (live buffers + cache + free space in blocks)."""
    return _alloc(device).stats()["reserved"]


def max_memory_reserved(device=None) -> int:
    return _alloc(device).peak_reserved


def reset_peak_memory_stats(device=None):
    _alloc(device).reset_peak()


def reset_max_memory_allocated(device=None):
    _alloc(device).reset_peak()


def empty_cache(device=None):
    """Give cached, unused blocks back to the driver."""
    _alloc(device).empty_cache()


def empty_host_cache():
    """Give the host-visible staging blocks that uploads and downloads left unused back to the
    driver, on every device opened so far (TorchVK's counterpart of pinned host memory)."""
    for dev in list(Device._open.values()):  # the devices opened (a device never opened has no cache)
        if dev.staging is not None:
            dev.staging.empty_cache()


def get_memory_info(device=None) -> tuple[int, int]:
    """(free, total) bytes of the memory heap the device's tensors live in, as torch.cuda.mem_get_info.
    With VK_EXT_memory_budget, free is what the driver says this process can still take from the
    heap (its budget less its use); without it (lavapipe), the heap's size less what TorchVK holds."""
    allocator = _alloc(device)
    dev = allocator.device
    budget_known = "VK_EXT_memory_budget" in dev.extensions
    heaps, types = _heaps_and_types(dev.physical.handle, budget_known)  # asked anew: the budget changes
    if allocator._memory_type is not None:  # the heap of the type its blocks are made in
        heap = heaps[types[allocator._memory_type]["heap"]]
    else:  # no block yet: the largest device-local heap, where it would make them
        heap = max(heaps, key=lambda candidate: (candidate["device_local"], candidate["size"]))
    if budget_known:
        free = heap["budget"] - heap["usage"]
    else:
        free = heap["size"] - allocator.reserved
    return max(free, 0), heap["size"]


def memory_stats(device=None) -> dict:
    s = _alloc(device).stats()
    return {"allocated_bytes.all.current": s["allocated"], "allocated_bytes.all.peak": s["peak_allocated"],
            "reserved_bytes.all.current": s["reserved"], "reserved_bytes.all.peak": s["peak_reserved"],
            "limit": s["limit"], "blocks": s["blocks"]}
