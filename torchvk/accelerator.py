"""torch.accelerator on tvk.

torch implements most of torch.accelerator in C++, over a backend's device guard, streams and
caching allocator, which a Python backend cannot supply: for tvk, torch's versions report device 0
whatever is current and ignore set_device_index; synchronize and get_device_capability raise "Backend
doesn't support"; the memory functions fail an internal assert (tvk has no c10 DeviceAllocator);
empty_host_cache crashes the process; Graph() raises "Graph is not supported on device type: tvk".

install() puts TorchVK's version of each into torch.accelerator (and torch.accelerator.memory,
.graphs), for the names the running torch has: Graph and empty_host_cache are torch 2.13's. Once
torchvk is imported, tvk is torch's accelerator (torch picks a PrivateUse1 backend before any
other), so these serve tvk alone; a device of another type raises, as in torch's own. Code that
took a function before `import torchvk` (`from torch.accelerator import synchronize`) keeps torch's.
is_available, device_count and current_accelerator need nothing: torch asks torch.tvk for them.
"""
from __future__ import annotations

from collections import OrderedDict

import torch
from torch.accelerator._utils import _get_device_index
from typing_extensions import deprecated

from . import memory as _memory
from ._module import Stream, TVKModule
from ._storage import current_index, get_device, set_current_index, supported_dtypes
from .graphs import TVKGraph


def current_device_index() -> int:
    return current_index()


def set_device_index(device, /) -> None:
    index = _get_device_index(device, optional=False)
    if index >= 0:  # a negative index changes nothing, as in torch
        TVKModule.set_device(index)


class device_index(torch.accelerator.device_index):
    """`with torch.accelerator.device_index(i):` makes tvk device i current in the block (None: no change)."""

    def __enter__(self) -> None:
        if self.idx is not None:
            self.prev_idx = current_index()
            TVKModule.set_device(self.idx)

    def __exit__(self, *exc_info) -> None:
        if self.idx is not None:
            set_current_index(self.prev_idx)


def get_device_capability(device=None, /) -> dict:
    """{"supported_dtypes": the dtypes tvk tensors can have on the device}, as torch's."""
    return {"supported_dtypes": set(supported_dtypes(get_device(_get_device_index(device, optional=True))))}


def current_stream(device=None, /) -> Stream:
    return Stream(_get_device_index(device, optional=True))


def set_stream(stream: torch.Stream) -> None:
    """Make the stream's device current (its stream is the device's only one)."""
    if stream.device.type != "tvk":
        raise ValueError(f"set_stream: a {stream.device.type} stream, while the accelerator is tvk")
    TVKModule.set_device(stream.device_index)


def synchronize(device=None, /) -> None:
    TVKModule.synchronize(_get_device_index(device, optional=True))


# -- memory: torchvk.memory, with torch's device argument and return types
def memory_stats(device_index=None, /) -> OrderedDict:
    return OrderedDict(sorted(_memory.memory_stats(_get_device_index(device_index, optional=True)).items()))


def memory_allocated(device_index=None, /) -> int:
    return _memory.memory_allocated(_get_device_index(device_index, optional=True))


def max_memory_allocated(device_index=None, /) -> int:
    return _memory.max_memory_allocated(_get_device_index(device_index, optional=True))


def memory_reserved(device_index=None, /) -> int:
    return _memory.memory_reserved(_get_device_index(device_index, optional=True))


def max_memory_reserved(device_index=None, /) -> int:
    return _memory.max_memory_reserved(_get_device_index(device_index, optional=True))


def reset_peak_memory_stats(device_index=None, /) -> None:
    _memory.reset_peak_memory_stats(_get_device_index(device_index, optional=True))


def reset_accumulated_memory_stats(device_index=None, /) -> None:
    """Nothing to reset: tvk's memory_stats keeps no running totals, only current and peak values."""
    _get_device_index(device_index, optional=True)  # a device of another type still raises


def empty_cache() -> None:
    """Give the cached, unused blocks of the current device back to the driver."""
    _memory.empty_cache()


def get_memory_info(device_index=None, /) -> tuple[int, int]:
    return _memory.get_memory_info(_get_device_index(device_index, optional=True))


REPLACEMENTS = {
    "current_device_index": current_device_index,
    "current_device_idx": deprecated("Use `current_device_index` instead.", category=FutureWarning)(
        current_device_index),
    "set_device_index": set_device_index,
    "set_device_idx": deprecated("Use `set_device_index` instead.", category=FutureWarning)(set_device_index),
    "device_index": device_index,
    "get_device_capability": get_device_capability,
    "current_stream": current_stream,
    "set_stream": set_stream,
    "synchronize": synchronize,
    "memory_stats": memory_stats,
    "memory_allocated": memory_allocated,
    "max_memory_allocated": max_memory_allocated,
    "memory_reserved": memory_reserved,
    "max_memory_reserved": max_memory_reserved,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
    "empty_cache": empty_cache,
    "empty_host_cache": _memory.empty_host_cache,
    "get_memory_info": get_memory_info,
    "Graph": TVKGraph,
}


def install() -> None:
    modules = [torch.accelerator, torch.accelerator.memory, getattr(torch.accelerator, "graphs", None)]
    for name, replacement in REPLACEMENTS.items():
        for module in modules:
            if module is not None and hasattr(module, name):  # only what this torch has (2.11 lacks some)
                setattr(module, name, replacement)
