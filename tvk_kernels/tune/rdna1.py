"""RDNA1 without the card: compile every candidate for Navi 10 with the real RDNA1 compiler
(ACO, through Mesa's null RADV device), read its registers, spills, LDS and occupancy, drop
what cannot run well, and rank the rest with a cost model of the Radeon RX 5600 XT.

Cost model: tune/cost_model.py with the RX 5600 XT's numbers (tuning/machines.json:
36 CUs x 2 SIMD32 at 1.56 GHz, 7.19 TFLOP/s fp32, LDS 7.2 TB/s, DRAM 288 GB/s); replace its
ranking with measurements by running `tvk-tune --device 0` on the card.
Rejected outright: any spilled VGPR/SGPR, any scratch, LDS above the driver's limit
(32 KiB on AMD's Windows driver for Navi 10, 64 KiB on RADV).

AMD's Windows driver compiles with its own compiler, not ACO: the register counts here
are RADV's. The configs are labelled "static-model" and the README says how to replace them.
"""
from __future__ import annotations

import dataclasses
import glob
import math
import os
import random
import subprocess
import sys
from pathlib import Path

from ..config import default_params
from ..env_flags import env_flag
from ..errors import InvalidConfigError, ShaderCompileError
from ..kernels.launch import subgroup_size_params
from ..search_space import bucket_of, candidates, search_space, violations
from .cost_model import machine, predict_seconds
from .driver import write_config
from .targets import load_targets, unavailable

RX_5600_XT = machine("rx5600xt")
RADV_COMPUTE_WAVE = 64  # the wave size RADV gives a compute pipeline that requires none (on Navi 10)
DRIVERS = {  # key name -> (VkDriverId, shared memory per workgroup the driver reports)
    "amd-proprietary": (1, 32768),
    "radv": (3, 65536),
}


def radv_icd() -> str | None:
    for pattern in ("/usr/share/vulkan/icd.d/radeon_icd*.json", "/etc/vulkan/icd.d/radeon_icd*.json"):
        found = glob.glob(pattern)
        if found:
            return found[0]
    return None


def on_null_navi10(device) -> bool:
    return device.facts.name.startswith("Null hardware") and "NAVI10" in device.facts.name.upper()


def null_navi10_env(icd: str, **extra) -> dict:
    """The environment that shows a process only Mesa's null Navi 10 device (validation off:
    a null device runs nothing to validate)."""
    env = dict(os.environ, RADV_FORCE_FAMILY="navi10", VK_ICD_FILENAMES=icd, VK_DRIVER_FILES=icd, TVK_DEVICE="0",
               **extra)
    env.pop("TVK_VALIDATION", None)
    return env


def reexec_on_null_navi10(argv, module: str = "tvk_kernels.tune.cli", what: str = "tvk-tune --target rdna1",
                          script: str | None = None) -> int:
    """Run this command (python -m `module` argv, or python `script` argv) again with only the null Navi 10
    device visible; once: a run that still does not see it (an older RADV) stops with a message."""
    if env_flag("TVK_ON_NULL_NAVI10"):
        print(f"{what}: Mesa's RADV driver shows no null Navi 10 device (RADV_FORCE_FAMILY=navi10); "
              "it needs Mesa 22 or later", file=sys.stderr)
        return 1
    icd = radv_icd()
    if icd is None:
        print(f"{what} needs Mesa's RADV driver (Debian: apt-get install mesa-vulkan-drivers)", file=sys.stderr)
        return 1
    command = [script] if script else ["-m", module]
    return subprocess.call([sys.executable, *command, *argv], env=null_navi10_env(icd, TVK_ON_NULL_NAVI10="1"))


