"""Fused attention in float16 beside torch CUDA's SDPA, and the cooperative-matrix route beside attention.comp's.

For each shape (the zoo's transformer shapes, a GQA one, and sizes no config was tuned on: odd lengths, head
dims 40 and 80, a length of 2048), forward and forward + backward, GPU time only on both sides, each case after
its spin-up: tvk's kernels from Vulkan timestamps (tvk-bench kernels' timer) with the cooperative-matrix route
(kernels/attention_coopmat.py, TVK_COOPMAT_ATTENTION=1) and with it off (TVK_COOPMAT_ATTENTION=0: attention.comp's fp16 kernels), torch's
F.scaled_dot_product_attention on CUDA in a process without torchvk (tvk_kernels/bench/cuda_timer.py: CUDA
graphs). TFLOP/s count 4 b h lq lk d for the forward (half of it where causal) and 2.5 times that for the
backward. The route's output and gradients are checked against the other route's in the same run.

    python benchmarks/attention_vs_torch.py [--quick] [--out DIR]
"""
import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name, batch, query heads, key/value heads, length, head dim, causal
SHAPES = [
    ("gpt2 L128", 8, 12, 12, 128, 64, True),
    ("gpt2 L512", 4, 12, 12, 512, 64, True),
    ("bert L256", 8, 12, 12, 256, 64, False),
    ("vit L197", 16, 12, 12, 197, 64, False),
    ("llama L512 d128", 2, 32, 32, 512, 128, True),
    ("gqa 32/8 L1024 d128", 2, 32, 8, 1024, 128, True),
    ("L1024 d64", 8, 8, 8, 1024, 64, False),
    ("odd L77 d40", 8, 8, 8, 77, 40, False),
    ("L2048 d80", 2, 16, 16, 2048, 80, True),
]
QUICK = [("quick L40 d32", 1, 2, 2, 40, 32, True), ("quick L33 d24 gqa", 1, 4, 2, 33, 24, False)]

_CUDA = r"""
import json, torch
import torch.nn.functional as F
out = {}
for name, b, hq, hkv, n, d, causal in SHAPES:
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, hq, n, d, device="cuda", dtype=torch.float16, generator=g, requires_grad=True)
    k, v = (torch.randn(b, hkv, n, d, device="cuda", dtype=torch.float16, generator=g, requires_grad=True)
            for _ in range(2))
    grad = torch.randn(b, hq, n, d, device="cuda", dtype=torch.float16, generator=g)
    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    def fwd_bwd():  # autograd.grad: fresh gradients as ours, no accumulation into .grad
        torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv),
                            (q, k, v), grad)
    res = {}
    for kind, fn in (("fwd", fwd), ("fwd_bwd", fwd_bwd)):
        res[kind], res[kind + "_timing"] = time_cuda(fn)
    out[name] = res
print(json.dumps(out))
"""


