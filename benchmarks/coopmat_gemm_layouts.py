"""fp16 GEMM on cooperative matrices per operand layout, beside cuBLAS (diagnostic):

    python benchmarks/coopmat_gemm_layouts.py [--out DIR] [--tiles]

Every shape runs in all four layouts (NN, NT, TN, TT: A and/or B read transposed through its
strides) on the subgroup-scope kernel with its bucket's config ("coopmat") and, where the device has
them, on workgroup-scope matrices at two tiles, each twice in alternating order (the better kept);
each result is checked against numpy on sampled rows. --tiles adds other subgroup-scope tiles at
4096^3 NN. cuBLAS runs in a process of its own (TF32 off, GPU-only timing, as gemm_sweep). The
squares and transformer shapes here are not the tuner's suite shapes except 4096^3. Writes
coopmat_gemm_layouts.{json,md} to --out.

Its H100 run at d1751b0 (benchmarks/results/h100/ab/coopmat_gemm_layouts-d1751b0.json) also timed a
KMAJOR variant that staged both tiles k-contiguous, gathering a row-major B or column-major A down k:
half the speed (4096^3 NN 83 against 175 TFLOP/s), while the layouts ran alike without it (NN 175,
NT 163), so the cooperative loads' layout is not what holds this kernel back; the variant went.
"""
import argparse
import math
import os

import numpy as np

SHAPES = [  # (M, N, K): squares, a GPT-2-sized MLP's three GEMMs (4096 tokens, 768 -> 3072), odd sizes
    (4096, 4096, 4096), (2048, 2048, 2048), (4096, 3072, 768), (4096, 768, 3072), (3072, 768, 4096),
    (3000, 2000, 1500), (1536, 4608, 1152)]
LAYOUTS = ("nn", "nt", "tn", "tt")
COOP2 = {"coop2 128x128x32": {"BM": 128, "BN": 128, "BK": 32, "WGS": 256},  # workgroup scope, where present
         "coop2 128x256x32": {"BM": 128, "BN": 256, "BK": 32, "WGS": 256}}
