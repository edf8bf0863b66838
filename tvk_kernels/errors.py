"""Errors TorchVK raises. Each message says what went wrong and what to do next."""


class TVKError(RuntimeError):
    """Base class of every TorchVK runtime error."""


class VulkanNotFoundError(TVKError):
    """No Vulkan loader or no Vulkan device on this machine."""


class DeviceNotFoundError(TVKError, IndexError):
    """A device index that does not exist."""


class CompilerNotFoundError(TVKError):
    """glslc (shaderc) is not installed."""


class ShaderCompileError(TVKError):
    """A GLSL template failed to compile; the message names the file and line."""


class VulkanError(TVKError):
    """A Vulkan call returned an error code."""

    def __init__(self, call: str, code: int, name: str):
        super().__init__(f"{call} failed with {name} ({code})")
        self.call, self.code, self.code_name = call, code, name


class InvalidConfigError(TVKError, ValueError):
    """A kernel parameter set that the device cannot run (too much shared memory, ...)."""


class DeviceLimitError(TVKError):
    """A launch past a device limit (maxComputeWorkGroupCount ...): a bug in a kernel's launch plan."""


class ForkedDeviceError(TVKError):
    """The tvk device was used in a process forked from one that had started Vulkan (runtime/fork.py)."""


class FreedBufferError(TVKError):
    """Use of a device buffer after it was freed."""


try:  # torch is optional here; where it exists, OOM is also a torch.OutOfMemoryError
    import sys as _sys

    _torch = _sys.modules.get("torch")
    _OOMBase = (_torch.OutOfMemoryError,) if _torch is not None and hasattr(_torch, "OutOfMemoryError") else ()
except Exception:  # pragma: no cover
    _OOMBase = ()


class OutOfMemoryError(TVKError, MemoryError, *_OOMBase):
    """The device (or the configured cap) has no room for an allocation."""

    def __init__(self, requested: int, allocated: int, reserved: int, limit: int | None, detail: str = ""):
        lim = "no cap" if limit is None else f"cap {_fmt(limit)} (TVK_MEMORY_LIMIT / set_memory_limit)"
        super().__init__(
            f"TorchVK out of memory: tried to allocate {_fmt(requested)}; {_fmt(allocated)} in live buffers, "
            f"{_fmt(reserved)} reserved from the driver, {lim}. {detail}"
            "Free tensors you no longer need, lower the batch size, or raise the cap. "
            "The runtime is still usable."
        )
        self.requested, self.allocated, self.reserved, self.limit = requested, allocated, reserved, limit


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)
