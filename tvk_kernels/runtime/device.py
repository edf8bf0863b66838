"""A logical Vulkan device: queue, memory, pipelines and the stream, one per device index."""
from __future__ import annotations

import os

from . import fork, vk_newer
from .error_word import ErrorWord
from .instance import Instance, DeviceFacts
from .lock import runtime_lock
from .memory import Allocator
from .pipeline import PipelineCache
from .stream import Stream
from .vk import NULL, check, cstr_array, ffi, lib, new
from ..errors import DeviceNotFoundError, TVKError

_OPTIONAL_EXTENSIONS = ("VK_KHR_cooperative_matrix", "VK_KHR_pipeline_executable_properties", "VK_EXT_memory_budget")


def default_index() -> int:
    value = os.environ.get("TVK_DEVICE", "0").strip() or "0"
    try:
        return int(value)
    except ValueError:
        raise DeviceNotFoundError(f"TVK_DEVICE={value!r} is not a device index; run `tvk-info` to list devices") from None


class Device:
    _open: dict[int, "Device"] = {}

    @classmethod
    def get(cls, index: int | None = None) -> "Device":
        if index is None:
            index = default_index()
        dev = cls._open.get(index)
        if dev is None:
            with runtime_lock:  # threads using the device for the first time at once open it once
                dev = cls._open.get(index)
                if dev is None:
                    dev = cls._open[index] = Device(index)
        return dev

    def __init__(self, index: int):
        instance = Instance.get()
        n = len(instance.physical_devices)
        if not 0 <= index < n:
            listing = ", ".join(f"{p.index}: {p.facts.name}" for p in instance.physical_devices) or "none"
            raise DeviceNotFoundError(
                f"Vulkan device {index} does not exist; this machine has {n} ({listing}). "
                "Pick one with --device N or TVK_DEVICE=N; `tvk-info` lists them."
            )
        self.instance = instance
        self.physical = instance.physical_devices[index]
        self.facts: DeviceFacts = self.physical.facts
        self.index = index
        if not self.facts.features["buffer_device_address"]:
            raise TVKError(f"{self.facts.name} lacks bufferDeviceAddress (Vulkan 1.2), which TorchVK's kernels use; "
                           "update the driver.")
        self.queue_family = self._pick_queue_family()
        self.handle = self._create_device()
        q = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(self.handle, self.queue_family, 0, q)
        self.queue = q[0]

        self.pipelines = PipelineCache(self)
        # Mesa's null devices (RADV_FORCE_FAMILY) compile pipelines but run nothing
        self.compile_only = self.facts.name.startswith("Null hardware")
        self.allocator = None if self.compile_only else Allocator(self)
        self.staging = None if self.compile_only else Allocator(self, host_visible=True)
        self.errors = None if self.compile_only else ErrorWord(self)  # what kernels report, read at sync points
        self.stream = None if self.compile_only else Stream(self)

    def _pick_queue_family(self) -> int:
        count = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.physical.handle, count, NULL)
        fams = ffi.new("VkQueueFamilyProperties[]", count[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(self.physical.handle, count, fams)
        compute = [i for i in range(count[0]) if fams[i].queueFlags & lib.VK_QUEUE_COMPUTE_BIT]
        if not compute:
            raise TVKError(f"{self.facts.name} has no compute queue")
        timed = [i for i in compute if fams[i].timestampValidBits > 0]
        self.timestamp_bits = fams[(timed or compute)[0]].timestampValidBits
        return (timed or compute)[0]

    def _create_device(self):
        keep: list = []
        feats = self.facts.features
        exts = [e for e in _OPTIONAL_EXTENSIONS if e in self.facts.extensions]
        f12 = new("VkPhysicalDeviceVulkan12Features", keep, bufferDeviceAddress=1,
                  shaderFloat16=int(feats["shader_float16"]), shaderInt8=int(feats["shader_int8"]),
                  storageBuffer8BitAccess=int(feats["storage_8bit"]))
        f11 = new("VkPhysicalDeviceVulkan11Features", keep, storageBuffer16BitAccess=int(feats["storage_16bit"]), pNext=f12)
        f13 = new("VkPhysicalDeviceVulkan13Features", keep, subgroupSizeControl=int(feats["subgroup_size_control"]),
                  computeFullSubgroups=int(feats["subgroup_size_control"]))
        f12.pNext = f13
        tail = f13
        if "VK_KHR_cooperative_matrix" in exts and feats["cooperative_matrix"]:
            coop = new("VkPhysicalDeviceCooperativeMatrixFeaturesKHR", keep, cooperativeMatrix=1)
            tail.pNext, tail = coop, coop
        if "VK_KHR_cooperative_matrix" in exts and feats["cooperative_matrix"] and feats.get("cooperative_matrix2"):
            coop2 = vk_newer.new("VkPhysicalDeviceCooperativeMatrix2FeaturesNV", keep,
                                 **{name: 1 for name in vk_newer.COOPMAT2_FEATURES})
            vk_newer.chain(tail, coop2)
            tail = coop2
            exts.append(vk_newer.COOPMAT2_EXTENSION)
        if feats.get("bfloat16_cooperative_matrix") and feats["cooperative_matrix"]:
            bf16 = vk_newer.new("VkPhysicalDeviceShaderBfloat16FeaturesKHR", keep,
                                **{name: 1 for name in vk_newer.BFLOAT16_FEATURES})
            vk_newer.chain(tail, bf16)
            tail = bf16
            exts.append(vk_newer.BFLOAT16_EXTENSION)
        if "VK_KHR_pipeline_executable_properties" in exts and feats["pipeline_executable_info"]:
            pexe = new("VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR", keep, pipelineExecutableInfo=1)
            vk_newer.chain(tail, pexe)
            tail = pexe
        f2 = new("VkPhysicalDeviceFeatures2", keep, pNext=f11)
        f2.features.shaderInt64 = int(feats["shader_int64"])
        f2.features.shaderInt16 = 1 if feats["storage_16bit"] else 0
        prio = ffi.new("float[]", [1.0])
        keep.append(prio)
        qinfo = new("VkDeviceQueueCreateInfo", keep, queueFamilyIndex=self.queue_family, queueCount=1, pQueuePriorities=prio)
        info = new("VkDeviceCreateInfo", keep, pNext=f2, queueCreateInfoCount=1, pQueueCreateInfos=qinfo,
                   enabledExtensionCount=len(exts), ppEnabledExtensionNames=cstr_array(exts, keep))
        out = ffi.new("VkDevice*")
        check(lib.vkCreateDevice(self.physical.handle, info, NULL, out), "vkCreateDevice")
        self.extensions = set(exts)
        return out[0]

    def proc(self, name: str, ctype: str | None = None):
        """An extension entry point, cast to its PFN type."""
        ptr = lib.vkGetDeviceProcAddr(self.handle, name.encode())
        if ptr == NULL:
            raise TVKError(f"{name} is not available on {self.facts.name}")
        return ffi.cast(ctype or f"PFN_{name}", ptr)

    # convenience for users of the torch-free API ---------------------------------
    def upload(self, array):
        from .transfer import upload  # lazy: numpy (transfer.py) only for host arrays: the runtime loads no numpy

        return upload(self, array)

    def download(self, buf, dtype, shape):
        from .transfer import download  # lazy: as upload's

        return download(self, buf, dtype, shape)

    def synchronize(self):
        self.stream.synchronize()

    def __repr__(self):
        return f"<tvk Device {self.index}: {self.facts.name} ({self.facts.driver_label} {self.facts.driver_info})>"


def get_device(index: int | None = None) -> Device:
    return Device.get(index)


def _after_fork_in_child() -> None:
    """A child of a process that started Vulkan: its copies of the runtime raise on use (fork.py)."""
    if Instance._singleton is None:
        return  # the parent never started Vulkan: the child may, as any process
    fork.mark_forked()
    for device in Device._open.values():
        fork.forbid(device.stream, device.allocator, device.staging, device.errors, device.pipelines, device)
    fork.forbid(Instance._singleton)


os.register_at_fork(after_in_child=_after_fork_in_child)
