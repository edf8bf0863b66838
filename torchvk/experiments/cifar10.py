"""Experiment 4: a CIFAR-10 CNN on tvk vs torch (CPU, CUDA where present). Real CIFAR-10
from a path the user gives; otherwise a deterministic stand-in, labelled in every output."""
from __future__ import annotations

import torch
from tqdm import tqdm

import torchvk
from tvk_kernels.bench.common import environment, md_table, write_result

from . import data, models
from .peer import run_peer
from .train import train

# quick (lavapipe: seconds a step): 3 steps of 16 images (compiled: one recording, two replays), scored on 32
QUICK = {"batch": 16, "max_steps": 3, "eval_limit": 32}


def run(device, out_dir, quick=False, cifar_path=None, epochs=None, batch=128, progress=True) -> dict:
    ds, label = data.experiment_data("cifar10", quick, cifar_path)
    epochs = epochs or (1 if quick else 2)
    peers = ["tvk", "tvk-compiled", "cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    runs, rows = [], []
    if progress:
        peers = tqdm(peers, desc="cifar10", unit="run")
    for dev in peers:
        torchvk.reset_op_counts()
        kw = dict(epochs=epochs if dev != "cpu" or quick else 1, batch=batch, lr=0.05,
                  max_steps=None if not (dev == "cpu" and not quick) else 40)
        if quick:
            kw.update(QUICK)
        if dev == "tvk-compiled":  # a failure here is a result (recorded), not the end of the experiment
            try:
                r = train(lambda: models.build("cifar_cnn"), ds, f"tvk:{device.index}", **kw, compiled=True)
            except Exception as e:  # noqa: BLE001
                runs.append({"peer": dev, "error": f"{type(e).__name__}: {e}"[-300:]})
                rows.append([dev, label.split(":")[0], "failed to run", None, None, None, None, None, None])
                continue
        elif dev == "tvk":
            r = train(lambda: models.build("cifar_cnn"), ds, f"tvk:{device.index}", **kw)
        else:  # torch peers run in a process without torchvk (see peer.py)
            r = run_peer({"task": "train", "device": dev, "dataset": "cifar10", "quick": quick,
                          "cifar_path": cifar_path, "model": "cifar_cnn", "train": kw})
            if "error" in r:
                raise RuntimeError(f"torch {dev} peer failed: {r['error']}")
        r["peer"] = dev
        if dev.startswith("tvk"):
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
