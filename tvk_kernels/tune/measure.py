"""Timing a candidate with Vulkan timestamps: warm-up, repeats, median; inputs rotated.

The GPU is kept busy while it is timed. A driver that saw the GPU idle (the tuner compiles
and checks on the host between candidates) may hold it at a low clock until the load is
sustained: the H200 measured the same conv2d kernel 4x slower right after a compile than in a
busy benchmark. So the warm-up runs for at least `warm_seconds` of wall time, and the timed
repeats are submitted back to back with one wait at the end, never a wait per repeat; each
is timed from the end of the one before (exclusive timestamps), so they never overlap.

Under a time budget (`deadline`) a measurement never starts what it cannot finish: the second
warm-up run, waited for, tells how long one run takes; the repeats are cut to what fits (at
least `min_repeats`), and OutOfTime is raised where not even those fit.
"""
from __future__ import annotations

import os
import statistics
import time

WARM_SECONDS = float(os.environ.get("TVK_TUNE_WARM_SECONDS", "0.05"))
MIN_REPEATS = 3  # timed runs a measurement under a deadline needs at least


class OutOfTime(Exception):
    """A measurement would run past the tuner's time budget."""


def time_candidate(device, run, n_inputs: int, warmup: int = 2, repeats: int = 10,
                   warm_seconds: float | None = None, deadline: float | None = None,
                   min_repeats: int = MIN_REPEATS) -> float:
    """Median GPU seconds of `run(i)` (one launch, possibly several dispatches) over `repeats`,
    rotating through `n_inputs` input sets so a cache never holds the next run's data.
    deadline: a time.perf_counter() value the measurement must end by (None: no limit)."""
    stream = device.stream
    warm_seconds = WARM_SECONDS if warm_seconds is None else warm_seconds
    end, i = time.perf_counter() + warm_seconds, 0
    if deadline is not None:  # two warm-up runs, waited for: the first may compile, the second is timed
        run(0)
        stream.synchronize()
        t = time.perf_counter()
        run(1 % n_inputs)
        stream.synchronize()
        now = time.perf_counter()
        one = now - t  # wall seconds of one run, submission included
        end, i = now + warm_seconds, 2
        fits = int((deadline - now) / max(2 * one, 1e-9))  # 2x: a busy host slows the next runs
        if fits < min_repeats:
            raise OutOfTime(f"{min_repeats} runs of {one:.3g} s do not fit the {max(deadline - now, 0):.3g} s left")
        repeats = min(repeats, fits)
        end = min(end, deadline - repeats * one)
    while i < warmup or time.perf_counter() < end:
        run(i % n_inputs)
        i += 1
        if i % 16 == 0:
            stream.submit()  # feeds the queue; the stream's few command buffers bound the backlog
    stream.synchronize()
    counts = []
    with stream.profiling(exclusive=True) as records:  # back to back: a start latched early would overlap
        for i in range(repeats):
            before = stream.total_dispatches
            run(i % n_inputs)
            counts.append(stream.total_dispatches - before)
    per_run, at = [], 0
    for n in counts:  # records are in launch order: run i owns the next counts[i] of them
        per_run.append(sum(t for _, t in records[at:at + n]))
        at += n
    per_run = [t for t in per_run if t > 0]
    if not per_run:
        raise RuntimeError("the device returned no usable timestamps")
    return statistics.median(per_run)
