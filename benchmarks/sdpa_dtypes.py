"""Fused attention's GPU time per dtype at the zoo's transformer shapes: float32 beside float16.

The models benchmark saw GPT-2's AMP attention backward take ~4x its float32 time (same kernel, same config,
16-bit storage only): this times the kernels alone, q/k/v as the strided views HF models hand over (heads split
off one [batch, length, 3 * heads * head] projection) and contiguous, causal, forward and backward, each case
after 0.3 s of its own work (the GPU clock up), the median of its profiled repeats (Vulkan timestamps).

    python benchmarks/sdpa_dtypes.py [--repeats 10] [--quick] [--out DIR]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

import torchvk
import torchvk.profiler

# (batch, heads, length, head): the zoo's bench sizes (torchvk/experiments/zoo_models.py) and one longer one
SHAPES = [(16, 4, 256, 64), (32, 4, 128, 64), (8, 8, 1024, 64)]
DTYPES = (torch.float32, torch.float16)  # the fused kernels' storage types (bf16 takes torch's math)


def case(shape, dtype, strided: bool):
    b, h, n, d = shape
    gen = torch.Generator().manual_seed(0)
    if strided:  # q, k, v views of one projection, as GPT-2's c_attn output split into heads
        qkv = torch.randn(b, n, 3 * h * d, generator=gen).to(dtype).to("tvk")
        q, k, v = (t.view(b, n, h, d).transpose(1, 2) for t in qkv.split(h * d, dim=2))
    else:
        q, k, v = (torch.randn(b, h, n, d, generator=gen).to(dtype).to("tvk") for _ in range(3))
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    grad = torch.randn(b, h, n, d, generator=gen).to(dtype).to("tvk")

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)
    return step


def measure(step, repeats: int) -> dict:
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:  # spin-up
        step()
        torch.tvk.synchronize()
    per = {}
    for _ in range(repeats):
        with torchvk.profiler.profile() as prof:
            step()
            torch.tvk.synchronize()
        for name in {k.name for k in prof.kernels}:
            per.setdefault(name, []).append(sum(k.duration_us for k in prof.kernels if k.name == name))
    return {name: statistics.median(us) / 1e3 for name, us in per.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="one tiny shape (a check of the script)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows, results = [], []
    for shape in [(2, 2, 32, 16)] if args.quick else SHAPES:
        for strided in (True, False):
            base = None
            for dtype in DTYPES:
                ms = measure(case(shape, dtype, strided), args.repeats)
                attention = {k: v for k, v in ms.items() if k.startswith("attention")}
                total = sum(attention.values())
                base = total if dtype is torch.float32 else base
                results.append({"shape": shape, "strided": strided, "dtype": str(dtype).split(".")[1], "ms": ms,
                                "attention_ms": total})
                rows.append([str(shape), "views" if strided else "contiguous", str(dtype).split(".")[1], total,
                             total / base, ", ".join(f"{k} {v:.3f}" for k, v in sorted(attention.items()))])
                print(rows[-1], flush=True)
    if args.out:
        from tvk_kernels import get_device
        from tvk_kernels.bench.common import environment, md_table, write_result

        table = md_table(["(batch, heads, length, head)", "q/k/v", "dtype", "attention kernels GPU ms (fwd+bwd)",
                          "/ float32", "per kernel (ms)"], rows)
        write_result(args.out, "sdpa_dtypes", {"experiment": "sdpa_dtypes", "environment": environment(get_device(0)),
                                               "repeats": args.repeats, "results": results}, table)


if __name__ == "__main__":
    torchvk.reset_op_counts()
    main()