TILES = [  # SG_M, SG_N, FM, FN, BK that fit 48 KiB of shared memory (NVIDIA's Vulkan limit)
    (2, 2, 4, 4, 32), (4, 2, 2, 4, 32), (2, 4, 4, 2, 16), (4, 4, 2, 2, 32)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.environ.get("OUT"))
    parser.add_argument("--tiles", action="store_true")
    args = parser.parse_args()

    from tvk_kernels import get_device
    from tvk_kernels.bench.common import environment, md_table, write_result
    from tvk_kernels.bench.cuda_timer import SPIN_UP_SECONDS
    from tvk_kernels.host_storage import from_storage, to_storage
    from tvk_kernels.kernels import matmul as matmul_kernels, matmul_coopmat2
    from tvk_kernels.kernels.launch import family
    from tvk_kernels.kernels.matmul_coopmat import CoopMatmul, verified
    from tvk_kernels.tune.measure import time_candidate
    from torchvk.experiments import gemm_sweep

    device = get_device(0)
    if verified(device) is None:
        raise SystemExit("no verified cooperative-matrix matmul on this device")
    coop = family(device, CoopMatmul)
    coop2 = matmul_coopmat2.verified(device, "float16")

    def timed(g, params):
        """(GPU seconds, relative error on sampled rows) of one fp16 GEMM with explicit coopmat params."""
        rng = np.random.default_rng(g["M"] * 7 + g["N"] * 13 + g["K"])
        a_shape, sa, b_shape, sb = gemm_sweep.operand_layout(g)
        a = to_storage(rng.standard_normal(a_shape, dtype=np.float32), "float16")
        b = to_storage(rng.standard_normal(b_shape, dtype=np.float32), "float16")
        M, N, K = g["M"], g["N"], g["K"]
        A, B = device.upload(a), device.upload(b)
        C = device.allocator.alloc(M * N * 2)
        try:
            def run(i):
                matmul_kernels.matmul(device, A.address, B.address, C.address, M, N, K, a_strides=sa,
                                      b_strides=sb, dtype="float16", params=params)
            t = time_candidate(device, run, n_inputs=1, warmup=1, repeats=10, warm_seconds=SPIN_UP_SECONDS)
            got = from_storage(device.download(C, np.float16, (M, N)), "float16").astype(np.float64)
            av = from_storage(a, "float16")[0].astype(np.float64)
            bv = from_storage(b, "float16")[0].astype(np.float64)
            av = av.T if g["layout"][0] == "t" else av
            bv = bv.T if g["layout"][1] == "t" else bv
            rows = rng.choice(M, size=4, replace=False)
            ref, scale = av[rows] @ bv, np.abs(av[rows]) @ np.abs(bv)
            err = float((np.abs(got[rows] - ref) / (scale + 1e-6)).max())
        finally:
            for buf in (A, B, C):
                buf.free()
        return t, err

    cases = []  # (gemm, {mode name: params})
    for M, N, K in SHAPES:
        for layout in LAYOUTS:
            g = {"M": M, "N": N, "K": K, "batch": 1, "layout": layout}
            base = dict(coop.resolve({**g}))
            base = {n: base[n] for n in ("SG_M", "SG_N", "FM", "FN", "BK", "PAD", "STAGES")}
            modes = {"coopmat": base}
            if coop2 is not None:
                modes.update(COOP2)
            cases.append((g, modes))
    if args.tiles:
        g = {"M": 4096, "N": 4096, "K": 4096, "batch": 1, "layout": "nn"}
        modes = {}
        for sgm, sgn, fm, fn, bk in TILES:
            modes[f"{sgm}x{sgn}x{fm}x{fn} bk{bk}"] = {"SG_M": sgm, "SG_N": sgn, "FM": fm, "FN": fn, "BK": bk,
                                                       "PAD": 8, "STAGES": 2}
        cases.append((g, modes))

    gemms = [g for g, _ in cases]
    peer = gemm_sweep.cuda_times(gemms, ["float16"], 10)
    cuda = peer[0] if peer else [None] * len(gemms)
    rows = []
    for (g, modes), cuda_s in zip(cases, cuda):
        flops = 2.0 * g["M"] * g["N"] * g["K"]
        best = {}
        for rep in range(2):  # alternating order, the better of two: clock drift favours no mode
            for name in (list(modes) if rep == 0 else list(modes)[::-1]):
                try:
                    t, err = timed(g, modes[name])
                except Exception as e:  # a tile this device cannot run: say so, keep going
                    best[name] = {"error": f"{type(e).__name__}: {e}"[:200]}
                    continue
                if name not in best or "s" not in best[name] or t < best[name]["s"]:
                    best[name] = {"s": t, "tflops": flops / t / 1e12, "rel_err": err, "params": modes[name]}
        row = {"label": gemm_sweep._label(g), **g, "cuda_s": cuda_s,
               "cuda_tflops": flops / cuda_s / 1e12 if cuda_s else None, "modes": best}
        for r in best.values():
            if cuda_s and "s" in r:
                r["speed_over_cublas"] = cuda_s / r["s"]
        rows.append(row)
        print(row["label"], "cuBLAS", f"{row['cuda_tflops'] or 0:.0f}",
              " ".join(f"{n} {r.get('tflops', 0):.0f} TF/s err {r.get('rel_err', float('nan')):.1e}"
                       for n, r in best.items()), flush=True)

    names = sorted({n for r in rows for n in r["modes"]}, key=lambda n: (n != "coopmat", n))
    table = md_table(["GEMM", "cuBLAS TFLOP/s"] + [f"{n} TFLOP/s (x cuBLAS)" for n in names],
                     [[r["label"], r["cuda_tflops"]] + [
                         (f"{r['modes'][n]['tflops']:.1f} ({r['modes'][n].get('speed_over_cublas', 0):.2f})"
                          if "s" in r["modes"].get(n, {}) else r["modes"].get(n, {}).get("error", "-"))
                         for n in names] for r in rows])
    summary = {}
    for n in ("coopmat", *COOP2):
        xs = [r["modes"][n]["speed_over_cublas"] for r in rows if "speed_over_cublas" in r["modes"].get(n, {})]
        if xs:
            summary[n] = {"geomean_speed_over_cublas": math.exp(sum(map(math.log, xs)) / len(xs)), "rows": len(xs)}
    table += "\n\n" + "; ".join(f"{n}: geometric mean {v['geomean_speed_over_cublas']:.3f} of cuBLAS's speed "
                                f"over {v['rows']} GEMMs" for n, v in summary.items()) + "\n"
    print(table)
    if args.out:
        write_result(args.out, "coopmat_gemm_layouts", {"experiment": "coopmat_gemm_layouts",
                                                         "environment": environment(device), "summary": summary,
                                                         "rows": rows}, table)


if __name__ == "__main__":
    os.environ.setdefault("TVK_VALIDATION", "0")
    main()
