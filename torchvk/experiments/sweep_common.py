"""What the GEMM and conv sweeps (gemm_sweep.py, conv_sweep.py) share: the torch CUDA peer's timer
and how it is run, and the sweep's summary statistics."""
from __future__ import annotations

import json
import math
import subprocess
import sys

from tvk_kernels.bench import cuda_timer

# Python source the peer scripts start with: they run in a process of their own without torchvk.
# The timer is tvk_kernels/bench/cuda_timer.py's; median_seconds also keeps the method of each timing,
# in call order, for run_cuda_peer to hand back beside the times.
CUDA_TIMER = cuda_timer.source() + r'''
import json, sys, torch

TIMING_METHODS = []


def median_seconds(fn, repeats):
    """Median GPU seconds of one fn() call (time_cuda: CUDA graph replays, or profiled kernels)."""
    seconds, method = time_cuda(fn, repeats)
    TIMING_METHODS.append(method)
    return seconds
'''

# printed after the peer script's own last line: the methods of its timings, in call order
_METHODS_FOOTER = "\nprint(json.dumps(TIMING_METHODS))\n"


def run_cuda_peer(script: str, payload, what: str) -> tuple[list, list[str]] | None:
    """(the JSON list a peer script prints for `payload` (given on stdin), the timing method of each
    median_seconds call it made), or None if it failed."""
    proc = subprocess.run([sys.executable, "-c", CUDA_TIMER + script + _METHODS_FOOTER], input=json.dumps(payload),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{what}: the CUDA peer failed: {proc.stderr.strip()[-800:]}", file=sys.stderr)
        return None
    *_, result, methods = proc.stdout.strip().splitlines()
    return json.loads(result), json.loads(methods)


def geomean(ratios) -> float | None:
    ratios = list(ratios)
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None


def worst(rows, ratio: str, keys, n: int = 5) -> list[dict]:
    """The n rows with the largest `ratio`, as dicts of `keys`."""
    ranked = sorted((r for r in rows if r[ratio]), key=lambda r: -r[ratio])
    return [{k: r[k] for k in keys} for r in ranked[:n]]
