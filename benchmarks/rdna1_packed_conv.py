"""fp16 convolution on RDNA1: the implicit GEMM with fp32 arithmetic beside its packed-fp16 variant
(conv2d.comp PACKED), as ACO compiles them for Navi 10 (Mesa's null device; no card needed).

Every conv2d config of a tuned RDNA1 file with an even TN (the packed variant multiplies columns in
pairs) is compiled in its bucket's direction, fp16 storage, at wave32 and wave64: fp32 arithmetic
(what runs where the packed route is off) and packed. Columns: ACO's statistics (registers, LDS,
subgroups per SIMD, instructions, and ACO's own "Inverse Throughput" estimate of the shader) and
whether the kernel fits RDNA1 (no spills, at most 32 KiB of LDS: AMD's Windows driver). These are
compiler statistics, not timings: no RDNA1 card has run either kernel. The last lines put ACO's
estimate beside a measurement: the same ratio for the shipped packed-fp16 matmul, which the H200
stand-in measured faster than the tiled kernel.

    python benchmarks/rdna1_packed_conv.py [config.json] [--out FILE.txt]   (needs Mesa's RADV)
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN = {"VGPRs": "VGPR", "LDS size": "LDS", "Subgroups per SIMD": "occ", "Instructions": "instr",
         "Inverse Throughput": "inv.thr"}
LDS_LIMIT = 32768


def rows(device, path: Path):
    from tvk_kernels.kernels import conv, conv_family
    from tvk_kernels.kernels.launch import family

    fam = family(device, conv.Conv2d)
    for bucket, entry in json.loads(path.read_text())["families"]["conv2d"]["buckets"].items():
        params = fam.resolve(bucket, entry["params"])
        if params["TN"] % 2:
            continue
        direction = next(d for d in ("bwd_input", "bwd_weight", "fwd") if bucket.startswith(d))
        for wave in (64, 32):
            stats = {}
            for packed in (False, True):
                defines = conv_family.gemm_defines(conv.DIRS[direction], params, params["WG"], dtype="float16", packed=packed)
                stats[packed] = device.pipelines.get(fam.template, defines, local_size=(params["WG"], 1, 1),
                                                     push_size=128, subgroup_size=wave, capture_stats=True).stats
            yield bucket, direction, params, wave, stats


def matmul_calibration(device, path: Path) -> list[float]:
    """ACO's inverse throughput of each shipped packed-fp16 matmul config over the tiled kernel's (fp16
    storage, fp32 arithmetic) at the same tile: the packed GEMM measured 1.25-1.33x faster than the tiled
    kernel on the H200 stand-in (tuning/matmul_packed_f16.json), so this says how far ACO's number is
    from a timing for these kernels."""
    from tvk_kernels.config import default_params
    from tvk_kernels.kernels import matmul_packed_f16, matmul_plan
    from tvk_kernels.search_space import search_space, with_derived

    ratios = []
    for entry in json.loads(path.read_text())["families"]["matmul_packed_f16"]["buckets"].values():
        packed = with_derived(search_space("matmul_packed_f16"), entry["params"])
        tiled = with_derived(search_space("matmul"), {**default_params("matmul", device.facts, "large"),
                                                      **{k: entry["params"][k] for k in ("BM", "BN", "BK", "TM", "TN")},
                                                      "VEC": entry["params"]["VEC"], "SUBGROUP": 0})
        got = []
        for template, defines, wg in (("matmul_packed_f16.comp", matmul_packed_f16.defines(packed), packed["WG"]),
                                      ("matmul.comp", matmul_plan.defines(tiled, dtype_id=1), tiled["WG"])):
            got.append(device.pipelines.get(template, defines, local_size=(wg, 1, 1), push_size=128, subgroup_size=64,
                                            capture_stats=True).stats["Inverse Throughput"])
        ratios.append(got[0] / got[1])
    return sorted(ratios)


def fits(stats: dict) -> bool:
    return not (stats["Spilled VGPRs"] or stats["Spilled SGPRs"] or stats.get("Scratch size", 0)) \
        and stats["LDS size"] <= LDS_LIMIT


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", type=Path, default=ROOT / "tuned_configs" / "rdna1--amd-proprietary.json")
    ap.add_argument("--out", type=Path, default=None, help="also write the table to this file")
    args = ap.parse_args(argv)
    from tvk_kernels.runtime import get_device
    from tvk_kernels.tune import rdna1

    device = get_device(0)
    if not rdna1.on_null_navi10(device):
        return rdna1.reexec_on_null_navi10(argv if argv is not None else sys.argv[1:], script=__file__,
                                           what="benchmarks/rdna1_packed_conv.py")
    commit = os.environ.get("TVK_COMMIT") or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                                            capture_output=True, text=True).stdout.strip()
    lines = [f"{device.facts.name} ({device.facts.driver_info}), {args.config.name}, commit {commit}, "
             f"{datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
             "fp16 storage; each pair of rows: fp32 arithmetic, then packed fp16 (conv2d.comp PACKED)",
             f"{'bucket':24s} {'dir':10s} {'tile BMxBNxBK TMxTN':20s} {'wave':>4s} {'arith':6s} "
             + " ".join(f"{c:>7s}" for c in SHOWN.values()) + "  fits"]
    bad, ratios = 0, []
    for bucket, direction, params, wave, stats in rows(device, args.config):
        tile = f"{params['BM']}x{params['BN']}x{params['BK']} {params['TM']}x{params['TN']}"
        for packed in (False, True):
            s = stats[packed]
            ok = fits(s)
            bad += not ok
            lines.append(f"{bucket:24s} {direction:10s} {tile:20s} {wave:4d} {'packed' if packed else 'fp32':6s} "
                         + " ".join(f"{s.get(n, ''):>7}" for n in SHOWN) + f"  {'yes' if ok else 'NO'}")
        if stats[False].get("Inverse Throughput") and stats[True].get("Inverse Throughput"):
            ratios.append(stats[True]["Inverse Throughput"] / stats[False]["Inverse Throughput"])
    if ratios:
        ratios.sort()
        lines.append(f"packed / fp32 inverse throughput (ACO's estimate) over {len(ratios)} kernels: median "
                     f"{ratios[len(ratios) // 2]:.3f}, range {ratios[0]:.3f}-{ratios[-1]:.3f}")
    calibration = matmul_calibration(device, args.config)
    lines.append(f"the same ratio for the shipped packed-fp16 matmul configs over the tiled kernel at their tiles "
                 f"(measured 1.25-1.33x faster on the H200 stand-in): median {calibration[len(calibration) // 2]:.3f}, "
                 f"range {calibration[0]:.3f}-{calibration[-1]:.3f} over {len(calibration)} configs")
    lines.append(f"kernels that do not fit RDNA1: {bad}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
