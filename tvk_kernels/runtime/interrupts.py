"""Ctrl-C (KeyboardInterrupt) raised only where the runtime's state is whole, and never into
native code that cannot take a Python error.

Critical sections. Python raises KeyboardInterrupt between two bytecodes of the main thread:
between a vkQueueSubmit and the line that marks its command buffer in flight, say. The stream
would then record into a command buffer the GPU is running (a crash in the driver) and free
what it keeps alive while the GPU still reads it. So the steps that must happen together (a
submit and its bookkeeping, a fence reset and the release of what the work kept alive) run
inside `deferred()`: a Ctrl-C there is raised as the block ends.

Native code. Python also runs signal handlers inside C functions that check for signals. torch
does, through pybind11, in every call of a Python backend's device guard (torchvk's), which it
makes from C++ that may not throw: around each op and autograd node, many times a step. A
handler raising there aborts the process ("terminate called without an active exception").
So SIGINT's handler from the first stream on (`install`) looks at the C stack it runs on: under
a native library of an installed package (torch's C++, and with it every tvk op, whose Python
runs inside torch's dispatcher) it keeps the Ctrl-C pending. So it does inside a __del__ (a
buffer freed by the garbage collector), where Python would only print the KeyboardInterrupt.
Elsewhere (plain Python, time.sleep, input) it raises at once, as Python's own handler does.

A pending Ctrl-C is raised once, at the first safe point: the end of the current tvk op
(`raise_pending`), the next slice of a fence wait (stream.wait_for_fence: Ctrl-C stops a long
wait at once and leaves the work in flight), or the end of the deferred() block it came in. A
tvk op is thus whole to Ctrl-C, as a CPU op is to torch. It never waits for a later, unrelated
call: Python runs no code of the runtime's as a __del__ or a native call returns, so while a
Ctrl-C is pending a profile hook (sys.setprofile, `_watch`) looks at each call, and raises
it at the first one where Python can take it.

Only the main thread receives signals, and only it raises them. A program that sets a SIGINT
handler of its own after the runtime started keeps it, and these guarantees lapse with it; one
that runs a profiler of its own keeps it too, and a pending Ctrl-C then waits for a safe point.
"""
from __future__ import annotations

import ctypes
import sys
import threading

# the C functions behind signal.signal and signal.getsignal: the module's wrappers convert
# handlers to enums through a caught ValueError, 10x the cost of the call itself
from _signal import SIGINT, default_int_handler, getsignal, signal as set_handler

_MAIN = threading.main_thread().ident
_get_ident = threading.get_ident


class _State:
    __slots__ = ("depth", "caught")

    def __init__(self):
        self.depth = 0  # deferred() blocks open on the main thread
        self.caught = False  # a Ctrl-C not raised yet


state = _State()


def on_sigint(signum, frame):
    if state.depth:
        state.caught = True  # raised as the block ends
    else:
        _raise_or_watch(frame)


def _raise_or_watch(frame):
    """Raise the Ctrl-C here if Python can take it; else keep it pending, watching for where it can."""
    if not _in_finalizer(frame) and not _under_package_native_code():
        state.caught = False
        raise KeyboardInterrupt
    state.caught = True
    if sys.getprofile() is None:
        sys.setprofile(_watch)


def _watch(frame, event, arg):
    """The profile hook while a Ctrl-C is pending: raise it at the first call that can take it.
    Not at a return: raised there, it would skip the frame's handlers (at a generator's yield, the
    `finally` of a context manager). Python unsets the hook when it raises; it unsets itself once
    a safe point has raised the Ctrl-C."""
    if not state.caught:
        sys.setprofile(None)
    elif not state.depth and event != "return":  # inside a deferred() block, the block's end raises it
        _raise_or_watch(frame)


def raise_pending():
    """Raise the pending Ctrl-C here, a safe point, unless inside a deferred() block (its end
    raises it) or on another thread. Callers test `state.caught` first: this runs at every tvk op."""
    if state.caught and not state.depth and _get_ident() == _MAIN:
        state.caught = False
        raise KeyboardInterrupt


def install():
    """Make on_sigint SIGINT's handler, where it is Python's default (and on the main thread)."""
    if _get_ident() == _MAIN and getsignal(SIGINT) is default_int_handler:
        _under_package_native_code()  # loads what it uses now, not in the first Ctrl-C
        set_handler(SIGINT, on_sigint)


class deferred:
    """`with deferred():` runs the block whole: a Ctrl-C inside it is raised as it ends (as the
    outermost block ends, where blocks nest), or, where the block ran in a __del__ or under
    native code, at the first place after that can take it."""

    __slots__ = ()

    def __enter__(self):
        if _get_ident() == _MAIN:  # only the main thread gets signals
            state.depth += 1

    def __exit__(self, *exc):
        if _get_ident() == _MAIN:
            state.depth -= 1
            if state.caught and not state.depth:
                _raise_or_watch(sys._getframe(1))


# ------------------------------------------------------------------ where the handler runs
def _in_finalizer(frame) -> bool:
    """Whether Python runs a __del__ (a buffer's, freeing it): an exception there is only printed."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_FRAMES = 64  # C frames looked at: the handler's own and the native caller's are within the first 30
_libc: list = []  # [libc], loaded on first use; [None] where backtrace or dladdr is missing


def _under_package_native_code() -> bool:
    """Whether a native library of an installed package is on the C stack near this call
    (False where the stack cannot be read: the handler then raises as Python's does)."""
    if not _libc:
        try:
            libc = ctypes.CDLL(None)
            _libc.append(libc if hasattr(libc, "backtrace") and hasattr(libc, "dladdr") else None)
        except OSError:
            _libc.append(None)
    libc = _libc[0]
    if libc is None:
        return False
    frames = (ctypes.c_void_p * _FRAMES)()
    info = _DlInfo()
    for i in range(libc.backtrace(frames, _FRAMES)):
        if libc.dladdr(ctypes.c_void_p(frames[i]), ctypes.byref(info)) and info.dli_fname:
            if b"site-packages" in info.dli_fname or b"dist-packages" in info.dli_fname:
                return True
    return False
