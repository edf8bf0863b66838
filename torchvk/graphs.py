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

import itertools
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


_pool_ids = itertools.count(1)


class TVKGraph:
    """torch.accelerator.Graph on tvk (put there by torchvk.accelerator.install): the kernels
    launched between capture_begin() and capture_end(), or inside `with graph:`, are recorded as
    by torchvk.graph() (same rules: module docstring); replay() submits them again.

    torch's arguments are taken as they are, with tvk's meaning: a recording is ready to replay
    when its capture ends (keep_graph and instantiate change nothing); each graph holds its own
    memory (pool() only names one); every capture_error_mode acts as "global": other threads'
    tvk work waits until the capture ends."""

    def __init__(self, keep_graph: bool = False, *, pool=None, capture_error_mode: str = "default"):
        self.keep_graph = keep_graph
        self.graph_pool = pool if pool is not None else (0, next(_pool_ids))
        self.capture_error_mode = capture_error_mode
        self.recording: Graph | None = None  # the runtime's Graph, once a capture has ended
        self._capturing = None  # between capture_begin and capture_end: the open graph() block, its Graph

    def capture_begin(self) -> None:
        if self._capturing is not None:
            raise RuntimeError("capture_begin: this graph is capturing already; call capture_end first")
        block = graph()
        self._capturing = block, block.__enter__()

    def capture_end(self) -> None:
        self._end(None, None, None)

    def _end(self, *exc_info) -> None:
        """End the capture; an exception raised inside it (exc_info) ends it too, and nothing is kept."""
        if self._capturing is None:
            raise RuntimeError("capture_end without capture_begin")
        (block, recording), self._capturing = self._capturing, None
        block.__exit__(*exc_info)
        if exc_info[0] is None:
            self.recording = recording

    def instantiate(self) -> None:
        """Nothing to do: the recorded command buffer is submitted as it is."""

    def replay(self) -> None:
        if self.recording is None:
            raise RuntimeError("replay: this graph holds no recording; capture one first "
                               "(capture_begin/capture_end or `with graph:`)")
        self.recording.replay()

    def reset(self) -> None:
        """Drop the recording, and with it the buffers it held."""
        self.recording = None

    def pool(self) -> tuple[int, int]:
        return self.graph_pool

    def enable_debug_mode(self) -> None:
        """Nothing to enable: see debug_dump."""

    def debug_dump(self, path: str) -> None:
        raise NotImplementedError("a tvk graph is one Vulkan command buffer, with no node graph to dump; "
                                  "graph.recording.dispatches counts its kernels")

    def __enter__(self) -> None:
        self.capture_begin()

    def __exit__(self, *exc_info) -> None:
        self._end(*exc_info)


__all__ = ["graph", "Graph", "TVKGraph"]
