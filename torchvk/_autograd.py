"""Autograd with tvk tensors: every backward runs on the calling thread, and an op that fails
inside a backward node raises its own exception from the call that started the backward.

The calling thread. torch's engine hands a non-CPU device's backward nodes to a worker thread
of its own and waits for it. That round trip cost about 1 ms of host time per training step
(design note 16), and with the runtime lock (tvk_kernels/runtime/lock.py) it would deadlock: a
thread holding the lock through a graph capture would wait for a worker that needs the lock.
torch's switch (set_multithreading_enabled) is per thread, so every autograd entry goes through
`run_backward`: Tensor.backward, torch.autograd.backward and torch.autograd.grad all call
torch.autograd's `_engine_run_backward`, which `install()` replaces. CPU nodes run on the
calling thread anyway, so a CPU-only backward in the same process is unchanged.

Errors. An exception raised by an op inside a backward node cannot unwind through the engine:
torch's device guard for a Python backend calls into Python while the error is still set, which
aborts the process ("terminate called without an active exception") or makes run_backward
return NULL with no exception. So the op keeps its error for the run and returns None, on which
torch stops the node with a C++ error of its own; the run raises the op's error instead.

Ctrl-C. Python would raise KeyboardInterrupt inside a node (in whatever Python code runs there),
which aborts as above: the run defers it (tvk_kernels/runtime/interrupts.py) and raises it when
the backward returns, as torch on the CPU does when Ctrl-C comes during its C++ backward.
"""
from __future__ import annotations

import logging
import threading

import torch
import torch.autograd.graph

from tvk_kernels.runtime.interrupts import deferred

log = logging.getLogger("torchvk")

_torch_run_backward = torch.autograd.graph._engine_run_backward
_runs = threading.local()  # .errors: the first error of an op inside a node of this thread's current run


def run_backward(t_outputs, *args, **kwargs):
    """torch's `_engine_run_backward` on the calling thread; raises the first error an op met in a node."""
    outer = getattr(_runs, "errors", None)  # a backward inside a backward node (reentrant checkpoint)
    errors = _runs.errors = []
    try:
        with deferred(), torch.autograd.set_multithreading_enabled(False):
            try:
                result = _torch_run_backward(t_outputs, *args, **kwargs)
            except Exception:
                if errors:
                    raise errors[0] from None  # the engine's own error only says that the node stopped
                raise
        if errors:  # a failed in-place op whose result torch did not check: the node ran on
            raise errors[0]
        return result
    finally:
        _runs.errors = outer


def in_backward_node() -> bool:
    return torch._C._current_autograd_node() is not None


def stop_node(func, err):
    """An op inside a backward node failed with err: keep err for run_backward to raise, and return
    None, on which torch stops the node (raising here would abort the process, see above)."""
    errors = getattr(_runs, "errors", None)
    if errors is None:  # a backward started from C++ (TorchScript, an extension), not through run_backward
        log.error("TorchVK: %s failed inside a backward node, which stops with an error of torch's own: "
                  "%s: %s", func, type(err).__name__, err)
    elif not errors:
        errors.append(err)
    return None


def install():
    """Route torch's autograd entries through run_backward (at `import torchvk`)."""
    torch.autograd._engine_run_backward = run_backward
    torch.autograd.graph._engine_run_backward = run_backward
