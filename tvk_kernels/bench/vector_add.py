"""Experiment 1: vector add, 1k..10M float32 elements (100M on request).

For every size: the result is checked against numpy, GPU time comes from Vulkan
timestamps (median of repeats after a spin-up), wall time is one add recorded, submitted
and waited for. Bandwidth counts 3 x 4 bytes per element (two reads, one write).
The same run measures torch CPU and, where present, torch CUDA (GPU time only: cuda_timer.py),
and the host cost of one queued dispatch and the cold start from `import tvk_kernels` to a verified add.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
from tqdm import tqdm

from ..kernels.elementwise import _PUSH, Binary, add
from ..kernels.launch import family
from .common import environment, md_table, median, write_result
from .cuda_timer import SPIN_UP_SECONDS, spin_up, time_cuda

DEFAULT_SIZES = [1_000, 10_000, 100_000, 1_000_000, 10_000_000]


def _repeats(n: int) -> int:
    return 50 if n <= 1_000_000 else 20


def measure_tvk(device, n: int, spin_seconds: float = SPIN_UP_SECONDS):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    A, B, C = device.upload(a), device.upload(b), device.allocator.alloc(4 * n)
    add(device, A, B, C, n)
    got = device.download(C, np.float32, (n,))
    max_err = float(np.max(np.abs(got - (a + b)))) if n else 0.0
    correct = bool(np.array_equal(got, a + b))
    gpu = None
    if device.stream.timestamps:
        spin_up(lambda: add(device, A, B, C, n), device.synchronize, spin_seconds)
        with device.stream.profiling() as records:
            for _ in range(_repeats(n)):
                add(device, A, B, C, n)
        gpu = median([t for _, t in records])
    walls = []
    for _ in range(min(_repeats(n), 20)):
        t0 = time.perf_counter()
        add(device, A, B, C, n)
        device.synchronize()
        walls.append(time.perf_counter() - t0)
    for buf in (A, B, C):
        buf.free()
    return {"gpu_s": gpu, "wall_s": median(walls), "correct": correct, "max_abs_err": max_err}


def measure_torch_cpu(n: int) -> float:
    """Median wall seconds of one torch CPU add."""
    import torch  # lazy: torch is optional: without it the torch baselines are left out

    a, b = torch.randn(n), torch.randn(n)
    c = torch.empty_like(a)
    for _ in range(3):
        torch.add(a, b, out=c)
    times = []
    for _ in range(_repeats(n)):
        t0 = time.perf_counter()
        torch.add(a, b, out=c)
        times.append(time.perf_counter() - t0)
    return median(times)


def measure_torch_cuda(n: int) -> tuple[float, str]:
    """(GPU seconds of one torch CUDA add, the timing method), from cuda_timer.py."""
    import torch  # lazy: as above

    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    c = torch.empty_like(a)
    return time_cuda(lambda: torch.add(a, b, out=c), _repeats(n))


def host_cost_per_dispatch(device, count: int = 10_000) -> dict:
    """Host time to queue one dispatch (bind, push constants, dispatch, barrier; no wait),
    over `count` dispatches recorded into one command buffer. Execution is excluded: the
    batch threshold is lifted for the measurement, and the submit is timed separately."""
    A, B, C = (device.allocator.alloc(4 * 1024) for _ in range(3))
    fam = family(device, Binary)
    params = fam.resolve("small")
    pipe = fam.kernel(params, "add", params["VEC"])
    push = _PUSH.pack(A.address, B.address, C.address, 1024, 1.0)
    stream = device.stream
    device.synchronize()
    saved, stream.batch, stream.early_submit = (stream.batch, stream.early_submit), count + 1, 0
    try:
        t0 = time.perf_counter()
        for _ in range(count):
            stream.dispatch(pipe, (1, 1, 1), push)
        raw = (time.perf_counter() - t0) / count
        t0 = time.perf_counter()
        stream.submit()
        submit = time.perf_counter() - t0
        device.synchronize()
        t0 = time.perf_counter()
        for _ in range(count):
            add(device, A, B, C, 1024)
        call = (time.perf_counter() - t0) / count
        device.synchronize()
    finally:
        stream.batch, stream.early_submit = saved
    for buf in (A, B, C):
        buf.free()
    return {"dispatches": count, "raw_dispatch_us": raw * 1e6, "add_call_us": call * 1e6, "submit_us": submit * 1e6}


_COLD_START = r"""
import time, json
t0 = time.perf_counter()
import numpy as np
import tvk_kernels
from tvk_kernels.kernels.elementwise import add
dev = tvk_kernels.get_device(%d)
a = np.arange(1000, dtype=np.float32); b = np.ones(1000, dtype=np.float32)
A, B, C = dev.upload(a), dev.upload(b), dev.allocator.alloc(4000)
add(dev, A, B, C, 1000)
ok = bool(np.array_equal(dev.download(C, np.float32, (1000,)), a + b))
print(json.dumps({"seconds": time.perf_counter() - t0, "correct": ok}))
"""


def cold_start(index: int) -> dict:
    """Seconds from `import tvk_kernels` to the first verified add, in a fresh process.
    The first run may compile; the second finds the SPIR-V and pipeline caches warm."""
    runs = []
    for _ in range(2):
        env = dict(os.environ)
        env.pop("TVK_VALIDATION", None)
        out = subprocess.run([sys.executable, "-c", _COLD_START % index], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            return {"error": out.stderr.strip()[-500:]}
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"first_s": runs[0]["seconds"], "warm_cache_s": runs[1]["seconds"], "correct": runs[1]["correct"]}


def run(device, out_dir, sizes=None, progress=True) -> dict:
    sizes = sizes or DEFAULT_SIZES
    try:
        import torch  # lazy: as above

        has_cuda = torch.cuda.is_available()
    except Exception:
        torch, has_cuda = None, False
    rows, results = [], []
    it = sizes
    if progress:
        it = tqdm(sizes, desc="vector-add", unit="size")
    for n in it:
        r = {"n": n, **measure_tvk(device, n)}
        r["tvk_gbps"] = 12 * n / r["gpu_s"] / 1e9 if r["gpu_s"] else None
        r["torch_cpu_s"] = measure_torch_cpu(n) if torch is not None else None
        r["torch_cuda_s"], r["cuda_timing"] = measure_torch_cuda(n) if has_cuda else (None, None)
        r["torch_cuda_gbps"] = 12 * n / r["torch_cuda_s"] / 1e9 if r["torch_cuda_s"] else None
        r["tvk_vs_cuda_bandwidth"] = (r["tvk_gbps"] / r["torch_cuda_gbps"]) if r["torch_cuda_gbps"] and r["tvk_gbps"] else None
        results.append(r)
        rows.append([n, r["correct"], r["gpu_s"] and r["gpu_s"] * 1e6, r["wall_s"] * 1e6, r["tvk_gbps"],
                     r["torch_cpu_s"] and r["torch_cpu_s"] * 1e6, r["torch_cuda_s"] and r["torch_cuda_s"] * 1e6,
                     r["tvk_vs_cuda_bandwidth"]])
    host = host_cost_per_dispatch(device)
    cold = cold_start(device.index)
    payload = {"experiment": "vector-add", "environment": environment(device), "results": results,
               "host_cost": host, "cold_start": cold}
    table = md_table(["n", "correct", "tvk GPU us", "tvk wall us", "tvk GB/s", "torch CPU us", "torch CUDA us",
                      "tvk/CUDA bandwidth"], rows)
    table += (f"\n\nHost cost per queued dispatch over {host['dispatches']}: raw {host['raw_dispatch_us']:.2f} us, "
              f"through `add()` {host['add_call_us']:.2f} us.\n")
    if "warm_cache_s" in cold:
        table += f"Cold start, import to first verified add: {cold['first_s']:.3f} s first run, {cold['warm_cache_s']:.3f} s warm cache.\n"
    write_result(out_dir, "vector-add", payload, table)
    return payload
