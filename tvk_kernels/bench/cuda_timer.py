"""The one GPU-only timer of the torch CUDA peer, and the spin-up every timed case starts with.

Our kernels are timed from Vulkan timestamps: GPU time only. Timing the CUDA side with events
around back-to-back launches would measure CUDA's launch rate on small shapes, not its kernels.
So `time_cuda(fn)` captures N calls of `fn` into a CUDA graph and times replays of it between two
events (no host launch cost inside), seconds per call = elapsed / N, median of the replays. Where
capture fails (an op that syncs, say) it sums the device time of the kernels torch.profiler saw
for a few calls instead; it never falls back to launch timing. It returns the method used.

A GPU left idle clocks down (docs/design-notes.md 11), so every timed case, on either side,
starts with `spin_up`: ~SPIN_UP_SECONDS of its own work immediately before it is timed.

This file imports neither torchvk nor tvk_kernels (torch only, inside the functions): peer scripts
that run in a process of their own read its source (`source()`) and start with it.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

SPIN_UP_SECONDS = 0.3  # wall seconds of work before each timed case: enough for the clock to rise
SPIN_ROUND_SECONDS = 0.01  # calls are issued in rounds of about this long between waits
MAX_ROUND_CALLS = 4096  # bounds what one round queues
GRAPH_CALLS = 10  # calls captured into one graph, fewer where one call is long
GRAPH_SECONDS = 0.05  # ...so that one replay takes at most about this long
PROFILED_CALLS = 3  # calls run under the profiler in the fallback
CUDA_GRAPH, PROFILER_KERNELS = "cuda_graph", "profiler_kernels"


def source() -> str:
    """This module's source, for peer scripts run with `python -c` in a process without torchvk."""
    return Path(__file__).read_text()


def run_peer(body: str, what: str, **values):
    """Run a peer script in a process without torchvk: this module's source, `values` as Python literals
    (NAME = repr(value)), then `body`. Returns the JSON its last line prints, or None (its error printed)."""
    code = source() + "".join(f"\n{name} = {value!r}" for name, value in values.items()) + "\n" + body
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"{what}: the torch CUDA peer failed: {done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def median(values):
    values = sorted(values)
    if not values:
        raise ValueError("median of no values")
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def calls_per_graph(probe_seconds: float, max_calls: int = GRAPH_CALLS, budget: float = GRAPH_SECONDS) -> int:
    """How many calls of `fn` one graph holds, from one call's measured time."""
    return max(1, min(max_calls, int(budget / max(probe_seconds, 1e-9))))


def spin_up(run, wait, seconds: float = SPIN_UP_SECONDS, clock=time.perf_counter) -> int:
    """Call `run()` for about `seconds` of wall time, waiting with `wait()` after each round; returns
    the calls made (at least one). Rounds double while one takes under SPIN_ROUND_SECONDS: a wait
    per tiny kernel would leave the GPU mostly idle, which is what this is meant to end."""
    end, batch, calls = clock() + seconds, 1, 0
    while True:
        started = clock()
        for _ in range(batch):
            run()
        wait()
        calls += batch
        now = clock()
        if now >= end:
            return calls
        if now - started < SPIN_ROUND_SECONDS:
            batch = min(2 * batch, MAX_ROUND_CALLS)


def device_seconds(events) -> float:
    """Seconds of GPU work among torch.profiler events (kernels, copies and sets on the device)."""
    return sum(e.time_range.elapsed_us() for e in events
               if getattr(e.device_type, "name", None) == "CUDA") * 1e-6


def graph_seconds(fn, repeats: int = 10, spin_seconds: float = SPIN_UP_SECONDS) -> float:
    """Median GPU seconds per call of `fn`, from replays of a CUDA graph of N calls."""
    import torch  # lazy: the tvk benches import this module where torch CUDA may be absent

    side = torch.cuda.Stream()  # warm-up on a side stream before capture, as torch's docs require
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()  # this probe only sizes the graph; it is never reported
    calls = calls_per_graph(start.elapsed_time(end) * 1e-3)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    spin_up(graph.replay, torch.cuda.synchronize, spin_seconds)
    times = []
    for _ in range(repeats):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / calls)
    return median(times)


def profiler_seconds(fn, repeats: int = 10, spin_seconds: float = SPIN_UP_SECONDS) -> float:
    """GPU seconds per call of `fn`: the device time of the kernels torch.profiler saw, per call."""
    import torch  # lazy: as above
    from torch.profiler import ProfilerActivity, profile  # lazy: as above

    spin_up(fn, torch.cuda.synchronize, spin_seconds)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED_CALLS):
            fn()
        torch.cuda.synchronize()
    seconds = device_seconds(prof.events()) / PROFILED_CALLS
    if seconds <= 0:
        raise RuntimeError("torch.profiler saw no CUDA kernels")
    return seconds


def time_cuda(fn, repeats: int = 10, spin_seconds: float = SPIN_UP_SECONDS) -> tuple[float, str]:
    """(GPU seconds per call of `fn`, the method: CUDA_GRAPH, or PROFILER_KERNELS where capture failed)."""
    try:
        return graph_seconds(fn, repeats, spin_seconds), CUDA_GRAPH
    except Exception:  # e.g. an op that syncs cannot be captured
        import torch  # lazy: as above

        torch.cuda.synchronize()
        return profiler_seconds(fn, repeats, spin_seconds), PROFILER_KERNELS
