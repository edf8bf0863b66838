"""`tvk-info`: every Vulkan device with the facts that matter for compute."""
from __future__ import annotations

import argparse
import json
import sys

from .config import arch_family
from .errors import TVKError
from .kernels.matmul import fp16_kernels
from .runtime import list_devices
from .runtime.device_limits import limits_profile


def _size(n) -> str:
    if n is None:
        return "-"
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"


def describe(f) -> str:
    lines = [
        f"[{f.index}] {f.name}",
        f"    vendor/device id : 0x{f.vendor_id:04x} / 0x{f.device_id:04x} ({f.vendor}, {f.device_type}, arch {arch_family(f)})",
        f"    driver           : {f.driver_name} ({f.driver_label}) {f.driver_info}, version {f.driver_version}",
        f"    Vulkan API       : {f.api_version}",
        f"    subgroup size    : {f.subgroup_size} (range {f.min_subgroup_size}-{f.max_subgroup_size}, "
        f"control {'yes' if f.subgroup_size_control else 'no'})",
        f"    shared memory    : {f.max_shared_memory} B per workgroup",
        f"    workgroup        : {f.max_workgroup_invocations} invocations, size {f.max_workgroup_size}, "
        f"count {f.max_workgroup_count}",
        f"    max allocation   : {_size(f.max_memory_allocation)}; push constants {f.max_push_constants} B",
    ]
    if f.max_loop_iterations:
        lines.append(f"    loop budget      : {f.max_loop_iterations} iterations an invocation (the driver ends loops after)")
    if limits_profile() != "device":
        lines.append(f"    limits profile   : {limits_profile()} (TVK_DEVICE_LIMITS: the limits above are lowered to it)")
    for h in f.heaps:
        budget = f", budget {_size(h['budget'])}, used {_size(h['usage'])}" if h["budget"] is not None else ""
        lines.append(f"    heap {h['index']}           : {_size(h['size'])}{' device-local' if h['device_local'] else ''}{budget}")
    feats = f.features
    names = [("fp16", "shader_float16"), ("16-bit storage", "storage_16bit"), ("int8", "shader_int8"),
             ("cooperative matrix", "cooperative_matrix"),
             ("workgroup-scope cooperative matrix", "cooperative_matrix2"),
             ("bf16 cooperative matrix", "bfloat16_cooperative_matrix"),
             ("buffer device address", "buffer_device_address"),
             ("timestamps", "timestamps"), ("subgroup arithmetic", "subgroup_arithmetic"),
             ("bfloat16", "shader_bfloat16"), ("pipeline statistics", "pipeline_executable_info"),
             ("memory budget", "memory_budget")]
    lines.append("    features         : " + ", ".join(f"{label} {'yes' if feats.get(k) else 'no'}" for label, k in names))
    lines.append("    fp16 GEMMs       : " + "; then ".join(fp16_kernels(f)))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tvk-info", description="List Vulkan devices and what TorchVK can use on them.")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    args = ap.parse_args(argv)
    try:
        devices = list_devices()
    except TVKError as e:
        print(f"tvk-info: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([d.as_dict() for d in devices], indent=2, default=str))
    else:
        if not devices:
            print("no Vulkan devices found (install a GPU driver, or mesa-vulkan-drivers for the CPU device)")
        for d in devices:
            print(describe(d))
    return 0


if __name__ == "__main__":
    sys.exit(main())
