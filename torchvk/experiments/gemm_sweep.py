"""GEMM sweep: a fixed, seeded sample of GEMMs beside torch CUDA (cuBLAS), fp32 and fp16.

M, N, K are drawn log-uniform from 1 to 8192, every layout (NN, NT, TN, TT: A and/or B read
transposed through its strides), batched or not (some batched ones broadcast B with batch
stride 0), under a FLOP cap so one GEMM stays short; shapes of the tuner's suites are left
out, so the sweep measures what tuning did not see. Each tvk result is checked against
numpy on a few sampled rows. cuBLAS runs in a process of its own that never imports torchvk
(see torchvk/experiments/peer.py), with TF32 off. Reported: per GEMM the time ratio
tvk/cuBLAS, per dtype its geometric mean, and the worst 5 GEMMs.
"""
from __future__ import annotations

import math

import numpy as np

from tvk_kernels.bench.common import md_table
from tvk_kernels.bench.cuda_timer import SPIN_UP_SECONDS
from tvk_kernels.host_storage import from_storage, storage_dtype, to_storage
from tvk_kernels.kernels import matmul as matmul_kernels
from tvk_kernels.tune.measure import time_candidate
from tvk_kernels.tune.targets.matmul import MatmulTarget

from .sweep_common import geomean, run_cuda_peer, worst

LAYOUTS = ("nn", "nt", "tn", "tt")
SEED = 16
COUNT = 60
MAX_DIM = 8192
FLOP_CAP = 2 ** 37        # ~137 GFLOP: well under 50 ms at the tiled kernel's fp32 rate on an H200
QUICK = {"count": 6, "max_dim": 40, "flop_cap": 2 ** 18}


def sample(seed: int = SEED, count: int = COUNT, max_dim: int = MAX_DIM, flop_cap: int = FLOP_CAP) -> list[dict]:
    """`count` GEMMs {M, N, K, batch, layout, bcast_b}, the same for the same arguments."""

    tuned = {(s["M"], s["N"], s["K"], s.get("batch", 1)) for suite in MatmulTarget.suites.values() for s in suite}
    rng = np.random.default_rng(seed)
    out, seen = [], set()

    def dim():
        return int(round(math.exp(rng.uniform(0.0, math.log(max_dim)))))

    while len(out) < count:
        M, N, K = dim(), dim(), dim()
        layout = LAYOUTS[len(out) % 4]  # every layout equally often
        batched = rng.uniform() < 0.35
        batch = int(round(math.exp(rng.uniform(math.log(2), math.log(512))))) if batched else 1
        key = (M, N, K, batch)
        if 2 * batch * M * N * K > flop_cap or key in tuned or (key, layout) in seen:
            continue
        seen.add((key, layout))
        out.append({"M": M, "N": N, "K": K, "batch": batch, "layout": layout,
                    "bcast_b": bool(batched and rng.uniform() < 0.3)})
    return out


def operand_layout(g: dict):
    """(A storage shape, A strides fn, B storage shape, B strides) in elements for a GEMM dict."""
    M, N, K, b = g["M"], g["N"], g["K"], g["batch"]
    a_t, b_t = g["layout"][0] == "t", g["layout"][1] == "t"
    a_shape = (b, K, M) if a_t else (b, M, K)
    a_strides = (M * K, 1, M) if a_t else (M * K, K, 1)
    nb = 1 if g.get("bcast_b") else b
    b_shape = (nb, N, K) if b_t else (nb, K, N)
    b_strides = (0 if nb == 1 else K * N,) + ((1, K) if b_t else (N, 1))
    return a_shape, a_strides, b_shape, b_strides


def _tvk_one(device, g: dict, dtype: str, repeats: int, quick: bool) -> dict:

    npdt = storage_dtype(dtype)
    esize = np.dtype(npdt).itemsize
    rng = np.random.default_rng(g["M"] * 7 + g["N"] * 13 + g["K"])
    a_shape, sa, b_shape, sb = operand_layout(g)
    a = to_storage(rng.standard_normal(a_shape, dtype=np.float32), dtype)
    b = to_storage(rng.standard_normal(b_shape, dtype=np.float32), dtype)
    M, N, K, batch = g["M"], g["N"], g["K"], g["batch"]
    A, B = device.upload(a), device.upload(b)
    C = device.allocator.alloc(batch * M * N * esize)
    info = {}

    def run(i):
        info.update(matmul_kernels.matmul(device, A.address, B.address, C.address, M, N, K, batch=batch, a_strides=sa,
                              b_strides=sb, dtype=dtype))

    try:
        # the better of two measurements, the first after a longer warm-up: an H200 left idle by host-side
        # work (compiling, the numpy check) runs at a low clock for a while (docs/design-notes.md 11, 17)
        t = min(time_candidate(device, run, n_inputs=1, warmup=1, repeats=repeats, warm_seconds=w)
                for w in ((0.01, 0.0) if quick else (SPIN_UP_SECONDS, None)))
        got = from_storage(device.download(C, npdt, (batch, M, N)), dtype)
        av, bv = from_storage(a, dtype), from_storage(b, dtype)
        av = np.swapaxes(av, 1, 2) if g["layout"][0] == "t" else av
        bv = np.swapaxes(bv, 1, 2) if g["layout"][1] == "t" else bv
        rows = rng.choice(M, size=min(M, 4), replace=False)
        bs = rng.choice(batch, size=min(batch, 2), replace=False)
        err = 0.0
        for bi in bs:
            ref = av[bi][rows].astype(np.float64) @ bv[0 if bv.shape[0] == 1 else bi].astype(np.float64)
            scale = np.abs(av[bi][rows].astype(np.float64)) @ np.abs(bv[0 if bv.shape[0] == 1 else bi]).astype(
                np.float64)
            err = max(err, float((np.abs(got[bi][rows] - ref) / (scale + 1e-6)).max()))
    finally:
        for buf in (A, B, C):
            buf.free()
    return {"tvk_s": t, "rel_err": err, "kernel": info.get("kernel"), "bucket": info.get("bucket"),
            "config_bucket": info.get("config_bucket"), "splits": info.get("splits"), "params": info.get("params")}


