"""Layer norm backward: how finely to cut the rows among workgroups, measured.

Where a row fits WG threads' registers 16 times over, layer_norm_backward is one fused pass (norm.comp
PHASE 9): the rows are cut into TARGET_GROUPS chunks of at least FUSED_MIN_CHUNK rows, each workgroup
computes grad_in for its rows and writes partial column sums of grad * xhat and grad, and the reduce
kernel adds the partials (kernels/norm.py). Fewer, longer chunks mean fewer partial rows to add; more,
shorter ones a shorter chain of row steps per workgroup and more workgroups in flight. Elsewhere (wider rows, no grad_in) a
row pass and a column pass split by SPLIT_ROWS run instead. This times the whole backward (grad_in,
grad_weight, grad_bias) per shape for the device's own config and for other TARGET_GROUPS (and one
SPLIT_ROWS), GPU time from Vulkan timestamps after a spin-up per case, beside torch CUDA's
native_layer_norm_backward (its own process, CUDA graphs) where CUDA is present. Each candidate's
gradients are checked against numpy first. Shapes: the norm tuner's suite and ones it never saw.

    python benchmarks/layer_norm_split.py [--quick] [--out DIR]
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (rows, cols); "tuned": in tvk_kernels/tune/targets/norm.py's suite
SHAPES = [
    (4096, 256, "zoo transformer (16 x 256 tokens, d 256)"),
    (8192, 768, "GPT-2 small, 8 x 1024 tokens"),
    (12608, 384, "ViT-S, 64 x 197 tokens"),
    (32768, 128, "narrow rows"),
    (2048, 1024, "BERT-large, 4 x 512 tokens"),
    (1000, 300, "odd sizes"),
    (512, 4096, "wide rows"),
    (16384, 64, "tuned"),
    (4096, 1024, "tuned"),
]
QUICK_SHAPES = [(256, 48, "quick"), (67, 130, "quick")]
# overrides of the device's own config; None: the config as the device resolves it
# (the fused backward, norm.comp PHASE 9, cuts the rows into TARGET_GROUPS chunks; SPLIT_ROWS only matters
# where it does not fuse: rows wider than WG x 16, or no grad_in)
CANDIDATES = [None, {"TARGET_GROUPS": 32}, {"TARGET_GROUPS": 128}, {"TARGET_GROUPS": 512}, {"TARGET_GROUPS": 2048},
              {"SPLIT_ROWS": 8}]

_CUDA_PEER = r"""
import json, sys, torch
shapes = json.loads(sys.argv[1])
out = []
for rows, cols in shapes:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(rows, cols, device="cuda", generator=gen)
    g = torch.randn(rows, cols, device="cuda", generator=gen)
    w = torch.randn(cols, device="cuda", generator=gen)
    b = torch.zeros(cols, device="cuda")
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [cols], w, b, 1e-5)
    bwd = lambda: torch.ops.aten.native_layer_norm_backward(g, x, [cols], mean, rstd, w, b, [True, True, True])
    seconds, method = time_cuda(bwd)
    out.append({"rows": rows, "cols": cols, "cuda_s": seconds, "cuda_timing": method})
