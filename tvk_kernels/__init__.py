"""tvk_kernels: the torch-free half of TorchVK: Vulkan runtime, kernel library, autotuner."""
from .errors import (CompilerNotFoundError, DeviceNotFoundError, FreedBufferError, InvalidConfigError,
                     OutOfMemoryError, ShaderCompileError, TVKError, VulkanError, VulkanNotFoundError)
from .runtime import Device, DeviceBuffer, get_device, list_devices

__version__ = "0.1.0"
__all__ = ["Device", "DeviceBuffer", "get_device", "list_devices", "TVKError", "OutOfMemoryError",
           "ShaderCompileError", "CompilerNotFoundError", "DeviceNotFoundError", "VulkanError",
           "VulkanNotFoundError", "InvalidConfigError", "FreedBufferError", "__version__"]
