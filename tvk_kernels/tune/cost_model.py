"""The static cost model: a kernel's predicted seconds from the work it does (a target's
`work(shape, params)`), its compiler's statistics and the GPU's numbers (tuning/machines.json).

`tvk-tune --target rdna1` ranks candidates with it for a card we cannot run on (rdna1.py);
benchmarks/rank_check.py checks its order against measured times on a card we can.

Deliberately simple:
  - occupancy (subgroups resident per SIMD) = min(the compiler's "Subgroups per SIMD" (ACO), or
    registers_per_simd / (registers per invocation x wave) where a driver reports registers only,
    else max_waves; what the shared memory allows: floor(shared_per_cu / shared per workgroup)
    workgroups per CU; max_waves)
  - efficiency = (fraction of SIMDs with work) x min(1, resident subgroups per SIMD / 4): fewer
    than 4 leave latency exposed
  - time = max(FLOPs / peak, shared bytes / shared bandwidth, DRAM bytes / DRAM bandwidth)
           / efficiency x the wave-quantization tail (the last partial round) + launch_s
"""
from __future__ import annotations

import dataclasses
import json
import math
from functools import cache

from ..paths import data_dir

LATENCY_WAVES = 4  # resident subgroups per SIMD that hide memory latency


@dataclasses.dataclass(frozen=True)
class Machine:
    name: str
    simds: int
    lanes: int
    per_cu: int
    clock_hz: float
    dram_bytes_per_s: float
    shared_bytes_per_clock_per_cu: float
    shared_per_cu: int
    max_waves: int
    registers_per_simd: int
    launch_s: float
    peak_flops_measured: float | None = None  # from the device's own roofline, where measured

    @property
    def peak_flops(self) -> float:
        """fp32 FLOP/s (an FMA is 2): measured where known, else lanes x 2 x clock."""
        return self.peak_flops_measured or self.simds * self.lanes * 2 * self.clock_hz

    @property
    def shared_bytes_per_s(self) -> float:
        return self.simds // self.per_cu * self.shared_bytes_per_clock_per_cu * self.clock_hz

    def measured(self, peak_flops: float | None, dram_bytes_per_s: float | None) -> Machine:
        """This machine with the roofline the device itself reached (None keeps the data sheet's)."""
        return dataclasses.replace(self, peak_flops_measured=peak_flops or self.peak_flops_measured,
                                   dram_bytes_per_s=dram_bytes_per_s or self.dram_bytes_per_s)


@cache
def _table() -> dict:
    with open(data_dir("tuning") / "machines.json") as f:
        return json.load(f)["machines"]


def machine(name: str) -> Machine:
    entry = _table()[name]
    return Machine(name=name, **{f.name: entry[f.name] for f in dataclasses.fields(Machine)
                                 if f.name in entry})


def machine_for(device_name: str) -> Machine | None:
    """The machine whose `match` names a part of `device_name` (None: the model knows no such GPU)."""
    for name, entry in _table().items():
        if any(part in device_name for part in entry["match"]):
            return machine(name)
    return None


def occupancy_limit(stats: dict, machine: Machine, wave: int) -> int:
    """Subgroups per SIMD the compiled code allows, before shared memory is counted."""
    if "Subgroups per SIMD" in stats:  # ACO says it outright
        return stats["Subgroups per SIMD"] or 1
    registers = next((v for k, v in stats.items() if "register" in k.lower() and isinstance(v, int) and v > 0), None)
    if registers and machine.registers_per_simd:
        return max(machine.registers_per_simd // (registers * wave), 1)
    return machine.max_waves


def launches(work: dict | list) -> list[dict]:
    """A target's `work`: one launch's counts, or a list of launches (an op of several kernels)."""
    return work if isinstance(work, list) else [work]


def totals(work: dict | list) -> tuple:
    """(FLOPs, DRAM bytes) of a target's `work`, its launches summed (None where no launch counts one)."""
    each = launches(work)
    flops = [w["flops"] for w in each if w.get("flops") is not None]
    moved = [w["dram_bytes"] for w in each if w.get("dram_bytes") is not None]
    return (sum(flops) if flops else None), (sum(moved) if moved else None)


def predict_seconds(work: dict | list, stats: dict, machine: Machine, wave: int) -> dict:
    """{"seconds", "occupancy_waves_per_simd", "bound"} of `work` (a target's counts per launch: flops,
    dram_bytes, lds_bytes, groups, invocations per group, lds_per_group): its launches one after another,
    each predicted with the compiled kernel's statistics, their seconds summed, the first one's occupancy
    and the longest one's bound."""
    each = [_launch_seconds(w, stats, machine, wave) for w in launches(work)]
    return {"seconds": sum(p["seconds"] for p in each), "occupancy_waves_per_simd": each[0]["occupancy_waves_per_simd"],
            "bound": max(each, key=lambda p: p["seconds"])["bound"]}


def _launch_seconds(work: dict, stats: dict, machine: Machine, wave: int) -> dict:
    waves_per_group = -(-work["invocations"] // wave)
    occ = occupancy_limit(stats, machine, wave)
    lds = stats.get("LDS size", work.get("lds_per_group", 0)) or 0
    if lds:
        groups_per_cu = max(machine.shared_per_cu // lds, 0)
        occ = min(occ, max(groups_per_cu * waves_per_group // machine.per_cu, 0))
    occ = max(min(occ, machine.max_waves), 1)
    total_waves = work["groups"] * waves_per_group
    spread = min(1.0, total_waves / machine.simds)  # fraction of SIMDs with work at all
    resident = max(1.0, min(occ, total_waves / machine.simds))  # subgroups per busy SIMD
    eff = spread * min(1.0, resident / LATENCY_WAVES)
    slots = machine.simds * occ
    tail = math.ceil(total_waves / slots) * slots / total_waves if total_waves > slots else 1.0
    t_alu = work["flops"] / machine.peak_flops
    t_lds = work["lds_bytes"] / machine.shared_bytes_per_s
    t_mem = work["dram_bytes"] / machine.dram_bytes_per_s
    bound, t = max(("alu", t_alu), ("lds", t_lds), ("dram", t_mem), key=lambda x: x[1])
    return {"seconds": t / eff * tail + machine.launch_s, "occupancy_waves_per_simd": occ, "bound": bound}
