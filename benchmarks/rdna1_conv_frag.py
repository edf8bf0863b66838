"""conv2d's FRAG 1 (runs of 4 rows and columns, read at 16-byte-aligned offsets) beside FRAG 0 on RDNA1:
ACO's statistics on Mesa's null Navi 10 (no card needed).

Every conv2d config of a tuned config file (default: tuned_configs/rdna1--amd-proprietary.json)
whose TM and TN are multiples of 4 is compiled in its bucket's direction, and every such seed of
tuning/conv2d.json in all three: as given (FRAG 0), then at FRAG 1 with PAD 0 and 4 (FRAG 1 needs
a multiple of 4). A row fits RDNA1 with no spills and at most 32 KiB of LDS (AMD's Windows driver).

Run:   python benchmarks/rdna1_conv_frag.py [config.json]   (needs Mesa's RADV)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN = {"VGPRs": "VGPR", "SGPRs": "SGPR", "Spilled VGPRs": "spV", "Spilled SGPRs": "spS", "LDS size": "LDS",
         "Instructions": "instr", "Subgroups per SIMD": "occ"}  # ACO's statistic: column
LDS_LIMIT = 32768


def configs(path: Path):
    """[(label, direction, params)]: the file's eligible conv2d configs, then the eligible seeds."""
    from tvk_kernels.kernels import conv
    from tvk_kernels.search_space import search_space

    rows = []
    for bucket, entry in json.loads(path.read_text())["families"]["conv2d"]["buckets"].items():
        rows.append((bucket, next(d for d in conv.DIRS if bucket.startswith(d)), entry["params"]))
    rows += [(f"seed {i}", d, s) for i, s in enumerate(search_space("conv2d")["seeds"]) for d in conv.DIRS]
    return [r for r in rows if r[2]["TM"] % 4 == 0 and r[2]["TN"] % 4 == 0]


def main(path: Path) -> int:
    from tvk_kernels.kernels import conv
    from tvk_kernels.runtime import get_device
    from tvk_kernels.search_space import search_space, with_derived
    from tvk_kernels.tune import rdna1

    device = get_device(0)
    if not rdna1.on_null_navi10(device):
        if os.environ.get("TVK_ON_NULL_NAVI10"):
            print(f"expected the null Navi 10 device, got {device.facts.name!r}", file=sys.stderr)
            return 1
        icd = rdna1.radv_icd()
        if icd is None:
            print("needs Mesa's RADV driver (apt-get install mesa-vulkan-drivers)", file=sys.stderr)
            return 1
        return subprocess.call([sys.executable, __file__, str(path)],
                               env=rdna1.null_navi10_env(icd, TVK_ON_NULL_NAVI10="1"))
    print(f"{'config':22s} {'dir':10s} {'tile BMxBNxBK TMxTN':20s} {'FRAG':>4s} {'PAD':>3s} "
          + " ".join(f"{c:>6s}" for c in SHOWN.values()) + "  fits")
    bad = 0
    for label, direction, params in configs(path):
        tile = f"{params['BM']}x{params['BN']}x{params['BK']} {params['TM']}x{params['TN']}"
        for frag, pad in ((0, params["PAD"]), (1, 0), (1, 4)):
            prm = with_derived(search_space("conv2d"), {**params, "PAD": pad, "FRAG": frag})
            defines = conv.gemm_defines(conv.DIRS[direction], prm, prm["WG"])
            stats = device.pipelines.get(conv.Conv2d.template, defines, local_size=(prm["WG"], 1, 1), push_size=128,
                                         capture_stats=True).stats
            spilled = stats["Spilled VGPRs"] + stats["Spilled SGPRs"] + stats.get("Scratch size", 0)
            fits = not spilled and stats["LDS size"] <= LDS_LIMIT
            bad += not fits
            print(f"{label:22s} {direction:10s} {tile:20s} {frag:4d} {pad:3d} "
                  + " ".join(f"{stats.get(n, ''):>6}" for n in SHOWN) + f"  {'yes' if fits else 'NO'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tuned_configs" / "rdna1--amd-proprietary.json"))
