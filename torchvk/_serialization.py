"""torch.save / torch.load and DataLoader(pin_memory=True) for tvk tensors.

A tvk tensor has no storage torch can write (its data lives in a Vulkan buffer), so it is
saved as torch saves any storage-less backend tensor: a CPU copy of its data plus the device
it came from (TVKTensor.__reduce_ex__, torch._utils._rebuild_device_tensor_from_cpu_tensor).
Loading rebuilds it on tvk, or where map_location sends it. The CPU copy's storage is what
map_location="tvk" would move onto tvk; there is no tvk storage object to move it into, so
it stays on the CPU and the rebuild moves the whole tensor.
"""
from __future__ import annotations

import re

import torch

from . import op_registry
from ._module import device_count, is_available

_TVK_LOCATION = re.compile(r"tvk(:(\d+))?$")


def _keep_on_cpu_for_rebuild(storage, location: str):
    """torch.load's deserializer for locations "tvk", "tvk:N": check the device exists, keep the
    storage on the CPU (the rebuild moves the tensor). None for any other location."""
    match = _TVK_LOCATION.match(location) if isinstance(location, str) else None
    if match is None:
        return None
    index = int(match.group(2) or 0)
    if not is_available() or index >= device_count():
        raise RuntimeError(
            f"torch.load: the checkpoint asks for device {location!r}, but torch.tvk.device_count() is "
            f"{device_count() if is_available() else 0}; pass map_location='cpu' or map_location='tvk:0' "
            "to load it onto an existing device")
    return storage


def _no_tag(storage):
    return None  # tvk tensors are saved through the CPU (TVKTensor.__reduce_ex__): no tvk storages


def _pin_memory_as_cpu_copy(self, device=None):
    """aten::_pin_memory on the CPU while tvk is the accelerator: a plain contiguous CPU copy.
    Vulkan host-visible memory cannot be handed to torch as a pinned allocator from Python, so
    the copy is not page-locked (is_pinned() stays False); uploads copy through a staging buffer
    when recorded anyway, so non_blocking=True copies from it are safe and give the same values."""
    if device is not None and torch.device(device).type != "tvk":
        raise NotImplementedError(
            f"pin_memory(device={str(device)!r}): with torchvk as the accelerator only pinning for 'tvk' "
            "is available; call pin_memory() without a device")
    return self.clone(memory_format=torch.contiguous_format)


def install():
    """Register the load-time location handler and, where tvk is the only accelerator, pin_memory."""
    # before torch's own privateuse1 handler (priority 23), which would call storage.to('tvk')
    torch.serialization.register_package(15, _no_tag, _keep_on_cpu_for_rebuild)
    accelerator = torch.accelerator.current_accelerator() if hasattr(torch, "accelerator") else None
    pin = torch.ops.aten._pin_memory.default
    if accelerator is not None and accelerator.type == "tvk" and pin not in op_registry.DECLARATIONS:
        op_registry.register_host(pin)(_pin_memory_as_cpu_copy)
