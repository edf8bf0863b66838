"""An eager training step's wall time, this checkout beside an earlier tree, in interleaved processes.

A model's eager step on the lent H200 moves by up to ~1.6x between processes of the same tree (its runs
in results/h200/eager_step_ab.md), more than most host-path changes move it: one models run per tree
cannot tell them apart. This runs each model ROUNDS times per tree, alternating the trees, each run in a
fresh process (zoo model at bench size, random init, its seeded batches; the median of the steps
after the first 4), and reports every run, each tree's median and min, and their ratio.

--cuda adds torch CUDA's eager step of each model to every round (its own process, without torchvk), and --clocks
samples the GPU's SM clock with nvidia-smi every 50 ms and reports its median over each run's timed steps: a
host-bound step leaves the GPU idle between kernels, and NVIDIA's driver may then lower its clock (design note
11), which makes the same tree's steps slower in one process than in the next.

    python benchmarks/eager_step_ab.py --compare REV|DIR [--models hf_gpt2,hf_llama] [--rounds 4] [--cuda]
                                       [--clocks] [--out DIR]
"""
import argparse
import json
import statistics
import subprocess
import threading
import time

from eager_host_time import ROOT, _run, trees

_STEP = r"""
import json, sys, time
import torch
name, steps, device, size = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if device == "tvk":
    import torchvk
from torchvk.experiments import zoo
losses, seconds, _ = zoo.train_steps(name, device, "eager", steps=steps, size=size)
end = time.time()  # the timed steps (5..N) end here, one after the other
timed = sorted(seconds[4:])
print(json.dumps({"median_ms": timed[len(timed) // 2] * 1e3, "loss": losses[-1], "window": [end - sum(timed), end]}))
"""


class _Clocks:
    """nvidia-smi's SM clock every 50 ms, stamped with this machine's time as each line arrives."""

    def __init__(self):
        self.samples: list = []
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits",
                                      "-lms", "50"], stdout=subprocess.PIPE, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.samples.append((time.time(), float(line.split(",")[0])))
            except ValueError:
                pass

    def median_mhz(self, window):
        inside = [mhz for t, mhz in self.samples if window[0] <= t <= window[1]]
        return statistics.median(inside) if inside else None

    def stop(self):
        self.proc.terminate()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", required=True, help="an earlier git revision, or a directory with an earlier tree")
    ap.add_argument("--models", default="hf_gpt2,hf_llama,timm_resnet18,tv_mobilenet_v3")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=14)
    ap.add_argument("--size", default="bench", help="the zoo models' size: bench, or tiny (a smoke test)")
    ap.add_argument("--cuda", action="store_true", help="torch CUDA's eager step too, each round")
    ap.add_argument("--clocks", action="store_true", help="the median SM clock (nvidia-smi) over each run's timed steps")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    models = args.models.split(",")
    clocks = _Clocks() if args.clocks else None
    with trees(args.compare) as roots:
        devices = {tree: "tvk" for tree in roots}
        if args.cuda:
            roots["torch cuda"], devices["torch cuda"] = ROOT, "cuda"
        runs = {tree: {m: [] for m in models} for tree in roots}
        for _ in range(args.rounds):
            for tree, root in roots.items():
                for m in models:
                    run = json.loads(_run(_STEP, root, m, str(args.steps), devices[tree], args.size).strip().splitlines()[-1])
                    if clocks is not None:
                        time.sleep(0.2)  # the sampler's lines for the run's last steps
                        run["sm_mhz"] = clocks.median_mhz(run["window"])
                    runs[tree][m].append(run)
    if clocks is not None:
        clocks.stop()
    summary = {tree: {m: {"median_ms": statistics.median(r["median_ms"] for r in rs),
                          "min_ms": min(r["median_ms"] for r in rs)} for m, rs in per.items()}
               for tree, per in runs.items()}
    print(json.dumps(summary, indent=1))
    if args.out:
        _write(args.out, runs, summary, models, args)


def _write(out_dir, runs, summary, models, args):
    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment, md_table, write_result

    this, other = list(summary)[:2]  # the two trees (torch cuda, with --cuda, comes third)
    header = ["model"] + [f"{t} runs (ms)" for t in summary] + [f"{t} median / min ms" for t in summary] + \
        [f"median {this} / {other}"]
    rows = [[m] + [", ".join(f"{r['median_ms']:.1f}" + (f" ({r['sm_mhz']:.0f} MHz)" if r.get("sm_mhz") else "")
                             for r in runs[t][m]) for t in summary]
            + [f"{summary[t][m]['median_ms']:.1f} / {summary[t][m]['min_ms']:.1f}" for t in summary]
            + [summary[this][m]["median_ms"] / summary[other][m]["median_ms"]] for m in models]
    payload = {"experiment": "eager_step_ab", "environment": environment(get_device(0)),
               "unit": "ms per eager step (wall, median of steps 5..N of a process); sm_mhz: the median SM clock over "
                       "those steps (nvidia-smi, every 50 ms)", "rounds": args.rounds,
               "steps": args.steps, "trees": list(summary), "runs": runs, "summary": summary}
    write_result(out_dir, "eager_step_ab", payload, md_table(header, rows))


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT))
    main()