print(json.dumps(out))
"""


def cuda_peer(shapes) -> dict:
    """{(rows, cols): (seconds, method)} from torch CUDA in a process without torchvk; {} without CUDA."""
    try:
        import torch
        if not torch.cuda.is_available():
            return {}
    except ImportError:
        return {}
    from tvk_kernels.bench.cuda_timer import source
    done = subprocess.run([sys.executable, "-c", source() + _CUDA_PEER, json.dumps([s[:2] for s in shapes])],
                          capture_output=True, text=True, check=True)
    return {(r["rows"], r["cols"]): (r["cuda_s"], r["cuda_timing"]) for r in json.loads(done.stdout.splitlines()[-1])}


def check(device, case, params) -> float:
    """Max relative error of grad_weight and grad_bias against numpy (float64)."""
    rows, cols, x, g, bufs = case
    case_run(device, case, params)
    got_w = device.download(bufs["dw"], np.float32, (cols,)).astype(np.float64)
    got_b = device.download(bufs["db"], np.float32, (cols,)).astype(np.float64)
    xd, gd = x.astype(np.float64), g.astype(np.float64)
    xhat = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5)
    want_w, want_b = (gd * xhat).sum(0), gd.sum(0)
    return max(float(np.abs(got_w - want_w).max() / max(np.abs(want_w).max(), 1e-30)),
               float(np.abs(got_b - want_b).max() / max(np.abs(want_b).max(), 1e-30)))


def make_case(device, rows, cols):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    g = rng.standard_normal((rows, cols), dtype=np.float32)
    alloc = device.allocator.alloc
    bufs = {"x": device.upload(x), "g": device.upload(g), "w": device.upload(np.ones(cols, np.float32)),
            "y": alloc(4 * rows * cols), "dx": alloc(4 * rows * cols), "stats": alloc(8 * rows),
            "dw": alloc(4 * cols), "db": alloc(4 * cols)}
    from tvk_kernels.kernels.norm import layer_norm
    layer_norm(device, bufs["x"].address, bufs["y"].address, (rows, cols), 1, bufs["w"].address, 0, 1e-5,
               bufs["stats"].address, bufs["stats"].address + 4 * rows)
    return rows, cols, x, g, bufs


def case_run(device, case, params):
    from tvk_kernels.kernels.norm import layer_norm_backward
    rows, cols, _, _, b = case
    layer_norm_backward(device, b["g"].address, b["x"].address, b["stats"].address, b["stats"].address + 4 * rows,
                        (rows, cols), 1, b["w"].address, b["dx"].address, b["dw"].address, b["db"].address,
                        params=params)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small shapes, few repeats (a check of the script)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment, md_table, write_result
    from tvk_kernels.bench.cuda_timer import SPIN_UP_SECONDS
    from tvk_kernels.kernels.launch import family
    from tvk_kernels.kernels.norm import Norm
    from tvk_kernels.tune.measure import time_candidate

    device = get_device(0)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    peer = {} if args.quick else cuda_peer(shapes)
    results, table = [], []
    for rows, cols, note in shapes:
        case = make_case(device, rows, cols)
        own = family(device, Norm).resolve({"n": rows * cols})
        cuda_s, method = peer.get((rows, cols), (None, None))
        best = None
        for override in CANDIDATES:
            params = dict(override) if override else None
            effective = {k: int(own[k]) for k in ("TARGET_GROUPS", "SPLIT_ROWS")} | (override or {})
            error = check(device, case, params)
            if error > 1e-4:
                raise AssertionError(f"{rows}x{cols} {effective}: grad_weight/bias off by {error:.3g} (relative)")
            seconds = time_candidate(device, lambda i, p=params: case_run(device, case, p), n_inputs=1,
                                     repeats=3 if args.quick else 20,
                                     warm_seconds=0.0 if args.quick else SPIN_UP_SECONDS)
            gbps = 12 * rows * cols / seconds / 1e9  # read grad and x, write grad_in: the least a backward moves
            row = {"rows": rows, "cols": cols, "shape_note": note, "override": override, "params": effective,
                   "own_config": override is None, "tvk_s": seconds, "tvk_gbps": gbps, "max_rel_error": error,
                   "cuda_s": cuda_s, "cuda_timing": method, "tvk_over_cuda_time": seconds / cuda_s if cuda_s else None}
            results.append(row)
            best = seconds if best is None else min(best, seconds)
            table.append([f"{rows} x {cols}", note, "own config" if override is None else json.dumps(override),
                          effective["TARGET_GROUPS"], effective["SPLIT_ROWS"], seconds * 1e6, gbps,
                          cuda_s * 1e6 if cuda_s else None, seconds / cuda_s if cuda_s else None])
            print(table[-1], flush=True)
        for b in case[4].values():
            b.free()
    payload = {"experiment": "layer_norm_split", "environment": environment(device), "rows": results}
    if args.out:
        write_result(args.out, "layer_norm_split", payload, md_table(
            ["rows x cols", "shape", "candidate", "TARGET_GROUPS", "SPLIT_ROWS", "tvk us (fwd-free backward)",
             "tvk GB/s (12 B/elem)", "CUDA us", "tvk / CUDA time"], table))


if __name__ == "__main__":
    os.environ.setdefault("TVK_VALIDATION", "0")
    main()
