"""Compute pipelines: (template, defines, specialization, subgroup size) -> VkPipeline, built once.

Kernels take their buffers as device addresses in push constants, so every pipeline
layout is just one push-constant range: no descriptor sets to allocate or bind.
The driver's VkPipelineCache is saved to disk at exit and loaded at start, checked (cache_file.py,
and its Vulkan header against this device): a bad file is dropped with a warning. When the driver
rejects a module from the SPIR-V cache, that entry is dropped and the template compiled afresh, once.

Inside `prefetching()`, a missing pipeline is built in a thread pool: get() returns its
Pipeline at once and the build fills it in later. glslc runs in a subprocess and cffi drops
the GIL in Vulkan calls, so builds really overlap; a VkPipelineCache is internally
synchronized. Compiled programs prefetch on their first run (torchvk/compile/program.py).
Outside it, too, kernel launches (get(background=True); TVK_BACKGROUND_BUILDS=0 turns it off) hand a
missing pipeline to the pool and return at once; the stream holds the dispatches that need it until it is built (stream.py), so an
eager step's pipelines build in parallel. A build error is raised at the next sync point.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from . import cache_file
from .compiler import compile_template, forget_template, split_defines
from .executable_stats import read_stats
from .vk import NULL, check, ffi, lib, new
from ..env_flags import env_flag
from ..errors import InvalidConfigError, ShaderCompileError, VulkanError
from ..paths import cache_dir

_OUT_OF_MEMORY = (-1, -2)  # VK_ERROR_OUT_OF_HOST_MEMORY, _DEVICE_MEMORY: no fault of the SPIR-V
_VK_CACHE_HEADER = struct.Struct("<IIII16s")  # VkPipelineCacheHeaderVersionOne: size, version, vendor, device, UUID


class Pipeline:
    """One compute pipeline. `handle` and `layout` are None while its build is pending (prefetch):
    kernel families memoize this object, so the build fills in this very object."""
    __slots__ = ("handle", "layout", "push_size", "name", "local_size", "compile_s", "stats", "_future")

    def __init__(self, push_size, name, local_size):
        self.handle = self.layout = self.stats = self._future = None
        self.push_size, self.name, self.local_size, self.compile_s = push_size, name, local_size, 0.0

    def wait(self) -> "Pipeline":
        """Block until a pending build is done (re-raising its error); free once built."""
        if self._future is not None:
            self._future.result()
            self._future = None
        return self


class PipelineCache:
    def __init__(self, device):
        self.device = device
        self.pipelines: dict[tuple, Pipeline] = {}
        self.compile_seconds = 0.0  # sum of per-pipeline build times (more than the wall time when built in parallel)
        self.spirv_seconds = 0.0  # of which GLSL -> SPIR-V (glslc, or the SPIR-V cache)
        self.driver_seconds = 0.0  # of which vkCreateShaderModule + vkCreateComputePipelines
        self.prefetch_wall_seconds = 0.0  # wall time inside prefetching() blocks, waiting for their builds included
        self._lock = threading.Lock()  # for the counters, which build threads add to
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list | None = None  # (key, Pipeline) submitted in the current prefetching() block
        # outside prefetching(), too, a missing pipeline is built in the pool and the stream holds the
        # dispatches that need it (stream.py): eager mode's first step builds its pipelines in parallel
        self.background = env_flag("TVK_BACKGROUND_BUILDS", True)
        f = device.facts
        # .v2: the checked format; a version-1 `.bin` beside it is never read (it would only warn)
        self._path = cache_dir() / "pipelines" / f"{f.uuid}-{f.driver_version}.v2.bin"
        self._key = f"VkPipelineCache {f.vendor_id:x}:{f.device_id:x} {f.uuid} {f.driver_version}"
        keep: list = []
        initial = cache_file.read(self._path, self._key, self._header_problem) or b""
        self._loaded = hashlib.sha256(initial).digest()  # save() writes only a cache that changed
        data = ffi.from_buffer(initial) if initial else NULL
        info = new("VkPipelineCacheCreateInfo", keep, initialDataSize=len(initial), pInitialData=data)
        out = ffi.new("VkPipelineCache*")
        if lib.vkCreatePipelineCache(device.handle, info, NULL, out) < 0:  # the driver rejects it: start empty
            cache_file.discard(self._path, "rejected by the driver (vkCreatePipelineCache failed)")
            info.initialDataSize, info.pInitialData = 0, NULL
            check(lib.vkCreatePipelineCache(device.handle, info, NULL, out), "vkCreatePipelineCache")
        self.handle = out[0]
        atexit.register(self.save)

    def get(self, template: str, defines: dict | None = None, local_size=(64, 1, 1), push_size: int = 0,
            spec: dict | None = None, subgroup_size: int | None = None, capture_stats: bool = False,
            shared_bytes: int = 0, background: bool = False) -> Pipeline:
        """The pipeline, built on first use after checking the device limits (shared_bytes: the
        kernel's shared memory, which only the kernel's author can compute). background: a launch
        site that only hands the pipeline to the stream lets it build in the pool (TVK_BACKGROUND_BUILDS)."""
        key = (template, tuple(sorted((defines or {}).items())), tuple(local_size), push_size,
               tuple(sorted((spec or {}).items())), subgroup_size, capture_stats)
        p = self.pipelines.get(key)
        if p is None:
            self.check_limits(tuple(local_size), shared_bytes, subgroup_size, push_size)
            p = Pipeline(push_size, template, tuple(local_size))
            compiled, tunables = split_defines(template, defines)  # tunables: the template's specialization constants
            build = (p, template, compiled, {**tunables, **(spec or {})}, subgroup_size, capture_stats)
            if self._pending is not None:
                p._future = self._executor().submit(self._build, *build)
                self._pending.append((key, p))
            elif background and self.background and not capture_stats:  # the stream holds its dispatches until built
                p._future = self._executor().submit(self._build, *build)
            else:
                self._build(*build)
            self.pipelines[key] = p
        return p

    @contextmanager
    def prefetching(self):
        """Build the pipelines that get() misses inside the block in a thread pool. Leaving the
        block waits for every build and re-raises the first build error (that pipeline is dropped
        from the cache, so a later get() tries again)."""
        t0 = time.perf_counter()
        outer, pending = self._pending, []
        self._pending = pending
        try:
            yield self
        finally:
            self._pending = outer
            error = None
            for key, p in pending:
                try:
                    p.wait()
                except Exception as e:
                    error = error or e
                    if self.pipelines.get(key) is p:
                        del self.pipelines[key]
            self.prefetch_wall_seconds += time.perf_counter() - t0
        if error is not None:
            raise error

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            workers = int(os.environ.get("TVK_COMPILE_THREADS") or os.cpu_count() or 1)
            self._pool = ThreadPoolExecutor(max(workers, 1), thread_name_prefix="tvk-pipeline")
        return self._pool

    def from_spirv(self, spirv: bytes, local_size, push_size: int, spec: dict | None = None,
                   capture_stats: bool = False) -> Pipeline:
        """A pipeline from a SPIR-V module, not memoized (tools comparing two builds of a kernel)."""
        p = Pipeline(push_size, "spirv", tuple(local_size))
        p.layout, p.handle = self._create_pipeline(spirv, p, spec or {}, None, capture_stats)
        if capture_stats:
            from .executable_stats import read_stats  # lazy: only tools read compiler statistics

            p.stats = read_stats(self.device, p.handle)
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
        if subgroup_size is not None and not f.gives_subgroup_size(subgroup_size):
            problems.append(f"subgroup size {subgroup_size} not selectable (device allows "
                            f"{f.min_subgroup_size}..{f.max_subgroup_size}, control={f.subgroup_size_control})")
        elif subgroup_size is not None and invocations > subgroup_size * f.max_compute_workgroup_subgroups:
            problems.append(f"{invocations} invocations per workgroup > {f.max_compute_workgroup_subgroups} subgroups of "
                            f"the required size {subgroup_size}")
        if problems:
            raise InvalidConfigError(f"kernel parameters do not fit {f.name}: " + "; ".join(problems))

    def _header_problem(self, blob: bytes) -> str | None:
        """What is wrong with a saved VkPipelineCache blob for this device, if anything."""
        f = self.device.facts
        if len(blob) < _VK_CACHE_HEADER.size:
            return f"not a Vulkan pipeline cache ({len(blob)} bytes)"
        size, version, vendor, device, uuid = _VK_CACHE_HEADER.unpack_from(blob)
        if not _VK_CACHE_HEADER.size <= size <= len(blob) or version != 1:
            return "not a Vulkan pipeline cache (bad header)"
        if (vendor, device, uuid.hex()) != (f.vendor_id, f.device_id, f.uuid):
            return "a pipeline cache of another device or driver"
        return None

    def _build(self, p: Pipeline, template, defines, spec, subgroup_size, capture_stats):
        """Create p's VkPipeline; runs on the caller's thread or a pool thread (prefetch)."""
        t0 = time.perf_counter()
        spirv = compile_template(template, defines)
        t1 = time.perf_counter()
        try:
            layout, handle = self._create_pipeline(spirv, p, spec, subgroup_size, capture_stats)
        except VulkanError as first:
            if first.code in _OUT_OF_MEMORY:
                raise
            layout, handle = self._rebuild_from_template(p, template, defines, spec, subgroup_size, capture_stats, first)
        t2 = time.perf_counter()
        if capture_stats:
            p.stats = read_stats(self.device, handle)
        p.layout, p.compile_s = layout, time.perf_counter() - t0
        p.handle = handle  # last: a non-None handle means the pipeline is complete
        with self._lock:
            self.compile_seconds += p.compile_s
            self.spirv_seconds += t1 - t0
            self.driver_seconds += t2 - t1

    def _rebuild_from_template(self, p, template, defines, spec, subgroup_size, capture_stats, first: VulkanError):
        """The driver rejected the module: its SPIR-V cache entry may be bad in a way the checks
        cannot see, so drop it and compile the template once more; a second failure is an error."""
        cached = forget_template(template, defines, f"a module the driver rejected ({first})")
        spirv = compile_template(template, defines)
        try:
            return self._create_pipeline(spirv, p, spec, subgroup_size, capture_stats)
        except VulkanError as second:
            shown = " ".join(f"{k}={v}" for k, v in sorted(defines.items())) or "none"
            raise ShaderCompileError(
                f"the driver cannot build a pipeline from {template} (defines: {shown}; SPIR-V cache file {cached}): "
                f"{second}, also after compiling the template afresh (first try: {first}). This is a driver or "
                "template bug: update the driver, or report it with this message."
            ) from second

    def _create_pipeline(self, spirv: bytes, p: Pipeline, spec, subgroup_size, capture_stats):
        """(VkPipelineLayout, VkPipeline) from SPIR-V."""
        local_size, push_size = p.local_size, p.push_size
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
        result = lib.vkCreateComputePipelines(dev, self.handle, 1, cinfo, NULL, out)
        lib.vkDestroyShaderModule(dev, module[0], NULL)
        if result < 0:  # the caller may try again: leave nothing behind
            lib.vkDestroyPipelineLayout(dev, layout[0], NULL)
        check(result, "vkCreateComputePipelines")
        return layout[0], out[0]

    def save(self):
        """Store the driver's pipeline cache (at exit), if it changed since it was loaded."""
        try:
            size = ffi.new("size_t*")
            check(lib.vkGetPipelineCacheData(self.device.handle, self.handle, size, NULL), "vkGetPipelineCacheData")
            buf = ffi.new("char[]", size[0])
            check(lib.vkGetPipelineCacheData(self.device.handle, self.handle, size, buf), "vkGetPipelineCacheData")
        except Exception:  # a cache that cannot be read back costs only compile time next run
            return
        data = ffi.buffer(buf, size[0])[:]
        digest = hashlib.sha256(data).digest()
        if digest != self._loaded:
            cache_file.store(self._path, self._key, data)
            self._loaded = digest


def keep_str(b: bytes, keep: list):
    p = ffi.new("char[]", b)
    keep.append(p)
    return p