def route_words(routed: bool, backward: bool) -> str:
    if not routed:
        return "attention.comp (no cooperative matrices)"
    return "cooperative matrices" + ("" if backward else " for the forward, attention.comp's backward after it")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny shapes, few repeats (a check of the script)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    import numpy as np
    import torch
    from tvk_kernels import config, get_device
    from tvk_kernels.bench import cuda_timer
    from tvk_kernels.bench.common import environment, md_table, write_result
    from tvk_kernels.kernels import attention, attention_coopmat
    from torchvk.experiments.kernels import _gpu

    device = get_device(0)
    shapes = QUICK if args.quick else SHAPES
    cuda = (cuda_timer.run_peer(_CUDA, "attention_vs_torch", SHAPES=shapes) or {}) if torch.cuda.is_available() else {}
    os.environ["TVK_COOPMAT_ATTENTION"] = "1"  # the route on, as TorchVK takes it where it is on by default
    routed = attention_coopmat.route(device, "float16", attention.check_coopmat) is not None
    rows = []
    for name, b, hq, hkv, n, d, causal in shapes:
        rng = np.random.default_rng(0)
        q, o, g, dq = (device.upload(rng.standard_normal((b, hq, n, d)).astype(np.float16)) for _ in range(4))
        k, v, dk, dv = (device.upload(rng.standard_normal((b, hkv, n, d)).astype(np.float16)) for _ in range(4))
        lse, delta = device.allocator.alloc(4 * b * hq * n), device.allocator.alloc(4 * b * hq * n)
        shape = (b, hq, hkv, n, n, d)
        kw = {"dtype": "float16", "scale": d ** -0.5, "causal": causal}

        def fwd():
            attention.attention_forward(device, q, k, v, o, lse, shape, **kw)

        def fwd_bwd():
            fwd()
            attention.attention_backward(device, q, k, v, o, g, lse, dq, dk, dv, shape, delta=delta, **kw)

        def results():
            fwd_bwd()
            return [device.download(x, np.float16, s).astype(np.float64)
                    for x, s in ((o, (b, hq, n, d)), (dq, (b, hq, n, d)), (dk, (b, hkv, n, d)), (dv, (b, hkv, n, d)))]

        row = {"shape": name, "batch": b, "heads_q": hq, "heads_kv": hkv, "length": n, "head": d, "causal": causal}
        flops = 4 * b * hq * n * n * d * (0.5 if causal else 1.0)
        timed = {}
        for route, flag in (("coopmat", "1"), ("attention_comp", "0")):
            os.environ["TVK_COOPMAT_ATTENTION"] = flag
            config.reload()  # kept launches go with the route
            if route == "coopmat" and not routed:
                continue
            timed[route] = {"fwd_s": _gpu(device, fwd, args.quick), "fwd_bwd_s": _gpu(device, fwd_bwd, args.quick),
                            "results": results()}
        os.environ.pop("TVK_COOPMAT_ATTENTION", None)
        config.reload()
        for route, t in timed.items():
            row[f"{route}_fwd_s"], row[f"{route}_fwd_bwd_s"] = t["fwd_s"], t["fwd_bwd_s"]
            row[f"{route}_fwd_tflops"] = flops / t["fwd_s"] / 1e12
            row[f"{route}_fwd_bwd_tflops"] = 3.5 * flops / t["fwd_bwd_s"] / 1e12
        if "coopmat" in timed:
            ref = timed["attention_comp"]["results"]
            row["coopmat_max_error"] = max(float(np.abs(a - r).max() / (1 + np.abs(r).max()))
                                           for a, r in zip(timed["coopmat"]["results"], ref))
        c = cuda.get(name)
        if c:
            row["cuda_fwd_s"], row["cuda_fwd_bwd_s"] = c["fwd"], c["fwd_bwd"]
            row["cuda_timing"] = c["fwd_timing"]
            row["cuda_fwd_bwd_tflops"] = 3.5 * flops / c["fwd_bwd"] / 1e12
            best = "coopmat" if "coopmat" in timed else "attention_comp"
            row["tvk_route"] = best
            row["torch_over_tvk_fwd"] = c["fwd"] / row[f"{best}_fwd_s"]  # speed as a fraction of torch's
            row["torch_over_tvk_fwd_bwd"] = c["fwd_bwd"] / row[f"{best}_fwd_bwd_s"]
        for buf in (q, o, g, dq, k, v, dk, dv, lse, delta):
            buf.free()
        rows.append(row)
        print(json.dumps(row), flush=True)

    def ms(x):
        return None if x is None else x * 1e3

    table = md_table(
        ["shape", "b x hq/hkv x L x d", "causal", "coopmat fwd ms", "coopmat fwd+bwd ms", "coopmat fwd+bwd TFLOP/s",
         "attention.comp fwd+bwd ms", "torch CUDA fwd ms", "torch CUDA fwd+bwd ms", "torch CUDA fwd+bwd TFLOP/s",
         "tvk speed / torch's, fwd", "tvk speed / torch's, fwd+bwd", "coopmat vs attention.comp max error"],
        [[r["shape"], f"{r['batch']}x{r['heads_q']}/{r['heads_kv']}x{r['length']}x{r['head']}", r["causal"],
          ms(r.get("coopmat_fwd_s")), ms(r.get("coopmat_fwd_bwd_s")), r.get("coopmat_fwd_bwd_tflops"),
          ms(r.get("attention_comp_fwd_bwd_s")), ms(r.get("cuda_fwd_s")), ms(r.get("cuda_fwd_bwd_s")),
          r.get("cuda_fwd_bwd_tflops"), r.get("torch_over_tvk_fwd"), r.get("torch_over_tvk_fwd_bwd"),
          r.get("coopmat_max_error")] for r in rows])
    ratios = [r["torch_over_tvk_fwd_bwd"] for r in rows if r.get("torch_over_tvk_fwd_bwd")]
    summary = {"routed": routed, "backward_routed": routed and attention_coopmat.BACKWARD_ROUTE}
    if ratios:
        summary["geomean_speed_over_torch_fwd_bwd"] = float(np.exp(np.mean(np.log(ratios))))
        summary["min_speed_over_torch_fwd_bwd"] = min(ratios)
        table += (f"\n\nfloat16 fwd+bwd, tvk's speed as a fraction of torch CUDA's: geometric mean "
                  f"{summary['geomean_speed_over_torch_fwd_bwd']:.3g} over {len(ratios)} shapes, lowest "
                  f"{summary['min_speed_over_torch_fwd_bwd']:.3g} (issue 33's target: 0.5)."
                  f" Route taken: {route_words(routed, attention_coopmat.BACKWARD_ROUTE)}.\n")
    print(table)
    if args.out:
        write_result(args.out, "attention_vs_torch", {"experiment": "attention_vs_torch",
                                                       "environment": environment(device), "summary": summary,
                                                       "rows": rows}, table)


if __name__ == "__main__":
    os.environ.setdefault("TVK_VALIDATION", "0")
    main()
