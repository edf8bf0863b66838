"""The Vulkan minimum limits, and the test profile that clamps a device's reported limits to them.

Any conformant device may report exactly these (Vulkan 1.3 spec, "Required Limits"; the
allocation size is VK_KHR_maintenance3's). A kernel whose launch plan assumes more is wrong
there, so `TVK_DEVICE_LIMITS=minimum` makes the runtime believe the device offers no more than
this: launch plans, tuned configs and pipeline checks then all work inside the minimums, and
the dispatch check refuses any grid past them. The real device may offer more; the profile
only ever lowers a limit.
"""
from __future__ import annotations

import dataclasses
import os

MINIMUM_LIMITS = {
    "max_workgroup_count": (65535, 65535, 65535),
    "max_workgroup_size": (128, 128, 64),
    "max_workgroup_invocations": 128,
    "max_shared_memory": 16384,
    "max_push_constants": 128,
    "max_storage_buffer_range": 1 << 27,  # binds descriptors only: the kernels use buffer device addresses
    "max_memory_allocation": 1 << 30,
}

PROFILES = ("device", "minimum")

# Drivers that end a shader's loops after a number of iterations in all (every loop of one
# invocation counts against one budget), silently: the work after it is never done. llvmpipe
# (lavapipe) guards against endless loops this way (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS); a
# kernel that walks a long row in few threads must spread it over more threads there
# (launch.loop_budget_params). tests/device_limits_worker.py has the long-row cases.
DRIVER_LOOP_LIMITS = {"MESA_LLVMPIPE": 65535}


def limits_profile() -> str:
    """TVK_DEVICE_LIMITS: "device" (default: what the driver reports) or "minimum"."""
    value = os.environ.get("TVK_DEVICE_LIMITS", "").strip().lower() or "device"
    if value not in PROFILES:
        raise ValueError(f"TVK_DEVICE_LIMITS={os.environ['TVK_DEVICE_LIMITS']!r}: use one of {', '.join(PROFILES)} "
                         "(minimum: clamp the device's limits to Vulkan's required minimums, a test profile)")
    return value


def _lower(reported, minimum):
    if isinstance(reported, tuple):
        return tuple(min(r, m) for r, m in zip(reported, minimum))
    return min(reported, minimum)


def apply_profile(facts):
    """The facts under the TVK_DEVICE_LIMITS profile (unchanged for "device")."""
    if limits_profile() == "device":
        return facts
    lowered = {name: _lower(getattr(facts, name), minimum) for name, minimum in MINIMUM_LIMITS.items()}
    return dataclasses.replace(facts, **lowered)
