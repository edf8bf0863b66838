"""Recorded command buffers replayed as a whole: Vulkan's counterpart of CUDA graphs.

    with capture(device) as graph:      # kernels are recorded, not run
        step(inputs)
    for batch in data:
        upload(device, batch, out=inputs)   # rebind = write new data into the captured buffers
        graph.replay()                      # one vkQueueSubmit, whatever the number of kernels

Kernels take their buffers as addresses, so a captured command buffer stays valid as long
as those buffers live: the graph keeps every buffer allocated during the capture (and
whatever the kernels asked the stream to keep alive). Host cost of a replay is one submit.
"""
from __future__ import annotations

from contextlib import contextmanager

from .vk import check, lib, new

_UINT64_MAX = 0xFFFFFFFFFFFFFFFF


class Graph:
    def __init__(self, stream, slot):
        self.stream, self.slot = stream, slot
        self.buffers: list = []  # every buffer allocated while capturing: alive as long as the graph
        self.dispatches = 0
        self.replays = 0

    def replay(self):
        """Submit the recorded work after everything recorded before it; does not wait."""
        stream = self.stream
        stream.submit()  # queue order: work recorded earlier on the stream runs first
        self.wait()  # one command buffer cannot be pending twice
        stream._submit_cmd[0] = self.slot.cmd
        check(lib.vkQueueSubmit(stream.device.queue, 1, stream._submit_info, self.slot.fence), "vkQueueSubmit")
        self.slot.in_flight = True
        stream.graphs_in_flight.add(self)
        self.replays += 1

    def wait(self):
        if self.slot.in_flight:
            dev = self.stream.device.handle
            check(lib.vkWaitForFences(dev, 1, self.slot.fence_ptr, 1, _UINT64_MAX), "vkWaitForFences")
            check(lib.vkResetFences(dev, 1, self.slot.fence_ptr), "vkResetFences")
            self.slot.in_flight = False
        self.stream.graphs_in_flight.discard(self)


@contextmanager
def capture(device):
    """Record the kernels launched inside the block into a Graph instead of running them."""
    from .stream import _Slot

    stream, allocator = device.stream, device.allocator
    if stream.blocking:
        raise RuntimeError("cannot capture with TVK_LAUNCH_BLOCKING=1: blocking mode submits every kernel")
    if stream.profile_records is not None:
        raise RuntimeError("cannot capture inside stream.profiling()")
    stream.synchronize()
    slot = _Slot(stream, 0)
    graph = Graph(stream, slot)
    saved = (stream.slots, stream.current, stream.batch)
    keep: list = []
    begin = new("VkCommandBufferBeginInfo", keep, flags=0)  # not one-time: it is submitted again and again
    check(lib.vkBeginCommandBuffer(slot.cmd, begin), "vkBeginCommandBuffer")
    stream.slots, stream.current, stream.batch = [slot], 0, 1 << 62
    stream.cmd, stream.recording, stream._last_pipeline, stream.count = slot.cmd, True, None, 0
    allocator.capture_list = graph.buffers
    stream.capturing = True
    try:
        yield graph
    finally:
        stream.capturing = False
        allocator.capture_list = None
        graph.dispatches = stream.count
        check(lib.vkEndCommandBuffer(slot.cmd), "vkEndCommandBuffer")
        stream.slots, stream.current, stream.batch = saved
        stream.recording, stream.cmd, stream._last_pipeline = False, None, None
        graph.buffers.extend(slot.keep_alive)  # scratch the kernels handed to the stream
        slot.keep_alive = []
