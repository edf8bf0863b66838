"""Experiment 2: square matmul 128..4096, fp32 and fp16 (and bf16 where the device has it).

TFLOP/s from Vulkan timestamps (median after a spin-up, inputs rotated), relative error
(Frobenius) against a float64 product of the same inputs, side by side with torch CPU
and, where present, torch CUDA (fp32 with TF32 off, and fp16) measured in the same run.
"""
from __future__ import annotations

import itertools
import time

import numpy as np
from tqdm import tqdm

from ..host_storage import from_storage, storage_dtype, to_storage
from ..kernels.matmul import matmul
from .common import environment, md_table, median, write_result
from .cuda_timer import SPIN_UP_SECONDS, spin_up, time_cuda

DEFAULT_SIZES = [128, 256, 512, 1024, 2048, 4096]


def measure_tvk(device, n: int, dtype: str, repeats: int, n_inputs: int = 2,
                spin_seconds: float = SPIN_UP_SECONDS) -> dict:
    rng = np.random.default_rng(n)
    hosts = [(to_storage(rng.standard_normal((n, n), dtype=np.float32), dtype),
              to_storage(rng.standard_normal((n, n), dtype=np.float32), dtype)) for _ in range(n_inputs)]
    np_dtype = storage_dtype(dtype)
    bufs = [(device.upload(a), device.upload(b)) for a, b in hosts]
    out = device.allocator.alloc(n * n * np.dtype(np_dtype).itemsize)
    info = matmul(device, bufs[0][0].address, bufs[0][1].address, out.address, n, n, n, dtype=dtype)
    got = from_storage(device.download(out, np_dtype, (n, n)), dtype)
    a64, b64 = (from_storage(h, dtype) for h in hosts[0])
    ref = a64 @ b64
    rel_err = float(np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30))
    calls = itertools.count()

    def warm_call():  # the spin-up before this case, rotating the inputs as the timed calls do
        a, b = bufs[next(calls) % n_inputs]
        matmul(device, a.address, b.address, out.address, n, n, n, dtype=dtype)

    spin_up(warm_call, device.synchronize, spin_seconds)
    gpu = []
    with device.stream.profiling() as records:
        for i in range(repeats):
            start = len(records)
            a, b = bufs[i % n_inputs]
            matmul(device, a.address, b.address, out.address, n, n, n, dtype=dtype)
            device.synchronize()
            gpu.append(sum(t for _, t in records[start:]))
    for a, b in bufs:
        a.free(), b.free()
    out.free()
    t = median(gpu)
    return {"gpu_s": t, "tflops": 2 * n ** 3 / t / 1e12 if t else None, "rel_err": rel_err,
            "kernel": info.get("kernel") if isinstance(info, dict) else None,
            "params": info.get("params") if isinstance(info, dict) else None,
            "config_source": info.get("source") if isinstance(info, dict) else None}


def _torch_operands(n: int, dtype: str, device: str):
    import torch  # lazy: torch is optional: without it the torch baselines are left out

    tdtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    return torch.randn(n, n, device=device).to(tdtype), torch.randn(n, n, device=device).to(tdtype)


def measure_torch_cpu(n: int, dtype: str, repeats: int) -> float | None:
    """Median wall seconds of one torch CPU product."""
    if dtype != "float32" or n > 2048:
        return None  # CPU half matmul and huge CPU products say nothing useful
    a, b = _torch_operands(n, dtype, "cpu")
    times = []
    for _ in range(max(2, repeats // 5)):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return median(times)


def measure_torch_cuda(n: int, dtype: str, repeats: int) -> tuple[float, str]:
    """(GPU seconds of one torch CUDA product, TF32 off; the timing method), from cuda_timer.py."""
    import torch  # lazy: as above

    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = _torch_operands(n, dtype, "cuda")
    return time_cuda(lambda: a @ b, repeats)


def run(device, out_dir, sizes=None, progress=True, dtypes=None) -> dict:
    sizes = sizes or DEFAULT_SIZES
    feats = device.facts.features
    if dtypes is None:
        dtypes = ["float32"]
        if feats.get("storage_16bit") and feats.get("shader_float16"):
            dtypes.append("float16")
    try:
        import torch  # lazy: as above

        has_cuda = torch.cuda.is_available()
    except Exception:
        torch, has_cuda = None, False
    jobs = [(d, n) for d in dtypes for n in sizes]
    if progress:
        jobs = tqdm(jobs, desc="matmul", unit="shape")
    results, rows = [], []
    for dtype, n in jobs:
        repeats = 20 if n <= 1024 else 10
        r = {"n": n, "dtype": dtype, **measure_tvk(device, n, dtype, repeats)}
        r["torch_cpu_s"] = measure_torch_cpu(n, dtype, repeats) if torch is not None else None
        r["torch_cuda_s"], r["cuda_timing"] = measure_torch_cuda(n, dtype, repeats) if has_cuda else (None, None)
        r["torch_cuda_tflops"] = 2 * n ** 3 / r["torch_cuda_s"] / 1e12 if r["torch_cuda_s"] else None
        r["tvk_vs_cuda"] = r["tflops"] / r["torch_cuda_tflops"] if r["torch_cuda_tflops"] and r["tflops"] else None
        results.append(r)
        rows.append([dtype, n, r["kernel"], r["gpu_s"] and r["gpu_s"] * 1e3, r["tflops"], r["rel_err"],
                     r["torch_cpu_s"] and r["torch_cpu_s"] * 1e3, r["torch_cuda_tflops"], r["tvk_vs_cuda"]])
    payload = {"experiment": "matmul", "environment": environment(device), "results": results,
               "notes": "torch CUDA fp32 with TF32 off; GPU times from Vulkan timestamps and, for torch CUDA, "
                        "CUDA graph replays (cuda_timing says where profiled kernels stood in)"}
    table = md_table(["dtype", "n", "kernel", "tvk ms", "tvk TFLOP/s", "rel err vs fp64", "torch CPU ms",
                      "torch CUDA TFLOP/s", "tvk/CUDA"], rows)
    write_result(out_dir, "matmul", payload, table)
    return payload
