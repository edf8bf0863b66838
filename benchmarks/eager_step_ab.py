"""An eager training step's wall time, this checkout beside an earlier tree, in interleaved processes.

A model's eager step on the lent H200 moves by up to ~1.6x between processes of the same tree (its runs
in results/h200/eager_step_ab.md), more than most host-path changes move it: one models run per tree
cannot tell them apart. This runs each model ROUNDS times per tree, alternating the trees, each run in a
fresh process (zoo model at bench size, random init, its seeded batches; the median of the steps
after the first 4), and reports every run, each tree's median and min, and their ratio.

    python benchmarks/eager_step_ab.py --compare REV|DIR [--models hf_gpt2,hf_llama] [--rounds 4] [--out DIR]
"""
import argparse
import json
import statistics

from eager_host_time import ROOT, _run, trees

_STEP = r"""
import json, sys
import torch, torchvk
from torchvk.experiments import zoo
name, steps = sys.argv[1], int(sys.argv[2])
losses, seconds, _ = zoo.train_steps(name, "tvk", "eager", steps=steps, size="bench")
timed = sorted(seconds[4:])
print(json.dumps({"median_ms": timed[len(timed) // 2] * 1e3, "loss": losses[-1]}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", required=True, help="an earlier git revision, or a directory with an earlier tree")
    ap.add_argument("--models", default="hf_gpt2,hf_llama,timm_resnet18,tv_mobilenet_v3")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    models = args.models.split(",")
    with trees(args.compare) as roots:
        runs = {tree: {m: [] for m in models} for tree in roots}
        for _ in range(args.rounds):
            for tree, root in roots.items():
                for m in models:
                    runs[tree][m].append(json.loads(_run(_STEP, root, m, str(args.steps)).strip().splitlines()[-1]))
    summary = {tree: {m: {"median_ms": statistics.median(r["median_ms"] for r in rs),
                          "min_ms": min(r["median_ms"] for r in rs)} for m, rs in per.items()}
               for tree, per in runs.items()}
    print(json.dumps(summary, indent=1))
    if args.out:
        _write(args.out, runs, summary, models, args)


def _write(out_dir, runs, summary, models, args):
    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment, md_table, write_result

    this, other = list(summary)
    header = ["model"] + [f"{t} runs (ms)" for t in summary] + [f"{t} median / min ms" for t in summary] + \
        [f"median {this} / {other}"]
    rows = [[m] + [", ".join(f"{r['median_ms']:.1f}" for r in runs[t][m]) for t in summary]
            + [f"{summary[t][m]['median_ms']:.1f} / {summary[t][m]['min_ms']:.1f}" for t in summary]
            + [summary[this][m]["median_ms"] / summary[other][m]["median_ms"]] for m in models]
    payload = {"experiment": "eager_step_ab", "environment": environment(get_device(0)),
               "unit": "ms per eager step (wall, median of steps 5..N of a process)", "rounds": args.rounds,
               "steps": args.steps, "trees": list(summary), "runs": runs, "summary": summary}
    write_result(out_dir, "eager_step_ab", payload, md_table(header, rows))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    main()
