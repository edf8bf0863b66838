"""Where the host time of a compiled MNIST CNN training step goes (diagnostic, prints only).

    python benchmarks/step_profile.py [--batch 64] [--steps 50]
Per phase host milliseconds (median) with a sync at the end of every step, then cProfile's top
functions over the same loop.
"""
import argparse
import cProfile
import pstats
import time
from statistics import median

import torch
import torch.nn.functional as F

import torchvk
from torchvk.experiments.ablations import _mnist_setup
from tvk_kernels import get_device

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--steps", type=int, default=50)
ap.add_argument("--eager", action="store_true")
args = ap.parse_args()
model, opt, x, y = _mnist_setup(get_device(0), args.batch)  # the ablations' workload
run = model if args.eager else torchvk.compile(model, loss_fn=F.cross_entropy)
phases = {k: [] for k in ("zero_grad", "forward", "loss", "backward", "optimizer", "sync")}


def step(record):
    t = [time.perf_counter()]
    opt.zero_grad(set_to_none=True); t.append(time.perf_counter())
    if args.eager:
        out = run(x); t.append(time.perf_counter())
        loss = F.cross_entropy(out, y); t.append(time.perf_counter())
    else:  # model and loss are one compiled graph: "loss" stays 0
        loss = run(x, y); t.append(time.perf_counter()); t.append(time.perf_counter())
    loss.backward(); t.append(time.perf_counter())
    opt.step(); t.append(time.perf_counter())
    torch.tvk.synchronize(); t.append(time.perf_counter())
    if record:
        for k, a, b in zip(phases, t, t[1:]):
            phases[k].append((b - a) * 1e3)


for i in range(args.steps + 3):
    step(i >= 3)
print("host ms per phase (median):", {k: round(median(v), 3) for k, v in phases.items()})
print("step ms:", round(sum(median(v) for v in phases.values()), 3))
prof = cProfile.Profile()
prof.enable()
for _ in range(args.steps):
    step(False)
prof.disable()
pstats.Stats(prof).sort_stats("tottime").print_stats(18)
