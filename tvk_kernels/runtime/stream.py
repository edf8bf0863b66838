"""The stream: kernels are recorded into a command buffer and submitted only at sync points.

Sync points: a readback, `synchronize()`, or the batch threshold (TVK_BATCH dispatches,
default 256). TVK_LAUNCH_BLOCKING=1 submits and waits after every dispatch, so an error
surfaces at the op that caused it.

Early submit: every TVK_EARLY_SUBMIT dispatches (default 16; 0 never) the stream looks whether
the GPU has finished everything submitted; if so, what is recorded is submitted at once, so the
GPU works while Python records the rest (the host and the GPU overlap). A busy GPU is left to
work: its queue is fed at the batch threshold or the next sync point, as before.

Every recording and submitting entry holds the runtime lock (lock.py): one thread at a time.

Ctrl-C (interrupts.py): a KeyboardInterrupt may come between any two lines here, and leaves the
stream whole. A submit with its bookkeeping, the start of a command buffer, and the end of a wait
(fence reset, timestamps read, kept-alive buffers freed) run whole, deferring the Ctrl-C to their
end; waits wait in slices, so Ctrl-C stops them at once and leaves the work in flight. Every
command is recorded after its barrier, not before it: an interrupt between the two leaves one
barrier too many, never a command unordered against the next.

The per-dispatch path (barrier, bind, push constants, dispatch) calls the raw cffi
functions with structs allocated once: the `vulkan` package's wrappers cost ~6x more.

A dry run (`dry_run()`) records no kernels: a compiled program's first run is done once
dry to learn which pipelines it needs and build them in parallel, then for real.

Held commands: eager ops build a missing pipeline in the pipeline pool (pipeline.py, background
builds), so a dispatch may meet a pipeline that is not built yet. Rather than wait, the stream holds
that dispatch, and every command after it, in order, and records them once their pipelines are
ready: the first eager step builds all the pipelines between two sync points at once instead of one
after another. Held commands go into the command buffer that was open when they were issued (no
submit while any are held), so what they keep alive and the memory they use stay theirs. A sync
point (submit, synchronize, an event) waits for the builds; a failed build raises there and drops
the commands still held. Blocking mode, profiling and graph capture wait for each pipeline instead.
"""
from __future__ import annotations

import os
from collections import deque
from contextlib import contextmanager

from . import interrupts
from .interrupts import deferred
from .lock import locked, runtime_lock
from ..env_flags import env_flag
from ..errors import DeviceLimitError
from .vk import NULL, check, ffi, lib, new

_COMPUTE = lib.VK_PIPELINE_BIND_POINT_COMPUTE
_STAGE = lib.VK_SHADER_STAGE_COMPUTE_BIT
_BARRIER_STAGES = lib.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | lib.VK_PIPELINE_STAGE_TRANSFER_BIT
_UINT64_MAX = 0xFFFFFFFFFFFFFFFF
_WAIT_SLICE_NS = 50_000_000  # a fence wait lets Python see Ctrl-C this often
_vkCmdBindPipeline = lib.vkCmdBindPipeline
_vkCmdPushConstants = lib.vkCmdPushConstants
_vkCmdDispatch = lib.vkCmdDispatch
_vkCmdPipelineBarrier = lib.vkCmdPipelineBarrier
_vkCmdWriteTimestamp = lib.vkCmdWriteTimestamp
_recorded = [0]  # commands (dispatches, copies, fills) recorded by every stream of the process, or discarded by a dry run


def commands_recorded() -> int:
    """How many commands every stream has recorded so far (a dry run's discarded ones included): a caller
    tells from it whether a piece of code issued GPU work (torchvk/_repeat.py), dry run or not."""
    return _recorded[0]


class _Slot:
    """One command buffer with its fence and what must stay alive until it completes."""

    def __init__(self, stream, query_capacity: int):
        dev = stream.device.handle
        keep: list = []
        ainfo = new("VkCommandBufferAllocateInfo", keep, commandPool=stream.pool, level=lib.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                    commandBufferCount=1)
        cmd = ffi.new("VkCommandBuffer*")
        check(lib.vkAllocateCommandBuffers(dev, ainfo, cmd), "vkAllocateCommandBuffers")
        self.cmd = cmd[0]
        fence = ffi.new("VkFence*")
        check(lib.vkCreateFence(dev, new("VkFenceCreateInfo", keep), NULL, fence), "vkCreateFence")
        self.fence = fence[0]
        self.fence_ptr = fence
        self.keep_alive: list = []
        self.labels: list = []  # timestamp query labels, pairs of queries each
        self.queries = None
        if query_capacity:
            qinfo = new("VkQueryPoolCreateInfo", keep, queryType=lib.VK_QUERY_TYPE_TIMESTAMP, queryCount=query_capacity)
            qp = ffi.new("VkQueryPool*")
            check(lib.vkCreateQueryPool(dev, qinfo, NULL, qp), "vkCreateQueryPool")
            self.queries = qp[0]
        self.in_flight = False
        self.generation = 0  # command buffers begun in this slot: a Marker of an older one has completed


