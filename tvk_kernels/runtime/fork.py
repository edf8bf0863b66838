"""Fork safety, as CUDA's: a process forked after its parent created the Vulkan instance cannot use it.

A fork copies the parent's memory but not its GPU context: the child's copies of the instance, the
devices, their queues, memory and command buffers name objects the driver gave the parent, and a lock
a parent thread held at the fork stays held. Using them hangs or corrupts (a DataLoader worker that
touched tvk hung). So in such a child every use raises ForkedDeviceError, which says what to do, as
torch raises "Cannot re-initialize CUDA in forked subprocess"; freeing (a tensor's buffer collected
in the child) does nothing, since the memory is the parent's. A child of a parent that never created
the instance uses tvk as any process does. runtime/device.py registers the hook (os.register_at_fork).
"""
from __future__ import annotations

from ..errors import ForkedDeviceError

MESSAGE = ("Cannot use the tvk device in a forked subprocess: the parent process had started Vulkan, whose "
           "device a fork does not carry. Use the 'spawn' start method (multiprocessing.set_start_method('spawn'), "
           "or DataLoader(..., multiprocessing_context='spawn')), or keep the workers on CPU tensors and move "
           "batches to tvk in the main process.")


_forked = False
# what a child may still call: releasing a buffer, a graph's deferred free, the pipeline cache's save
# at exit; each does nothing there (the memory and the cache are the parent's)
_HARMLESS = frozenset({"release", "_now_or_later", "save"})


def _nothing(*args, **kwargs):
    return None


class _Forbidden:
    """Mixed into a runtime object's class in a forked child: any use raises, freeing does nothing."""
    __slots__ = ()

    def __getattribute__(self, name):
        if name in _HARMLESS:
            return _nothing
        if name.startswith("__") and name.endswith("__"):
            return object.__getattribute__(self, name)
        raise ForkedDeviceError(MESSAGE)

    def __repr__(self):
        return f"<{type(self).__bases__[0].__name__} of the parent process (unusable after a fork)>"


_classes: dict = {}


def forbid(*objects) -> None:
    """Make these objects raise ForkedDeviceError on any use (None: skipped)."""
    for obj in objects:
        if obj is None or isinstance(obj, _Forbidden):
            continue
        cls = type(obj)
        forbidden = _classes.get(cls)
        if forbidden is None:
            forbidden = _classes[cls] = type(f"Forked{cls.__name__}", (cls, _Forbidden),
                                                   {"__slots__": (), "__repr__": _Forbidden.__repr__})
        obj.__class__ = forbidden


def mark_forked() -> None:
    global _forked
    _forked = True


def check() -> None:
    """Raise ForkedDeviceError in a child forked from a process that had started Vulkan."""
    if _forked:
        raise ForkedDeviceError(MESSAGE)
