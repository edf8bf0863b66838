"""Record the kernel launches of a workload (tvk-tune --model, tvk-bench shapes):

    with ShapeRecorder() as rec:
        run_the_model()
    rec.shapes    # {family: [shape, ...]}: each a shape dict of its tuner target, in launch order, deduplicated
    rec.launches  # [{"family", "shape", "count", and what the launch site added: "dtype", "op"}], by family, most first

Kernel families report each launch through kernels/launch.py's record_shape; families whose launch
site cannot give their target's shape format exactly report nothing (see cli.py's --model help).
"""
from __future__ import annotations

import json

from ..kernels import launch


class ShapeRecorder:
    def __init__(self):
        self._seen: dict = {}  # family -> {canonical JSON: shape}
        self._counts: dict = {}  # (family, shape JSON, about JSON) -> [shape, about, count]

    def add(self, family: str, shape: dict, about: dict | None = None) -> None:
        key = json.dumps(shape, sort_keys=True)  # dicts are unhashable; JSON is also what --shapes reads
        self._seen.setdefault(family, {}).setdefault(key, dict(shape))
        about = about or {}
        entry = self._counts.setdefault((family, key, json.dumps(about, sort_keys=True)), [dict(shape), dict(about), 0])
        entry[2] += 1

    @property
    def shapes(self) -> dict:
        return {family: list(by_key.values()) for family, by_key in self._seen.items()}

    @property
    def launches(self) -> list[dict]:
        rows = [{"family": family, "shape": shape, **about, "count": count}
                for (family, _, _), (shape, about, count) in self._counts.items()]
        return sorted(rows, key=lambda r: (r["family"], -r["count"]))

    def __enter__(self):
        if launch._recorder is not None:
            raise RuntimeError("a ShapeRecorder is already active; shape recorders do not nest")
        launch._recorder = self
        return self

    def __exit__(self, *exc):
        launch._recorder = None
        return False
