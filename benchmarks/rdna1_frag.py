"""FRAG 1 (runs of 4 rows and columns, read at 16-byte-aligned shared offsets) beside FRAG 0 on RDNA1,
for the tiled GEMM (matmul) and the implicit-GEMM conv (conv2d): ACO's statistics on Mesa's null Navi 10
(no card needed).

Every matmul and conv2d config of a tuned config file (default: tuned_configs/rdna1--amd-proprietary.json)
whose TM and TN are multiples of 4 is compiled (matmul: the fp32 GEMM; conv2d: in its bucket's direction),
and every such seed of the families' tuning files (conv2d: in all three directions): as given (FRAG 0),
then at FRAG 1 with PAD 0 and 4 (FRAG 1 needs a multiple of 4). A row fits RDNA1 with no spills and at
most 32 KiB of LDS (AMD's Windows driver).

Run:   python benchmarks/rdna1_frag.py [config.json]   (needs Mesa's RADV)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHOWN = {"VGPRs": "VGPR", "SGPRs": "SGPR", "Spilled VGPRs": "spV", "Spilled SGPRs": "spS", "LDS size": "LDS",
         "Instructions": "instr", "Subgroups per SIMD": "occ"}  # ACO's statistic: column
LDS_LIMIT = 32768


def configs(path: Path):
    """[(family, label, direction or "", params)]: the file's eligible configs, then the eligible seeds."""
    from tvk_kernels.kernels import conv, conv_family
    from tvk_kernels.search_space import search_space

    families = json.loads(path.read_text())["families"]
    rows = [("matmul", bucket, "", entry["params"]) for bucket, entry in families["matmul"]["buckets"].items()]
    rows += [("matmul", f"seed {i}", "", s) for i, s in enumerate(search_space("matmul").get("seeds", []))]
    for bucket, entry in families["conv2d"]["buckets"].items():
        rows.append(("conv2d", bucket, next(d for d in conv.DIRS if bucket.startswith(d)), entry["params"]))
    rows += [("conv2d", f"seed {i}", d, s) for i, s in enumerate(search_space("conv2d")["seeds"]) for d in conv.DIRS]
    return [r for r in rows if r[3]["TM"] % 4 == 0 and r[3]["TN"] % 4 == 0]


def kernel(family: str, direction: str, params: dict):
    """(template, defines, local size, required subgroup size) of a config's kernel."""
    from tvk_kernels.kernels import conv, conv_family, matmul_plan
    from tvk_kernels.search_space import search_space, with_derived

    prm = with_derived(search_space(family), params)
    if family == "matmul":
        return matmul_plan.Matmul.template, matmul_plan.defines(prm), (prm["WG"], 1, 1), prm.get("SUBGROUP") or None
    return conv.Conv2d.template, conv_family.gemm_defines(conv.DIRS[direction], prm, prm["WG"]), (prm["WG"], 1, 1), None


def main(path: Path) -> int:
    from tvk_kernels.config import default_params
    from tvk_kernels.runtime import get_device
    from tvk_kernels.tune import rdna1

    device = get_device(0)
    if not rdna1.on_null_navi10(device):
        return rdna1.reexec_on_null_navi10([str(path)], script=__file__, what="benchmarks/rdna1_frag.py")
    print(f"{'family':7s} {'config':16s} {'dir':10s} {'tile BMxBNxBK TMxTN':20s} {'FRAG':>4s} {'PAD':>3s} "
          + " ".join(f"{c:>6s}" for c in SHOWN.values()) + "  fits")
    bad = 0
    for family, label, direction, params in configs(path):
        tile = f"{params['BM']}x{params['BN']}x{params['BK']} {params['TM']}x{params['TN']}"
        base = {**default_params(family, device.facts), **params}
        for frag, pad in ((0, params["PAD"]), (1, 0), (1, 4)):
            template, defines, local_size, subgroup = kernel(family, direction, {**base, "PAD": pad, "FRAG": frag})
            stats = device.pipelines.get(template, defines, local_size=local_size, push_size=128,
                                         subgroup_size=subgroup, capture_stats=True).stats
            spilled = stats["Spilled VGPRs"] + stats["Spilled SGPRs"] + stats.get("Scratch size", 0)
            fits = not spilled and stats["LDS size"] <= LDS_LIMIT
            bad += not fits
            print(f"{family:7s} {label:16s} {direction:10s} {tile:20s} {frag:4d} {pad:3d} "
                  + " ".join(f"{stats.get(n, ''):>6}" for n in SHOWN) + f"  {'yes' if fits else 'NO'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tuned_configs" / "rdna1--amd-proprietary.json"))
