"""Is any kernel slower? Two runs of `tvk-bench kernels` (kernels.json), row by row.

    python benchmarks/compare_kernels.py BEFORE.json AFTER.json [--slower 1.10] [--out FILE.json]

Rows are matched by their section and label (conv2d layer and direction, bandwidth op, each GEMM
and conv of the sweeps, SDPA shape). For each: tvk's time after / before, and the same ratio
divided by the CUDA peer's after / before, which takes out a GPU clocked differently between the
two runs (both sides were timed in each run, and the peer the same way: `cuda_timing`). A row is slower when both ratios pass `--slower`.
Prints a markdown table of the slower rows and the geometric means; `--out` writes them as JSON
with both runs' environments.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

# section -> (the row's identifying fields, tvk's seconds, the CUDA peer's seconds)
SECTIONS = {
    "conv2d": (("layer", "direction"), "tvk_s", "cudnn_s"),
    "bandwidth": (("op", "n"), "tvk_s", "cuda_s"),
    "gemm_sweep": (("label", "dtype"), "tvk_s", "cuda_s"),
    "conv_sweep": (("label", "direction"), "tvk_s", "cudnn_s"),
    "sdpa": (("dtype", "batch", "heads", "seq", "head"), "tvk_fwd_bwd_s", "cuda_fwd_bwd_s"),
}


def rows_of(result: dict, section: str) -> list:
    value = result.get(section) or []
    return value["rows"] if isinstance(value, dict) else value


def matched(before: dict, after: dict) -> list:
    """[(section, label, tvk after/before, cuda after/before)] for the rows both runs timed."""
    out = []
    for section, (fields, tvk, cuda) in SECTIONS.items():
        earlier = {tuple(row.get(f) for f in fields): row for row in rows_of(before, section)}
        for row in rows_of(after, section):
            old = earlier.get(tuple(row.get(f) for f in fields))
            if not old or not old.get(tvk) or not row.get(tvk):
                continue
            same_timer = row.get("cuda_timing") == old.get("cuda_timing")  # a graph replay against launches says nothing
            peer = row[cuda] / old[cuda] if same_timer and old.get(cuda) and row.get(cuda) else None
            label = " ".join(str(row.get(f)) for f in fields)
            out.append((section, label, row[tvk] / old[tvk], peer))
    return out


def geomean(values) -> float:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--slower", type=float, default=1.10, help="the ratio past which a row is slower")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    before, after = (json.loads(p.read_text()) for p in (args.before, args.after))
    rows = matched(before, after)
    if not rows:
        print("no row of the two runs matches", file=sys.stderr)
        return 1
    slower = [r for r in rows if r[2] > args.slower and (r[3] is None or r[2] / r[3] > args.slower)]
    sections = sorted({r[0] for r in rows})
    summary = {s: {"rows": sum(r[0] == s for r in rows),
                   "geomean_tvk_after_over_before": geomean(r[2] for r in rows if r[0] == s),
                   "geomean_clock_corrected": geomean(r[2] / r[3] for r in rows if r[0] == s and r[3])}
               for s in sections}
    commits = [run.get("environment", {}).get("commit", "?")[:12] for run in (before, after)]
    print(f"# kernels: {commits[1]} against {commits[0]}\n")
    print("| section | rows | tvk after/before (geomean) | clock-corrected |\n|---|---|---|---|")
    for s, v in summary.items():
        print(f"| {s} | {v['rows']} | {v['geomean_tvk_after_over_before']:.3f} | {v['geomean_clock_corrected']:.3f} |")
    print(f"\n{len(slower)} of {len(rows)} rows slower than {args.slower}x on both measures")
    if slower:
        print("\n| section | row | tvk after/before | CUDA after/before |\n|---|---|---|---|")
        for section, label, ratio, peer in sorted(slower, key=lambda r: -r[2]):
            print(f"| {section} | {label} | {ratio:.3f} | {'-' if peer is None else f'{peer:.3f}'} |")
    if args.out:
        args.out.write_text(json.dumps({
            "before": before.get("environment"), "after": after.get("environment"), "slower_than": args.slower,
            "summary": summary, "slower": [dict(zip(("section", "row", "tvk_ratio", "cuda_ratio"), r)) for r in slower],
            "rows": [dict(zip(("section", "row", "tvk_ratio", "cuda_ratio"), r)) for r in rows]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
