"""Compute pipelines: (template, defines, specialization, subgroup size) -> VkPipeline, built once.

Kernels take their buffers as device addresses in push constants, so every pipeline
layout is just one push-constant range: no descriptor sets to allocate or bind.
The driver's VkPipelineCache is saved to disk at exit and loaded at start.
"""
from __future__ import annotations

import atexit
import struct
import time

from .compiler import compile_template
from .vk import NULL, check, ffi, lib, new
from ..errors import InvalidConfigError
from ..paths import cache_dir


class Pipeline:
    __slots__ = ("handle", "layout", "push_size", "name", "local_size", "compile_s", "stats")

    def __init__(self, handle, layout, push_size, name, local_size, compile_s):
        self.handle, self.layout, self.push_size, self.name = handle, layout, push_size, name
        self.local_size, self.compile_s, self.stats = local_size, compile_s, None


class PipelineCache:
    def __init__(self, device):
        self.device = device
        self.pipelines: dict[tuple, Pipeline] = {}
        self.compile_seconds = 0.0
        self._path = cache_dir() / "pipelines" / f"{device.facts.uuid}-{device.facts.driver_version}.bin"
        keep: list = []
        initial = self._path.read_bytes() if self._path.is_file() else b""
        data = ffi.from_buffer(initial) if initial else NULL
        info = new("VkPipelineCacheCreateInfo", keep, initialDataSize=len(initial), pInitialData=data)
        out = ffi.new("VkPipelineCache*")
        if lib.vkCreatePipelineCache(device.handle, info, NULL, out) < 0:  # a corrupt file: start empty
            info.initialDataSize, info.pInitialData = 0, NULL
            check(lib.vkCreatePipelineCache(device.handle, info, NULL, out), "vkCreatePipelineCache")
        self.handle = out[0]
        atexit.register(self.save)

    def get(self, template: str, defines: dict | None = None, local_size=(64, 1, 1), push_size: int = 0,
            spec: dict | None = None, subgroup_size: int | None = None, capture_stats: bool = False,
            shared_bytes: int = 0) -> Pipeline:
        """The pipeline, built on first use after checking the device limits (shared_bytes: the
        kernel's shared memory, which only the kernel's author can compute)."""
        key = (template, tuple(sorted((defines or {}).items())), tuple(local_size), push_size,
               tuple(sorted((spec or {}).items())), subgroup_size, capture_stats)
        p = self.pipelines.get(key)
        if p is None:
            self.check_limits(tuple(local_size), shared_bytes, subgroup_size, push_size)
            p = self.pipelines[key] = self._build(template, defines or {}, tuple(local_size), push_size, spec or {},
                                                  subgroup_size, capture_stats)
        return p

    def check_limits(self, local_size, shared_bytes: int = 0, subgroup_size: int | None = None, push_size: int = 0):
        f = self.device.facts
        invocations = local_size[0] * local_size[1] * local_size[2]
        problems = []
        if invocations > f.max_workgroup_invocations:
            problems.append(f"{invocations} invocations per workgroup > device limit {f.max_workgroup_invocations}")
        if any(l > m for l, m in zip(local_size, f.max_workgroup_size)):
            problems.append(f"workgroup size {local_size} exceeds {f.max_workgroup_size}")
        if shared_bytes > f.max_shared_memory:
            problems.append(f"{shared_bytes} B shared memory > device limit {f.max_shared_memory}")
        if push_size > f.max_push_constants:
            problems.append(f"{push_size} B push constants > device limit {f.max_push_constants}")
        if subgroup_size is not None and not (f.subgroup_size_control and f.min_subgroup_size <= subgroup_size <= f.max_subgroup_size):
            problems.append(f"subgroup size {subgroup_size} not selectable (device allows "
                            f"{f.min_subgroup_size}..{f.max_subgroup_size}, control={f.subgroup_size_control})")
        if problems:
            raise InvalidConfigError(f"kernel parameters do not fit {f.name}: " + "; ".join(problems))

    def _build(self, template, defines, local_size, push_size, spec, subgroup_size, capture_stats) -> Pipeline:
        t0 = time.perf_counter()
        spirv = compile_template(template, defines)
        dev = self.device.handle
        keep: list = []
        code = ffi.from_buffer("uint32_t[]", spirv)
        keep.append(code)
        minfo = new("VkShaderModuleCreateInfo", keep, codeSize=len(spirv), pCode=code)
        module = ffi.new("VkShaderModule*")
        check(lib.vkCreateShaderModule(dev, minfo, NULL, module), "vkCreateShaderModule")

        # specialization constants 0,1,2 are the local size; others are kernel-specific
        consts = {0: local_size[0], 1: local_size[1], 2: local_size[2], **spec}
        ids = sorted(consts)
        entries = ffi.new("VkSpecializationMapEntry[]", len(ids))
        blob = b"".join(struct.pack("<I", int(consts[i]) & 0xFFFFFFFF) for i in ids)
        for n, i in enumerate(ids):
            entries[n].constantID, entries[n].offset, entries[n].size = i, 4 * n, 4
        blob_c = ffi.new("char[]", blob)
        keep += [entries, blob_c]
        sinfo = new("VkSpecializationInfo", keep, mapEntryCount=len(ids), pMapEntries=entries, dataSize=len(blob), pData=blob_c)
        stage = new("VkPipelineShaderStageCreateInfo", keep, stage=lib.VK_SHADER_STAGE_COMPUTE_BIT, module=module[0],
                    pName=keep_str(b"main", keep), pSpecializationInfo=sinfo)
        if subgroup_size is not None:
            req = new("VkPipelineShaderStageRequiredSubgroupSizeCreateInfo", keep, requiredSubgroupSize=subgroup_size)
            stage.pNext = req
            stage.flags = lib.VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT

        rng = new("VkPushConstantRange", keep, stageFlags=lib.VK_SHADER_STAGE_COMPUTE_BIT, offset=0, size=push_size)
        linfo = new("VkPipelineLayoutCreateInfo", keep, pushConstantRangeCount=1 if push_size else 0,
                    pPushConstantRanges=rng if push_size else NULL)
        layout = ffi.new("VkPipelineLayout*")
        check(lib.vkCreatePipelineLayout(dev, linfo, NULL, layout), "vkCreatePipelineLayout")
        cinfo = new("VkComputePipelineCreateInfo", keep, stage=stage[0], layout=layout[0])
        if capture_stats:
            cinfo.flags = lib.VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
        out = ffi.new("VkPipeline*")
        check(lib.vkCreateComputePipelines(dev, self.handle, 1, cinfo, NULL, out), "vkCreateComputePipelines")
        lib.vkDestroyShaderModule(dev, module[0], NULL)
        dt = time.perf_counter() - t0
        self.compile_seconds += dt
        p = Pipeline(out[0], layout[0], push_size, template, local_size, dt)
        if capture_stats:
            from .executable_stats import read_stats

            p.stats = read_stats(self.device, out[0])
        return p

    def save(self):
        try:
            size = ffi.new("size_t*")
            check(lib.vkGetPipelineCacheData(self.device.handle, self.handle, size, NULL), "vkGetPipelineCacheData")
            buf = ffi.new("char[]", size[0])
            check(lib.vkGetPipelineCacheData(self.device.handle, self.handle, size, buf), "vkGetPipelineCacheData")
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_suffix(".tmp")
            tmp.write_bytes(ffi.buffer(buf, size[0])[:])
            tmp.replace(self._path)
        except Exception:  # a cache that cannot be saved costs only compile time next run
            pass


def keep_str(b: bytes, keep: list):
    p = ffi.new("char[]", b)
    keep.append(p)
    return p
