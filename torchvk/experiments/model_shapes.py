"""The kernel benchmark at real models' shapes: the GEMMs and convolutions that the recorded suites
(tvk_kernels/tune/suites/, `tvk-bench shapes`) say one training step of the zoo's third-party
models spends its time in, timed by the GEMM and conv sweeps (gemm_sweep.py, conv_sweep.py:
GPU time on both sides, the CUDA peer in CUDA graphs, a spin-up before every case).

Shapes are ranked by weight (model_suites.weight: count x estimated time, summed over the models).
The first MODEL_SHAPES of each family are in the tuner's default suite; the next ones are not, so
the section shows untuned real shapes too (each row says which). The summary's geometric mean of
tvk / peer time is weighted by the shapes' weights: the shapes a step spends longest in count most.
--quick takes the lightest recorded shapes instead (lavapipe in CI).
"""
from __future__ import annotations

import json
import math

from tvk_kernels.tune import model_suites
from tvk_kernels.tune.targets import MODEL_SHAPES

from . import conv_sweep, gemm_sweep

PER_FAMILY = 2 * MODEL_SHAPES  # half tuned by default, half not
QUICK_PER_FAMILY = 2
QUICK_FLOP_CAP = 2 ** 22


def _ranked(suites: dict, family_names, keep) -> list[tuple]:
    """[(the launch's shape, weight summed over suites and over family_names' launches of it by keep(shape))]."""
    weights, shapes = {}, {}
    for suite in suites.values():
        for launch in suite["launches"]:
            if launch["family"] in family_names:
                key = keep(launch["shape"])
                weights[key] = weights.get(key, 0.0) + model_suites.weight(launch)
                shapes.setdefault(key, launch["shape"])
    return sorted(((shapes[k], w) for k, w in weights.items()), key=lambda sw: -sw[1])


def gemms(suites: dict, quick: bool = False) -> list[dict]:
    """The heaviest GEMM shapes of the recorded suites (model_suites.load()) as gemm_sweep dicts, with
    "weight" and "tuned_by_default"."""
    ranked = _ranked(suites, {"matmul"}, lambda s: json.dumps(s, sort_keys=True))
    out = [{"M": s["M"], "N": s["N"], "K": s["K"], "batch": s.get("batch", 1), "layout": s.get("layout", "nn"),
            "bcast_b": False, "weight": w, "tuned_by_default": rank < MODEL_SHAPES}
           for rank, (s, w) in enumerate(ranked)]
    if quick:
        small = [g for g in out if 2 * g["batch"] * g["M"] * g["N"] * g["K"] <= QUICK_FLOP_CAP]
        return sorted(small, key=lambda g: -g["weight"])[:QUICK_PER_FAMILY]
    return out[:PER_FAMILY]


def conv_layers(suites: dict, quick: bool = False) -> list[dict]:
    """The heaviest conv geometries of the recorded suites (all directions of a layer add up) as conv_sweep layers."""
    def geometry(s):
        return json.dumps([s["x"], s["w"], s["stride"], s["padding"], s["dilation"], s["groups"]])

    ranked = _ranked(suites, {"conv2d", "conv2d_depthwise"}, geometry)
    out = [{"name": f"rank {rank + 1}", "x": s["x"], "w": s["w"], "stride": s["stride"], "padding": s["padding"],
            "dilation": s["dilation"], "groups": s["groups"], "weight": w, "tuned_by_default": rank < MODEL_SHAPES}
           for rank, (s, w) in enumerate(ranked)]
    if quick:
        small = [c for c in out if conv_sweep.flops(c) <= QUICK_FLOP_CAP]
        return sorted(small, key=lambda c: -c["weight"])[:QUICK_PER_FAMILY]
    return out[:PER_FAMILY]


def weighted_geomean(pairs) -> float | None:
    """exp(sum w log r / sum w) over (ratio, weight) pairs with a ratio."""
    pairs = [(r, w) for r, w in pairs if r and w]
    total = sum(w for _, w in pairs)
    return math.exp(sum(w * math.log(r) for r, w in pairs) / total) if total else None


def run(device, quick: bool = False, has_cuda: bool = False) -> tuple[dict, str]:
    """(payload section, markdown) of the GEMM and conv sweeps at the recorded real-model shapes."""
    suites = model_suites.load()
    picked_gemms, picked_convs = gemms(suites, quick), conv_layers(suites, quick)
    gemm, gemm_md = gemm_sweep.run(device, quick=quick, has_cuda=has_cuda, gemms=picked_gemms) if picked_gemms \
        else ({"rows": []}, "")
    convs, conv_md = conv_sweep.run(device, quick=quick, has_cuda=has_cuda, layers=picked_convs) if picked_convs \
        else ({"rows": []}, "")
    summary = {}
    for dtype in sorted({r["dtype"] for r in gemm["rows"]}):
        rows = [r for r in gemm["rows"] if r["dtype"] == dtype]
        summary[f"GEMM {dtype}"] = _summary(rows, "tvk_over_cuda_time")
    summary["conv2d float32"] = _summary(convs["rows"], "tvk_over_cudnn_time")
    table = ("## real-model shapes (tvk_kernels/tune/suites/: one training step of each third-party zoo model)\n\n"
             f"The {PER_FAMILY if not quick else QUICK_PER_FAMILY} heaviest GEMM shapes and conv layers of the "
             f"recorded suites; the first {MODEL_SHAPES} of each are in the tuner's default suite. tvk / peer GPU "
             "time, geometric mean weighted by each shape's share of a step:\n\n")
    table += ("| class | shapes | weighted geomean tvk/peer | in the tuner's default suite | not in it |\n"
              "|---|---|---|---|---|\n")
    for key, s in summary.items():
        table += f"| {key} | {s['count']} | {_fmt(s['weighted'])} | {_fmt(s['tuned'])} | {_fmt(s['untuned'])} |\n"
    return {"gemm": gemm, "conv": convs, "summary": summary}, table + "\n" + gemm_md + "\n" + conv_md


def _summary(rows, ratio: str) -> dict:
    return {"count": len(rows), "weighted": weighted_geomean((r[ratio], r["weight"]) for r in rows),
            "tuned": weighted_geomean((r[ratio], r["weight"]) for r in rows if r["tuned_by_default"]),
            "untuned": weighted_geomean((r[ratio], r["weight"]) for r in rows if not r["tuned_by_default"])}


def _fmt(value):
    return "-" if value is None else f"{value:.3g}"
