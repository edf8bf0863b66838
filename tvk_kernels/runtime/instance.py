"""The Vulkan instance (one per process), the validation layer, and physical-device facts."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from . import fork, vk_newer
from .device_limits import DRIVER_LOOP_LIMITS, apply_profile
from .lock import runtime_lock
from .vk import NULL, check, cstr, cstr_array, enumerate_into, ffi, lib, new, to_str, version_str
from ..env_flags import env_flag
from ..errors import VulkanNotFoundError

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"


class ValidationLog:
    """Collects validation-layer messages; tests fail if any appear."""

    def __init__(self):
        self.messages: list[str] = []
        self._lock = threading.Lock()

    def add(self, text: str):
        with self._lock:
            self.messages.append(text)

    def take(self) -> list[str]:
        with self._lock:
            out, self.messages = self.messages, []
        return out


class Instance:
    _singleton: "Instance | None" = None

    def __init__(self, validation: bool | None = None):
        if validation is None:
            validation = env_flag("TVK_VALIDATION")
        keep: list = []
        available_layers = {to_str(p.layerName) for p in enumerate_into(lib.vkEnumerateInstanceLayerProperties, "VkLayerProperties")[0]}
        available_exts = {to_str(p.extensionName) for p in enumerate_into(lib.vkEnumerateInstanceExtensionProperties, "VkExtensionProperties", NULL)[0]}
        layers, exts = [], []
        if validation:
            if VALIDATION_LAYER not in available_layers:
                raise VulkanNotFoundError(
                    f"validation was requested (TVK_VALIDATION=1) but {VALIDATION_LAYER} is not installed: "
                    "`apt-get install vulkan-validationlayers` or install the Vulkan SDK."
                )
            layers.append(VALIDATION_LAYER)
        self.debug_utils = "VK_EXT_debug_utils" in available_exts and validation
        if self.debug_utils:
            exts.append("VK_EXT_debug_utils")
        flags = 0
        if "VK_KHR_portability_enumeration" in available_exts:  # MoltenVK on macOS
            exts.append("VK_KHR_portability_enumeration")
            flags |= 0x00000001  # VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
        app = new("VkApplicationInfo", keep, pApplicationName=cstr("torchvk", keep), apiVersion=(1 << 22) | (3 << 12))
        info = new(
            "VkInstanceCreateInfo", keep, pApplicationInfo=app, flags=flags,
            enabledLayerCount=len(layers), ppEnabledLayerNames=cstr_array(layers, keep),
            enabledExtensionCount=len(exts), ppEnabledExtensionNames=cstr_array(exts, keep),
        )
        handle = ffi.new("VkInstance*")
        res = lib.vkCreateInstance(info, NULL, handle)
        if res < 0:
            raise VulkanNotFoundError(
                f"vkCreateInstance failed ({res}): no usable Vulkan driver. On Linux without a GPU install Mesa's "
                "CPU driver: `apt-get install mesa-vulkan-drivers`; otherwise update your GPU driver."
            )
        self.handle = handle[0]
        self.validation = validation
        self.log = ValidationLog()
        self._messenger = None
        if self.debug_utils:
            self._install_messenger()
        self.physical_devices = self._enumerate()

    def _install_messenger(self):
        log = self.log

        @ffi.callback("VkBool32(VkDebugUtilsMessageSeverityFlagBitsEXT, VkDebugUtilsMessageTypeFlagsEXT, "
                      "const VkDebugUtilsMessengerCallbackDataEXT*, void*)")
        def on_message(severity, types, data, user):
            if severity >= lib.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT:
                log.add(to_str(data.pMessage) if data.pMessage != NULL else "<no message>")
            return 0

        self._callback = on_message  # keep alive as long as the instance
        keep: list = []
        info = new(
            "VkDebugUtilsMessengerCreateInfoEXT", keep,
            messageSeverity=lib.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | lib.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
            messageType=lib.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | lib.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
            | lib.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
            pfnUserCallback=on_message,
        )
        fn = ffi.cast("PFN_vkCreateDebugUtilsMessengerEXT", lib.vkGetInstanceProcAddr(self.handle, b"vkCreateDebugUtilsMessengerEXT"))
        out = ffi.new("VkDebugUtilsMessengerEXT*")
        check(fn(self.handle, info, NULL, out), "vkCreateDebugUtilsMessengerEXT")
        self._messenger = out[0]

    def _enumerate(self) -> list:
        count = ffi.new("uint32_t*")
        check(lib.vkEnumeratePhysicalDevices(self.handle, count, NULL), "vkEnumeratePhysicalDevices")
        arr = ffi.new("VkPhysicalDevice[]", count[0])
        if count[0]:
            check(lib.vkEnumeratePhysicalDevices(self.handle, count, arr), "vkEnumeratePhysicalDevices")
        return [PhysicalDevice(self, i, arr[i]) for i in range(count[0])]

    @classmethod
    def get(cls) -> "Instance":
        fork.check()  # a forked child's copy of the instance is the parent's: unusable
        if cls._singleton is None:
            with runtime_lock:  # threads starting at once create one instance
                if cls._singleton is None:
                    cls._singleton = Instance()
        return cls._singleton


# VkDriverId -> short name, read from the headers (VK_DRIVER_ID_MESA_RADV -> "MESA_RADV")
DRIVER_NAMES = {getattr(lib, n): n[len("VK_DRIVER_ID_"):] for n in dir(lib)
                if n.startswith("VK_DRIVER_ID_") and not n.endswith(("_KHR", "MAX_ENUM"))}
VENDOR_NAMES = {0x1002: "AMD", 0x10DE: "NVIDIA", 0x8086: "Intel", 0x13B5: "ARM", 0x5143: "Qualcomm", 0x106B: "Apple",
                0x10005: "Mesa (CPU)"}


@dataclass
class DeviceFacts:
    """Everything tvk-info prints and the config key is built from."""

    index: int
    name: str
    vendor_id: int
    device_id: int
    device_type: str
    api_version: str
    driver_version: int
    driver_id: int
    driver_name: str
    driver_info: str
    vendor: str
    subgroup_size: int
    min_subgroup_size: int
    max_subgroup_size: int
    subgroup_size_control: bool
    # a workgroup that requires a subgroup size holds at most this many subgroups of it
    max_compute_workgroup_subgroups: int
    max_shared_memory: int
    max_workgroup_invocations: int
    max_workgroup_size: tuple
    max_workgroup_count: tuple
    max_push_constants: int
    max_memory_allocation: int
    max_storage_buffer_range: int
    timestamp_period_ns: float
    timestamps: bool
    uuid: str
    # loop iterations one invocation may run in all before the driver silently ends its loops (0: no limit)
    max_loop_iterations: int = 0
    extensions: set = field(repr=False, default_factory=set)
    features: dict = field(default_factory=dict)
    heaps: list = field(default_factory=list)
    memory_types: list = field(default_factory=list)
    # VK_NV_cooperative_matrix2 where the device has the features matmul_coopmat2.comp uses:
    # {"max_workgroup_size", "max_dimension", "reserved_shared", "flexible": [granularity entries]}
    coopmat2: dict = field(default_factory=dict)

    @property
    def driver_label(self) -> str:
        return DRIVER_NAMES.get(self.driver_id, f"driver id {self.driver_id}")

    def gives_subgroup_size(self, size: int) -> bool:
        """Whether a pipeline may require this subgroup size here (VK_EXT_subgroup_size_control)."""
        return self.subgroup_size_control and self.min_subgroup_size <= size <= self.max_subgroup_size

    def as_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "extensions"}
        d["driver_label"] = self.driver_label
        return d


class PhysicalDevice:
    def __init__(self, instance: Instance, index: int, handle):
        self.instance, self.index, self.handle = instance, index, handle
        self.facts = apply_profile(self._query())

    def _coopmat2_properties(self) -> dict:
        keep: list = []
        props = vk_newer.new("VkPhysicalDeviceCooperativeMatrix2PropertiesNV", keep)
        props2 = new("VkPhysicalDeviceProperties2", keep)
        vk_newer.chain(props2, props)
        lib.vkGetPhysicalDeviceProperties2(self.handle, props2)
        return {"max_workgroup_size": props.cooperativeMatrixWorkgroupScopeMaxWorkgroupSize,
                "max_dimension": props.cooperativeMatrixFlexibleDimensionsMaxDimension,
                "reserved_shared": props.cooperativeMatrixWorkgroupScopeReservedSharedMemory,
                "flexible": vk_newer.flexible_dimensions(self.instance.handle, self.handle)}

    def _query(self) -> DeviceFacts:
        keep: list = []
        exts = {to_str(e.extensionName) for e in enumerate_into(lib.vkEnumerateDeviceExtensionProperties, "VkExtensionProperties", self.handle, NULL)[0]}
        v11 = new("VkPhysicalDeviceVulkan11Properties", keep)
        drv = new("VkPhysicalDeviceDriverProperties", keep)
        sgc = new("VkPhysicalDeviceSubgroupSizeControlProperties", keep)
        props2 = new("VkPhysicalDeviceProperties2", keep)
        props2.pNext = v11
        v11.pNext = drv
        drv.pNext = sgc
        lib.vkGetPhysicalDeviceProperties2(self.handle, props2)
        p = props2.properties
        lim = p.limits

        f12 = new("VkPhysicalDeviceVulkan12Features", keep)
        f11 = new("VkPhysicalDeviceVulkan11Features", keep, pNext=f12)
        f13 = new("VkPhysicalDeviceVulkan13Features", keep)
        f12.pNext = f13
        chain_tail = f13
        coop = None
        if "VK_KHR_cooperative_matrix" in exts:
            coop = new("VkPhysicalDeviceCooperativeMatrixFeaturesKHR", keep)
            chain_tail.pNext = coop
            chain_tail = coop
        pexe = None
        if "VK_KHR_pipeline_executable_properties" in exts:
            pexe = new("VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR", keep)
            chain_tail.pNext = pexe
            chain_tail = pexe
        coop2 = None
        if vk_newer.COOPMAT2_EXTENSION in exts:
            coop2 = vk_newer.new("VkPhysicalDeviceCooperativeMatrix2FeaturesNV", keep)
            vk_newer.chain(chain_tail, coop2)
            chain_tail = coop2
        bf16 = None
        if vk_newer.BFLOAT16_EXTENSION in exts:
            bf16 = vk_newer.new("VkPhysicalDeviceShaderBfloat16FeaturesKHR", keep)
            vk_newer.chain(chain_tail, bf16)
            chain_tail = bf16
        feats2 = new("VkPhysicalDeviceFeatures2", keep, pNext=f11)
        lib.vkGetPhysicalDeviceFeatures2(self.handle, feats2)
        coopmat2 = {}
        if coop2 is not None and all(getattr(coop2, name) for name in vk_newer.COOPMAT2_FEATURES):
            coopmat2 = self._coopmat2_properties()

        heaps, types = _memory(self.handle, "VK_EXT_memory_budget" in exts)
        features = {
            "shader_float16": bool(f12.shaderFloat16),
            "shader_int8": bool(f12.shaderInt8),
            "storage_16bit": bool(f11.storageBuffer16BitAccess),
            "storage_8bit": bool(f12.storageBuffer8BitAccess),
            "shader_int64": bool(feats2.features.shaderInt64),
            "shader_float64": bool(feats2.features.shaderFloat64),
            "buffer_device_address": bool(f12.bufferDeviceAddress),
            "subgroup_size_control": bool(f13.subgroupSizeControl) and bool(f13.computeFullSubgroups),
            "cooperative_matrix": bool(coop.cooperativeMatrix) if coop is not None else False,
            "pipeline_executable_info": bool(pexe.pipelineExecutableInfo) if pexe is not None else False,
            "timestamps": bool(lim.timestampComputeAndGraphics),
            "memory_budget": "VK_EXT_memory_budget" in exts,
            "push_descriptor": "VK_KHR_push_descriptor" in exts,
            "subgroup_arithmetic": bool(v11.subgroupSupportedOperations & lib.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT),
            "shader_bfloat16": "VK_KHR_shader_bfloat16" in exts,
            "cooperative_matrix2": bool(coopmat2),
            # bf16 values in shaders and bf16 cooperative matrices (VK_KHR_shader_bfloat16)
            "bfloat16_cooperative_matrix": bf16 is not None and all(getattr(bf16, n) for n in vk_newer.BFLOAT16_FEATURES),
        }
        uuid = bytes(ffi.buffer(p.pipelineCacheUUID, 16)).hex()
        dev_type = {0: "other", 1: "integrated GPU", 2: "discrete GPU", 3: "virtual GPU", 4: "CPU"}.get(p.deviceType, "?")
        return DeviceFacts(
            index=self.index, name=to_str(p.deviceName), vendor_id=p.vendorID, device_id=p.deviceID,
            device_type=dev_type, api_version=version_str(p.apiVersion), driver_version=p.driverVersion,
            driver_id=drv.driverID, driver_name=to_str(drv.driverName), driver_info=to_str(drv.driverInfo),
            vendor=VENDOR_NAMES.get(p.vendorID, hex(p.vendorID)),
            subgroup_size=v11.subgroupSize,
            min_subgroup_size=sgc.minSubgroupSize or v11.subgroupSize, max_subgroup_size=sgc.maxSubgroupSize or v11.subgroupSize,
            subgroup_size_control=features["subgroup_size_control"],
            max_compute_workgroup_subgroups=sgc.maxComputeWorkgroupSubgroups,
            max_shared_memory=lim.maxComputeSharedMemorySize,
            max_workgroup_invocations=lim.maxComputeWorkGroupInvocations,
            max_workgroup_size=tuple(lim.maxComputeWorkGroupSize), max_workgroup_count=tuple(lim.maxComputeWorkGroupCount),
            max_push_constants=lim.maxPushConstantsSize,
            max_memory_allocation=_max_allocation(self.handle),
            max_storage_buffer_range=lim.maxStorageBufferRange,
            timestamp_period_ns=float(lim.timestampPeriod), timestamps=features["timestamps"],
            uuid=uuid, extensions=exts, features=features, heaps=heaps, memory_types=types, coopmat2=coopmat2,
            max_loop_iterations=DRIVER_LOOP_LIMITS.get(DRIVER_NAMES.get(drv.driverID), 0),
        )


def _max_allocation(handle) -> int:
    keep: list = []
    m3 = new("VkPhysicalDeviceMaintenance3Properties", keep)
    p2 = new("VkPhysicalDeviceProperties2", keep, pNext=m3)
    lib.vkGetPhysicalDeviceProperties2(handle, p2)
    return int(m3.maxMemoryAllocationSize)


def _memory(handle, has_budget: bool):
    keep: list = []
    budget = new("VkPhysicalDeviceMemoryBudgetPropertiesEXT", keep) if has_budget else NULL
    mp2 = new("VkPhysicalDeviceMemoryProperties2", keep, pNext=budget)
    lib.vkGetPhysicalDeviceMemoryProperties2(handle, mp2)
    mp = mp2.memoryProperties
    heaps = []
    for i in range(mp.memoryHeapCount):
        h = mp.memoryHeaps[i]
        heaps.append({
            "index": i, "size": int(h.size), "device_local": bool(h.flags & lib.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT),
            "budget": int(budget.heapBudget[i]) if has_budget else None,
            "usage": int(budget.heapUsage[i]) if has_budget else None,
        })
    types = [{"index": i, "heap": mp.memoryTypes[i].heapIndex, "flags": int(mp.memoryTypes[i].propertyFlags)} for i in range(mp.memoryTypeCount)]
    return heaps, types


def list_devices() -> list[DeviceFacts]:
    return [pd.facts for pd in Instance.get().physical_devices]
