"""Experiment: the kernel launches of one training step of real models (`tvk-bench shapes`).

Every matmul, conv, attention, norm, softmax, reduce and elementwise launch of one forward, loss,
backward and optimizer step, with its tuner shape, layout (in the shape), dtype and count, and the
work it does (FLOPs and bytes from its tuner target, tvk_kernels/tune/targets/). One JSON per model,
<out>/<model>.json, and a summary, <out>/shapes.md.

    tvk-bench shapes --out tvk_kernels/tune/suites         # the zoo's third-party models at bench size
    tvk-bench shapes --model pkg.module:factory --input-shape 8,3,224,224 --out my-shapes

The recorded suites in tvk_kernels/tune/suites/ (shipped) are what the tuner's default suites and
the kernel benchmark draw real-model shapes from (tvk_kernels/tune/model_suites.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from tvk_kernels.bench.common import environment, md_table
from tvk_kernels.config import default_params
from tvk_kernels.search_space import bucket_of
from tvk_kernels.tune.cost_model import totals
from tvk_kernels.tune.model import record_step, record_training_step
from tvk_kernels.tune.targets import load_targets

from . import zoo_models


def _work(device, launch: dict) -> tuple:
    """(FLOPs, bytes) of one launch from its tuner target's model (None, None: no target reads it)."""
    target = load_targets().get(launch["family"])
    if target is None or not hasattr(target, "work"):
        return None, None
    try:
        params = default_params(target.family, device.facts, bucket_of(target.family, launch["shape"]))
        work = target.work(launch["shape"], params)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # a launch the target's format does not fit
        return None, None
    return totals(work)


def _payload(device, recorder, about: dict) -> dict:
    launches = []
    for launch in recorder.launches:
        flops, moved = _work(device, launch)
        launches.append({**launch, "flops": flops, "bytes": moved})
    families = {}
    for launch in launches:
        totals = families.setdefault(launch["family"], {"launches": 0, "shapes": 0})
        totals["launches"] += launch["count"]
        totals["shapes"] += 1
    return {"experiment": "shapes", **about, "environment": environment(device), "families": families,
            "launches": launches}


def record_zoo_model(device, name: str, size: str) -> dict:
    """The launches of one training step of zoo model `name` at `size`, on its own inputs, loss and optimizer."""
    entry = zoo_models.ZOO[name]
    dev = torch.device("tvk", device.index)
    model = zoo_models.build(name, size).to(dev).train()
    x, y = (t.to(dev) for t in zoo_models.batches(name, 1, size)[0])
    recorder = record_step(model, x, lambda out: entry.loss(out, y), entry.optimizer(model.parameters()))
    return _payload(device, recorder, {"model": name, "library": entry.library, "size": size,
                                       "dims": getattr(entry, size), "input": list(x.shape)})


def run(device, out_dir, quick=False, progress=True, model=None, input_shape=None, input_high=None,
        loss="cross_entropy", target_shape=None, optimizer="adamw") -> dict:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if model is not None:
        recorder = record_training_step(model, input_shape, loss, target_shape, device.index, input_high, optimizer)
        payloads = {model.replace(":", "."): _payload(device, recorder, {"model": model, "input": list(input_shape),
                                                                         "loss": loss, "optimizer": optimizer})}
    else:
        names = zoo_models.third_party()
        payloads = {}
        for name in names:
            if progress:
                print(f"tvk-bench shapes: {name}", flush=True)
            payloads[name] = record_zoo_model(device, name, "tiny" if quick else "bench")
    rows = []
    for name, payload in payloads.items():
        (out / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
        for family, totals in sorted(payload["families"].items()):
            rows.append([name, family, totals["launches"], totals["shapes"]])
    env = next(iter(payloads.values()))["environment"]
    (out / "shapes.md").write_text(
        f"# shapes\n\n{env['device']}, torch {env.get('torch_version')}, commit {env['commit']}, {env['date']}\n\n"
        "Kernel launches of one training step (forward, loss, backward, optimizer step):\n\n"
        + md_table(["model", "family", "launches", "distinct shapes"], rows) + "\n")
    return payloads
