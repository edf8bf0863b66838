"""Thin helpers over the raw cffi Vulkan bindings (`vulkan.ffi`, `vulkan.lib`).

We build structs with `ffi.new` ourselves and keep every nested struct alive in a
`keep` list until the call returns: the `vulkan` package's struct wrappers can free
nested structs early (seen as random VK_ERROR_UNKNOWN) and cost ~6x more per call.
"""
from __future__ import annotations

import re

from ..errors import VulkanError, VulkanNotFoundError

try:
    from vulkan import ffi, lib
except OSError as e:  # the wheel loads libvulkan at import time
    raise VulkanNotFoundError(
        f"could not load the Vulkan loader ({e}). Install it: Debian/Ubuntu `apt-get install libvulkan1 "
        "mesa-vulkan-drivers`; Windows: a current GPU driver (it ships vulkan-1.dll)."
    ) from None

NULL = ffi.NULL

_RESULT_NAMES = {}
for _name in dir(lib):
    if _name.startswith("VK_ERROR_") or _name in ("VK_NOT_READY", "VK_TIMEOUT", "VK_INCOMPLETE"):
        _RESULT_NAMES.setdefault(getattr(lib, _name), _name)


def check(result: int, call: str) -> int:
    """Raise VulkanError for a negative VkResult (errors); positive codes are statuses."""
    if result < 0:
        raise VulkanError(call, result, _RESULT_NAMES.get(result, "VK_ERROR"))
    return result


def new(ctype: str, keep: list | None = None, **fields):
    """ffi.new('ctype*') with fields set; sType is filled from the struct name when it has one."""
    ptr = ffi.new(ctype + "*")
    names = dict(ffi.typeof(ctype).fields)
    if "sType" in names and "sType" not in fields:
        fields["sType"] = structure_type(ctype)
    for k, v in fields.items():
        setattr(ptr, k, v)
    if keep is not None:
        keep.append(ptr)
    return ptr


def cstr(s: str, keep: list):
    p = ffi.new("char[]", s.encode())
    keep.append(p)
    return p


def cstr_array(strings, keep: list):
    ptrs = [cstr(s, keep) for s in strings]
    arr = ffi.new("char*[]", ptrs) if ptrs else NULL
    keep.append(arr)
    return arr


def to_str(chars) -> str:
    return ffi.string(chars).decode(errors="replace")


_STYPE_CACHE: dict[str, int] = {}


def structure_type(ctype: str) -> int:
    """VkPhysicalDeviceVulkan12Features -> VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES."""
    if ctype in _STYPE_CACHE:
        return _STYPE_CACHE[ctype]
    name = ctype[2:]
    vendor = ""
    for suffix in ("KHR", "EXT", "NV", "AMD"):
        if name.endswith(suffix):
            name, vendor = name[: -len(suffix)], "_" + suffix
            break
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).upper()
    base = "VK_STRUCTURE_TYPE_" + snake
    base = re.sub(r"(?<=[A-Z])(\d+)_BIT_", r"_\1BIT_", base)
    candidates = [base, re.sub(r"VULKAN(\d)(\d)", r"VULKAN_\1_\2", base), re.sub(r"(?<=[A-Z])(\d+)(?=_|$)", r"_\1", base)]
    candidates = [c + vendor for c in candidates]
    for c in candidates:
        if hasattr(lib, c):
            _STYPE_CACHE[ctype] = getattr(lib, c)
            return _STYPE_CACHE[ctype]
    raise KeyError(f"no VkStructureType for {ctype} (tried {candidates})")


def chain(*ptrs):
    """Link structs through pNext in order; returns the first."""
    for a, b in zip(ptrs, ptrs[1:]):
        a.pNext = b
    return ptrs[0]


def enumerate_into(fn, ctype: str, *args):
    """Two-call Vulkan enumeration: count, then array."""
    count = ffi.new("uint32_t*")
    check(fn(*args, count, NULL), fn.__name__ if hasattr(fn, "__name__") else "enumerate")
    arr = ffi.new(ctype + "[]", count[0])
    if count[0]:
        check(fn(*args, count, arr), "enumerate")
    return [arr[i] for i in range(count[0])], arr


def version_str(v: int) -> str:
    return f"{v >> 22}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"
