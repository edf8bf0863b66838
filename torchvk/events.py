"""torch.Event on tvk, as on cuda: record, query, synchronize, wait and elapsed_time.

torch.Event is a C++ class that asks the backend's device guard for each of these, and a Python
backend's guard does nothing there (record is a no-op, query says True, elapsed_time raises). So
install() puts a subclass in its place: `torch.Event(...)` on tvk (the current accelerator, or
device="tvk") makes a tvk Event, backed by a Marker in the device's stream
(tvk_kernels/runtime/stream.py); on any other device it makes torch's own event, as before, and
isinstance(e, torch.Event) holds for both. `torch.tvk.Event(enable_timing=True)` is the same
class under torch.cuda.Event's name.

A device has one queue (torchvk/_module.py, Stream), whose work runs in order: `wait` has nothing
to order and returns at once. elapsed_time waits for both events, where CUDA's raises until they
have completed.
"""
from __future__ import annotations

import torch

from ._storage import get_device

TorchEvent = torch.Event  # torch's own class, kept before install() replaces the public name


class _EventType(type):
    # torch's own events (another device's, or made by torch's C++ code) are torch.Events too
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, TorchEvent) if cls is Event else super().__instancecheck__(obj)

    def __subclasscheck__(cls, other) -> bool:
        return issubclass(other, TorchEvent) if cls is Event else super().__subclasscheck__(other)


class Event(TorchEvent, metaclass=_EventType):
    """Event(device=None, *, enable_timing=False, blocking=False, interprocess=False), as torch.Event."""

    def __new__(cls, device=None, *, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        target = torch.device(device) if device is not None else torch.accelerator.current_accelerator()
        if target is None or target.type != "tvk":
            return TorchEvent(device, enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)
        if interprocess:
            raise RuntimeError("interprocess events are not supported on tvk")
        index = target.index if target.index is not None else torch.tvk.current_device()
        event = super().__new__(cls, torch.device("tvk", index), enable_timing=enable_timing, blocking=blocking)
        event._device = torch.device("tvk", index)  # torch's own property leaves the index out
        event.enable_timing = bool(enable_timing)
        event._marker = None
        return event

    def __init__(self, *args, **kwargs):  # __new__ took the arguments
        pass

    @property
    def device(self) -> torch.device:
        return self._device

    def _stream(self, stream=None):
        if stream is not None and (stream.device.type != "tvk" or stream.device_index != self.device.index):
            raise ValueError(f"an event of {self.device} recorded on a stream of {stream.device}")
        return get_device(self.device.index).stream

    def record(self, stream=None) -> None:
        """Mark the point after every kernel recorded so far on the device (stream: its stream, or None)."""
        self._marker = self._stream(stream).mark(timed=self.enable_timing)

    def query(self) -> bool:
        """Whether the work before the recorded point has run (True if never recorded), without waiting."""
        return self._marker is None or get_device(self.device.index).stream.reached(self._marker)

    def synchronize(self) -> None:
        """Wait until the work before the recorded point has run."""
        if self._marker is not None:
            get_device(self.device.index).stream.wait_for(self._marker)

    def wait(self, stream=None) -> None:
        """Make later work on `stream` wait for this event: the device's one queue runs in order already."""
        self._stream(stream)

    def elapsed_time(self, end_event) -> float:
        """Milliseconds of GPU time between this event's recorded point and end_event's."""
        if type(end_event) is not Event:
            raise TypeError(f"elapsed_time: end_event must be a tvk torch.Event, got {end_event!r}")
        if end_event.device != self.device:
            raise ValueError(f"elapsed_time between events of {self.device} and {end_event.device}")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._marker is None or end_event._marker is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        self.synchronize()
        end_event.synchronize()
        return (end_event._marker.timer.seconds() - self._marker.timer.seconds()) * 1e3

    def ipc_handle(self):
        raise RuntimeError("interprocess events are not supported on tvk")

    def __repr__(self) -> str:
        return f"torch.Event device_type=tvk, device_index={self.device.index}, enable_timing={self.enable_timing}"


def install() -> None:
    torch.Event = Event
