"""Vulkan structs and entry points newer than the headers of the `vulkan` package we pin
(1.3.275): declared here in a cffi FFI of their own, chained into the package's structs by address.

So far: VK_NV_cooperative_matrix2 (workgroup-scope cooperative matrices, flexible dimensions,
tensor addressing) and VK_KHR_shader_bfloat16's cooperative matrices, whose features and properties
the GEMM of matmul_coopmat2.py needs.
"""
from __future__ import annotations

import cffi

from .vk import NULL, check, ffi, lib

_ffi = cffi.FFI()
_ffi.cdef("""
typedef struct {
    int sType; void* pNext;
    uint32_t cooperativeMatrixWorkgroupScope, cooperativeMatrixFlexibleDimensions, cooperativeMatrixReductions,
             cooperativeMatrixConversions, cooperativeMatrixPerElementOperations, cooperativeMatrixTensorAddressing,
             cooperativeMatrixBlockLoads;
} VkPhysicalDeviceCooperativeMatrix2FeaturesNV;
typedef struct {
    int sType; void* pNext;
    uint32_t cooperativeMatrixWorkgroupScopeMaxWorkgroupSize, cooperativeMatrixFlexibleDimensionsMaxDimension,
             cooperativeMatrixWorkgroupScopeReservedSharedMemory;
} VkPhysicalDeviceCooperativeMatrix2PropertiesNV;
typedef struct {
    int sType; void* pNext;
    uint32_t MGranularity, NGranularity, KGranularity;
    int AType, BType, CType, ResultType;
    uint32_t saturatingAccumulation;
    int scope;
    uint32_t workgroupInvocations;
} VkCooperativeMatrixFlexibleDimensionsPropertiesNV;
typedef struct {
    int sType; void* pNext;
    uint32_t shaderBFloat16Type, shaderBFloat16DotProduct, shaderBFloat16CooperativeMatrix;
} VkPhysicalDeviceShaderBfloat16FeaturesKHR;
typedef int (*PFN_flexible)(void* physicalDevice, uint32_t* count, VkCooperativeMatrixFlexibleDimensionsPropertiesNV* props);
""")

COOPMAT2_EXTENSION = "VK_NV_cooperative_matrix2"
_STYPE = {"VkPhysicalDeviceCooperativeMatrix2FeaturesNV": 1000593000,
          "VkCooperativeMatrixFlexibleDimensionsPropertiesNV": 1000593001,
          "VkPhysicalDeviceCooperativeMatrix2PropertiesNV": 1000593002,
          "VkPhysicalDeviceShaderBfloat16FeaturesKHR": 1000141000}
BFLOAT16_EXTENSION = "VK_KHR_shader_bfloat16"
# bf16 values and bf16 cooperative matrices (matmul_coopmat2.comp at DTYPE bfloat16)
BFLOAT16_FEATURES = ("shaderBFloat16Type", "shaderBFloat16CooperativeMatrix")
# the features matmul_coopmat2.comp uses
COOPMAT2_FEATURES = ("cooperativeMatrixWorkgroupScope", "cooperativeMatrixFlexibleDimensions",
                     "cooperativeMatrixPerElementOperations", "cooperativeMatrixTensorAddressing")


def new(ctype: str, keep: list, **fields):
    """A struct of this module (sType filled), kept alive in `keep`."""
    ptr = _ffi.new(ctype + "*", {"sType": _STYPE[ctype], **fields})
    keep.append(ptr)
    return ptr


def chain(first, second) -> None:
    """first.pNext = second, for structs of either FFI (this module's or the `vulkan` package's)."""
    first.pNext = _ffi_of(first).cast("void*", int(_ffi_of(second).cast("uintptr_t", second)))


def _ffi_of(ptr):
    try:
        _ffi.typeof(ptr)
        return _ffi
    except TypeError:  # a cdata of the `vulkan` package's FFI
        return ffi


def flexible_dimensions(instance_handle, physical_handle) -> list[dict]:
    """The device's VkCooperativeMatrixFlexibleDimensionsPropertiesNV entries (its workgroup-scope
    matrix granularities), as dicts with the component types as VK_COMPONENT_TYPE_* numbers."""
    ptr = lib.vkGetInstanceProcAddr(instance_handle, b"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV")
    if ptr == NULL:
        return []
    fn = _ffi.cast("PFN_flexible", int(ffi.cast("uintptr_t", ptr)))
    physical = _ffi.cast("void*", int(ffi.cast("uintptr_t", physical_handle)))
    count = _ffi.new("uint32_t*")
    check(fn(physical, count, _ffi.NULL), "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV")
    if not count[0]:
        return []
    props = _ffi.new("VkCooperativeMatrixFlexibleDimensionsPropertiesNV[]", count[0])
    for i in range(count[0]):
        props[i].sType = _STYPE["VkCooperativeMatrixFlexibleDimensionsPropertiesNV"]
    check(fn(physical, count, props), "vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV")
    return [{name: int(getattr(props[i], name)) for name in
             ("MGranularity", "NGranularity", "KGranularity", "AType", "BType", "CType", "ResultType",
              "saturatingAccumulation", "scope", "workgroupInvocations")} for i in range(count[0])]
