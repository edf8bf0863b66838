"""The device's ceilings, measured: the yardstick every kernel benchmark row divides by (% of peak).

    fp32 / fp16 FMA rate    an FMA loop on registers (templates/roofline.comp KIND 1), FLOP/s
    cooperative matrices    fp16 x fp16 -> fp32 multiply-adds on registers (KIND 3), where the device
                            has VK_KHR_cooperative_matrix with such a shape
    copy bandwidth          a vec4 copy between two buffers larger than any cache (KIND 2),
                            bytes read + written per second

Each probe checks what its kernel computed against numpy (a probe that skipped work would report a
peak it never reached), and is a kernel of ours timed with Vulkan timestamps after the spin-up every timed case starts with
(tvk_kernels/bench/cuda_timer.py's SPIN_UP_SECONDS), so it is the peak a Vulkan compute kernel reaches
on this device and driver, not the data sheet's. `tvk-bench roofline` writes it alone; `tvk-bench
kernels` measures it first and reports each row's fraction of it.
"""
from __future__ import annotations

import math
import struct

import numpy as np

from ..errors import TVKError
from ..kernels.launch import Family, family, grid_1d, workgroup_size
from ..kernels.matmul_coopmat import coop_shapes, pick_shape
from ..tune.measure import time_candidate
from .common import environment, md_table, write_result
from .cuda_timer import SPIN_UP_SECONDS

PUSH = struct.Struct("<QQIff")
CHAINS = 4 * 8  # operations a loop trip, each thread (templates/roofline.comp: 4 unrolled x 8 chains)
# the probes' sizes: `quick` for lavapipe and CI (a few MFLOP), `full` for a GPU (milliseconds a case)
SIZES = {
    "quick": {"groups": 8, "iterations": 8, "copy_bytes": 1 << 20},
    "full": {"groups": 4096, "iterations": 512, "copy_bytes": 512 << 20},
}


class Roofline(Family):
    """The probe kernels. Not tuned (no tuning/roofline.json): a probe's launch is fixed."""

    family = "roofline"
    template = "roofline.comp"


def _time(device, dispatch, quick: bool) -> float:
    return time_candidate(device, lambda i: dispatch(), n_inputs=1, warmup=1, repeats=3 if quick else 10,
                          warm_seconds=0.0 if quick else SPIN_UP_SECONDS)


def fma_rate(device, fp16: bool, quick: bool = False) -> float:
    """FLOP/s of fused multiply-adds (2 FLOP each) in fp32, or fp16 where `fp16`."""
    size = SIZES["quick" if quick else "full"]
    wg = workgroup_size(device, 256)
    threads = size["groups"] * wg
    fam = family(device, Roofline)
    pipe = fam.variant({"KIND": 1, "FP16": int(fp16), "ITER": size["iterations"]}, wg, PUSH.size)
    dtype = np.float16 if fp16 else np.float32
    out = device.allocator.alloc(threads * 4 * np.dtype(dtype).itemsize)
    try:
        push = PUSH.pack(0, out.address, 0, 1.0, 1.0)  # acc = acc * 1 + 1: exact in fp32, checkable in fp16
        seconds = _time(device, lambda: device.stream.dispatch(pipe, grid_1d(size["groups"]), push, "roofline.fma"),
                        quick)
        got = device.download(out, dtype, (threads, 4))
    finally:
        out.free()
    # fp16: a driver may keep the chain wider than fp16 between FMAs (0.2% off the emulated rounding);
    # a probe that skipped trips is off by far more
    _check("fp16 FMA" if fp16 else "fp32 FMA", got, _fma_expected(threads, size["iterations"], dtype),
           rtol=1e-2 if fp16 else 1e-6)
    return threads * size["iterations"] * CHAINS * 4 * 2 / seconds


def _fma_expected(threads: int, iterations: int, dtype) -> np.ndarray:
    """What templates/roofline.comp KIND 1 stores with mul = add = 1: chain j of thread t starts at
    (t & 15) * 0.01 + j and gains 1 a step, rounded to `dtype` after each, as the FMAs round."""
    start = np.arange(16) * 0.01  # the 16 distinct starting points
    total = None
    for j in range(8):
        chain = (start + j).astype(dtype)
        for _ in range(CHAINS // 8 * iterations):
            chain = (chain + dtype(1)).astype(dtype)
        total = chain if total is None else (total + chain).astype(dtype)
    return np.repeat(total[np.arange(threads) & 15][:, None], 4, axis=1)


def _check(what: str, got: np.ndarray, expected: np.ndarray, rtol: float = 1e-3) -> None:
    if not np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=0):
        bad = int(np.argmax(np.abs(got.astype(np.float64) - expected.astype(np.float64)).reshape(-1)))
        raise TVKError(f"roofline probe {what}: the kernel computed {got.reshape(-1)[bad]} where "
                       f"{expected.reshape(-1)[bad]} was due (element {bad}); its time would not be a peak")


