"""fp16 convolution: packed fp16 arithmetic (conv2d.comp PACKED) against fp32 arithmetic, GPU time, one run.

RDNA1 (no cooperative matrices) is what the packed variant is for, and no RDNA1 card is here: the stand-in
is a GPU with cooperative matrices turned off (TVK_COOPMAT=0, set here), as for matmul's packed kernel.
Each non-depthwise layer of the conv sweep (torchvk/experiments/conv_sweep.py; the tuner's suites hold
none of them) runs forward, grad-input and grad-weight with fp16 storage, with TVK_PACKED_CONV=0 and =1
in turn (the tuned tiles either way), each after a spin-up (Vulkan timestamps, median of repeats). The
packed result is checked against float64 within the template's bound. Design note 47 says why the
variant is opt-in until this says it is faster.

    python benchmarks/packed_conv_ab.py [--quick] [--out DIR]
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="three small layers, this device taken for a GPU")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    os.environ["TVK_COOPMAT"] = "0"
    from tvk_kernels import config, get_device
    from tvk_kernels.bench.common import environment, md_table, write_result
    from tvk_kernels.bench.cuda_timer import SPIN_UP_SECONDS
    from tvk_kernels.kernels import conv, conv_family, matmul_packed_f16
    from tvk_kernels.tune.measure import time_candidate
    from torchvk.experiments.conv_sweep import DIRECTIONS, LAYERS, QUICK_LAYERS, flops

    tile = None  # the tuned tiles
    if args.quick:  # lavapipe is a CPU device, which keeps fp32 arithmetic: route it as a GPU, with a tile
        matmul_packed_f16.PackedMatmul.routed = lambda self: True  # whose TN is even (its tuned ones have TN 1)
        tile = {"BM": 16, "BN": 8, "BK": 8, "TM": 2, "TN": 2, "PAD": 1, "FRAG": 0}
    device = get_device(0)
    seen = []
    original = conv_family.gemm_defines

    def spy(*a, **k):
        defines = original(*a, **k)
        seen.append(defines.get("PACKED", 0))
        return defines

    conv_family.gemm_defines = spy
    rng = np.random.default_rng(0)
    rows, table = [], []
    for layer in (QUICK_LAYERS if args.quick else LAYERS):
        if layer["groups"] > 1 and layer["w"][1] == 1:
            continue  # depthwise: direct kernels, no implicit GEMM
        geo = {k: layer[k] for k in ("stride", "padding", "dilation", "groups")}
        x = rng.standard_normal(layer["x"]).astype(np.float16)
        w = (rng.standard_normal(layer["w"]) / np.sqrt(np.prod(layer["w"][1:]))).astype(np.float16)
        out_shape = conv.conv2d_output_shape(layer["x"], layer["w"], **geo)
        go = rng.standard_normal(out_shape).astype(np.float16)
        X, W, GO = device.upload(x), device.upload(w), device.upload(go)
        result = {"fwd": out_shape, "bwd_input": x.shape, "bwd_weight": w.shape}
        args_of = (layer["x"], layer["w"], geo["stride"], geo["padding"], geo["dilation"], geo["groups"])
        for direction in DIRECTIONS:
            out = device.allocator.alloc(2 * int(np.prod(result[direction])))
            call = {"fwd": lambda: conv.conv2d_forward(device, X, W, 0, out, *args_of, tile, dtype="float16"),
                    "bwd_input": lambda: conv.conv2d_backward_input(device, GO, W, out, *args_of, tile,
                                                                    dtype="float16"),
                    "bwd_weight": lambda: conv.conv2d_backward_weight(device, GO, X, out, *args_of, tile,
                                                                      dtype="float16")}[direction]
            times, kernels = {}, {}
            for packed in ("0", "1"):
                os.environ["TVK_PACKED_CONV"] = packed
                config.reload()  # kept launches made under the other setting go
                seen.clear()
                times[packed] = time_candidate(device, lambda i: call(), n_inputs=1, warmup=1,
                                               repeats=3 if args.quick else 10,
                                               warm_seconds=0.0 if args.quick else SPIN_UP_SECONDS)
                kernels[packed] = max(seen, default=0)
                if packed == "1":
                    got = device.download(out, np.float16, result[direction]).astype(np.float64)
            x64, w64, go64 = x.astype(np.float64), w.astype(np.float64), go.astype(np.float64)
            if direction == "fwd":
                want = conv.reference_conv2d(x64, w64, None, **geo)
                size = conv.reference_conv2d(np.abs(x64), np.abs(w64), None, **geo)
            else:
                pick = 0 if direction == "bwd_input" else 1
                want = conv.reference_conv2d_backward(go64, x64, w64, **geo)[pick]
                size = conv.reference_conv2d_backward(np.abs(go64), np.abs(x64), np.abs(w64), **geo)[pick]
            bound = 17 * 2.0 ** -11 * size + 2.0 ** -11 * np.abs(want) + 1e-6
            within = bool(np.all(np.abs(got - want) <= bound))
            out.free()
            ratio = times["1"] / times["0"]
            tflop = flops(layer) / 1e12
            rows.append({"layer": layer["name"], "x": layer["x"], "w": layer["w"], **geo, "direction": direction,
                         "fp32_arith_s": times["0"], "packed_s": times["1"], "packed_over_fp32_time": ratio,
                         "packed_ran": bool(kernels["1"]), "fp32_ran": not kernels["0"], "within_bound": within,
                         "fp32_arith_tflops": tflop / times["0"], "packed_tflops": tflop / times["1"]})
            table.append([layer["name"], f"{layer['x']} * {layer['w']}", direction, times["0"] * 1e6,
                          times["1"] * 1e6, ratio, kernels["1"] == 1, within])
            print(table[-1], flush=True)
            if not within:
                raise AssertionError(f"{layer['name']} {direction}: packed result outside the bound")
        for b in (X, W, GO):
            b.free()
    ratios = [r["packed_over_fp32_time"] for r in rows if r["packed_ran"]]
    geomean = float(np.exp(np.mean(np.log(ratios)))) if ratios else None
    print(f"packed / fp32 arithmetic time, geometric mean over {len(ratios)} rows: {geomean}")
    if args.out:
        md = md_table(["layer", "x * w", "direction", "fp32 arithmetic us", "packed us", "packed / fp32 time",
                       "packed ran", "within bound"], table)
        md += f"\n\nGeometric mean of packed / fp32 arithmetic time over {len(ratios)} rows: {geomean}\n"
        write_result(args.out, "packed_conv_ab", {"experiment": "packed_conv_ab", "environment": environment(device),
                                                  "rows": rows, "geomean_packed_over_fp32_time": geomean}, md)


if __name__ == "__main__":
    os.environ.setdefault("TVK_VALIDATION", "0")
    main()
