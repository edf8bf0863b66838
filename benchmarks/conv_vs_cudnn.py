"""float16 conv2d beside cuDNN's, and the cooperative-matrix route beside conv2d.comp's fp32-arithmetic kernels.

For each layer (ResNet's, and layers no config was tuned on: odd channel counts and sizes, 5x5, grouped,
dilated), the forward and the three GEMMs of a training step (forward, grad-input, grad-weight), GPU time only
on both sides, each case after its spin-up: tvk's kernels from Vulkan timestamps (tvk-bench kernels' timer) with
the cooperative-matrix route (kernels/conv_coopmat.py, TVK_COOPMAT_CONV=1) and with it off (TVK_COOPMAT_CONV=0),
torch's F.conv2d on CUDA (cuDNN, cudnn.benchmark on, TF32 irrelevant in fp16) in a process without torchvk
(tvk_kernels/bench/cuda_timer.py: CUDA graphs). TFLOP/s count 2 N OC OH OW IC/G KH KW for the forward and
three times that for the step. The route's results are checked against the other route's in the same run.

    python benchmarks/conv_vs_cudnn.py [--quick] [--out DIR]
"""
import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name, x shape, w shape, stride, padding, dilation, groups
LAYERS = [
    ("resnet stem 7x7/2", (32, 3, 224, 224), (64, 3, 7, 7), 2, 3, 1, 1),
    ("resnet 3x3 64 @56", (32, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1, 1),
    ("resnet50 1x1 256->64 @56", (32, 256, 56, 56), (64, 256, 1, 1), 1, 0, 1, 1),
    ("resnet 3x3/2 128->256 @28", (32, 128, 28, 28), (256, 128, 3, 3), 2, 1, 1, 1),
    ("resnet 3x3 512 @7", (32, 512, 7, 7), (512, 512, 3, 3), 1, 1, 1, 1),
    ("resnet50 1x1/2 256->512 @56", (32, 256, 56, 56), (512, 256, 1, 1), 2, 0, 1, 1),
    ("odd 3x3 72->96 @33", (16, 72, 33, 33), (96, 72, 3, 3), 1, 1, 1, 1),
    ("5x5 48->64 @27", (16, 48, 27, 27), (64, 48, 5, 5), 1, 2, 1, 1),
    ("grouped 3x3 g4 128 @28", (16, 128, 28, 28), (128, 32, 3, 3), 1, 1, 1, 4),
    ("dilated 3x3 d2 64 @40", (16, 64, 40, 40), (64, 64, 3, 3), 1, 2, 2, 1),
]
QUICK = [("quick 3x3", (2, 16, 9, 9), (16, 16, 3, 3), 1, 1, 1, 1),
         ("quick 5x5/2 g2", (1, 32, 11, 10), (32, 16, 5, 5), 2, 2, 1, 2)]

_CUDA = r"""
import json, torch
import torch.nn.functional as F
torch.backends.cudnn.benchmark = True
out = {}
for name, xs, ws, s, p, d, g in LAYERS:
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(xs, device="cuda", dtype=torch.float16, generator=gen, requires_grad=True)
    w = torch.randn(ws, device="cuda", dtype=torch.float16, generator=gen, requires_grad=True)
    y = F.conv2d(x, w, None, s, p, d, g)
    grad = torch.randn(y.shape, device="cuda", dtype=torch.float16, generator=gen)
    def fwd():
        with torch.no_grad():
            F.conv2d(x, w, None, s, p, d, g)
    def step():  # autograd.grad: fresh gradients as ours, no accumulation into .grad
        torch.autograd.grad(F.conv2d(x, w, None, s, p, d, g), (x, w), grad)
    res = {}
    for kind, fn in (("fwd", fwd), ("step", step)):
        res[kind], res[kind + "_timing"] = time_cuda(fn)
    out[name] = res
print(json.dumps(out))
"""


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
    from tvk_kernels.kernels import conv, conv_coopmat
    from torchvk.experiments.kernels import _gpu

    device = get_device(0)
    layers = QUICK if args.quick else LAYERS
    cuda = (cuda_timer.run_peer(_CUDA, "conv_vs_cudnn", LAYERS=layers) or {}) if torch.cuda.is_available() else {}
    os.environ["TVK_COOPMAT_CONV"] = "1"  # the route on, as TorchVK takes it where it is on by default
    fam = conv_coopmat.gemm_family(device, "float16", None, conv.check_coopmat, 64, 64)
    routed = type(fam) is conv_coopmat.Conv2dCoopmat
    rows = []
    for name, xs, ws, s, p, d, g in layers:
        geo = dict(stride=s, padding=p, dilation=d, groups=g)
        ys = conv.conv2d_output_shape(xs, ws, **geo)
        rng = np.random.default_rng(0)
        x, w, grad = (device.upload(rng.standard_normal(shape).astype(np.float16)) for shape in (xs, ws, ys))
        y, gx, gw = (device.allocator.alloc(2 * int(np.prod(shape))) for shape in (ys, xs, ws))

        def fwd():
            conv.conv2d_forward(device, x, w, None, y, xs, ws, **geo, dtype="float16")

        def bwd_input():
            conv.conv2d_backward_input(device, grad, w, gx, xs, ws, **geo, dtype="float16")

        def bwd_weight():
            conv.conv2d_backward_weight(device, grad, x, gw, xs, ws, **geo, dtype="float16")

        def step():
            fwd()
            bwd_input()
            bwd_weight()

        def results():
            step()
            return [device.download(b, np.float16, shape).astype(np.float64)
                    for b, shape in ((y, ys), (gx, xs), (gw, ws))]

        row = {"layer": name, "x": list(xs), "w": list(ws), **geo}
        flops = 2 * int(np.prod(ys)) * int(np.prod(ws[1:]))
        timed = {}
        for route, flag in (("coopmat", "1"), ("fp32_arith", "0")):
            if route == "coopmat" and not routed:
                continue
            os.environ["TVK_COOPMAT_CONV"] = flag
            config.reload()  # kept launches go with the route
            timed[route] = {"fwd_s": _gpu(device, fwd, args.quick), "bwd_input_s": _gpu(device, bwd_input, args.quick),
                            "bwd_weight_s": _gpu(device, bwd_weight, args.quick),
                            "step_s": _gpu(device, step, args.quick), "results": results()}
        os.environ.pop("TVK_COOPMAT_CONV", None)
        config.reload()
        for route, t in timed.items():
            for kind in ("fwd", "bwd_input", "bwd_weight", "step"):
                row[f"{route}_{kind}_s"] = t[f"{kind}_s"]
            row[f"{route}_step_tflops"] = 3 * flops / t["step_s"] / 1e12
        if "coopmat" in timed:
            ref = timed["fp32_arith"]["results"]
            row["coopmat_max_error"] = max(float(np.abs(a - r).max() / (1 + np.abs(r).max()))
                                           for a, r in zip(timed["coopmat"]["results"], ref))
        c = cuda.get(name)
        if c:
            row["cudnn_fwd_s"], row["cudnn_step_s"], row["cudnn_timing"] = c["fwd"], c["step"], c["fwd_timing"]
            row["cudnn_step_tflops"] = 3 * flops / c["step"] / 1e12
            best = "coopmat" if "coopmat" in timed else "fp32_arith"
            row["tvk_route"] = best
            row["cudnn_over_tvk_fwd"] = c["fwd"] / row[f"{best}_fwd_s"]  # speed as a fraction of cuDNN's
            row["cudnn_over_tvk_step"] = c["step"] / row[f"{best}_step_s"]
        for buf in (x, w, grad, y, gx, gw):
            buf.free()
        rows.append(row)
        print(json.dumps(row), flush=True)

    def ms(v):
        return None if v is None else v * 1e3

    table = md_table(
        ["layer", "x * w", "stride, pad, dil, groups", "coopmat fwd ms", "coopmat grad-input ms",
         "coopmat grad-weight ms", "coopmat step ms", "coopmat step TFLOP/s", "fp32-arithmetic fwd ms",
         "fp32-arithmetic grad-input ms", "fp32-arithmetic grad-weight ms", "fp32-arithmetic step ms", "cuDNN fwd ms", "cuDNN step ms", "cuDNN step TFLOP/s", "tvk speed / cuDNN's, fwd",
         "tvk speed / cuDNN's, step", "coopmat vs fp32-arithmetic max error"],
        [[r["layer"], f"{r['x']} * {r['w']}", f"{r['stride']}, {r['padding']}, {r['dilation']}, {r['groups']}",
          ms(r.get("coopmat_fwd_s")), ms(r.get("coopmat_bwd_input_s")), ms(r.get("coopmat_bwd_weight_s")),
          ms(r.get("coopmat_step_s")), r.get("coopmat_step_tflops"), ms(r.get("fp32_arith_fwd_s")),
          ms(r.get("fp32_arith_bwd_input_s")), ms(r.get("fp32_arith_bwd_weight_s")), ms(r.get("fp32_arith_step_s")), ms(r.get("cudnn_fwd_s")), ms(r.get("cudnn_step_s")),
          r.get("cudnn_step_tflops"), r.get("cudnn_over_tvk_fwd"), r.get("cudnn_over_tvk_step"),
          r.get("coopmat_max_error")] for r in rows])
    ratios = [r["cudnn_over_tvk_step"] for r in rows if r.get("cudnn_over_tvk_step")]
    summary = {"routed": routed}
    if ratios:
        summary["geomean_speed_over_cudnn_step"] = float(np.exp(np.mean(np.log(ratios))))
        summary["min_speed_over_cudnn_step"] = min(ratios)
        table += (f"\n\nfloat16 conv fwd + grad-input + grad-weight, tvk's speed as a fraction of cuDNN's: geometric "
                  f"mean {summary['geomean_speed_over_cudnn_step']:.3g} over {len(ratios)} layers, lowest "
                  f"{summary['min_speed_over_cudnn_step']:.3g} (issue 33's target: 0.6). Route taken: "
                  f"{'cooperative matrices' if routed else 'conv2d.comp fp32 arithmetic (no cooperative matrices)'}.\n")
    print(table)
    if args.out:
        write_result(args.out, "conv_vs_cudnn", {"experiment": "conv_vs_cudnn", "environment": environment(device),
                                                 "summary": summary, "rows": rows}, table)


if __name__ == "__main__":
    os.environ.setdefault("TVK_VALIDATION", "0")
    main()