class Marker:
    """A point in a stream's work (torch.Event on tvk): reached once every command recorded before it
    has run. `timer`, where given, took the GPU's clock there."""

    __slots__ = ("slot", "generation", "timer")

    def __init__(self, slot, generation, timer):
        self.slot, self.generation, self.timer = slot, generation, timer


class Timer:
    """One timestamp query, written by the command buffer a Marker was recorded into; the command
    buffer holds it (keep_alive) until it has run, so dropping its event early frees nothing in use."""

    def __init__(self, device):
        self.device = device
        pool = ffi.new("VkQueryPool*")
        check(lib.vkCreateQueryPool(device.handle, new("VkQueryPoolCreateInfo", [], queryType=lib.VK_QUERY_TYPE_TIMESTAMP,
                                                       queryCount=1), NULL, pool), "vkCreateQueryPool")
        self.pool = pool[0]

    def seconds(self) -> float:
        """The GPU clock when it was written, in seconds (of an arbitrary origin: compare two of one device)."""
        data = ffi.new("uint64_t[1]")
        check(lib.vkGetQueryPoolResults(self.device.handle, self.pool, 0, 1, 8, data, 8,
                                        lib.VK_QUERY_RESULT_64_BIT | lib.VK_QUERY_RESULT_WAIT_BIT), "vkGetQueryPoolResults")
        bits = self.device.timestamp_bits
        ticks = data[0] & ((1 << bits) - 1 if bits < 64 else _UINT64_MAX)
        return ticks * self.device.facts.timestamp_period_ns * 1e-9

    def __del__(self):
        try:
            lib.vkDestroyQueryPool(self.device.handle, self.pool, NULL)
        except Exception:  # interpreter shutdown: the device may be gone first
            pass


