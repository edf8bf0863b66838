"""Record the tuner shapes a workload launches (tvk-tune --model):

    with ShapeRecorder() as rec:
        run_the_model()
    rec.shapes  # {family: [shape, ...]}: each a shape dict of its tuner target, in launch order, deduplicated

Kernel families report each launch through kernels/launch.py's record_shape; families whose launch
site cannot give their target's shape format exactly report nothing (see cli.py's --model help).
"""
from __future__ import annotations

import json

from ..kernels import launch


class ShapeRecorder:
    def __init__(self):
        self._seen: dict = {}  # family -> {canonical JSON: shape}

    def add(self, family: str, shape: dict) -> None:
        key = json.dumps(shape, sort_keys=True)  # dicts are unhashable; JSON is also what --shapes reads
        self._seen.setdefault(family, {}).setdefault(key, dict(shape))

    @property
    def shapes(self) -> dict:
        return {family: list(by_key.values()) for family, by_key in self._seen.items()}

    def __enter__(self):
        if launch._recorder is not None:
            raise RuntimeError("a ShapeRecorder is already active; shape recorders do not nest")
        launch._recorder = self
        return self

    def __exit__(self, *exc):
        launch._recorder = None
        return False
