"""Experiment 3: MNIST classifier (MLP and small CNN) on tvk, side by side with torch CPU
and torch CUDA (where present), same seed, same batches. Asserts zero CPU ops on tvk."""
from __future__ import annotations

import importlib.util

import torch
from tqdm import tqdm

import torchvk
from tvk_kernels.bench.common import environment, md_table, write_result

from . import data, models
from .peer import run_peer
from .train import train

# quick (lavapipe: seconds a CNN step): the CNN takes 3 steps (compiled: one recording, two replays) and
# is scored on 64 test images; the MLP keeps every step, so its accuracy can be compared with CPU's
QUICK_CNN = {"max_steps": 3, "eval_limit": 64}


def peers() -> list[str]:
    """tvk, torch CPU, torch CUDA where present, PyPI torchvulkan where installed."""
    extra = ["torchvulkan"] if importlib.util.find_spec("torchvulkan") else []
    return ["tvk", "tvk-compiled", "cpu"] + (["cuda"] if torch.cuda.is_available() else []) + extra


def run(device, out_dir, quick=False, epochs=None, batches=(64, 256), progress=True, models_=("mlp", "cnn")) -> dict:
    ds, label = data.experiment_data("mnist", quick)
    if quick:  # CI: a few hundred images, a couple of steps
        batches = (64,)
    epochs = epochs or (1 if quick else 3)
    runs, rows = [], []
    bar = None
    if progress:
        bar = tqdm(total=len(models_) * len(batches) * len(peers()), desc="mnist", unit="run")
    for model_name in models_:
        for batch in batches:
            for dev in peers():
                if bar is not None:
                    bar.set_postfix(model=model_name, batch=batch, device=dev)
                    bar.update(1)
                if dev == "cpu" and not quick and batch != batches[0]:
                    continue  # CPU epochs are slow and say little beyond one batch size
                torchvk.reset_op_counts()
                cpu_partial = dev == "cpu" and not quick  # CPU: 300 steps, enough for a same-seed loss comparison
                kw = dict(epochs=1 if cpu_partial else epochs, batch=batch, lr=0.01, max_steps=300 if cpu_partial else None)
                if quick and model_name == "cnn":
                    kw.update(QUICK_CNN)
                if dev == "tvk-compiled":  # a failure here is a result (recorded), not the end of the experiment
                    try:
                        r = train(lambda: models.build(model_name), ds, f"tvk:{device.index}", **kw, compiled=True)
                    except Exception as e:  # noqa: BLE001
                        runs.append({"model": model_name, "batch": batch, "peer": dev, "error": f"{type(e).__name__}: {e}"[-300:]})
                        rows.append([model_name, batch, dev, "failed to run", None, None, None, None, None])
                        continue
                elif dev == "tvk":
                    r = train(lambda: models.build(model_name), ds, f"tvk:{device.index}", **kw)
                else:  # torch peers run in a process without torchvk (see peer.py)
                    r = run_peer({"task": "train", "device": dev, "dataset": "mnist", "quick": quick,
                                  "model": model_name, "train": kw})
                    if "error" in r and dev == "torchvulkan":  # e.g. its wheel does not load on this torch
                        runs.append({"model": model_name, "batch": batch, "peer": dev, "error": r["error"][-300:]})
                        rows.append([model_name, batch, dev, "failed to run", None, None, None, None, None])
                        continue
                    if "error" in r:
                        raise RuntimeError(f"torch {dev} peer failed: {r['error']}")
                r.update(model=model_name, peer=dev)
                if dev.startswith("tvk"):
                    counts = torchvk.op_counts()
                    r["op_counts"] = counts
                    r["cpu_ops"] = sum(counts["cpu"].values())
                runs.append(r)
                last = r["epochs"][-1]
                rows.append([model_name, batch, dev, len(r["epochs"]), last["test_accuracy"], last["seconds"],
                             r["step_ms_median"], r["peak_memory_bytes"], r.get("cpu_ops")])
    payload = {"experiment": "mnist", "environment": environment(device), "quick": quick, "runs": runs,
               "dataset": label}
    table = md_table(["model", "batch", "device", "epochs", "test acc", "last epoch s", "step ms (median)",
                      "peak bytes", "CPU ops"], rows)
    write_result(out_dir, "mnist", payload, table)
    return payload
