"""A compiled program replayed from one recorded command buffer (Vulkan's CUDA graph).

Call 1 runs the program op by op (compiles pipelines, settles the allocator). Call 2
records it with `tvk_kernels.runtime.graph.capture` and replays it; later calls only
replay: one submit, whatever the number of kernels. While the stream is profiling
(torchvk.profiler), calls run op by op, so each kernel is timed: the same kernels a replay runs.

Kernels take buffer addresses, so the recording is tied to addresses:
- inputs are *bound* (used in place) when they sit where they sat on the previous call
  (parameters, buffers, tensors that came out of another replay), else *slots*: the graph
  owns a copy and each call copies the new input in. A bound input that moves makes the
  call run op by op and, on the next call, a re-recording with that input as a slot.
- outputs live in buffers the graph owns and are handed out as fresh tensors over them.
  Before the next replay overwrites those buffers, any handed-out tensor still alive (a
  loss kept for later, a grad not set to None, a forward's saved tensors whose backward
  has not run) is moved to a buffer of its own, so nothing the user holds changes.
- the recording is told which allocations are temporaries (those the program's first run freed
  before its end): they may sit in other graphs' scratch ranges (graphs run one after another),
  so a forward and its backward share their temporaries' memory. If that plan fails (a
  borrowed range outlives the capture), the program is recorded plainly, and once more at
  call 3 with the plan its own capture gave (TVK_SHARE_GRAPH_SCRATCH=0 keeps each graph's own).
  Inputs that come out of a graph recorded again move with it: the graphs reading them are
  recorded again at once, not run op by op.
- dropout is recorded with its seed in a small buffer that the host rewrites before every
  replay (fresh masks, the same numbers eager mode would draw); programs with other random
  ops are never recorded (a replay would repeat the same numbers).
"""
from __future__ import annotations

import weakref

from tvk_kernels.env_flags import env_flag
from tvk_kernels.runtime.graph import capture
from tvk_kernels.runtime.lock import locked

from .. import _rng
from .._storage import Storage, alloc_storage
from .._tensor import TVKTensor, new_tensor
from ..profiler import record_function
from ..aten.copies import device_copy

MAX_RECORDINGS = 4


