"""Vulkan runtime: instance, device, memory, compiler, pipelines, stream, profiling."""
from .device import Device, get_device
from .instance import DeviceFacts, list_devices
from .memory import DeviceBuffer, parse_bytes

__all__ = ["Device", "DeviceBuffer", "DeviceFacts", "get_device", "list_devices", "parse_bytes"]
