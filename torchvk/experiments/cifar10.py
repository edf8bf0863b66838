"""Experiment 4: a CIFAR-10 CNN on tvk vs torch (CPU, CUDA where present). Real CIFAR-10
from a path the user gives; otherwise a deterministic stand-in, labelled in every output."""
from __future__ import annotations

import torch

from tvk_kernels.bench.common import environment, md_table, write_result

from . import data, models
from .train import train


def load(path=None, quick=False):
    try:
        x, y, xt, yt = data.load_cifar10(path)
        label = "CIFAR-10"
    except data.DatasetMissing as e:
        if path:  # the user asked for real data: say what is wrong
            raise
        n = (512, 256) if quick else (10000, 2000)
        x, y, xt, yt = data.standin_cifar10(*n)
        label = f"STAND-IN (not CIFAR-10): {e}"
    if quick:
        x, y, xt, yt = x[:128], y[:128], xt[:64], yt[:64]
    return (x, y, xt, yt), label


def run(device, out_dir, quick=False, cifar_path=None, epochs=None, batch=128, progress=True) -> dict:
    import torchvk

    ds, label = load(cifar_path, quick)
    epochs = epochs or (1 if quick else 2)
    peers = ["tvk", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    runs, rows = [], []
    for dev in peers:
        torchvk.reset_op_counts()
        r = train(lambda: models.build("cifar_cnn"), ds, dev if dev != "tvk" else f"tvk:{device.index}",
                  epochs=epochs if dev != "cpu" or quick else 1, batch=batch if not quick else 16, lr=0.05,
                  max_steps=None if not (dev == "cpu" and not quick) else 40)
        r["peer"] = dev
        if dev == "tvk":
            r["op_counts"] = torchvk.op_counts()
            r["cpu_ops"] = sum(r["op_counts"]["cpu"].values())
        r["images_per_s"] = r["batch"] / (r["step_ms_median"] / 1e3) if r["step_ms_median"] else None
        runs.append(r)
        last = r["epochs"][-1]
        rows.append([dev, label.split(":")[0], len(r["epochs"]), last["test_accuracy"], last["seconds"],
                     r["step_ms_median"], r["images_per_s"], r["peak_memory_bytes"], r.get("cpu_ops")])
    payload = {"experiment": "cifar10", "environment": environment(device), "dataset": label, "quick": quick, "runs": runs}
    table = f"Data: **{label}**\n\n" + md_table(["device", "data", "epochs", "test acc", "last epoch s", "step ms",
                                                  "images/s", "peak bytes", "CPU ops"], rows)
    write_result(out_dir, "cifar10", payload, table)
    return payload
