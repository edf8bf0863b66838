"""Conv sweep: a fixed list of common CNN layers beside torch CUDA (cuDNN), fp32, all three directions.

ResNet-18/50 at 224 px (the 7x7 stem, 3x3 convs with and without stride 2, 1x1 bottleneck
reduce/expand, 1x1 stride-2 downsamples), VGG 3x3 at 224/112/56 px, MobileNetV2 depthwise 3x3
(stride 1 and 2) and pointwise 1x1, UNet 3x3 at 128/64 px and a dilated 3x3; none is in the
conv2d tuning suites (tvk_kernels/tune/targets/conv2d.py), so the sweep measures what
tuning did not see. Batch sizes (1, 8 or 32) keep each layer at most ~2 GFLOP. Each layer runs
forward, grad-input and grad-weight; each tvk result is checked against torch CPU in float64.
cuDNN runs in a process of its own that never imports torchvk (see torchvk/experiments/peer.py),
with TF32 off. Reported: per layer and direction the time ratio tvk/cuDNN, its geometric mean,
and the worst 5.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from tvk_kernels.bench.common import md_table
from tvk_kernels.bench.cuda_timer import SPIN_UP_SECONDS
from tvk_kernels.kernels import conv, conv_family
from tvk_kernels.tune.measure import time_candidate
from tvk_kernels.tune.targets.conv2d import Conv2dTarget

from .sweep_common import geomean, run_cuda_peer, worst

DIRECTIONS = ("fwd", "bwd_input", "bwd_weight")


def _layer(name, batch, cin, cout, hw, k, stride=1, padding=None, dilation=1, groups=1) -> dict:
    pad = dilation * (k - 1) // 2 if padding is None else padding  # "same" size at stride 1
    return {"name": name, "x": [batch, cin, hw, hw], "w": [cout, cin // groups, k, k], "stride": stride,
            "padding": pad, "dilation": dilation, "groups": groups}


LAYERS = [
    # ResNet-18 at 224 px (3x3 layers whose batch-8 shape is tuned run at batch 1)
    _layer("ResNet stem", 8, 3, 64, 224, 7, stride=2, padding=3),
    _layer("ResNet-18 3x3", 1, 64, 64, 56, 3),
    _layer("ResNet-18 3x3/2", 8, 64, 128, 56, 3, stride=2),
    _layer("ResNet-18 3x3", 1, 128, 128, 28, 3),
    _layer("ResNet-18 3x3/2", 8, 128, 256, 28, 3, stride=2),
    _layer("ResNet-18 3x3", 1, 256, 256, 14, 3),
    _layer("ResNet-18 3x3/2", 8, 256, 512, 14, 3, stride=2),
    _layer("ResNet-18 3x3", 8, 512, 512, 7, 3),
    _layer("ResNet-18 downsample", 32, 128, 256, 28, 1, stride=2),
    _layer("ResNet-18 downsample", 32, 256, 512, 14, 1, stride=2),
    # ResNet-50 bottlenecks at 224 px
    _layer("ResNet-50 1x1 reduce", 8, 256, 64, 56, 1),
    _layer("ResNet-50 1x1 expand", 8, 64, 256, 56, 1),
    _layer("ResNet-50 1x1 reduce", 8, 1024, 256, 14, 1),
    _layer("ResNet-50 1x1 expand", 8, 512, 2048, 7, 1),
    _layer("ResNet-50 downsample", 8, 512, 1024, 28, 1, stride=2),
    _layer("ResNet-50 3x3/2", 8, 128, 128, 56, 3, stride=2),
    # VGG at 224/112/56 px (its wider layers exceed 2 GFLOP even at batch 1)
    _layer("VGG 3x3", 8, 3, 64, 224, 3),
    _layer("VGG 3x3", 1, 64, 128, 112, 3),
    _layer("VGG 3x3", 1, 128, 256, 56, 3),
    _layer("VGG 3x3", 1, 256, 512, 28, 3),
    # MobileNetV2 at 224 px: depthwise 3x3 and pointwise 1x1
    _layer("MobileNetV2 depthwise", 32, 32, 32, 112, 3, groups=32),
    _layer("MobileNetV2 depthwise/2", 32, 96, 96, 112, 3, stride=2, groups=96),
    _layer("MobileNetV2 depthwise", 32, 144, 144, 56, 3, groups=144),
    _layer("MobileNetV2 depthwise/2", 32, 144, 144, 56, 3, stride=2, groups=144),
    _layer("MobileNetV2 depthwise/2", 32, 576, 576, 14, 3, stride=2, groups=576),
    _layer("MobileNetV2 pointwise", 32, 16, 96, 112, 1),
    _layer("MobileNetV2 pointwise", 32, 144, 24, 56, 1),
    _layer("MobileNetV2 pointwise", 32, 320, 1280, 7, 1),
    # UNet 3x3 at 128/64 px, and a dilated 3x3 (DeepLab-style)
    _layer("UNet 3x3", 1, 64, 64, 128, 3),
    _layer("UNet 3x3", 1, 128, 128, 64, 3),
    _layer("dilated 3x3 (d2)", 1, 128, 128, 64, 3, dilation=2),
]

# CI (lavapipe): a strided 7x7, a strided depthwise and a dilated conv, seconds in all
QUICK_LAYERS = [
    _layer("stem-like 7x7/2", 1, 3, 8, 16, 7, stride=2, padding=3),
    _layer("depthwise/2", 2, 8, 8, 8, 3, stride=2, groups=8),
    _layer("dilated 3x3 (d2)", 1, 4, 4, 8, 3, dilation=2),
]


def _geo(layer: dict) -> dict:
    return {k: layer[k] for k in ("stride", "padding", "dilation", "groups")}


def flops(layer: dict) -> int:
    """Multiply-adds x 2 of one direction (the three directions do the same work)."""
    n, oc, oh, ow = conv.conv2d_output_shape(layer["x"], layer["w"], **_geo(layer))
    return 2 * n * oc * oh * ow * math.prod(layer["w"][1:])


def _gemm_mnk(direction: str, layer: dict) -> list[int]:
    """The implicit GEMM's M, N, K for one direction: what the kernel's tile choice sees."""
    s = conv_family.tune_shape(direction, layer["x"], layer["w"], **_geo(layer))
    return [s["M"], s["N"], s["K"]]


def tuned_keys() -> set:
    """The geometries of the conv2d tuning suites, for leaving them out of the sweep."""
    return {_key(s) for suite in Conv2dTarget.suites.values() for s in suite}


def _key(s: dict) -> tuple:
    return tuple(s["x"]), tuple(s["w"]), s["stride"], s["padding"], s["dilation"], s["groups"]


def _tvk_one(device, layer: dict, repeats: int, quick: bool) -> dict:
    """{direction: (GPU seconds, max relative error vs torch CPU float64)} for one layer."""
    xs, ws, geo = tuple(layer["x"]), tuple(layer["w"]), _geo(layer)
    ys = conv.conv2d_output_shape(xs, ws, **geo)
    rng = np.random.default_rng(sum(xs) * 7 + sum(ws))
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ws, dtype=np.float32) * 0.1
    go = rng.standard_normal(ys, dtype=np.float32)
    X, W, GO = device.upload(x), device.upload(w), device.upload(go)
    Y, GX, GW = (device.allocator.alloc(4 * math.prod(s)) for s in (ys, xs, ws))
    runs = {
        "fwd": (Y, ys, lambda i: conv.conv2d_forward(device, X, W, None, Y, xs, ws, **geo)),
        "bwd_input": (GX, xs, lambda i: conv.conv2d_backward_input(device, GO, W, GX, xs, ws, **geo)),
        "bwd_weight": (GW, ws, lambda i: conv.conv2d_backward_weight(device, GO, X, GW, xs, ws, **geo)),
    }
    out = {}
    try:
        tx, tw = (torch.from_numpy(a).double().requires_grad_(True) for a in (x, w))
        ref_y = F.conv2d(tx, tw, **geo)
        ref_gx, ref_gw = torch.autograd.grad(ref_y, (tx, tw), torch.from_numpy(go).double())
        refs = {"fwd": ref_y.detach(), "bwd_input": ref_gx, "bwd_weight": ref_gw}
        for direction, (buf, shape, run) in runs.items():
            # the better of two measurements, the first after a longer warm-up (see gemm_sweep.py)
            t = min(time_candidate(device, run, n_inputs=1, warmup=1, repeats=repeats, warm_seconds=s)
                    for s in ((0.01, 0.0) if quick else (SPIN_UP_SECONDS, None)))
            got = device.download(buf, np.float32, shape).astype(np.float64)
            ref = refs[direction].numpy()
            out[direction] = (t, float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30)))
    finally:
        for buf in (X, W, GO, Y, GX, GW):
            buf.free()
    return out


_CUDA_PEER = r"""
import torch.nn.functional as F
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
layers, directions, repeats = json.loads(sys.stdin.read())
out = []
for L in layers:
    geo = {k: L[k] for k in ("stride", "padding", "dilation", "groups")}
    x = torch.randn(*L["x"], device="cuda")
    w = torch.randn(*L["w"], device="cuda")
    go = F.conv2d(x, w, **geo).normal_()
    fns = {"fwd": lambda: F.conv2d(x, w, **geo),
           "bwd_input": lambda: torch.nn.grad.conv2d_input(x.shape, w, go, **geo),
           "bwd_weight": lambda: torch.nn.grad.conv2d_weight(x, w.shape, go, **geo)}
    out += [median_seconds(fns[d], repeats) for d in directions]
    del x, w, go
