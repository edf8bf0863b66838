"""Real models' kernel shapes, weighted: the suites `tvk-bench shapes` recorded (suites/<model>.json:
one training step of each of the zoo's third-party models at bench size, on the device and commit
each file names) and the shapes that matter most in them.

A launch's weight is how long the step spends in it on our first target, estimated from its work:
count x max(FLOPs / peak FLOP/s, bytes / peak bandwidth) at the RX 5600 XT's fp32 peaks. The tuner's
default suites add each family's heaviest shapes (targets/__init__.py), and the kernel benchmark
times them (torchvk/experiments/model_shapes.py).
"""
from __future__ import annotations

import json
from pathlib import Path

from .cost_model import machine

SUITES = Path(__file__).with_name("suites")
RX_5600_XT = machine("rx5600xt")  # the card the weights estimate seconds on


def load(folder: Path = SUITES) -> dict:
    """{model: its recorded suite}; {} where the folder has none."""
    return {path.stem: json.loads(path.read_text()) for path in sorted(Path(folder).glob("*.json"))}


def weight(launch: dict) -> float:
    """Estimated seconds of all `count` runs of a launch (see the module docstring); its count where
    no target gave its work."""
    if launch.get("flops") is None and launch.get("bytes") is None:
        return float(launch["count"])
    return launch["count"] * max((launch.get("flops") or 0) / RX_5600_XT.peak_flops,
                                  (launch.get("bytes") or 0) / RX_5600_XT.dram_bytes_per_s)


def heaviest(family: str, limit: int, suites: dict | None = None) -> list[dict]:
    """Up to `limit` distinct tuner shapes of `family`, heaviest first, by weight summed over every
    suite (a shape several models launch adds up)."""
    by_shape: dict = {}
    for suite in (load() if suites is None else suites).values():
        for launch in suite["launches"]:
            if launch["family"] == family:
                key = json.dumps(launch["shape"], sort_keys=True)
                by_shape[key] = by_shape.get(key, 0.0) + weight(launch)
    ranked = sorted(by_shape, key=lambda key: -by_shape[key])
    return [json.loads(key) for key in ranked[:limit]]