def coopmat_rate(device, quick: bool = False) -> float | None:
    """FLOP/s of fp16 x fp16 -> fp32 cooperative-matrix multiply-adds; None where the device has none."""
    features = device.facts.features
    shape = pick_shape(coop_shapes(device)) if features.get("cooperative_matrix") else None
    if shape is None or "VK_KHR_cooperative_matrix" not in getattr(device, "extensions", ()):
        return None
    size = SIZES["quick" if quick else "full"]
    subgroup = device.facts.subgroup_size
    wg = 4 * subgroup
    fam = family(device, Roofline)
    control = subgroup if device.facts.subgroup_size_control else None  # whole subgroups of the reported size
    pipe = fam.variant({"KIND": 3, "FP16": 0, "MS": shape["M"], "NS": shape["N"], "KS": shape["K"],
                        "ITER": size["iterations"]}, wg, PUSH.size, subgroup_size=control)
    subgroups = size["groups"] * 4
    tile = shape["M"] * shape["N"]
    out = device.allocator.alloc(subgroups * tile * 4)
    try:
        push = PUSH.pack(0, out.address, 0, 1.0 / 64, 1.0 / 64)  # products of 2^-12: exact in fp32 sums
        seconds = _time(device, lambda: device.stream.dispatch(pipe, grid_1d(size["groups"]), push, "roofline.coopmat"),
                        quick)
        got = device.download(out, np.float32, (subgroups, tile))
    finally:
        out.free()
    # acc[j] starts at j and gains K * 2^-12 a multiply-add; the 8 are summed
    steps = CHAINS // 8 * size["iterations"]
    _check("cooperative matrix", got, np.full((subgroups, tile), sum(range(8)) + 8 * steps * shape["K"] / 4096.0))
    return subgroups * size["iterations"] * CHAINS * 2 * shape["M"] * shape["N"] * shape["K"] / seconds


def copy_bandwidth(device, nbytes: int | None = None, quick: bool = False) -> tuple[float, int]:
    """(bytes read + written a second, bytes copied) of a vec4 copy of `nbytes` (default: the size's)."""
    nbytes = nbytes or SIZES["quick" if quick else "full"]["copy_bytes"]
    nbytes -= nbytes % 16
    wg = workgroup_size(device, 256)
    vectors = nbytes // 16
    groups = min(math.ceil(vectors / wg), 32768)  # a grid-stride loop: enough threads to fill any GPU
    fam = family(device, Roofline)
    pipe = fam.variant({"KIND": 2, "FP16": 0}, wg, PUSH.size)
    data = np.arange(nbytes // 4, dtype=np.uint32)
    src, dst = device.upload(data), device.allocator.alloc(nbytes)
    try:
        push = PUSH.pack(src.address, dst.address, vectors, 0.0, 0.0)
        seconds = _time(device, lambda: device.stream.dispatch(pipe, grid_1d(groups), push, "roofline.copy"), quick)
        if not np.array_equal(device.download(dst, np.uint32, data.shape), data):
            raise TVKError("roofline probe copy: the destination does not hold the source; its time would not be a peak")
    finally:
        src.free()
        dst.free()
    return 2 * nbytes / seconds, nbytes


def probe(device, quick: bool = False) -> dict:
    """The device's measured peaks: TFLOP/s per kind of arithmetic (None: not on this device), GB/s."""
    features = device.facts.features
    fp16 = bool(features.get("shader_float16") and features.get("storage_16bit"))
    coopmat = coopmat_rate(device, quick)
    bandwidth, nbytes = copy_bandwidth(device, quick=quick)
    return {"fp32_fma_tflops": fma_rate(device, False, quick) / 1e12,
            "fp16_fma_tflops": fma_rate(device, True, quick) / 1e12 if fp16 else None,
            "coopmat_fp16_tflops": coopmat / 1e12 if coopmat else None,
            "copy_gbps": bandwidth / 1e9, "copy_bytes": nbytes}


def peak_tflops(peaks: dict, dtype: str) -> float:
    """The arithmetic ceiling of a GEMM or conv in `dtype`: cooperative matrices where the device has
    them for fp16 (cuBLAS's tensor cores are measured against the same), else the FMA rate."""
    if dtype == "float16":
        return peaks.get("coopmat_fp16_tflops") or peaks.get("fp16_fma_tflops") or peaks["fp32_fma_tflops"]
    return peaks["fp32_fma_tflops"]


def fraction(value: float | None, peak: float | None) -> float | None:
    """value / peak, None where either is unknown."""
    return value / peak if value and peak else None


def markdown(peaks: dict) -> str:
    """One table of the peaks."""
    rows = [["fp32 FMA", peaks["fp32_fma_tflops"], "TFLOP/s"], ["fp16 FMA", peaks["fp16_fma_tflops"], "TFLOP/s"],
            ["cooperative matrix fp16 -> fp32", peaks["coopmat_fp16_tflops"], "TFLOP/s"],
            [f"copy ({peaks['copy_bytes'] >> 20} MiB, read + write)", peaks["copy_gbps"], "GB/s"]]
    return md_table(["ceiling", "measured", "unit"], rows)


def run(device, out_dir, quick: bool = False, progress: bool = True) -> dict:
    """`tvk-bench roofline`: the peaks alone, as roofline.json and roofline.md."""
    peaks = probe(device, quick)
    payload = {"experiment": "roofline", "environment": environment(device), "quick": quick, "peaks": peaks,
               "notes": "our probe kernels (templates/roofline.comp), Vulkan timestamps, spun up before each"}
    write_result(out_dir, "roofline", payload, "## measured peaks\n\n" + markdown(peaks) + "\n")
    return payload