class Stream:
    def __init__(self, device):
        self.device = device
        interrupts.install()  # Ctrl-C raised only where the runtime's state is whole
        self.max_groups = device.facts.max_workgroup_count  # every dispatch is checked against it
        self.blocking = env_flag("TVK_LAUNCH_BLOCKING")
        self.batch = int(os.environ.get("TVK_BATCH", "256"))
        self.early_submit = int(os.environ.get("TVK_EARLY_SUBMIT", "16"))
        self.early_submits = 0  # submits made because the GPU was idle
        keep: list = []
        pinfo = new("VkCommandPoolCreateInfo", keep, queueFamilyIndex=device.queue_family,
                    flags=lib.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT)
        pool = ffi.new("VkCommandPool*")
        check(lib.vkCreateCommandPool(device.handle, pinfo, NULL, pool), "vkCreateCommandPool")
        self.pool = pool[0]
        self.timestamps = device.facts.timestamps and device.timestamp_bits > 0
        self._query_capacity = 2 * self.batch if self.timestamps else 0
        self.slots = [_Slot(self, self._query_capacity) for _ in range(3)]
        self.current = 0
        self.recording = False
        self.cmd = None
        self.count = 0  # dispatches in the open command buffer
        self.total_dispatches = 0
        self.submits = 0
        self.profile_records: list | None = None  # (label, gpu seconds) when profiling
        self.profile_start_ticks: list | None = None  # beside them: each kernel's start, raw GPU clock ticks
        self._profile_start_stage = lib.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT
        self.graphs_in_flight: set = set()
        self.capturing = False  # replayed graphs (runtime/graph.py) not yet waited for
        self.dry = False  # inside dry_run(): GPU work is discarded
        self.call_capture = None  # capturing_calls(): dispatches are collected there, nothing is recorded
        self._last_pipeline = None
        self._held: deque | None = None  # commands waiting, in order, for a pipeline being built (see above)
        self.holds = 0  # times commands were held behind a pipeline build
        self._begin_info = new("VkCommandBufferBeginInfo", keep, flags=lib.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
        self._barrier = new("VkMemoryBarrier", keep,
                            srcAccessMask=lib.VK_ACCESS_SHADER_WRITE_BIT | lib.VK_ACCESS_TRANSFER_WRITE_BIT,
                            dstAccessMask=lib.VK_ACCESS_SHADER_READ_BIT | lib.VK_ACCESS_SHADER_WRITE_BIT
                            | lib.VK_ACCESS_TRANSFER_READ_BIT | lib.VK_ACCESS_TRANSFER_WRITE_BIT)
        self._submit_cmd = ffi.new("VkCommandBuffer[1]")
        self._submit_info = new("VkSubmitInfo", keep, commandBufferCount=1, pCommandBuffers=self._submit_cmd)
        self._copy_region = ffi.new("VkBufferCopy*")
        # at the end of every command buffer: device writes made visible to host reads (readbacks
        # and the error word, runtime/error_word.py); a fence wait alone does not promise that
        self._to_host = new("VkMemoryBarrier", keep,
                            srcAccessMask=lib.VK_ACCESS_SHADER_WRITE_BIT | lib.VK_ACCESS_TRANSFER_WRITE_BIT,
                            dstAccessMask=lib.VK_ACCESS_HOST_READ_BIT)
        self._keep = keep

    # ------------------------------------------------------------------ record
    def _begin(self):
        slot = self.slots[self.current]
        if slot.in_flight:
            self._retire(slot)
        with deferred():  # a begun command buffer is always the one being recorded
            check(lib.vkBeginCommandBuffer(slot.cmd, self._begin_info), "vkBeginCommandBuffer")
            if slot.queries is not None and self.profile_records is not None:
                lib.vkCmdResetQueryPool(slot.cmd, slot.queries, 0, self._query_capacity)
            self.cmd = slot.cmd
            self.recording = True
            self._last_pipeline = None
            self.count = 0
            slot.generation += 1
        return slot.cmd

    def dispatch(self, pipeline, groups, push: bytes = b"", label: str | None = None):
        """Record one kernel launch. `push` is the packed push-constant block (bytes)."""
        with runtime_lock:  # not @locked, and one function: each extra call costs a tenth of this path's time
            if self.call_capture is not None:  # kernels/kept_calls.py learns a call: nothing is recorded
                self.call_capture.dispatches.append((pipeline, tuple(groups), bytes(push), label))
                return
            if self.dry:
                _recorded[0] += 1  # discarded, but issued: a repeat must account for it (_repeat.py)
                return
            limit = self.max_groups
            if groups[0] > limit[0] or groups[1] > limit[1] or groups[2] > limit[2]:
                raise DeviceLimitError(f"{pipeline.name}: a grid of {tuple(groups)} workgroups exceeds the "
                                       f"device's maxComputeWorkGroupCount {tuple(limit)}; this is a TorchVK bug "
                                       "in the launch plan, please report it")
            if (pipeline.handle is None or self._held is not None) and self._hold(("d", pipeline, tuple(groups),
                                                                                  bytes(push), label)):
                return  # held until its pipeline (or one before it) is built
            cmd = self.cmd if self.recording else self._begin()
            _vkCmdPipelineBarrier(cmd, _BARRIER_STAGES, _BARRIER_STAGES, 0, 1, self._barrier, 0, NULL, 0, NULL)
            if pipeline is not self._last_pipeline:
                self._last_pipeline = None  # until the bind is recorded: an interrupt between must not skip it
                _vkCmdBindPipeline(cmd, _COMPUTE, pipeline.handle)
                self._last_pipeline = pipeline
            if push:
                _vkCmdPushConstants(cmd, pipeline.layout, _STAGE, 0, len(push), push)  # cffi passes bytes as void*
            if self.profile_records is None:
                _vkCmdDispatch(cmd, groups[0], groups[1], groups[2])
            else:
                with deferred():  # a label for every pair of timestamps, and timestamps for every label
                    self._timed_dispatch(cmd, pipeline, groups, label)
            self.count += 1
            self.total_dispatches += 1
            _recorded[0] += 1
            if self.blocking:
                self.synchronize()
            elif self.count >= self.batch:
                self.submit()
            elif self.early_submit and self.count % self.early_submit == 0 and not self.capturing and self._gpu_idle():
                self.early_submits += 1
                self.submit()

    # ------------------------------------------------------------------ held commands
    def _hold(self, command: tuple) -> bool:
        """Hold a command behind a pipeline still being built; False: record it now (the caller does),
        after waiting for the build where holding is off (blocking, profiling, capture)."""
        if self.blocking or self.capturing or self.profile_records is not None:
            self.drain()
            if command[0] == "d":
                command[1].wait()
            return False
        if not self.recording:
            self._begin()  # held commands belong to the command buffer open now
        if self._held is None:
            self._held = deque()
            self.holds += 1
        self._held.append(command)
        _recorded[0] += 1  # issued: counted now, as a recorded command is
        if command[0] == "d":
            self.total_dispatches += 1
        self._record_held(wait=False)
        return True

    def drain(self):
        """Record every held command, waiting for the pipelines they need (a sync point's first step)."""
        if self._held is not None:
            self._record_held(wait=True)

    def _record_held(self, wait: bool):
        """Record held commands from the oldest on while their pipelines are built (wait: until all are).
        A build error drops the commands still held and is raised."""
        held = self._held
        while held:
            command = held[0]
            if command[0] == "d" and command[1].handle is None:
                if not wait:
                    return
                try:
                    command[1].wait()
                except BaseException as error:
                    if not isinstance(error, KeyboardInterrupt):  # Ctrl-C: the rest stays held for the next sync
                        self._held = None
                    raise
            with deferred():  # recorded and taken off together
                self._record_command(command)
                held.popleft()
        self._held = None
        if self.count >= self.batch:
            self.submit()

    def _issue(self, command: tuple):
        """A copy or fill: held behind earlier held commands, or recorded now."""
        if self._held is not None and self._hold(command):
            return
        if not self.recording:
            self._begin()
        self._record_command(command)
        _recorded[0] += 1
        if self.blocking:
            self.synchronize()

    def _record_command(self, command: tuple):
        """Record one command (barrier first) into the open command buffer: a held one, a copy or a fill
        (dispatch() records its own inline: the per-op path)."""
        cmd = self.cmd
        _vkCmdPipelineBarrier(cmd, _BARRIER_STAGES, _BARRIER_STAGES, 0, 1, self._barrier, 0, NULL, 0, NULL)
        kind = command[0]
        if kind == "d":
            _, pipeline, groups, push, label = command
            if pipeline is not self._last_pipeline:
                _vkCmdBindPipeline(cmd, _COMPUTE, pipeline.handle)
                self._last_pipeline = pipeline
            if push:
                _vkCmdPushConstants(cmd, pipeline.layout, _STAGE, 0, len(push), push)
            _vkCmdDispatch(cmd, groups[0], groups[1], groups[2])
        elif kind == "c":
            _, src, dst, nbytes, src_offset, dst_offset = command
            r = self._copy_region
            r.srcOffset, r.dstOffset, r.size = src.offset + src_offset, dst.offset + dst_offset, nbytes
            lib.vkCmdCopyBuffer(cmd, src.block.buffer, dst.block.buffer, 1, r)
        else:
            _, dst, value_u32, size = command
            lib.vkCmdFillBuffer(cmd, dst.block.buffer, dst.offset, size, value_u32 & 0xFFFFFFFF)
        self.count += 1

    def _gpu_idle(self) -> bool:
        """Whether the last submitted command buffer has completed (the queue runs them in order)."""
        slot = self.slots[self.current - 1]
        return not slot.in_flight or lib.vkGetFenceStatus(self.device.handle, slot.fence) == lib.VK_SUCCESS

    def _timed_dispatch(self, cmd, pipeline, groups, label):
        slot = self.slots[self.current]
        q = 2 * len(slot.labels)
        _vkCmdWriteTimestamp(cmd, self._profile_start_stage, slot.queries, q)
        _vkCmdDispatch(cmd, groups[0], groups[1], groups[2])
        _vkCmdWriteTimestamp(cmd, lib.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, slot.queries, q + 1)
        slot.labels.append(label or pipeline.name)

    @locked
    def copy(self, src, dst, nbytes: int, src_offset: int = 0, dst_offset: int = 0):
        """Record a buffer-to-buffer copy (DeviceBuffer ranges)."""
        if self.call_capture is not None:  # not replayable; an upload still runs (its data is real, and a
            self.call_capture.other = True  # family may keep the uploaded table for later calls), as in a dry run
            if src.block.mapped is None:
                return
        elif self.dry and src.block.mapped is None:
            _recorded[0] += 1  # discarded, but issued
            return  # a device-to-device copy (uploads come from mapped staging memory and still run)
        self._issue(("c", src, dst, nbytes, src_offset, dst_offset))

    @locked
    def fill(self, dst, value_u32: int, nbytes: int | None = None):
        """Fill a buffer with a repeated 32-bit pattern (zeros for zeros_like)."""
        if self.call_capture is not None:
            self.call_capture.other = True
            return
        if self.dry:
            _recorded[0] += 1  # discarded, but issued
            return
        self._issue(("f", dst, value_u32, dst.size if nbytes is None else (nbytes + 3) // 4 * 4))

    @locked
    def keep_alive(self, obj):
        """Hold `obj` until the command buffer being recorded has finished on the GPU."""
        if self.call_capture is not None:
            self.call_capture.kept_alive(obj)
            return
        if not self.recording:
            self._begin()
        self.slots[self.current].keep_alive.append(obj)

    # ------------------------------------------------------------------ markers (torch.Event)
    @locked
    def mark(self, timed: bool = False) -> Marker:
        """A Marker after everything recorded so far; timed: it also takes the GPU's clock there,
        once every earlier command has finished."""
        if self.capturing:
            raise RuntimeError("an event recorded inside a graph capture: TorchVK's graphs hold kernels only; "
                               "record the event before the capture or after a replay")
        if timed and not self.timestamps:
            raise RuntimeError(f"{self.device.facts.name} has no compute timestamps: an event with "
                               "enable_timing=True cannot be timed on it; use enable_timing=False")
        timer = Timer(self.device) if timed else None
        self.drain()  # the marker goes after every command issued so far
        cmd = self.cmd if self.recording else self._begin()
        slot = self.slots[self.current]
        if timer is not None:
            with deferred():  # the timer is held until the command buffer that writes it has run
                lib.vkCmdResetQueryPool(cmd, timer.pool, 0, 1)
                _vkCmdWriteTimestamp(cmd, lib.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, timer.pool, 0)
                slot.keep_alive.append(timer)
        return Marker(slot, slot.generation, timer)

    @locked
    def reached(self, marker: Marker) -> bool:
        """Whether the work before the marker has run (no wait; recorded but not submitted: not yet)."""
        slot = marker.slot
        if slot.generation != marker.generation or not (slot.in_flight or slot is self.slots[self.current]
                                                        and self.recording):
            return True  # its command buffer has completed and been retired
        if not slot.in_flight:
            return False
        return lib.vkGetFenceStatus(self.device.handle, slot.fence) == lib.VK_SUCCESS

    @locked
    def wait_for(self, marker: Marker):
        """Wait until the work before the marker has run (submitting it if it is still being recorded)."""
        slot = marker.slot
        if slot.generation != marker.generation:
            return
        if self.recording and slot is self.slots[self.current]:
            self.submit()
        n = len(self.slots)
        for i in range(n):  # oldest first up to the marker's, so profile records stay in order
            older = self.slots[(self.current + i) % n]
            if older.in_flight:
                self._retire(older)
            if older is slot:
                break
        self.device.errors.check()

    @contextmanager
    def capturing_calls(self, capture):
        """Collect the dispatches made inside into `capture` (kernels/kept_calls.py) instead of recording
        them, and show it the allocations and keep_alives; a copy or fill marks the capture `other` and
        is dropped, but for an upload from the host, which runs."""
        allocator = self.device.allocator
        with runtime_lock:
            outer, self.call_capture = self.call_capture, capture
            outer_allocs, allocator.call_capture = allocator.call_capture, capture
            try:
                yield capture
            finally:
                self.call_capture = outer
                allocator.call_capture = outer_allocs

    # ------------------------------------------------------------------ submit
    @locked
    def submit(self):
        self.drain()
        if not self.recording:
            return
        if self.capturing:
            raise RuntimeError("a sync point (readback, .item(), synchronize) inside a graph capture: "
                               "captured work cannot be waited for before the capture ends")
        slot = self.slots[self.current]
        with deferred():  # a submitted command buffer is always marked in flight, never recorded into again
            self.barrier_to_host(slot.cmd)
            check(lib.vkEndCommandBuffer(slot.cmd), "vkEndCommandBuffer")
            self._submit_cmd[0] = slot.cmd
            check(lib.vkQueueSubmit(self.device.queue, 1, self._submit_info, slot.fence), "vkQueueSubmit")
            slot.in_flight = True
            self.recording = False
            self.submits += 1
            self.current = (self.current + 1) % len(self.slots)

    def barrier_to_host(self, cmd):
        _vkCmdPipelineBarrier(cmd, _BARRIER_STAGES, lib.VK_PIPELINE_STAGE_HOST_BIT, 0, 1, self._to_host,
                              0, NULL, 0, NULL)

    @locked
    def synchronize(self):
        """Submit what is recorded and wait for everything; then results can be read."""
        self.submit()
        n = len(self.slots)
        for i in range(n):  # oldest first, so profile records stay in order
            slot = self.slots[(self.current + i) % n]
            if slot.in_flight:
                self._retire(slot)
        for graph in list(self.graphs_in_flight):
            graph.wait()
        self.device.errors.check()  # bad input a kernel reported (runtime/error_word.py): raised here

    @locked
    def query(self) -> bool:
        """Whether all work recorded so far has finished on the GPU, without waiting (work recorded
        but not yet submitted counts as unfinished, as a CUDA stream's queued kernels do)."""
        if self.recording:
            return False
        fences = [slot.fence for slot in self.slots if slot.in_flight]
        fences += [graph.slot.fence for graph in self.graphs_in_flight]
        return all(lib.vkGetFenceStatus(self.device.handle, fence) == lib.VK_SUCCESS for fence in fences)

    def _retire(self, slot):
        wait_for_fence(self.device, slot.fence_ptr)
        with deferred():  # the slot is free again only once all of this is done
            check(lib.vkResetFences(self.device.handle, 1, slot.fence_ptr), "vkResetFences")
            if slot.labels:
                self._collect_timestamps(slot)
            slot.keep_alive.clear()
            slot.in_flight = False

    def _collect_timestamps(self, slot):
        n = 2 * len(slot.labels)
        data = ffi.new("uint64_t[]", n)
        check(lib.vkGetQueryPoolResults(self.device.handle, slot.queries, 0, n, 8 * n, data, 8,
                                        lib.VK_QUERY_RESULT_64_BIT | lib.VK_QUERY_RESULT_WAIT_BIT), "vkGetQueryPoolResults")
        mask = (1 << self.device.timestamp_bits) - 1 if self.device.timestamp_bits < 64 else _UINT64_MAX
        period = self.device.facts.timestamp_period_ns * 1e-9
        if self.profile_records is not None:
            for i, label in enumerate(slot.labels):
                ticks = ((data[2 * i + 1] & mask) - (data[2 * i] & mask)) & mask
                self.profile_records.append((label, ticks * period))
                self.profile_start_ticks.append(data[2 * i] & mask)
        slot.labels.clear()

    @contextmanager
    def dry_run(self):
        """Discard the kernels, fills and device-to-device copies issued inside the block: what it
        computes is garbage, to be thrown away, and it changes no existing buffer (an input that a
        program updates in place stays as it was). Uploads from the host still run: their data is
        real, and a kernel family may keep an uploaded table for later calls."""
        with runtime_lock:  # another thread's kernels must not be discarded with these
            saved, self.dry = self.dry, True
            try:
                yield
            finally:
                self.dry = saved

    @contextmanager
    def profiling(self, exclusive: bool = False):
        """Collect (label, gpu_seconds) for every dispatch recorded inside the block (and, in
        `profile_start_ticks`, when each started on the GPU's clock: torchvk/profiler.py's timeline).

        By default a kernel's start is latched at the top of the pipe, which on a busy queue can
        be before the kernel ahead of it has finished: back-to-back times overlap. exclusive=True
        latches it once every earlier command has finished its compute work, so each kernel is
        charged from the end of the previous one to its own end (launch gaps included) and the
        times add up to the GPU span of the block: what a per-kernel breakdown of a step needs."""
        if not self.timestamps:
            raise RuntimeError(f"{self.device.facts.name} has no compute timestamps; GPU times cannot be measured")
        self.synchronize()  # so query pools are reset at the next begin
        records: list = []
        self.profile_records, self.profile_start_ticks = records, []
        self._profile_start_stage = (lib.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT if exclusive
                                     else lib.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT)
        batch = self.batch
        try:
            yield records
            self.synchronize()
        finally:
            self.profile_records = self.profile_start_ticks = None
            self.batch = batch


def wait_for_fence(device, fence_ptr):
    """Wait until the fence is signalled, in slices: a Ctrl-C is raised between two of them, with
    the work still in flight (one long wait would not return before the GPU is done)."""
    while True:
        res = lib.vkWaitForFences(device.handle, 1, fence_ptr, 1, _WAIT_SLICE_NS)
        if res != lib.VK_TIMEOUT:
            check(res, "vkWaitForFences")
            return
        if interrupts.state.caught:
            interrupts.raise_pending()
