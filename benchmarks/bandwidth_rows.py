"""The memory-bound rows of `tvk-bench kernels` alone (its bandwidth section), beside torch CUDA, one run.

A short device call's way to time what `tvk-bench kernels` times in its bandwidth section (reductions,
softmax, layer norm forward and backward at real models' shapes, elementwise ops, embedding backwards),
each case after its spin-up, both sides GPU-only (tvk_kernels/bench/cuda_timer.py), with the copy peak
(roofline.py) for each row's fraction of it. The full experiment also runs convolutions, GEMM and conv
sweeps and attention (minutes); this is the section only.

    python benchmarks/bandwidth_rows.py [--quick] [--out DIR]
"""
import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, few repeats (a check of the script)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import torch
    from tvk_kernels import get_device
    from tvk_kernels.bench import roofline
    from tvk_kernels.bench.common import environment, md_table, write_result
    from torchvk.experiments import kernels

    device = get_device(0)
    has_cuda = torch.cuda.is_available()
    bandwidth, _ = roofline.copy_bandwidth(device, quick=args.quick)
    rows = kernels.bandwidth(device, *((64, 256) if args.quick else (4096, 4096)), has_cuda, args.quick)
    peak_gbps = bandwidth / 1e9
    for row in rows:
        row["tvk_of_peak"] = roofline.fraction(row["tvk_gbps"], peak_gbps)
        row["cuda_of_peak"] = roofline.fraction(row["cuda_gbps"], peak_gbps)
    table = md_table(["op", "floats", "tvk us", "tvk GB/s", "tvk of peak", "CUDA GB/s", "CUDA of peak",
                      "tvk/CUDA bandwidth"],
                     [[r["op"], r["n"], r["tvk_s"] * 1e6, r["tvk_gbps"], r["tvk_of_peak"], r["cuda_gbps"],
                       r["cuda_of_peak"], r["tvk_over_cuda_bandwidth"]] for r in rows])
    table += f"\n\nCopy peak measured in the same run: {peak_gbps:.0f} GB/s (512 MiB, read + write).\n"
    print(table)
    if args.out:
        write_result(args.out, "bandwidth_rows", {"experiment": "bandwidth_rows", "environment": environment(device),
                                                  "copy_peak_gbps": peak_gbps, "rows": rows}, table)


if __name__ == "__main__":
    os.environ.setdefault("TVK_VALIDATION", "0")
    main()