def rank(device, target, shapes, trials: int, shared_limit: int, seed: int = 0, machine=RX_5600_XT,
         wave: int = RADV_COMPUTE_WAVE):
    """Compile up to `trials` candidates (the default first), keep those that fit, rank by the model
    of `machine` (`wave`: the subgroup size of a pipeline that requires none)."""
    facts = dataclasses.replace(device.facts, max_shared_memory=shared_limit)
    bucket = bucket_of(target.family, shapes[0])
    default = default_params(target.family, facts, bucket)
    wave_name = wave_param(target.family)
    pool = candidates(target.family, facts)
    if wave_name:  # sample the other parameters; each sample is then ranked at every wave size (below)
        pool = [c for c in pool if c[wave_name] == 0]
    random.Random(seed).shuffle(pool)
    chosen = [default] + [c for c in pool if c != default][: max(trials - 1, 0)]
    if wave_name:
        chosen = [default] + [v for c in chosen for v in wave_variants(target.family, c, facts)]
    scored, rejected = [], []
    for params in chosen:
        defines, local_size, subgroup = target.static_defines(params)
        try:
            # the push-constant range does not change code generation; 128 B covers every kernel
            pipe = device.pipelines.get(target.template, defines, local_size=local_size, push_size=128,
                                        subgroup_size=subgroup, capture_stats=True)
        except (InvalidConfigError, ShaderCompileError) as e:
            rejected.append((params, str(e).splitlines()[0]))
            continue
        stats = pipe.stats or {}
        spills = stats.get("Spilled VGPRs", 0) + stats.get("Spilled SGPRs", 0) + stats.get("Scratch size", 0)
        if spills:
            rejected.append((params, f"spills ({stats.get('Spilled VGPRs')} VGPR, {stats.get('Spilled SGPRs')} SGPR)"))
            continue
        if stats.get("LDS size", 0) > shared_limit:
            rejected.append((params, f"LDS {stats['LDS size']} B > {shared_limit} B"))
            continue
        preds = [predict_seconds(target.work(s, params), stats, machine, subgroup or wave) for s in shapes]
        score = math.exp(sum(math.log(p["seconds"]) for p in preds) / len(preds))
        scored.append((score, params, stats, preds))
    scored.sort(key=lambda x: x[0])
    if wave_name:  # the winner names its wave size: the default (the driver's choice) only sets the baseline
        scored = [s for s in scored if s[1][wave_name]] + [s for s in scored if not s[1][wave_name]]
    return scored, rejected, default


def wave_param(family: str) -> str | None:
    """The family's required-subgroup-size parameter (kind "subgroup_size"), if it has one."""
    return next(iter(subgroup_size_params(family)), None)


def wave_variants(family: str, params: dict, facts) -> list[dict]:
    """params at each explicit subgroup size the device can give (Navi 10: 32 and 64) that the family's
    constraints admit."""
    space, name = search_space(family), wave_param(family)
    sizes = [v for v in space["params"][name]["values"] if v]
    return [p for p in (dict(params, **{name: v}) for v in sizes) if not violations(space, p, facts)]


def best_by_wave(family: str, scored) -> dict:
    """The best predicted geometric-mean seconds at each wave size ranked ("32", "64")."""
    name = wave_param(family)
    best: dict = {}
    for score, params, _, _ in scored:
        if name and params[name]:
            best.setdefault(str(params[name]), score)
    return best


def static_tune(device, families, suite, trials, out_dir):
    targets = load_targets()
    paths = []
    for driver_name, (driver_id, shared_limit) in DRIVERS.items():
        results = {}
        for family in families:
            target = targets[family]
            if not hasattr(target, "work") or unavailable(target, device):
                continue
            by_bucket: dict = {}
            for s in target.suites[suite]:
                by_bucket.setdefault(bucket_of(family, s), []).append(s)
            for bucket, shapes in by_bucket.items():
                scored, rejected, default = rank(device, target, shapes, trials, shared_limit)
                if not scored:
                    continue
                score, params, stats, preds = scored[0]
                default_score = next((s for s, p, _, _ in scored if p == default), None)
                keep = ("VGPRs", "SGPRs", "LDS size", "Subgroups per SIMD", "Spilled VGPRs", "Spilled SGPRs", "Instructions")
                results.setdefault(family, (target.template, {}))[1][bucket] = {
                    "params": params,
                    "provenance": {
                        "method": "static: ACO (RADV null Navi 10) statistics + RX 5600 XT cost model",
                        "predicted_seconds": [p["seconds"] for p in preds], "bound": [p["bound"] for p in preds],
                        "occupancy_waves_per_simd": preds[0]["occupancy_waves_per_simd"],
                        "compiler_stats": {k: stats.get(k) for k in keep},
                        "default_predicted_seconds": default_score,
                        "predicted_speedup": (default_score / score) if default_score else None,
                        "best_predicted_seconds_by_wave": best_by_wave(family, scored),
                        "candidates_compiled": len(scored) + len(rejected), "rejected": len(rejected),
                        "rejected_examples": [r for _, r in rejected[:5]], "shapes": shapes,
                        "shared_memory_limit": shared_limit,
                        "replace_with_measured": "tvk-tune --device 0 --out <TVK_CONFIG_DIR> (on the card)",
                    },
                }
        overrides = {"driver_id": driver_id, "driver": driver_name, "max_shared_memory": shared_limit,
                     "name": "AMD Radeon RX 5600 XT (Navi 10)", "device_id": None, "driver_version": None, "driver_info": None}
        paths.append(write_config(Path(out_dir), device.facts, "static-model", results, match="arch",
                                  name=f"rdna1--{driver_name}", device_overrides=overrides))
    return paths
