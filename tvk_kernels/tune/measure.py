"""Timing a candidate with Vulkan timestamps: warm-up, repeats, median; inputs rotated."""
from __future__ import annotations

import statistics


def time_candidate(device, run, n_inputs: int, warmup: int = 2, repeats: int = 10) -> float:
    """Median GPU seconds of `run(i)` (one launch, possibly several dispatches) over `repeats`,
    rotating through `n_inputs` input sets so a cache never holds the next run's data."""
    stream = device.stream
    for i in range(warmup):
        run(i % n_inputs)
    stream.synchronize()
    per_run = []
    with stream.profiling() as records:
        marks = []
        for i in range(repeats):
            marks.append(len(records))
            run(i % n_inputs)
            stream.submit()
            stream.synchronize()
            marks.append(len(records))
    for start, end in zip(marks[::2], marks[1::2]):
        per_run.append(sum(t for _, t in records[start:end]))
    per_run = [t for t in per_run if t > 0]
    if not per_run:
        raise RuntimeError("the device returned no usable timestamps")
    return statistics.median(per_run)
