"""Where the GPU time of one training step goes, per kernel, tvk vs torch CUDA (diagnostic).

    python benchmarks/kernel_profile.py [--out DIR]
For the MNIST CNN at batch 256 and the CIFAR CNN at batch 128 (the two compiled-mode steps
still slower than torch CUDA eager): one compiled tvk step (the kernels compiled mode replays,
fusions included) and one eager step under the stream's exclusive timestamp queries, summed by
kernel label, and the same step on CUDA under torch.profiler, summed by kernel name. Writes
kernel_profile.json to DIR.
"""
import argparse
import importlib.util
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

MODELS_PY = Path(__file__).resolve().parents[1] / "torchvk" / "experiments" / "models.py"
WORKLOADS = [("cnn", 256, (1, 28, 28)), ("cifar_cnn", 128, (3, 32, 32))]
STEPS = 5  # profiled steps, averaged


def _step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()


def _setup(name, batch, shape, dev):
    # the models file alone: importing torchvk breaks CUDA backwards in the same process (README)
    spec = importlib.util.spec_from_file_location("experiment_models", MODELS_PY)
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    model = models.build(name).to(dev)
    if dev == "cuda":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        import torchvk

        opt = torchvk.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, *shape, generator=g).to(dev)
    y = torch.randint(0, 10, (batch,), generator=g).to(dev)
    return model, opt, x, y


def _spin_up(device, seconds):
    from torchvk.experiments.ablations import _spin_up  # not at the top: the CUDA side runs without torchvk

    _spin_up(device, seconds)


def tvk_kernels_ms(device, name, batch, shape, compiled: bool) -> dict:
    """Per-label GPU ms of one step. Compiled: the torchvk.compile program (fusions included) run
    kernel by kernel (replay off, so the stream can time each launch; a replay runs the same
    kernels). Times are exclusive: each kernel from the end of the one before, so they add up to
    the step's GPU span."""
    import torchvk

    model, opt, x, y = _setup(name, batch, shape, f"tvk:{device.index}")
    step = _step
    if compiled:
        model_and_loss = torchvk.compile(model, loss_fn=F.cross_entropy, replay=False)

        def step(model, opt, x, y):
            opt.zero_grad(set_to_none=True)
            model_and_loss(x, y).backward()
            opt.step()
    for _ in range(3):
        step(model, opt, x, y)
    torch.tvk.synchronize()
    _spin_up(device, 0.5)  # the idle clock again after the host work above (design note 11)
    with device.stream.profiling(exclusive=True) as records:
        for _ in range(STEPS):  # back to back, as training runs: the GPU stays busy
            step(model, opt, x, y)
    per = defaultdict(float)
    for label, seconds in records:
        per[label] += seconds * 1e3 / STEPS
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


def cuda_kernels_ms(name, batch, shape) -> dict | None:
    """In a subprocess without torchvk."""
    proc = subprocess.run([sys.executable, __file__, "--cuda", json.dumps([name, batch, shape])],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-600:], file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _cuda_in_this_process(name, batch, shape) -> dict | None:
    if not torch.cuda.is_available():
        return None
    model, opt, x, y = _setup(name, batch, shape, "cuda")
    for _ in range(3):
        _step(model, opt, x, y)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            _step(model, opt, x, y)
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name[:90]] += e.device_time / 1e3 / STEPS
    return dict(sorted(per.items(), key=lambda kv: -kv[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--cuda", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cuda:
        print(json.dumps(_cuda_in_this_process(*json.loads(args.cuda))))
        return
    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment

    device = get_device(0)
    if not device.stream.timestamps:
        raise SystemExit(f"{device.facts.name} has no timestamp queries: cannot time kernels")
    _spin_up(device, 1.5)  # the H200 idles at a low clock (docs/design-notes.md 11)
    result = {"experiment": "kernel_profile", "environment": environment(device), "workloads": []}
    for name, batch, shape in WORKLOADS:
        cuda = cuda_kernels_ms(name, batch, shape)
        tvk = tvk_kernels_ms(device, name, batch, shape, compiled=True)
        eager = tvk_kernels_ms(device, name, batch, shape, compiled=False)
        result["workloads"].append({"model": name, "batch": batch, "tvk_ms": tvk, "tvk_eager_ms": eager,
                                    "cuda_ms": cuda, "tvk_total_ms": sum(tvk.values()),
                                    "tvk_eager_total_ms": sum(eager.values()),
                                    "cuda_total_ms": sum(cuda.values()) if cuda else None})
        print(f"== {name} batch {batch}: tvk compiled kernels {sum(tvk.values()):.3f} ms, eager "
              f"{sum(eager.values()):.3f} ms" + (f", CUDA kernels {sum(cuda.values()):.3f} ms" if cuda else ""))
        for label, ms in list(tvk.items())[:14]:
            print(f"  tvk  {ms:8.3f}  {label}")
        for label, ms in list((cuda or {}).items())[:14]:
            print(f"  cuda {ms:8.3f}  {label}")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "kernel_profile.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
