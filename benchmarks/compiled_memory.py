"""Device memory of a training step: eager vs compiled, with and without shared graph scratch.

    python benchmarks/compiled_memory.py [--out DIR] [--mnist-batch 64] [--cifar-batch 16] [--steps 6]
For the MNIST CNN and the CIFAR CNN (random data of the right shapes): the allocator's peak and
what it still holds after the steps, above what the model and optimizer held before the first
step. Each setting runs in its own process, so nothing one leaves behind is counted in the next.
Byte counts come from the allocator, so they do not depend on the GPU's speed (split-K scratch
sizes follow the device's tuned configs). Writes compiled_memory.json to DIR.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

SETTINGS = {"eager": {}, "compiled, own scratch per graph": {"TVK_SHARE_GRAPH_SCRATCH": "0"},
            "compiled, shared graph scratch": {"TVK_SHARE_GRAPH_SCRATCH": "1"}}
MODELS = {"cnn": (1, 28, 28), "cifar_cnn": (3, 32, 32)}


def measure(name: str, batch: int, steps: int, compiled: bool) -> dict:
    import torch
    import torch.nn.functional as F

    import torchvk
    import torchvk.optim
    from torchvk.experiments.models import build

    torch.manual_seed(0)
    x = torch.randn(batch, *MODELS[name]).to("tvk")
    y = torch.randint(0, 10, (batch,)).to("tvk")
    model = build(name).to("tvk")
    opt = torchvk.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    run = torchvk.compile(model, loss_fn=F.cross_entropy) if compiled else (lambda a, b: F.cross_entropy(model(a), b))
    torch.tvk.synchronize()
    base = torchvk.memory_allocated()
    torchvk.reset_peak_memory_stats()
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = run(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    torch.tvk.synchronize()
    out = {"peak_bytes": torchvk.max_memory_allocated() - base, "held_bytes": torchvk.memory_allocated() - base,
           "last_loss": losses[-1]}
    if compiled:
        stats = run.compile_stats()[0]
        out["shared_scratch"] = {k: stats[k]["shared_scratch"] for k in ("forward", "backward")}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--mnist-batch", type=int, default=64)
    ap.add_argument("--cifar-batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure(*json.loads(args.one))))
        return
    import os

    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment

    result = {"experiment": "compiled_memory", "environment": environment(get_device(0)),
              "notes": "random data; bytes above what the model and optimizer held before the first step",
              "rows": []}
    for name, batch in (("cnn", args.mnist_batch), ("cifar_cnn", args.cifar_batch)):
        for setting, env in SETTINGS.items():
            job = json.dumps([name, batch, args.steps, setting != "eager"])
            proc = subprocess.run([sys.executable, __file__, "--one", job], capture_output=True, text=True,
                                  env={**os.environ, **env})
            if proc.returncode != 0:
                raise SystemExit(proc.stderr[-2000:])
            row = {"model": name, "batch": batch, "setting": setting, **json.loads(proc.stdout.strip().splitlines()[-1])}
            result["rows"].append(row)
            print(f"{name} b{batch} {setting}: peak {row['peak_bytes'] / 2**20:.1f} MiB, "
                  f"held {row['held_bytes'] / 2**20:.1f} MiB, last loss {row['last_loss']:.6f}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "compiled_memory.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