_CUDA_PEER = r"""
torch.backends.cuda.matmul.allow_tf32 = False
gemms, dtypes, repeats = json.loads(sys.stdin.read())
out = []
for g in gemms:
    M, N, K, b = g["M"], g["N"], g["K"], g["batch"]
    nb = 1 if g.get("bcast_b") else b
    for name in dtypes:
        dt = getattr(torch, name)
        a = torch.randn(b, K, M, device="cuda", dtype=dt).transpose(1, 2) if g["layout"][0] == "t" else \
            torch.randn(b, M, K, device="cuda", dtype=dt)
        w = torch.randn(nb, N, K, device="cuda", dtype=dt).transpose(1, 2) if g["layout"][1] == "t" else \
            torch.randn(nb, K, N, device="cuda", dtype=dt)
        w = w.expand(b, K, N)
        fn = (lambda: torch.mm(a[0], w[0])) if b == 1 else (lambda: torch.bmm(a, w))
        out.append(median_seconds(fn, repeats))
        del a, w
print(json.dumps(out))
"""


def cuda_times(gemms: list[dict], dtypes: list[str], repeats: int = 10) -> tuple[list[float], list[str]] | None:
    """(median cuBLAS seconds per (gemm, dtype), gemm-major, the timing method of each), from a process
    without torchvk; None if it fails."""
    return run_cuda_peer(_CUDA_PEER, [gemms, dtypes, repeats], "gemm sweep")


def _label(g: dict) -> str:
    batch = f"{g['batch']}x " if g["batch"] > 1 else ""
    return f"{batch}{g['M']}x{g['N']}x{g['K']} {g['layout'].upper()}" + (" (B broadcast)" if g.get("bcast_b") else "")


def run(device, quick: bool = False, has_cuda: bool = False, gemms: list[dict] | None = None) -> tuple[dict, str]:
    """Time the sweep; returns (payload section, markdown)."""
    feats = device.facts.features
    dtypes = ["float32"] + (["float16"] if feats.get("storage_16bit") and feats.get("shader_float16") else [])
    if gemms is None:
        gemms = sample(**({"seed": SEED} | QUICK)) if quick else sample()
    repeats = 3 if quick else 10
    cuda, methods = (cuda_times(gemms, dtypes, repeats) if has_cuda else None) or (None, None)
    rows = []
    for gi, g in enumerate(gemms):
        for di, dtype in enumerate(dtypes):
            r = {**g, "label": _label(g), "dtype": dtype, **_tvk_one(device, g, dtype, repeats, quick)}
            flops = 2 * g["batch"] * g["M"] * g["N"] * g["K"]
            r["tvk_tflops"] = flops / r["tvk_s"] / 1e12
            r["cuda_s"] = cuda[gi * len(dtypes) + di] if cuda else None
            r["cuda_timing"] = methods[gi * len(dtypes) + di] if methods else None
            r["tvk_over_cuda_time"] = r["tvk_s"] / r["cuda_s"] if r["cuda_s"] else None
            rows.append(r)
    summary = {}
    for dtype in dtypes:
        summary[dtype] = {
            "count": sum(r["dtype"] == dtype for r in rows),
            "geomean_tvk_over_cuda_time": geomean(r["tvk_over_cuda_time"] for r in rows
                                                  if r["dtype"] == dtype and r["tvk_over_cuda_time"]),
            "max_rel_err": max(r["rel_err"] for r in rows if r["dtype"] == dtype),
        }
    slowest = worst(rows, "tvk_over_cuda_time",
                    ("label", "dtype", "tvk_over_cuda_time", "tvk_s", "cuda_s", "bucket", "config_bucket", "splits"))
    section = {"seed": SEED, "gemms": gemms, "rows": rows, "summary": summary, "worst": slowest}
    return section, _markdown(rows, summary, slowest)


def _markdown(rows, summary, worst) -> str:

    lines = ["## GEMM sweep (seeded sample, all layouts, batched and not; tvk vs cuBLAS, TF32 off)", ""]
    for dtype, s in summary.items():
        g = s["geomean_tvk_over_cuda_time"]
        lines.append(f"- {dtype}: {s['count']} GEMMs, geometric mean tvk/cuBLAS time "
                     f"{'-' if g is None else f'{g:.3g}x'}, max relative error {s['max_rel_err']:.3g}")
    if worst:
        lines += ["", "Worst 5:", "",
                  md_table(["GEMM", "dtype", "tvk/cuBLAS", "tvk ms", "cuBLAS ms", "bucket", "config of", "splits"],
                           [[w["label"], w["dtype"], w["tvk_over_cuda_time"], w["tvk_s"] * 1e3, w["cuda_s"] * 1e3,
                             w["bucket"], w.get("config_bucket"), w["splits"]] for w in worst])]
    lines += ["", md_table(["GEMM", "dtype", "kernel", "bucket", "config of", "splits", "tvk ms", "TFLOP/s",
                            "cuBLAS ms", "tvk/cuBLAS", "rel err"],
                           [[r["label"], r["dtype"], r["kernel"], r["bucket"], r.get("config_bucket"), r["splits"],
                             r["tvk_s"] * 1e3,
                             r["tvk_tflops"], r["cuda_s"] and r["cuda_s"] * 1e3, r["tvk_over_cuda_time"],
                             r["rel_err"]] for r in rows])]
    return "\n".join(lines)
