"""AMP and float32 training steps of real models, GPU time and wall time, this checkout beside an earlier tree.

The issue's yardstick for mixed precision is our own float32 step (AMP at most 0.6x its time); a change to the
AMP path (16-bit storage in a kernel family, fewer cast copies) shows as the AMP step's GPU time and its count of
`copy` kernels beside the earlier tree's. Each (tree, model) runs in a fresh process: the zoo model at bench size
(random init, its seeded batches), float32 eager then AMP (autocast float16 + GradScaler, torch.amp's recipe);
per mode 0.3 s of steps to spin the GPU up, the median wall time of STEPS steps (each ending in loss.item()),
then a profiled step: its GPU kernel time from Vulkan timestamps, its kernel count and its copy kernels. A
host-bound eager step leaves the GPU idle enough for its clock to fall (design note 11: the same kernel was seen
4x slower in one process than in the next), so each profiled step follows 0.3 s of GPU-bound load (fp32
matmuls), three times, and the one of least GPU time is kept.
The trees alternate, ROUNDS runs each.

    python benchmarks/amp_step_ab.py --compare REV|DIR [--models timm_resnet18,hf_gpt2] [--rounds 2] [--size tiny]
                                     [--out DIR]
"""
import argparse
import json
import statistics

from eager_host_time import ROOT, _run, trees

MODES = ("eager", "amp")
_STEPS = r"""
import collections, json, sys, time
import torch, torchvk, torchvk.profiler
from torchvk.experiments import zoo, zoo_models
from torchvk.experiments.ablations import _spin_up
from tvk_kernels import get_device
device = get_device(0)
name, steps, size = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {}
for mode in ("eager", "amp"):
    model, step = zoo.trainer(name, "tvk", mode, size)
    batches = [(x.to("tvk"), y.to("tvk")) for x, y in zoo_models.batches(name, 3, size)]
    t_end, i = time.perf_counter() + 0.3, 0
    while i < 3 or time.perf_counter() < t_end:  # spin-up: pipelines built, the GPU clock up
        step(*batches[i % 3]).item()
        i += 1
    walls = []
    for j in range(steps):
        torch.tvk.synchronize()
        t0 = time.perf_counter()
        loss = step(*batches[j % 3]).item()
        walls.append(time.perf_counter() - t0)
    best = None
    for _ in range(3):  # a host-bound step lets the clock fall: each profile right after GPU-bound load, the least kept
        _spin_up(device, 0.3, 2048 if size == "bench" else 64)  # tiny: a CPU check, no clock to raise
        with torchvk.profiler.profile() as prof:
            step(*batches[0]).item()
            torch.tvk.synchronize()
        total = sum(k.duration_us for k in prof.kernels)
        best = (total, prof.kernels) if best is None or total < best[0] else best
    names = collections.Counter(k.name for k in best[1])
    per = collections.Counter()
    for k in best[1]:
        per[k.name] += k.duration_us / 1e3
    walls.sort()
    out[mode] = {"wall_ms": walls[len(walls) // 2] * 1e3, "gpu_ms": sum(per.values()), "kernels": len(prof.kernels),
                 "copies": names["copy"], "copy_ms": per["copy"], "loss": loss,
                 "top": [[n, round(ms, 3), names[n]] for n, ms in per.most_common(6)]}
print(json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", required=True, help="an earlier git revision, or a directory with an earlier tree")
    ap.add_argument("--models", default="timm_resnet18,tv_mobilenet_v3,timm_efficientnet,timm_convnext,hf_gpt2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--size", default="bench", choices=("bench", "tiny"), help="the zoo's model dims (tiny: a check)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    models = args.models.split(",")
    with trees(args.compare) as roots:
        runs = {tree: {} for tree in roots}
        for m in models:  # model by model, written as each finishes: a run cut short keeps what it measured
            for _ in range(args.rounds):
                for tree, root in roots.items():
                    out = _run(_STEPS, root, m, str(args.steps), args.size)
                    runs[tree].setdefault(m, []).append(json.loads(out.strip().splitlines()[-1]))
            summary = {tree: {m: {mode: {key: statistics.median(r[mode][key] for r in rs)
                                         for key in ("wall_ms", "gpu_ms", "kernels", "copies", "copy_ms")}
                                  for mode in MODES} for m, rs in per.items()} for tree, per in runs.items()}
            if args.out:
                _write(args.out, runs, summary, list(runs["tvk"]), args)
    print(json.dumps(summary, indent=1))


def _write(out_dir, runs, summary, models, args):
    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment, md_table, write_result

    this, other = list(summary)
    header = ["model", "tree", "fp32 GPU ms", "AMP GPU ms", "AMP / fp32 GPU", "fp32 wall ms", "AMP wall ms",
              "AMP / fp32 wall", "AMP kernels", "AMP copies (GPU ms)", "AMP top kernels (GPU ms, count), last run"]
    rows = []
    for m in models:
        for tree in (this, other):
            s = summary[tree][m]
            top = ", ".join(f"{n} {ms:.2f} ({c})" for n, ms, c in runs[tree][m][-1]["amp"]["top"][:4])
            rows.append([m, tree, s["eager"]["gpu_ms"], s["amp"]["gpu_ms"], s["amp"]["gpu_ms"] / s["eager"]["gpu_ms"],
                         s["eager"]["wall_ms"], s["amp"]["wall_ms"], s["amp"]["wall_ms"] / s["eager"]["wall_ms"],
                         s["amp"]["kernels"], f"{s['amp']['copies']:.0f} ({s['amp']['copy_ms']:.2f})", top])
    payload = {"experiment": "amp_step_ab", "environment": environment(get_device(0)),
               "unit": "ms per training step: wall (median of a process's timed steps) and GPU (one profiled step), "
                       "each the median over the tree's runs", "rounds": args.rounds, "steps": args.steps, "size": args.size,
               "trees": [this, other], "models": models, "runs": runs, "summary": summary}
    write_result(out_dir, "amp_step_ab", payload, md_table(header, rows))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    main()
