"""What the GEMM and conv sweeps (gemm_sweep.py, conv_sweep.py) share: the torch CUDA peer's timer
and how it is run, and the sweep's summary statistics."""
from __future__ import annotations

import json
import math
import subprocess
import sys

# Python source the peer scripts start with: they run in a process of their own without torchvk.
CUDA_TIMER = r'''
import json, sys, torch


def median_seconds(fn, repeats):
    """Median GPU seconds of one fn() call. Back-to-back launches per timing, so a small kernel's
    time is its own, not the launch latency (the tvk side reads Vulkan timestamps of the dispatches)."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); fn(); e.record(); e.synchronize()
    inner = max(1, min(100, int(1e-3 / max(s.elapsed_time(e) * 1e-3, 1e-7))))
    ts = []
    for _ in range(repeats):
        s.record()
        for _ in range(inner):
            fn()
        e.record(); e.synchronize()
        ts.append(s.elapsed_time(e) * 1e-3 / inner)
    ts.sort()
    return ts[len(ts) // 2]
'''


def run_cuda_peer(script: str, payload, what: str) -> list | None:
    """The JSON list a peer script prints for `payload` (given on stdin), or None if it failed."""
    proc = subprocess.run([sys.executable, "-c", CUDA_TIMER + script], input=json.dumps(payload),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"{what}: the CUDA peer failed: {proc.stderr.strip()[-800:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def geomean(ratios) -> float | None:
    ratios = list(ratios)
    return math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None


def worst(rows, ratio: str, keys, n: int = 5) -> list[dict]:
    """The n rows with the largest `ratio`, as dicts of `keys`."""
    ranked = sorted((r for r in rows if r[ratio]), key=lambda r: -r[ratio])
    return [{k: r[k] for k in keys} for r in ranked[:n]]
