"""Does glslc's -O change the RDNA1 machine code? (ACO on Mesa's null Navi 10 device)

TorchVK can compile its GLSL templates without glslc's `-O` (TVK_SPIRV_OPT=0), which makes
cold-start compiles 2-4x faster. Drivers optimize SPIR-V themselves, so the GPU code should
barely change. This measures it for RDNA1: for every tunable kernel family, the default
parameters (one per shape bucket) plus 3 other candidates (seed 0) are compiled by ACO, the
real RDNA1 compiler, through RADV with RADV_FORCE_FAMILY=navi10 (no card needed), and the
compiler's statistics (VK_KHR_pipeline_executable_properties: VGPRs, SGPRs, spills, LDS,
code size, instructions, subgroups per SIMD, ...) are compared between -O and no -O.

Each setting runs in its own subprocess with an empty TVK_CACHE_DIR (and Mesa's shader cache
off), since TorchVK's pipeline memo does not key on the optimization setting.

Run:   python benchmarks/spirv_opt_rdna1.py     (needs Mesa's RADV: apt-get install mesa-vulkan-drivers)
Writes benchmarks/results/rdna1-null/spirv_opt.json and prints a table.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "rdna1-null" / "spirv_opt.json"
EXTRA_CANDIDATES, SEED = 3, 0
CHILD = "_TVK_SPIRV_OPT_RDNA1_CHILD"
# table columns (ACO's statistic names); every statistic is compared, these are shown
SHOWN = {"VGPRs": "VGPR", "SGPRs": "SGPR", "Spilled VGPRs": "spV", "Spilled SGPRs": "spS", "LDS size": "LDS",
         "Code size": "code", "Instructions": "instr", "Inverse Throughput": "invTput", "Subgroups per SIMD": "occ"}
HASHES = {"Hash", "Driver pipeline hash"}  # identify the binary / its inputs: not compared as statistics
RANGED = ("Code size", "Instructions", "VGPRs", "SGPRs", "Latency", "Inverse Throughput", "Subgroups per SIMD")


def variants(target, facts):
    """[(params, source)]: the default per shape bucket, then EXTRA_CANDIDATES others (deterministic)."""
    from tvk_kernels.config import default_params
    from tvk_kernels.search_space import bucket_of, candidates

    chosen = []
    for shape in target.suites["suite"]:
        bucket = bucket_of(target.family, shape)
        params = default_params(target.family, facts, bucket)
        if all(params != p for p, _ in chosen):
            chosen.append((params, f"default[{bucket}]"))
    pool = candidates(target.family, facts)
    random.Random(SEED).shuffle(pool)
    extra = [p for p in pool if all(p != q for q, _ in chosen)][:EXTRA_CANDIDATES]
    return chosen + [(p, "candidate") for p in extra]


def child() -> int:
    """Compile every variant under the current TVK_SPIRV_OPT; print {"environment", "results"} as JSON."""
    from tvk_kernels.bench.common import environment
    from tvk_kernels.errors import InvalidConfigError, ShaderCompileError
    from tvk_kernels.runtime import get_device
    from tvk_kernels.runtime.compiler import compile_template, spirv_optimized
    from tvk_kernels.tune.rdna1 import on_null_navi10
    from tvk_kernels.tune.targets import load_targets

    device = get_device(0)
    if not on_null_navi10(device):
        print(f"expected the null Navi 10 device, got {device.facts.name!r}", file=sys.stderr)
        return 1
    results, keys_shown = [], False
    for family, target in sorted(load_targets().items()):
        if not hasattr(target, "static_defines"):
            continue
        for params, source in variants(target, device.facts):
            defines, local_size, subgroup = target.static_defines(params)
            row = {"family": family, "template": target.template, "params": params, "source": source}
            try:
                spirv = compile_template(target.template, defines)
                pipe = device.pipelines.get(target.template, defines, local_size=local_size, push_size=128,
                                            subgroup_size=subgroup, capture_stats=True)
                row.update(spirv_bytes=len(spirv), spirv_sha=hashlib.sha256(spirv).hexdigest()[:16], stats=pipe.stats or {})
                if not keys_shown and pipe.stats:
                    print(f"[opt={int(spirv_optimized())}] ACO statistics: {sorted(pipe.stats)}", file=sys.stderr)
                    keys_shown = True
            except (InvalidConfigError, ShaderCompileError) as e:
                row["error"] = str(e).splitlines()[0]
            results.append(row)
    json.dump({"environment": environment(device), "spirv_opt": spirv_optimized(), "results": results}, sys.stdout)
    return 0


def run_setting(icd: str, opt: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="tvk-spirv-opt-") as cache:
        from tvk_kernels.tune.rdna1 import null_navi10_env

        env = null_navi10_env(icd, TVK_SPIRV_OPT=str(opt), TVK_CACHE_DIR=cache, MESA_SHADER_CACHE_DISABLE="1",
                              **{CHILD: "1"})
        proc = subprocess.run([sys.executable, __file__], env=env, stdout=subprocess.PIPE, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"the TVK_SPIRV_OPT={opt} run failed (exit {proc.returncode})")
    return json.loads(proc.stdout)


def rel(a, b) -> float:
    """(no-O - O) / O; 0 when both are 0."""
    return (b - a) / a if a else (0.0 if b == a else float("inf"))


def compare(with_o: list, without_o: list) -> tuple[list, dict]:
    rows, key = [], lambda r: (r["family"], json.dumps(r["params"], sort_keys=True))
    other = {key(r): r for r in without_o}
    spills = lambda s: s.get("Spilled VGPRs", 0) + s.get("Spilled SGPRs", 0) + s.get("Scratch size", 0)
    for a in with_o:
        b = other.get(key(a))
        if b is None or "error" in a or "error" in b:
            rows.append({**{k: a[k] for k in ("family", "params", "source")}, "error": a.get("error") or (b or {}).get("error", "missing")})
            continue
        sa, sb = a["stats"], b["stats"]
        diff = {k: [sa.get(k), sb.get(k)] for k in sorted(set(sa) | set(sb)) if k not in HASHES and sa.get(k) != sb.get(k)}
        rows.append({"family": a["family"], "params": a["params"], "source": a["source"],
                     "spirv_bytes": [a["spirv_bytes"], b["spirv_bytes"]], "spirv_identical": a["spirv_sha"] == b["spirv_sha"],
                     "stats_O": sa, "stats_noO": sb, "differences": diff, "identical": not diff,
                     "identical_code_hash": sa.get("Hash") is not None and sa.get("Hash") == sb.get("Hash"),
                     "noO_worse_occupancy": sb.get("Subgroups per SIMD", 0) < sa.get("Subgroups per SIMD", 0),
                     "noO_more_spills": spills(sb) > spills(sa)})
    ok = [r for r in rows if "error" not in r]

    def spread(k, rs=ok):  # [min, max] of (no-O - O) / O over the variants
        d = [rel(r["stats_O"].get(k, 0), r["stats_noO"].get(k, 0)) for r in rs if k in r["stats_O"]]
        return [round(min(d), 4), round(max(d), 4)] if d else None

    summary = {
        "variants": len(rows), "compiled": len(ok), "errors": len(rows) - len(ok),
        "identical_stats": sum(r["identical"] for r in ok),
        "identical_machine_code_hash": sum(r["identical_code_hash"] for r in ok),
        "identical_spirv": sum(r["spirv_identical"] for r in ok),
        "stats_compared": sorted(set(ok[0]["stats_O"]) - HASHES) if ok else [],
        "rel_diff_noO_vs_O": {k: spread(k) for k in RANGED},  # [min, max]; negative: smaller without -O
        "rel_diff_noO_vs_O_by_family": {f: {k: spread(k, [r for r in ok if r["family"] == f]) for k in ("Code size", "VGPRs", "Inverse Throughput")}
                                        for f in sorted({r["family"] for r in ok})},
        "differing_stat_counts": {k: sum(k in r["differences"] for r in ok) for k in sorted({k for r in ok for k in r["differences"]})},
        "noO_worse_occupancy": [f"{r['family']} {r['params']}" for r in ok if r["noO_worse_occupancy"]],
        "noO_better_occupancy": [f"{r['family']} {r['params']}" for r in ok
                                 if r["stats_noO"].get("Subgroups per SIMD", 0) > r["stats_O"].get("Subgroups per SIMD", 0)],
        "noO_more_spills": [f"{r['family']} {r['params']}" for r in ok if r["noO_more_spills"]],
        "spills_any": sum(spills(r["stats_O"]) + spills(r["stats_noO"]) > 0 for r in ok),
        "spirv_bytes_total": [sum(r["spirv_bytes"][0] for r in ok), sum(r["spirv_bytes"][1] for r in ok)],
    }
    return rows, summary


def table(rows) -> str:
    cols = [k for k in SHOWN if any(k in r.get("stats_O", {}) for r in rows)]
    lines = [f"{'family':<11} {'source':<28} {'SPIR-V B (O/noO)':>17}  " + "  ".join(f"{SHOWN[k]:>11}" for k in cols)]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['family']:<11} {r['source']:<28} error: {r['error'][:80]}")
            continue
        cells = []
        for k in cols:
            a, b = r["stats_O"].get(k), r["stats_noO"].get(k)
            cells.append(f"{a!s:>11}" if a == b else f"{f'{a}/{b}':>11}")
        sp = "{}/{}".format(*r["spirv_bytes"])
        lines.append(f"{r['family']:<11} {r['source']:<28} {sp:>17}  " + "  ".join(cells))
    return "\n".join(lines) + "\n(a single number: same with and without -O; a/b: with -O / without)"


def main() -> int:
    sys.path.insert(0, str(ROOT))
    if os.environ.get(CHILD):
        return child()
    from tvk_kernels.tune.rdna1 import radv_icd

    icd = radv_icd()
    if icd is None:
        print("spirv_opt_rdna1: Mesa's RADV driver was not found (no radeon_icd*.json under /usr/share/vulkan/icd.d "
              "or /etc/vulkan/icd.d), so there is no null Navi 10 device to compile for. "
              "Install it (Debian/Ubuntu: apt-get install mesa-vulkan-drivers) and run again.", file=sys.stderr)
        return 2
    with_o, without_o = run_setting(icd, 1), run_setting(icd, 0)
    rows, summary = compare(with_o["results"], without_o["results"])
    env = dict(with_o["environment"], glslc=_glslc_version())
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"benchmark": "spirv_opt_rdna1", "environment": env, "summary": summary, "variants": rows},
                              indent=1, default=str) + "\n")
    print(table(rows))
    print(json.dumps(summary, indent=1, default=str))
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


def _glslc_version() -> str | None:
    try:
        from tvk_kernels.runtime.compiler import find_glslc

        out = subprocess.run([find_glslc(), "--version"], capture_output=True, text=True, timeout=10).stdout
        return " / ".join(out.splitlines()[:2]) or None
    except Exception:
        return None


if __name__ == "__main__":
    sys.exit(main())
