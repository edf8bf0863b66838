"""fp16 fused attention: packed fp16 arithmetic (attention.comp PACKED) against fp32 arithmetic, GPU time, one run.

RDNA1 (no cooperative matrices) is what the packed variant is for, and no RDNA1 card is here: the stand-in
is a GPU with cooperative matrices turned off (TVK_COOPMAT=0, set here), as for matmul's and conv's packed
kernels. Each shape (real models' heads: GPT-2, BERT and ViT's d 64 at their lengths, Llama's d 128, odd
lengths and a head dim padded to 32; the tuner's suite holds none of them) runs the forward and the
backward (row sums, dQ, dK/dV) with fp16 storage, with TVK_PACKED_ATTENTION=0 and =1 in turn (the device's
attention config either way), each after a spin-up (Vulkan timestamps, median of repeats). The packed
forward's output is checked against float64 and against the fp32-arithmetic output. Design note 48 says
why the variant is opt-in until this says it is faster.

    python benchmarks/packed_attention_ab.py [--quick] [--out DIR]
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (name, batch, heads, length, head dim, causal)
SHAPES = [
    ("gpt2 L128", 8, 12, 128, 64, True),
    ("gpt2 L512", 4, 12, 512, 64, True),
    ("bert L256", 8, 12, 256, 64, False),
    ("vit L197", 16, 12, 197, 64, False),
    ("llama L512 d128", 2, 32, 512, 128, True),
    ("odd L77 d40", 8, 8, 77, 40, False),
    ("L1024 d64", 2, 16, 1024, 64, True),
]
QUICK_SHAPES = [("quick", 1, 2, 20, 32, True), ("quick odd", 1, 1, 9, 24, False)]


def reference(q, k, v, scale, causal):
    """softmax(q k^T scale) v in float64 (numpy)."""
    s = np.einsum("bhid,bhjd->bhij", q, k) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bhij,bhjd->bhid", s / s.sum(-1, keepdims=True), v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="two small shapes, this device taken for a GPU")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ["TVK_COOPMAT"] = "0"
    from tvk_kernels import config, get_device
    from tvk_kernels.bench.common import environment, md_table, write_result
    from tvk_kernels.bench.cuda_timer import SPIN_UP_SECONDS
    from tvk_kernels.kernels import attention, matmul_packed_f16
    from tvk_kernels.tune.measure import time_candidate

    if args.quick:  # lavapipe is a CPU device, which keeps fp32 arithmetic: route it as a GPU
        matmul_packed_f16.PackedMatmul.routed = lambda self: True
    device = get_device(0)
    seen = []
    original = attention.kernel_defines

    def spy(*a, **k):
        defines = original(*a, **k)
        seen.append(defines[0].get("PACKED", 0))
        return defines

    attention.kernel_defines = spy
    rng = np.random.default_rng(0)
    rows, table = [], []
    for name, b, h, length, d, causal in (QUICK_SHAPES if args.quick else SHAPES):
        shape = (b, h, h, length, length, d)
        scale = 1 / np.sqrt(d)
        q, k, v, go = (rng.standard_normal((b, h, length, d)).astype(np.float16) for _ in range(4))
        Q, K, V, GO = (device.upload(x) for x in (q, k, v, go))
        half = 2 * b * h * length * d
        O, dQ, dK, dV = (device.allocator.alloc(half) for _ in range(4))
        lse, delta = (device.allocator.alloc(4 * b * h * length) for _ in range(2))
        common = dict(dtype="float16", scale=scale, causal=causal)

        def forward():
            attention.attention_forward(device, Q, K, V, O, lse, shape, **common)

        def backward():
            attention.attention_backward(device, Q, K, V, O, GO, lse, dQ, dK, dV, shape, delta=delta, **common)

        times, ran, outputs = {}, {}, {}
        for packed in ("0", "1"):
            os.environ["TVK_PACKED_ATTENTION"] = packed
            config.reload()  # kept launches made under the other setting go
            seen.clear()
            for part, call in (("forward", forward), ("backward", backward)):
                times[packed, part] = time_candidate(device, lambda i: call(), n_inputs=1, warmup=1,
                                                     repeats=3 if args.quick else 10,
                                                     warm_seconds=0.0 if args.quick else SPIN_UP_SECONDS)
            ran[packed] = max(seen, default=0)
            forward()
            outputs[packed] = device.download(O, np.float16, q.shape).astype(np.float64)
        want = reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), scale, causal)
        error = float(np.abs(outputs["1"] - want).max())
        fp32_error = float(np.abs(outputs["0"] - want).max())
        within = error <= 5e-3 * (1 + np.abs(want).max())
        for buf in (Q, K, V, GO, O, dQ, dK, dV, lse, delta):
            buf.free()
        flop = 4 * b * h * length * length * d * (0.5 if causal else 1.0)
        row = {"shape": name, "batch": b, "heads": h, "length": length, "head_dim": d, "causal": causal,
               "packed_ran": bool(ran["1"]), "fp32_ran": not ran["0"], "max_error": error,
               "fp32_arith_max_error": fp32_error, "within_tolerance": bool(within)}
        for part in ("forward", "backward"):
            row[f"{part}_fp32_arith_s"] = times["0", part]
            row[f"{part}_packed_s"] = times["1", part]
            row[f"{part}_packed_over_fp32_time"] = times["1", part] / times["0", part]
        row["forward_fp32_arith_tflops"] = flop / times["0", "forward"] / 1e12
        row["forward_packed_tflops"] = flop / times["1", "forward"] / 1e12
        rows.append(row)
        table.append([name, f"{b}x{h}x{length}x{d}{' causal' if causal else ''}",
                      times["0", "forward"] * 1e6, times["1", "forward"] * 1e6, row["forward_packed_over_fp32_time"],
                      times["0", "backward"] * 1e6, times["1", "backward"] * 1e6,
                      row["backward_packed_over_fp32_time"], row["packed_ran"], error, fp32_error])
        print(table[-1], flush=True)
        if not within:
            raise AssertionError(f"{name}: packed output off by {error}")
    summary = {}
    for part in ("forward", "backward"):
        ratios = [r[f"{part}_packed_over_fp32_time"] for r in rows if r["packed_ran"]]
        summary[part] = float(np.exp(np.mean(np.log(ratios)))) if ratios else None
    print(f"packed / fp32 arithmetic time, geometric mean over {len(rows)} shapes: {summary}")
    if args.out:
        md = md_table(["shape", "b x h x L x d", "forward fp32 arithmetic us", "forward packed us",
                       "forward packed / fp32", "backward fp32 arithmetic us", "backward packed us",
                       "backward packed / fp32", "packed ran", "packed max error", "fp32 arithmetic max error"], table)
        md += (f"\n\nGeometric mean of packed / fp32 arithmetic time over {len(rows)} shapes: forward "
               f"{summary['forward']}, backward {summary['backward']}\n")
        write_result(args.out, "packed_attention_ab", {
            "experiment": "packed_attention_ab", "environment": environment(device), "rows": rows,
            "geomean_packed_over_fp32_time": summary}, md)


if __name__ == "__main__":
    os.environ.setdefault("TVK_VALIDATION", "0")
    main()
