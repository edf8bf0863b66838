"""Host and GPU overlap of an eager training step (issue #17 item 2, the stream's early submit).

For the ablations' eager MNIST CNN step, with early submit off (kernels go to the GPU at the
batch threshold and the step's sync) and on (an idle GPU gets what is recorded every
`early_submit` kernels): the host time to issue the step, the GPU time of its kernels (exclusive
timestamps, a separate run) and the wall time through the sync. Overlap shows as wall time
below host + GPU time.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def step_overlap_ms(device, steps: int, batch: int, setup, time_steps) -> dict:
    """{"off": {...}, "on": {...}} with host_ms, gpu_ms and wall_ms of one step (medians)."""
    stream = device.stream
    saved = stream.early_submit
    out = {}
    try:
        for name, every in (("off", 0), ("on", saved or 16)):
            stream.early_submit = every
            model, opt, x, y = setup(device, batch)

            def step():
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(x), y).backward()
                opt.step()

            host, wall = time_steps(step, steps)
            gpu = None
            if stream.timestamps:
                with stream.profiling(exclusive=True) as records:
                    step()
                gpu = sum(seconds for _, seconds in records) * 1e3
            out[name] = {"early_submit": every, "host_ms": host, "gpu_ms": gpu, "wall_ms": wall}
    finally:
        stream.early_submit = saved
        torch.tvk.synchronize()
    return out
