"""Kernel benchmarks beside torch CUDA (issue targets of the kernel library and the device):

  conv2d       the CIFAR-10 CNN's layer shapes at batch 128: forward, grad-input, grad-weight,
               GPU time vs cuDNN (fp32, TF32 off); each result checked against torch CPU
  bandwidth    reductions (sum, row sum), softmax, layer norm and N-d elementwise (broadcast
               mul, transposed copy) at 16M floats, and layer norm's backward (weight and bias
               gradients too) there and at real models' shapes: GB/s vs torch CUDA's on the same op
  gemm sweep   a seeded sample of ~60 GEMMs (all layouts, batched and not, fp32 and fp16) vs
               cuBLAS: geometric mean time ratio and the worst 5 (gemm_sweep.py)
  real shapes  the GEMMs and convs real models' training steps spend their time in (model_shapes.py:
               the recorded suites of tvk_kernels/tune/suites/), tuned by default and not
  conv sweep   ~30 untuned ResNet/VGG/MobileNetV2/UNet conv layers, forward and both backwards, vs
               cuDNN (fp32): geometric mean time ratio and the worst 5 (conv_sweep.py)
  attention    fused SDPA forward and forward + backward vs torch CUDA's, and a seq-4096 training
               step under a 2 GiB cap (attention_bench.py)
  per-op host  host time to issue one small op in eager mode: torchvk (deferred) vs torch
               CUDA eager (asynchronous launch), measured in a process without torchvk

  roofline     the device's measured peaks first (tvk_kernels/bench/roofline.py): every row then carries
               tvk's and the peer's fraction of the peak of its kind (FLOP/s of its dtype, copy GB/s)

GPU times come from Vulkan timestamps and, for torch CUDA, from CUDA graph replays (or profiled kernels:
tvk_kernels/bench/cuda_timer.py), median of repeats after a spin-up before each case.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np

import torch
import torch.nn.functional as F

from tvk_kernels.bench import roofline
from tvk_kernels.bench.common import environment, md_table, median, write_result
from tvk_kernels.bench.cuda_timer import SPIN_UP_SECONDS, time_cuda
from tvk_kernels.kernels import conv, embedding, norm, reduce, softmax
from tvk_kernels.kernels import elementwise as elementwise_kernels
from tvk_kernels.kernels.elementwise import add
from tvk_kernels.runtime.graph import capture
from tvk_kernels.tune.measure import time_candidate

from . import attention_bench, conv_sweep, gemm_sweep, model_shapes

# (C_in, C_out, H) of the CIFAR CNN's 3x3, padding-1 convolutions (torchvk/experiments/models.py)
CIFAR_CONVS = [(3, 32, 32), (32, 32, 32), (32, 64, 16), (64, 64, 16), (64, 128, 8)]


def _gpu(device, fn, quick=False):
    """Median GPU seconds of `fn()` (Vulkan timestamps). The warm-up is the spin-up every timed case
    starts with (SPIN_UP_SECONDS of this very call, tvk_kernels/bench/cuda_timer.py). quick: 3 repeats
    after one warm-up run (a timed warm-up issues runs for 0.3 s: dozens of a conv that takes lavapipe 0.1 s)."""
    return time_candidate(device, lambda i: fn(), n_inputs=1, warmup=1, repeats=3 if quick else 10,
                          warm_seconds=0.0 if quick else SPIN_UP_SECONDS)


def conv2d(device, batch, has_cuda, quick=False):

    rows = []
    for cin, cout, h in CIFAR_CONVS:
        xs, ws = (batch, cin, h, h), (cout, cin, 3, 3)
        rng = np.random.default_rng(cin)
        x = rng.standard_normal(xs, dtype=np.float32)
        w = rng.standard_normal(ws, dtype=np.float32) * 0.1
        go = rng.standard_normal((batch, cout, h, h), dtype=np.float32)
        X, W, GO = device.upload(x), device.upload(w), device.upload(go)
        Y, GX, GW = (device.allocator.alloc(4 * int(np.prod(s))) for s in ((batch, cout, h, h), xs, ws))
        geo = dict(stride=1, padding=1, dilation=1, groups=1)
        runs = {
            "fwd": lambda: conv.conv2d_forward(device, X, W, None, Y, xs, ws, **geo),
            "bwd_input": lambda: conv.conv2d_backward_input(device, GO, W, GX, xs, ws, **geo),
            "bwd_weight": lambda: conv.conv2d_backward_weight(device, GO, X, GW, xs, ws, **geo),
        }
        tx, tw, tgo = (torch.from_numpy(a).requires_grad_(True) for a in (x, w, go))
        ref_y = F.conv2d(tx, tw, padding=1)
        ref_gx, ref_gw = torch.autograd.grad(ref_y, (tx, tw), tgo)
        refs = {"fwd": (Y, ref_y), "bwd_input": (GX, ref_gx), "bwd_weight": (GW, ref_gw)}
        cuda = {}
        if has_cuda:
            torch.backends.cudnn.allow_tf32 = False
            cx, cw, cgo = (t.detach().cuda() for t in (tx, tw, tgo))
            cuda = {
                "fwd": lambda: F.conv2d(cx, cw, padding=1),
                "bwd_input": lambda: torch.nn.grad.conv2d_input(xs, cw, cgo, padding=1),
                "bwd_weight": lambda: torch.nn.grad.conv2d_weight(cx, ws, cgo, padding=1),
            }
        for direction, run in runs.items():
            t = _gpu(device, run, quick)
            buf, ref = refs[direction]
            got = device.download(buf, np.float32, tuple(ref.shape))
            ref = ref.detach()
            err = float(np.abs(got - ref.numpy()).max() / max(float(ref.abs().max()), 1e-30))
            tc, method = time_cuda(cuda[direction]) if cuda else (None, None)
            flops = 2 * batch * cout * cin * 9 * h * h
            rows.append({"layer": f"{cin}->{cout} {h}x{h}", "direction": direction, "tvk_s": t, "cudnn_s": tc,
                         "cuda_timing": method, "tvk_tflops": flops / t / 1e12,
                         "tvk_over_cudnn_time": (t / tc) if tc else None, "max_rel_err": err})
        for b in (X, W, GO, Y, GX, GW):  # noqa: B007
            b.free()
    return rows


def bandwidth(device, n_rows, n_cols, has_cuda, quick=False):


    n = n_rows * n_cols
    x = np.random.default_rng(0).standard_normal((n_rows, n_cols), dtype=np.float32)
    X = device.upload(x)
    Y = device.allocator.alloc(4 * n)
    R = device.allocator.alloc(4 * n_rows)
    row = device.upload(np.ones(n_cols, np.float32))
    shape = (n_rows, n_cols)
    F = elementwise_kernels.Operand
    ops = {  # name: (tvk call, bytes moved, torch CUDA call)
        "sum (all)": (lambda: reduce.reduce(device, "sum", X.address, R.address, shape), 4 * n,
                      lambda t: t.sum()),
        "sum (rows)": (lambda: reduce.reduce(device, "sum", X.address, R.address, shape, dims=(1,)), 4 * n,
                       lambda t: t.sum(1)),
        "softmax (rows)": (lambda: softmax.softmax(device, X.address, Y.address, shape, -1), 8 * n,
                           lambda t: t.softmax(-1)),
        "layer norm (rows)": (lambda: norm.layer_norm(device, X.address, Y.address, shape), 8 * n,
                              lambda t: torch.nn.functional.layer_norm(t, (n_cols,))),
        "mul, row broadcast": (lambda: elementwise_kernels.binary_nd(device, "mul", F(X, shape), F(row, (1, n_cols)), F(Y, shape)),
                               8 * n, lambda t: t * t[0:1]),
        "transposed copy": (lambda: elementwise_kernels.copy(device, F(X, (n_cols, n_rows), (1, n_cols)), F(Y, (n_cols, n_rows))),
                            8 * n, lambda t: t.t().contiguous()),
        "relu": (lambda: elementwise_kernels.unary(device, "relu", F(X, shape), F(Y, shape)), 8 * n, lambda t: t.relu()),
    }
    ct = torch.from_numpy(x).cuda() if has_cuda else None
    rows = []
    for name, (run, nbytes, torch_fn) in ops.items():
        t = _gpu(device, run, quick)
        tc, method = time_cuda(lambda: torch_fn(ct)) if has_cuda else (None, None)
        rows.append(_bandwidth_row(name, n, nbytes, t, tc, method))
    for b in (X, Y, R, row):
        b.free()
    shapes = [(n_rows, n_cols)] + ([] if quick else LAYER_NORM_SHAPES)
    rows += [layer_norm_backward(device, r, c, has_cuda, quick) for r, c in shapes]
    return rows + [embedding_backward(device, *shape, has_cuda, quick) for shape in EMBEDDING_SHAPES[:1 if quick else None]]


# (rows, cols) of real models' layer norms beside the section's square: the zoo transformer (16 x 128
# tokens, d 128), GPT-2 small (8 x 1024 tokens, d 768), ViT-S (64 x 197 tokens, d 384), odd sizes; the
# norm tuner's suite holds none of them
LAYER_NORM_SHAPES = [(2048, 128), (8192, 768), (12608, 384), (1000, 300)]


# (tokens, rows, rows the tokens hold, dim, name) of embedding backwards: BERT's token types (every position
# holds row 0 of 2) and words, GPT-2 small's words, T5's relative position buckets (tokens: its L x L scores),
# a char-level vocabulary; the embedding tuner's suite holds none of them
EMBEDDING_SHAPES = [(4096, 2, 1, 256, "token types"), (4096, 8192, 8192, 256, "words"),
                    (8192, 50257, 50257, 768, "words"), (65536, 32, 32, 8, "relative positions"),
                    (16384, 96, 96, 512, "characters")]


def _bandwidth_row(op, n, nbytes, t, tc, method) -> dict:
    return {"op": op, "n": n, "tvk_s": t, "tvk_gbps": nbytes / t / 1e9, "cuda_s": tc, "cuda_timing": method,
            "cuda_gbps": nbytes / tc / 1e9 if tc else None, "tvk_over_cuda_bandwidth": (tc / t) if tc else None}


def layer_norm_backward(device, n_rows, n_cols, has_cuda, quick=False) -> dict:
    """layer_norm's backward with its weight and bias gradients (a model's LayerNorm), rows x cols; the
    bytes are the least any backward moves: grad and x read, grad_in written (12 per element)."""
    n = n_rows * n_cols
    gen = np.random.default_rng(1)
    x, g = (gen.standard_normal((n_rows, n_cols), dtype=np.float32) for _ in range(2))
    w = np.ones(n_cols, np.float32)
    X, G, W = device.upload(x), device.upload(g), device.upload(w)
    alloc = device.allocator.alloc
    Y, DX, stats, DW = alloc(4 * n), alloc(4 * n), alloc(8 * n_rows), alloc(8 * n_cols)
    mean, rstd = stats.address, stats.address + 4 * n_rows
    shape = (n_rows, n_cols)
    norm.layer_norm(device, X.address, Y.address, shape, 1, W.address, 0, 1e-5, mean, rstd)
    t = _gpu(device, lambda: norm.layer_norm_backward(device, G.address, X.address, mean, rstd, shape, 1, W.address,
                                                      DX.address, DW.address, DW.address + 4 * n_cols), quick)
    xhat = (x - x.mean(1, keepdims=True, dtype=np.float64)) / np.sqrt(x.var(1, keepdims=True, dtype=np.float64) + 1e-5)
    want = np.stack([(g * xhat).sum(0), g.sum(0, dtype=np.float64)])  # grad_weight, grad_bias
    got = device.download(DW, np.float32, (2, n_cols))
    error = float(np.abs(got - want).max() / np.abs(want).max())
    tc = method = None
    if has_cuda:
        cx, cg, cw = (torch.from_numpy(a).cuda() for a in (x, g, w))
        cb = torch.zeros_like(cw)
        _, cmean, crstd = torch.ops.aten.native_layer_norm(cx, [n_cols], cw, cb, 1e-5)
        tc, method = time_cuda(lambda: torch.ops.aten.native_layer_norm_backward(
            cg, cx, [n_cols], cmean, crstd, cw, cb, [True, True, True]))
    for b in (X, G, W, Y, DX, stats, DW):
        b.free()
    return _bandwidth_row(f"layer norm backward, {n_rows} x {n_cols}", n, 12 * n, t, tc, method) | {"max_rel_err": error}


def embedding_backward(device, tokens, rows, held, dim, name, has_cuda, quick=False) -> dict:
    """F.embedding's weight gradient (zeroed, then summed over the positions holding each row), the tokens
    drawn from the first `held` of `rows`; the bytes are the least any backward moves: grad_out and the
    indices read, the gradient written (dense, as torch's)."""
    gen = np.random.default_rng(2)
    g = gen.standard_normal((tokens, dim), dtype=np.float32)
    idx = gen.integers(0, held, tokens)
    G, I, W = device.upload(g), device.upload(idx), device.allocator.alloc(4 * rows * dim)
    t = _gpu(device, lambda: embedding.embedding_backward(device, G, I, W, tokens, rows, dim), quick)
    want = np.zeros((rows, dim))
    np.add.at(want, idx, g.astype(np.float64))
    error = float(np.abs(device.download(W, np.float32, (rows, dim)) - want).max() / np.abs(want).max())
    tc = method = None
    if has_cuda:
        cg, ci = torch.from_numpy(g).cuda(), torch.from_numpy(idx).cuda()
        tc, method = time_cuda(lambda: torch.ops.aten.embedding_dense_backward(cg, ci, rows, -1, False))
    for b in (G, I, W):
        b.free()
    nbytes = 4 * tokens * dim + 8 * tokens + 4 * rows * dim
    return _bandwidth_row(f"embedding backward, {name}: {tokens} tokens x {dim} into {rows} rows", tokens * dim,
                          nbytes, t, tc, method) | {"max_rel_err": error}


_CUDA_OVERHEAD = r"""
import time, json, torch
a = torch.ones(16, device="cuda"); b = torch.ones(16, device="cuda")
for _ in range(100): a + b
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(%d): a + b
t = (time.perf_counter() - t0) / %d
torch.cuda.synchronize()
print(json.dumps({"us": t * 1e6}))
"""


def per_op_overhead(device, count, has_cuda):


    a = torch.ones(16, device=f"tvk:{device.index}")
    b = torch.ones(16, device=f"tvk:{device.index}")
    for _ in range(100):
        a + b
    torch.tvk.synchronize()
    t0 = time.perf_counter()
    for _ in range(count):
        a + b
    tvk_us = (time.perf_counter() - t0) / count * 1e6
    torch.tvk.synchronize()
    cuda_us = None
    if has_cuda:  # a process without torchvk: see torchvk/experiments/peer.py
        out = subprocess.run([sys.executable, "-c", _CUDA_OVERHEAD % (count, count)], capture_output=True, text=True)
        if out.returncode == 0:
            cuda_us = json.loads(out.stdout.strip().splitlines()[-1])["us"]
    return {"op": "a + b (16 floats)", "count": count, "tvk_us": tvk_us, "torch_cuda_us": cuda_us,
            "tvk_over_cuda": (tvk_us / cuda_us) if cuda_us else None}


def graph_replay(device, counts=(10, 1000), repeats=20) -> dict:
    """Host time of one replay of a captured graph of N small kernels (GPU time excluded:
    each replay starts after the previous one finished)."""

    x = device.upload(np.ones(256, np.float32))
    y = device.allocator.alloc(1024)
    out = {}
    for count in counts:
        with capture(device) as graph:
            for _ in range(count):
                add(device, x, x, y, 256)
        times = []
        for _ in range(repeats):
            graph.wait()
            t0 = time.perf_counter()
            graph.replay()
            times.append(time.perf_counter() - t0)
        graph.wait()
        out[str(count)] = median(times) * 1e6
    return {"kernels_to_replay_us": out}


def of_peak(payload: dict, peaks: dict) -> dict:
    """Each row's `tvk_of_peak` and `cuda_of_peak`: its FLOP/s over the peak of its dtype, or its
    bandwidth over the copy peak; the CUDA peer's from its time. Returns the geometric means per
    section (and dtype), both sides."""
    sections = {"conv2d": ("tvk_tflops", "tvk_s", "cudnn_s"), "bandwidth": ("tvk_gbps", "tvk_s", "cuda_s"),
                "gemm_sweep": ("tvk_tflops", "tvk_s", "cuda_s"), "conv_sweep": ("tvk_tflops", "tvk_s", "cudnn_s"),
                "sdpa": ("tvk_fwd_tflops", "tvk_fwd_s", "cuda_fwd_s"),
                "real-model GEMM": ("tvk_tflops", "tvk_s", "cuda_s"), "real-model conv": ("tvk_tflops", "tvk_s", "cudnn_s")}
    tables = {**payload, "real-model GEMM": payload["model_shapes"]["gemm"], "real-model conv": payload["model_shapes"]["conv"]}
    means = {}
    for section, (rate, tvk_time, cuda_time) in sections.items():
        value = tables[section]
        for row in value["rows"] if isinstance(value, dict) else value:
            if rate == "tvk_gbps":
                peak = peaks["copy_gbps"]
            else:
                peak = roofline.peak_tflops(peaks, row.get("dtype", "float32"))
            row["tvk_of_peak"] = roofline.fraction(row[rate], peak)
            peer_rate = row[rate] * row[tvk_time] / row[cuda_time] if row.get(cuda_time) else None
            row["cuda_of_peak"] = roofline.fraction(peer_rate, peak)
            key = f"{section} {row['dtype']}" if "dtype" in row else section
            means.setdefault(key, {"tvk": [], "cuda": []})
            means[key]["tvk"].append(row["tvk_of_peak"])
            means[key]["cuda"].append(row["cuda_of_peak"])
    return {key: {side: _geomean(values) for side, values in sides.items()} for key, sides in means.items()}


def _geomean(values):
    values = [v for v in values if v]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def run(device, out_dir, quick=False, progress=True) -> dict:
    try:

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    peaks = roofline.probe(device, quick)
    conv_rows = conv2d(device, 2 if quick else 128, has_cuda, quick)
    bw_rows = bandwidth(device, *((64, 256) if quick else (4096, 4096)), has_cuda, quick)
    overhead = per_op_overhead(device, 200 if quick else 5000, has_cuda)
    replay = graph_replay(device)
    gemm, gemm_md = gemm_sweep.run(device, quick=quick, has_cuda=has_cuda)
    conv_sw, conv_sw_md = conv_sweep.run(device, quick=quick, has_cuda=has_cuda)
    real, real_md = model_shapes.run(device, quick=quick, has_cuda=has_cuda)
    sdpa_rows = attention_bench.sdpa(device, quick, has_cuda, lambda fn: _gpu(device, fn, quick))
    long_seq = attention_bench.long_sequence_step(device, quick)
    payload = {"experiment": "kernels", "environment": environment(device), "quick": quick,
               "conv2d": conv_rows, "bandwidth": bw_rows, "per_op_overhead": overhead, "graph_replay": replay,
               "gemm_sweep": gemm, "conv_sweep": conv_sw, "model_shapes": real, "sdpa": sdpa_rows, "attention_long_sequence": long_seq,
               "roofline": peaks,
               "notes": "cuDNN and cuBLAS with TF32 off; GPU times from Vulkan timestamps and CUDA events"}
    payload["of_peak"] = of_peak(payload, peaks)
    table = "## measured peaks (tvk_kernels/bench/roofline.py)\n\n" + roofline.markdown(peaks) + "\n\n"
    table += "Fraction of the peak of its kind, geometric mean of the rows (fp16 GEMMs: of the cooperative-matrix peak " \
             "where the device has one):\n\n" + md_table(
                 ["rows", "tvk of peak", "CUDA of peak"],
                 [[key, v["tvk"], v["cuda"]] for key, v in payload["of_peak"].items()]) + "\n\n"
    table += "## conv2d, CIFAR CNN layers, batch " + str(2 if quick else 128) + "\n\n" + md_table(
        ["layer", "direction", "tvk ms", "tvk TFLOP/s", "tvk of peak", "cuDNN ms", "tvk/cuDNN time", "max rel err"],
        [[r["layer"], r["direction"], r["tvk_s"] * 1e3, r["tvk_tflops"], r["tvk_of_peak"],
          r["cudnn_s"] and r["cudnn_s"] * 1e3, r["tvk_over_cudnn_time"], r["max_rel_err"]] for r in conv_rows])
    table += "\n\n## bandwidth\n\n" + md_table(
        ["op", "floats", "tvk us", "tvk GB/s", "tvk of peak", "CUDA GB/s", "CUDA of peak", "tvk/CUDA bandwidth"],
        [[r["op"], r["n"], r["tvk_s"] * 1e6, r["tvk_gbps"], r["tvk_of_peak"], r["cuda_gbps"], r["cuda_of_peak"],
          r["tvk_over_cuda_bandwidth"]] for r in bw_rows])
    table += (f"\n\nPer-op host overhead ({overhead['op']}, {overhead['count']} ops): tvk {overhead['tvk_us']:.1f} us, "
              f"torch CUDA {overhead['torch_cuda_us'] and round(overhead['torch_cuda_us'], 1)} us.\n")
    table += "Host cost of one graph replay: " + ", ".join(
        f"{n} kernels {us:.1f} us" for n, us in replay["kernels_to_replay_us"].items()) + ".\n"
    table += "\n" + real_md + "\n"
    table += "\n" + gemm_md + "\n"
    table += "\n" + conv_sw_md + "\n"
    table += "\n" + attention_bench.markdown(sdpa_rows, long_seq)
    write_result(out_dir, "kernels", payload, table)
    return payload
