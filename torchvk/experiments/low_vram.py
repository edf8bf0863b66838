"""Experiment 5: how little GPU memory is enough. A cap sweep (6 GB as on the RX 5600 XT,
then 2 GB, 1 GB, 512 MB, ...) for the MNIST CNN and the CIFAR-10 CNN at several batch
sizes: the smallest cap that trains, peak memory vs torch CUDA for the same steps, and
that hitting the cap raises a clear out-of-memory error after which the runtime works.

Inputs are random tensors of each dataset's shape: memory does not depend on values."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from tqdm import tqdm

import torchvk
from tvk_kernels.bench.common import environment, md_table, write_result
from tvk_kernels.runtime.memory import parse_bytes

from . import models
from .peer import run_peer
from .train import peak_memory, reset_peak_memory, synchronize

CAPS = ["6G", "2G", "1G", "512M", "256M", "128M", "64M", "32M", "16M", "8M", "4M"]
SETUPS = {"cnn": (1, 28), "cifar_cnn": (3, 32)}


def _steps(model_name, batch, device, steps=3):
    """Train `steps` steps on tvk; returns peak bytes (the CUDA peer runs in peer.py)."""
    torch.manual_seed(0)
    channels, size = SETUPS[model_name]
    model = models.build(model_name).to(device)
    opt = torchvk.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    synchronize(device)
    reset_peak_memory(device)
    for _ in range(steps):
        x = torch.randn(batch, channels, size, size).to(device)
        y = torch.randint(0, 10, (batch,)).to(device)
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    synchronize(device)
    peak = peak_memory(device)
    del model, opt
    return peak


def _usable_after_oom(device) -> bool:
    a = torch.arange(1000, dtype=torch.float32).to(device)
    return bool(torch.equal((a + a).cpu(), torch.arange(1000, dtype=torch.float32) * 2))


def run(device, out_dir, quick=False, progress=True) -> dict:
    dev = f"tvk:{device.index}"
    caps = ["256M", "16M", "2M", "256K"] if quick else CAPS
    batches = (32,) if quick else (64, 256)
    model_names = ("cnn",) if quick else ("cnn", "cifar_cnn")
    results, rows = [], []
    jobs = [(m, b) for m in model_names for b in batches]
    if progress:
        jobs = tqdm(jobs, desc="low-vram", unit="setup")
    for model_name, batch in jobs:
        cuda_peak = None
        if torch.cuda.is_available():  # in a process without torchvk (see peer.py)
            r = run_peer({"task": "peak", "device": "cuda", "model": model_name, "batch": batch, "steps": 3,
                          "input": SETUPS[model_name]})
            cuda_peak = r.get("peak_memory_bytes")
        entry = {"model": model_name, "batch": batch, "torch_cuda_peak_bytes": cuda_peak, "caps": []}
        for cap in caps:
            torchvk.empty_cache()
            torchvk.set_memory_limit(parse_bytes(cap))
            try:
                peak = _steps(model_name, batch, dev)
                entry["caps"].append({"cap": cap, "trained": True, "peak_bytes": peak})
            except torch.OutOfMemoryError as e:
                torchvk.set_memory_limit(None)
                entry["caps"].append({"cap": cap, "trained": False, "error_type": type(e).__name__,
                                      "is_torch_oom": True, "message": str(e)[:400],
                                      "usable_after": _usable_after_oom(dev)})
            finally:
                torchvk.set_memory_limit(None)
                torchvk.empty_cache()
        ok = [c for c in entry["caps"] if c["trained"]]
        entry["smallest_cap_that_trains"] = ok[-1]["cap"] if ok else None
        entry["tvk_peak_bytes"] = ok[0]["peak_bytes"] if ok else None
        entry["peak_vs_cuda"] = (entry["tvk_peak_bytes"] / cuda_peak) if cuda_peak and entry["tvk_peak_bytes"] else None
        failed = [c for c in entry["caps"] if not c["trained"]]
        entry["oom_errors_clear"] = all(c["is_torch_oom"] and "out of memory" in c["message"] for c in failed)
        entry["usable_after_every_oom"] = all(c["usable_after"] for c in failed)
        results.append(entry)
        rows.append([model_name, batch, entry["smallest_cap_that_trains"], entry["tvk_peak_bytes"], cuda_peak,
                     entry["peak_vs_cuda"], len(failed), entry["oom_errors_clear"], entry["usable_after_every_oom"]])
    payload = {"experiment": "low-vram", "environment": environment(device), "quick": quick, "caps_tried": caps,
               "results": results, "inputs": "random tensors of the dataset shapes (memory does not depend on values)"}
    table = md_table(["model", "batch", "smallest cap that trains", "tvk peak bytes", "torch CUDA peak bytes",
                      "tvk/CUDA peak", "caps that OOMed", "OOM errors clear", "usable after OOM"], rows)
    write_result(out_dir, "low-vram", payload, table)
    return payload
