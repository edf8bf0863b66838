"""Whole-step replay for tvk tensors, in the spirit of torch.cuda.graph:

    x = torch.empty(batch_shape, device="tvk"); y = torch.empty(..., dtype=torch.int64, device="tvk")
    step()                           # one eager step first: creates grads and optimizer state
    with torchvk.graph() as g:       # record the step's kernels once
        loss = step()
    for xb, yb in loader:
        x.copy_(xb); y.copy_(yb)     # new data into the captured input tensors
        g.replay()                   # one submit for the whole step
        print(loss.item())           # the captured output tensors hold the new results

Rules (as for CUDA graphs): inputs and outputs are the tensors used during capture (copy
new data into them); no sync point inside the capture (.item(), .cpu(), printing); random
ops replay the same random numbers; shapes are fixed: capture again for a new batch size.
Other threads' tvk work waits until the capture ends (it holds the runtime lock): it would
otherwise be recorded into the graph and not run.
"""
from __future__ import annotations

from contextlib import contextmanager

from tvk_kernels.runtime.graph import Graph, capture
from tvk_kernels.runtime.lock import runtime_lock

from ._storage import get_device


@contextmanager
def graph(device=None):
    """Capture the tvk kernels launched inside the block; returns a Graph with .replay()."""
    dev = get_device(None if device is None else getattr(device, "index", device))
    with runtime_lock, capture(dev) as g:
        yield g


__all__ = ["graph", "Graph"]
