"""Compiler statistics of a pipeline (VK_KHR_pipeline_executable_properties).

On RADV these are ACO's numbers for the real GPU: VGPRs, SGPRs, spills, LDS bytes,
subgroups per SIMD (occupancy), instruction counts. This is how RDNA1 kernels are
checked without the card (RADV_FORCE_FAMILY=navi10 gives a null Navi 10 device).
"""
from __future__ import annotations

from .vk import NULL, check, ffi, lib, new, to_str


def read_stats(device, pipeline) -> dict:
    """{statistic name: number} for the compute executable of `pipeline`."""
    if "VK_KHR_pipeline_executable_properties" not in device.extensions:
        return {}
    get_props = device.proc("vkGetPipelineExecutablePropertiesKHR")
    get_stats = device.proc("vkGetPipelineExecutableStatisticsKHR")
    keep: list = []
    pinfo = new("VkPipelineInfoKHR", keep, pipeline=pipeline)
    count = ffi.new("uint32_t*")
    check(get_props(device.handle, pinfo, count, NULL), "vkGetPipelineExecutablePropertiesKHR")
    if count[0] == 0:
        return {}
    stats: dict = {}
    einfo = new("VkPipelineExecutableInfoKHR", keep, pipeline=pipeline, executableIndex=0)
    n = ffi.new("uint32_t*")
    check(get_stats(device.handle, einfo, n, NULL), "vkGetPipelineExecutableStatisticsKHR")
    arr = ffi.new("VkPipelineExecutableStatisticKHR[]", n[0])
    for i in range(n[0]):
        arr[i].sType = lib.VK_STRUCTURE_TYPE_PIPELINE_EXECUTABLE_STATISTIC_KHR
    check(get_stats(device.handle, einfo, n, arr), "vkGetPipelineExecutableStatisticsKHR")
    for i in range(n[0]):
        s = arr[i]
        fmt = s.format
        if fmt == lib.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_BOOL32_KHR:
            value = bool(s.value.b32)
        elif fmt == lib.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_INT64_KHR:
            value = int(s.value.i64)
        elif fmt == lib.VK_PIPELINE_EXECUTABLE_STATISTIC_FORMAT_UINT64_KHR:
            value = int(s.value.u64)
        else:
            value = float(s.value.f64)
        stats[to_str(s.name)] = value
    return stats
