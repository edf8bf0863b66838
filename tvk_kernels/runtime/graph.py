"""Recorded command buffers replayed as a whole: Vulkan's counterpart of CUDA graphs.

    with capture(device) as graph:      # kernels are recorded, not run
        step(inputs)
    for batch in data:
        upload(device, batch, out=inputs)   # rebind = write new data into the captured buffers
        graph.replay()                      # one vkQueueSubmit, whatever the number of kernels

Kernels take their buffers as addresses, so a captured command buffer stays valid as long
as those buffers live: the graph holds the buffers allocated during the capture that are
still alive at its end, and keeps the ranges freed during it (temporaries, which later
kernels of the same capture reuse) out of the allocator until the graph is dropped.
Graphs run one after another on the device's queue, so a later recording told which of its
allocations are temporaries may put them in the scratch ranges of other graphs.
Host cost of a replay is one submit.
"""
from __future__ import annotations

from contextlib import contextmanager

from .interrupts import deferred
from .lock import locked
from .memory import freed_ordinals
from .stream import _Slot, wait_for_fence
from .vk import NULL, check, ffi, lib, new


class Capture:
    """What the allocator saw during a capture (weak references: a temporary that dies inside
    the capture is reused by later kernels of the same capture, which run after it).

    temps: ordinals of this capture's allocations that a previous recording of the same program
    freed before its end; those may be placed in other graphs' scratch ranges (`lendable`)."""

    def __init__(self, temps=(), lendable=()):
        self.allocated: list = []
        self.released: list = []
        self.temps = frozenset(temps)
        self.lendable: list = list(lendable)  # (size, block, offset) free for this capture to borrow
        self.borrowed: set = set()


class Graph:
    def __init__(self, stream, slot):
        self.stream, self.slot = stream, slot
        self.buffers: list = []  # buffers allocated in the capture and still alive: held by the graph
        self.reserved: list = []  # ranges freed in the capture, kept out of the allocator for the graph
        self.dispatches = 0
        self.replays = 0
        self.temps: frozenset = frozenset()  # ordinals of the capture's allocations freed within it
        self.broken = False  # a borrowed scratch range outlived the capture: never replay this one

    def __del__(self):
        try:  # the garbage collector may run this on any thread: free under the runtime lock, or later
            self.stream.device.allocator._now_or_later(_free_graph, (self.stream, self.slot, self.reserved))
        except Exception:  # interpreter shutdown
            pass

    @locked
    def replay(self):
        """Submit the recorded work after everything recorded before it; does not wait."""
        stream = self.stream
        stream.submit()  # queue order: work recorded earlier on the stream runs first
        self.wait()  # one command buffer cannot be pending twice
        with deferred():  # a submitted graph is always marked in flight (stream.py, Ctrl-C)
            stream._submit_cmd[0] = self.slot.cmd
            check(lib.vkQueueSubmit(stream.device.queue, 1, stream._submit_info, self.slot.fence), "vkQueueSubmit")
            self.slot.in_flight = True
            stream.graphs_in_flight.add(self)
            self.replays += 1

    def wait(self):
        if self.slot.in_flight:
            wait_for_fence(self.stream.device, self.slot.fence_ptr)
            with deferred():
                check(lib.vkResetFences(self.stream.device.handle, 1, self.slot.fence_ptr), "vkResetFences")
                self.slot.in_flight = False
        self.stream.graphs_in_flight.discard(self)


def _free_graph(parts):
    """A dropped graph's fence, command buffer and scratch ranges go back. Runs holding the
    runtime lock: the command pool is the stream's, which another thread may be recording into."""
    stream, slot, reserved = parts
    dev = stream.device.handle
    with deferred():  # a graph half freed would hold its ranges, or be freed twice
        if slot.in_flight:
            wait_for_fence(stream.device, slot.fence_ptr)
            slot.in_flight = False
        stream.device.allocator._release_graph_ranges(reserved)
        lib.vkDestroyFence(dev, slot.fence, NULL)
        lib.vkFreeCommandBuffers(dev, stream.pool, 1, ffi.new("VkCommandBuffer[1]", [slot.cmd]))


@contextmanager
def capture(device, temps=()):
    """Record the kernels launched inside the block into a Graph instead of running them.

    temps: the `graph.temps` of an earlier recording of the same work; those allocations may
    share memory with other graphs' temporaries (graphs never run at the same time). If one of
    them turns out to outlive the capture, `graph.broken` is set: record again without temps."""
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
    lendable = [(e[2], e[0], e[1]) for e in allocator.graph_scratch.values()] if temps else ()
    cap = Capture(temps, lendable)
    try:
        with deferred():  # the stream is switched to the graph's command buffer inside the try, whole
            stream.slots, stream.current, stream.batch = [slot], 0, 1 << 62
            stream.cmd, stream.recording, stream._last_pipeline, stream.count = slot.cmd, True, None, 0
            allocator.capture = cap
            stream.capturing = True
        yield graph
    finally:
        with deferred():  # the stream gets its own command buffers back whatever interrupted the capture
            stream.capturing = False
            graph.buffers, graph.reserved, graph.broken = allocator.keep_for_graph(cap)
            graph.temps = freed_ordinals(cap.allocated)
            allocator.capture = None
            graph.dispatches = stream.count
            stream.barrier_to_host(slot.cmd)
            check(lib.vkEndCommandBuffer(slot.cmd), "vkEndCommandBuffer")
            stream.slots, stream.current, stream.batch = saved
            stream.recording, stream.cmd, stream._last_pipeline = False, None, None
            graph.buffers.extend(slot.keep_alive)  # scratch the kernels handed to the stream
            slot.keep_alive = []