print(json.dumps(out))
"""


def cuda_times(layers: list[dict], repeats: int = 10) -> tuple[list[float], list[str]] | None:
    """(median cuDNN seconds per (layer, direction), layer-major, the timing method of each), from a
    process without torchvk; None if it fails."""
    return run_cuda_peer(_CUDA_PEER, [layers, DIRECTIONS, repeats], "conv sweep")


def label(layer: dict) -> str:
    n, c, h, _ = layer["x"]
    oc, _, k, _ = layer["w"]
    extra = "".join(f" {short}{layer[key]}" for short, key in (("s", "stride"), ("d", "dilation"), ("g", "groups"))
                    if layer[key] != 1)
    return f"{layer['name']}: {k}x{k} {c}->{oc} {h}px b{n}{extra}"


def run(device, quick: bool = False, has_cuda: bool = False, layers: list[dict] | None = None) -> tuple[dict, str]:
    """Time the sweep; returns (payload section, markdown)."""
    if layers is None:
        layers = QUICK_LAYERS if quick else LAYERS
    repeats = 3 if quick else 10
    cuda, methods = (cuda_times(layers, repeats) if has_cuda else None) or (None, None)
    rows = []
    for li, layer in enumerate(layers):
        for di, (direction, (t, err)) in enumerate(_tvk_one(device, layer, repeats, quick).items()):
            tc = cuda[li * len(DIRECTIONS) + di] if cuda else None
            method = methods[li * len(DIRECTIONS) + di] if methods else None
            rows.append({**layer, "label": label(layer), "direction": direction,
                         "gemm_mnk": _gemm_mnk(direction, layer), "tvk_s": t,
                         "tvk_tflops": flops(layer) / t / 1e12, "cudnn_s": tc, "cuda_timing": method,
                         "tvk_over_cudnn_time": t / tc if tc else None, "rel_err": err})
    summary = {"float32": {
        "count": len(rows),
        "geomean_tvk_over_cudnn_time": geomean(r["tvk_over_cudnn_time"] for r in rows if r["tvk_over_cudnn_time"]),
        "max_rel_err": max(r["rel_err"] for r in rows),
    }}
    slowest = worst(rows, "tvk_over_cudnn_time",
                    ("label", "direction", "tvk_over_cudnn_time", "tvk_s", "cudnn_s", "gemm_mnk"))
    section = {"layers": layers, "rows": rows, "summary": summary, "worst": slowest}
    return section, _markdown(rows, summary, slowest)


def _markdown(rows, summary, worst) -> str:

    lines = ["## Conv sweep (ResNet, VGG, MobileNetV2, UNet layers, none tuned; tvk vs cuDNN, fp32, TF32 off)", ""]
    for dtype, s in summary.items():
        g = s["geomean_tvk_over_cudnn_time"]
        lines.append(f"- {dtype}: {s['count']} layer/direction pairs, geometric mean tvk/cuDNN time "
                     f"{'-' if g is None else f'{g:.3g}x'}, max relative error {s['max_rel_err']:.3g}")
    if worst:
        lines += ["", "Worst 5:", "",
                  md_table(["layer", "direction", "tvk/cuDNN", "tvk ms", "cuDNN ms", "GEMM MxNxK"],
                           [[w["label"], w["direction"], w["tvk_over_cudnn_time"], w["tvk_s"] * 1e3,
                             w["cudnn_s"] * 1e3, "x".join(map(str, w["gemm_mnk"]))] for w in worst])]
    lines += ["", md_table(["layer", "direction", "GEMM MxNxK", "tvk ms", "TFLOP/s", "cuDNN ms", "tvk/cuDNN",
                            "rel err"],
                           [[r["label"], r["direction"], "x".join(map(str, r["gemm_mnk"])), r["tvk_s"] * 1e3,
                             r["tvk_tflops"], r["cudnn_s"] and r["cudnn_s"] * 1e3, r["tvk_over_cudnn_time"],
                             r["rel_err"]] for r in rows])]
    return "\n".join(lines)