def _where(t) -> tuple:
    return (t._tvk.buffer.address, t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


class Replayed:
    def __init__(self, program, enabled: bool = True):
        self.program = program
        self.device = program.device
        self.enabled = enabled and not program.random and not program.custom_ops
        self.reason = ("random ops" if program.random else "custom ops" if program.custom_ops
                       else "disabled" if not enabled else "")
        self.calls = self.replays = self.recordings = self.fallbacks = self.moved = 0
        self.graph = None
        self.last_inputs: list | None = None
        self.force_slot: set = set()
        self.handed_out: list = []  # weakrefs to the Storages over graph-owned buffers given out last time
        self.randomness = None  # _rng.RecordedRandomness of the recording, if it draws random numbers
        self.first_replay = False
        self.replanned = False  # recorded again with its temporaries in shared graph scratch (_replan)
        self.shared_scratch = False

    # ---------------------------------------------------------------- call
    @locked  # a recording must not take in another thread's kernels
    def __call__(self, *args):
        self.calls += 1
        if self.device.stream.profile_records is not None:  # a replay cannot be timed kernel by kernel
            with record_function(f"compiled {self.program.name} graph"):
                return self.program(*args)
        if not self.enabled or self.device.stream.blocking:
            return self.program(*args)
        if self.graph is not None:
            moved = [i for i, w in self.bound if _where(args[i]) != w]
            if not moved:
                if not self.replanned:
                    self._replan(args)
                return self._replay(args)
            owned_elsewhere = _replay_owned_buffers()
            if all(id(args[i]._tvk.buffer) in owned_elsewhere for i in moved):
                # the graph these inputs come out of was recorded again: they sit in its new, stable
                # buffers, so record against them right away (the plan of temporaries still holds)
                self.last_inputs = [_where(a) if isinstance(a, TVKTensor) else None for a in args]
                self._replan(args, always=True)
                return self._replay(args)
            self.fallbacks += 1
            self.force_slot |= {i for i, w in self.bound if _where(args[i]) != w}
            self.graph = None
            self.last_inputs = [_where(a) if isinstance(a, TVKTensor) else None for a in args]
            return self.program(*args)
        if self.last_inputs is None:
            self.last_inputs = [_where(a) if isinstance(a, TVKTensor) else None for a in args]
            return self.program(*args)
        if self.recordings >= MAX_RECORDINGS:
            self.enabled, self.reason = False, f"inputs kept moving ({self.recordings} recordings)"
            return self.program(*args)
        self._record_shared(args, self.program.temps)
        return self._replay(args)

    # ---------------------------------------------------------------- record
    def _replan(self, args, always: bool = False):
        """Record again with the temporaries the current recording's capture found (when the first
        plan was missing or failed), or, with always=True, because bound inputs moved with the
        graph they come out of. Inputs that were slots stay slots."""
        self.replanned = True
        temps = self.graph.temps if env_flag("TVK_SHARE_GRAPH_SCRATCH", default=True) else frozenset()
        if not temps and not always:
            return
        self.force_slot |= {i for i, _ in self.slots}
        # the old recording goes first (what it handed out is moved off its buffers), so the new
        # one reuses its memory instead of adding to the peak
        self._protect_handed_out()
        self.graph, self.outputs, self.slots = None, [], []
        self._record_shared(args, temps)

    def _record_shared(self, args, temps):
        """Record with `temps` (allocation ordinals) allowed into other graphs' scratch; if that
        plan does not hold (a borrowed range outlives the capture), record again without it."""
        if not env_flag("TVK_SHARE_GRAPH_SCRATCH", default=True):
            temps = frozenset()
        self._record(args, temps)
        if self.graph.broken:
            self.graph = None
            self._record(args)
        self.shared_scratch = bool(temps) and not self.graph.broken
        self.replanned = self.replanned or self.shared_scratch

    def _record(self, args, temps=()):
        self.recordings += 1
        self._protect_handed_out()
        self.handed_out = []
        bound, slots, static = [], [], list(args)
        owned_elsewhere = _replay_owned_buffers()
        for i, a in enumerate(args):
            if not isinstance(a, TVKTensor):
                continue
            same = self.last_inputs[i] == _where(a) or id(a._tvk.buffer) in owned_elsewhere
            if same and i not in self.force_slot:
                bound.append((i, _where(a)))
            else:
                slot = new_tensor(a.shape, a.dtype, self.device, stride=a.stride())
                slots.append((i, slot))
                static[i] = slot
        self.bound, self.slots = bound, slots
        storage_to_input = {id(static[i]._tvk): i for i, a in enumerate(static) if isinstance(a, TVKTensor)}
        rec = _rng.RecordedRandomness(alloc_storage(16, self.device)) if self.program.replayable_random else None
        with _rng.recording(rec), capture(self.device, temps) as graph:
            outs = self.program(*static)
        self.randomness, self.first_replay = rec, True
        slot_buffers = {id(s._tvk.buffer): s._tvk.buffer for _, s in slots}
        owned = {id(b): b for b in graph.buffers} | slot_buffers
        self.outputs = []
        for o in outs:
            if not isinstance(o, TVKTensor):
                self.outputs.append(("value", o))
            elif id(o._tvk) in storage_to_input and id(o._tvk.buffer) not in slot_buffers:
                self.outputs.append(("input", storage_to_input[id(o._tvk)], _geometry(o)))
            elif id(o._tvk.buffer) in owned:
                self.outputs.append(("owned", o._tvk.buffer, o._tvk.nbytes, _geometry(o)))
            else:  # an output we cannot tie to the recording: run op by op from now on
                self.enabled, self.reason = False, "an output outside the recorded buffers"
        del outs
        graph.buffers.extend(slot_buffers.values())
        self.graph = graph
        _GRAPHS.add(self)

    # ---------------------------------------------------------------- replay
    def _replay(self, args):
        if not self.enabled:
            return self.program(*args)
        self._protect_handed_out()
        for i, slot in self.slots:
            if args[i] is not slot:
                device_copy(slot, args[i])
        if self.randomness is not None:
            self.randomness.next_base(first=self.first_replay)
        self.first_replay = False
        self.graph.replay()
        self.replays += 1
        storages: dict = {}
        result, handed = [], []
        for spec in self.outputs:
            kind = spec[0]
            if kind == "value":
                result.append(spec[1])
            elif kind == "input":
                size, stride, offset, dtype = spec[2]
                result.append(TVKTensor(args[spec[1]]._tvk, size, stride, offset, dtype))
            else:
                _, buf, nbytes, (size, stride, offset, dtype) = spec
                st = storages.get(id(buf))
                if st is None:
                    st = storages[id(buf)] = Storage(buf, nbytes, self.device)
                    handed.append(weakref.ref(st))
                result.append(TVKTensor(st, size, stride, offset, dtype))
        self.handed_out = handed
        return result

    def _protect_handed_out(self):
        """Move tensors from the last replay that are still alive off the buffers the next one writes."""
        stream, alloc = self.device.stream, self.device.allocator
        for ref in self.handed_out:
            st = ref()
            if st is None:
                continue
            old = st.buffer
            new = alloc.alloc(max(old.nbytes, 1))
            stream.copy(old, new, old.nbytes)
            st.buffer = new
            self.moved += 1
        self.handed_out = []

    def stats(self) -> dict:
        return {"calls": self.calls, "replays": self.replays, "recordings": self.recordings,
                "fallbacks": self.fallbacks, "moved_outputs": self.moved, "replay": self.enabled,
                "shared_scratch": self.shared_scratch,
                "why_not": self.reason, "kernels": self.graph.dispatches if self.graph is not None else None}


def _geometry(t) -> tuple:
    return (tuple(t.shape), t.stride(), t.storage_offset(), t.dtype)


_GRAPHS: "weakref.WeakSet[Replayed]" = weakref.WeakSet()


def _replay_owned_buffers() -> set:
    """ids of buffers that recorded graphs write (another graph's outputs are stable inputs)."""
    out: set = set()
    for r in list(_GRAPHS):
        for spec in getattr(r, "outputs", ()):
            if spec[0] == "owned":
                out.add(id(spec[1]))
    return out
