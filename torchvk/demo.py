"""`make demo`: train the MNIST classifier on the first Vulkan device for one epoch and print
accuracy, step time, peak memory and the op counts that show no op ran on the CPU.

On a CPU Vulkan device (lavapipe, no GPU present) it trains the MLP on a 6,000-image subset
so the demo finishes in about a minute; on a GPU, the CNN on all 60,000 images."""
from __future__ import annotations

import argparse
import sys
import time

from tqdm import tqdm

import torchvk
from tvk_kernels.info import describe
from tvk_kernels.runtime import get_device

from .experiments import data, models
from .experiments.train import train


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torchvk.demo", description=__doc__)
    ap.add_argument("--device", type=int, default=None, help="Vulkan device index (default TVK_DEVICE or 0)")
    ap.add_argument("--model", choices=["mlp", "cnn"], default=None)
    ap.add_argument("--subset", type=int, default=None, help="train on the first N images")
    ap.add_argument("--test-images", type=int, default=None, help="evaluate on the first N test images")
    ap.add_argument("--compiled", action="store_true",
                    help="train through torchvk.compile(model, loss_fn=cross_entropy) instead of eagerly")
    args = ap.parse_args(argv)
    dev = get_device(args.device)
    print(describe(dev.facts))
    on_cpu_vulkan = dev.facts.device_type == "CPU"
    model = args.model or ("mlp" if on_cpu_vulkan else "cnn")
    subset = args.subset or (6000 if on_cpu_vulkan else None)
    try:
        x, y, xt, yt = data.load_mnist()
    except data.DatasetMissing as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    if subset:
        x, y = x[:subset], y[:subset]
        xt, yt = xt[:2000], yt[:2000]
    if args.test_images:
        xt, yt = xt[:args.test_images], yt[:args.test_images]
    mode = "compiled" if args.compiled else "eager"
    print(f"\nTraining the MNIST {model.upper()} ({mode}) on tvk:{dev.index} for one epoch: {len(x)} images, batch 64"
          + (" (a subset: this device is Vulkan on the CPU)" if subset else ""))
    torchvk.reset_op_counts()
    t0 = time.perf_counter()
    with tqdm(total=len(x) // 64, unit="step") as bar:
        r = train(lambda: models.build(model), (x, y, xt, yt), f"tvk:{dev.index}", epochs=1, batch=64, lr=0.01,
                  progress=bar, compiled=args.compiled)
    counts = torchvk.op_counts()
    cpu_ops = sum(counts["cpu"].values())
    vk_ops = sum(counts["vulkan"].values())
    ep = r["epochs"][-1]
    print(f"\ntest accuracy      : {ep['test_accuracy'] * 100:.2f}% on {len(xt)} test images")
    print(f"epoch time         : {ep['seconds']:.1f} s ({time.perf_counter() - t0:.1f} s with evaluation)")
    print(f"step time (median) : {r['step_ms_median']:.2f} ms")
    print(f"peak tvk memory    : {r['peak_memory_bytes'] / 2**20:.1f} MiB")
    print(f"ops on Vulkan      : {vk_ops} ({len(counts['vulkan'])} distinct aten ops)")
    print(f"ops on CPU         : {cpu_ops}" + ("  <- no silent fallback: every op ran on the GPU" if cpu_ops == 0 else ""))
    top = sorted(counts["vulkan"].items(), key=lambda kv: -kv[1])[:8]
    print("busiest ops        : " + ", ".join(f"{k} x{v}" for k, v in top))
    for st in r.get("compile_stats", []):
        fw, bw = st["forward"], st["backward"]
        print(f"compiled graphs    : forward {fw['kernels']} kernels, backward {bw['kernels']} kernels; replayed "
              f"{fw['replays']} / {bw['replays']} times; traced in {st['trace_seconds']:.2f} s")
    return 0 if cpu_ops == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
