"""Fused attention beside torch CUDA's SDPA (part of `tvk-bench kernels`).

  sdpa         forward and forward + backward at batch 8, heads 8, seq 1024, head dim 64, fp32 and
               fp16: GPU time of the tvk kernels vs F.scaled_dot_product_attention on CUDA (measured
               in a process without torchvk: a CUDA backward fails once torchvk is imported; timed by
               tvk_kernels/bench/cuda_timer.py, whose source the peer script starts with)
  long seq     one training step of a TransformerEncoderLayer at seq 4096 (causal) under
               torchvk.set_memory_limit(2 GiB): it fits because the L x L scores are never stored;
               step time and peak memory

--quick: tiny sizes (lavapipe).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np

import torch

import torchvk
from tvk_kernels.bench import cuda_timer
from tvk_kernels.bench.common import md_table
from tvk_kernels.kernels import attention as attention_kernels

FULL = {"batch": 8, "heads": 8, "seq": 1024, "head": 64}
QUICK = {"batch": 1, "heads": 2, "seq": 64, "head": 32}

_CUDA_SDPA = r"""
import json, torch
import torch.nn.functional as F
b, h, l, d = %d, %d, %d, %d
out = {}
for name, dt in (("float32", torch.float32), ("float16", torch.float16)):
    q, k, v = (torch.randn(b, h, l, d, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, l, d, device="cuda", dtype=dt)
    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v)
    def fwd_bwd():
        F.scaled_dot_product_attention(q, k, v).backward(g)
    res = {"timing": {}}
    for kind, fn in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        res[kind], res["timing"][kind] = time_cuda(fn)
    out[name] = res
print(json.dumps(out))
"""


def _cuda_sdpa(shape) -> dict:
    code = cuda_timer.source() + _CUDA_SDPA % (shape["batch"], shape["heads"], shape["seq"], shape["head"])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode != 0:
        return {}
    return json.loads(out.stdout.strip().splitlines()[-1])


def sdpa(device, quick, has_cuda, gpu_time) -> list:
    """GPU seconds of the fused forward and forward + backward; `gpu_time(fn)` times one launch."""

    s = QUICK if quick else FULL
    b, h, n, d = s["batch"], s["heads"], s["seq"], s["head"]
    shape = (b, h, h, n, n, d)
    cuda = _cuda_sdpa(s) if has_cuda else {}
    rows = []
    for dtype, np_dt in (("float32", np.float32), ("float16", np.float16)):
        if dtype == "float16" and not device.facts.features.get("storage_16bit"):
            continue
        rng = np.random.default_rng(0)
        q, k, v, o, g, dq, dk, dv = (device.upload(rng.standard_normal((b, h, n, d)).astype(np_dt)) for _ in range(8))
        lse, delta = device.allocator.alloc(4 * b * h * n), device.allocator.alloc(4 * b * h * n)
        kw = {"dtype": dtype, "scale": 1.0 / d ** 0.5}

        def fwd():
            attention_kernels.attention_forward(device, q, k, v, o, lse, shape, **kw)

        def fwd_bwd():
            fwd()
            attention_kernels.attention_backward(device, q, k, v, o, g, lse, dq, dk, dv, shape, delta=delta, **kw)

        t_fwd, t_all = gpu_time(fwd), gpu_time(fwd_bwd)
        flops = 4 * b * h * n * n * d
        c = cuda.get(dtype, {})
        rows.append({"dtype": dtype, **s, "tvk_fwd_s": t_fwd, "tvk_fwd_bwd_s": t_all,
                     "tvk_fwd_tflops": flops / t_fwd / 1e12, "cuda_fwd_s": c.get("fwd"), "cuda_fwd_bwd_s": c.get("fwd_bwd"),
                     "cuda_timing": c.get("timing"),
                     "tvk_over_cuda_fwd": t_fwd / c["fwd"] if c else None,
                     "tvk_over_cuda_fwd_bwd": t_all / c["fwd_bwd"] if c else None})
        for buf in (q, k, v, o, g, dq, dk, dv, lse, delta):
            buf.free()
    return rows


def long_sequence_step(device, quick) -> dict:
    """One TransformerEncoderLayer training step at seq 4096 under a 2 GiB cap (eager tvk)."""


    seq, d_model, heads, cap = (128, 64, 2, 2 << 30) if quick else (4096, 256, 4, 2 << 30)
    dev = f"tvk:{device.index}"
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True).to(dev)
    x = torch.randn(1, seq, d_model).to(dev)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(seq).to(dev)
    torchvk.set_memory_limit(cap)
    try:
        def step():
            layer.zero_grad()
            loss = layer(x, src_mask=mask, is_causal=True).square().mean()
            loss.backward()
            return loss.item()

        step()  # builds the pipelines
        torchvk.reset_peak_memory_stats()
        t0 = time.perf_counter()
        loss = step()
        seconds = time.perf_counter() - t0
        peak = torchvk.max_memory_allocated()
    finally:
        torchvk.set_memory_limit(None)
    return {"seq": seq, "d_model": d_model, "heads": heads, "memory_limit_bytes": cap, "step_s": seconds,
            "peak_bytes": peak, "loss": loss,
            "scores_bytes_if_materialised": 4 * heads * seq * seq}


def markdown(rows, long_seq) -> str:
    s = rows[0] if rows else QUICK
    text = (f"## SDPA (fused attention), batch {s['batch']}, heads {s['heads']}, seq {s['seq']}, head {s['head']}\n\n"
            + md_table(["dtype", "tvk fwd ms", "tvk fwd+bwd ms", "tvk fwd TFLOP/s", "CUDA fwd ms", "CUDA fwd+bwd ms",
                        "tvk/CUDA fwd", "tvk/CUDA fwd+bwd"],
                       [[r["dtype"], r["tvk_fwd_s"] * 1e3, r["tvk_fwd_bwd_s"] * 1e3, r["tvk_fwd_tflops"],
                         r["cuda_fwd_s"] and r["cuda_fwd_s"] * 1e3, r["cuda_fwd_bwd_s"] and r["cuda_fwd_bwd_s"] * 1e3,
                         r["tvk_over_cuda_fwd"], r["tvk_over_cuda_fwd_bwd"]] for r in rows]))
    L = long_seq
    text += (f"\n\nTransformerEncoderLayer training step at seq {L['seq']} (d_model {L['d_model']}, {L['heads']} heads, "
             f"causal) under a {L['memory_limit_bytes'] >> 20} MiB cap: {L['step_s'] * 1e3:.1f} ms, peak "
             f"{L['peak_bytes'] / 2 ** 20:.1f} MiB (the fp32 L x L scores of its heads, stored once, would be "
             f"{L['scores_bytes_if_materialised'] / 2 ** 20:.0f} MiB).\n")
    return text
