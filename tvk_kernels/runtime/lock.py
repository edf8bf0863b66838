"""The runtime lock: one thread at a time records GPU work or changes the runtime's state.

A device has one stream (one command buffer being recorded), one allocator and one queue.
Vulkan requires command buffers and queues to be used from one thread at a time, and cffi
releases the GIL inside every Vulkan call, so two Python threads really do run in them at
once: that crashed, hung or mixed up buffers. One process-wide re-entrant lock guards them
all. Every stream and allocator entry and every graph replay takes it, and torchvk holds it
across the entries whose steps must not interleave with another thread's: an eager op, a
compiled call, a whole graph capture (a capture or a dry run would swallow another thread's
kernels).

Never wait for another thread while holding it if that thread may need it; the threads
that build pipelines (pipeline.py) never take it, and a buffer freed by the garbage
collector on a thread that cannot take it at once is released later (memory.py).
"""
from __future__ import annotations

import functools
import threading

runtime_lock = threading.RLock()


def locked(fn):
    """Decorator: fn runs holding the runtime lock."""

    @functools.wraps(fn)
    def run_locked(*args, **kwargs):
        with runtime_lock:
            return fn(*args, **kwargs)

    return run_locked
