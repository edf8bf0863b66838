"""torch.Event on tvk (torchvk/events.py) behaves as on CUDA.

Asserted: torch.Event() on the tvk accelerator is a tvk event, torch.Event(device="cpu") stays
torch's own, and isinstance holds for both; query says whether the work before the recorded point
has run (False while it is recorded but not submitted, True after synchronize, across command
buffers that rotate through the stream's slots); elapsed_time is GPU time between two points (adds
up over three events, grows with the work between them) and raises torch's errors for an event not
recorded or not timed; Stream.record_event/wait_event/wait_stream; recording inside a graph capture
raises and leaves the runtime usable; a timed event dropped before its work ran frees nothing in use.
"""
from __future__ import annotations

import gc

import pytest
import torch

import torchvk
from torchvk._storage import get_device


def _work(n: int = 3, size: int = 64) -> torch.Tensor:
    x = torch.ones(size, size, device="tvk")
    for _ in range(n):
        x = (x @ x) / size
    return x


def test_event_on_the_tvk_accelerator_is_a_tvk_event_and_other_devices_keep_torchs():
    event = torch.Event()
    assert type(event) is torchvk.events.Event and event.device == torch.device("tvk", 0)
    assert torch.tvk.Event is torch.Event
    cpu_event = torch.Event(device="cpu")
    assert type(cpu_event) is torchvk.events.TorchEvent
    assert isinstance(event, torch.Event) and isinstance(cpu_event, torch.Event)
    assert issubclass(torchvk.events.TorchEvent, torch.Event)


def test_query_says_whether_the_work_before_the_recorded_point_has_run():
    event = torch.Event()
    assert event.query()  # never recorded, as CUDA's
    y = _work()
    event.record()
    assert not event.query()  # recorded, not yet submitted: the GPU cannot have run it
    event.synchronize()
    assert event.query()
    assert torch.allclose(y.cpu(), torch.ones(64, 64))


def test_an_event_stays_reached_once_its_command_buffer_slot_is_reused():
    stream = get_device().stream
    event = torch.Event()
    _work(1)
    event.record()
    slot = stream.slots[stream.current]
    event.synchronize()
    for _ in range(2 * len(stream.slots)):  # every slot begun and retired again
        _work(1)
        stream.synchronize()
    assert slot.generation > event._marker.generation and event.query()
    event.synchronize()  # returns at once


def test_elapsed_time_is_gpu_time_that_adds_up_and_grows_with_the_work():
    start, middle, end = (torch.Event(enable_timing=True) for _ in range(3))
    torch.accelerator.synchronize()
    start.record()
    _work(1, 128)
    middle.record()
    _work(8, 128)
    end.record()
    total = start.elapsed_time(end)  # waits for both, where CUDA's would raise until they have run
    first, second = start.elapsed_time(middle), middle.elapsed_time(end)
    assert 0 < first < second
    assert total == pytest.approx(first + second, rel=1e-6)
    assert end.query()


def test_elapsed_time_raises_torchs_errors_for_an_event_not_recorded_or_not_timed():
    timed, untimed = torch.Event(enable_timing=True), torch.Event()
    with pytest.raises(RuntimeError, match="must be recorded"):
        timed.elapsed_time(torch.Event(enable_timing=True))
    timed.record()
    untimed.record()
    with pytest.raises(RuntimeError, match="enable_timing=True"):
        timed.elapsed_time(untimed)
    with pytest.raises(TypeError, match="tvk torch.Event"):
        timed.elapsed_time(torch.Event(device="cpu"))


def test_stream_records_waits_for_events_and_streams():
    stream = torch.accelerator.current_stream()
    y = _work()
    event = stream.record_event()
    assert type(event) is torchvk.events.Event and not event.query()
    again = torch.Event(enable_timing=True)
    assert stream.record_event(again) is again
    stream.wait_event(event)
    stream.wait_stream(torch.accelerator.current_stream())
    with pytest.raises(TypeError, match="tvk torch.Event"):
        stream.record_event(torch.Event(device="cpu"))
    again.synchronize()
    assert event.query() and torch.allclose(y.cpu(), torch.ones(64, 64))


def test_an_event_recorded_inside_a_graph_capture_raises_and_the_runtime_stays_usable():
    x = torch.ones(4, device="tvk")
    x * 2  # one eager run first
    event = torch.Event()
    with pytest.raises(RuntimeError, match="inside a graph capture"):
        with torchvk.graph():
            x * 2
            event.record()
    assert torch.equal((x + 1).cpu(), torch.full((4,), 2.0))


def test_a_timed_event_dropped_before_its_work_ran_frees_nothing_in_use():
    event = torch.Event(enable_timing=True)
    y = _work()
    event.record()
    del event
    gc.collect()
    torch.accelerator.synchronize()  # the command buffer that writes the dropped timer's query runs
    assert torch.allclose(y.cpu(), torch.ones(64, 64))
