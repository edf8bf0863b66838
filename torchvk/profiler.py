"""torchvk.profiler: the GPU time of every kernel (Vulkan timestamp queries) and the aten op that launched it.

    with torchvk.profiler.profile() as p:
        loss = model(x).sum(); loss.backward()
    print(p.key_averages().table(sort_by="gpu_time_total", row_limit=20))
    p.export_chrome_trace("trace.json")      # chrome://tracing or ui.perfetto.dev

While profiling, the stream brackets each kernel with timestamps (`Stream.profiling(exclusive=True)`:
a kernel is timed from the end of the one before, so the times add up to the GPU's busy span) and
numbers the kernels it records; a TorchDispatchMode notes, for each aten op on tvk tensors, its
host time and the numbers of the kernels recorded during it. A kernel is charged to the innermost
op or `record_function` region it was recorded in, else to OUTSIDE_OPS (a kernel launched straight
through tvk_kernels, not by an aten op). An op that torchvk runs as a decomposition
shows as that op, its pieces inside it. Compiled graphs (torchvk.compile, torch.compile(backend="tvk"))
launch kernels without aten dispatch and, while profiling, run op by op instead of replaying their
recorded command buffer, whose kernels cannot be timed one by one (compile/replay.py): their kernels
are charged to the regions "compiled forward graph", "compiled backward graph"; their GPU times are
a replay's (the same kernels), their host times are not.

Chrome trace: a host track (ops and regions, the host's clock) and a GPU track (kernels, the GPU's
clock). The two clocks share no origin: the GPU track is shifted by the least amount that starts no
kernel before the op that recorded it (a kernel runs at a later submit, so it may be drawn early).

Only this thread's ops are seen; kernels that other threads record meanwhile are timed but charged
to this thread's ops. Buffer copies and fills are not timed.

torch.profiler cannot show tvk kernels: its PrivateUse1 device activity needs a C++ Kineto plugin
(IActivityProfiler) or C++ ProfilerStubs (registerPrivateUse1Methods), which Python cannot register.
"""
from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import accumulate

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ._storage import get_device
from ._tensor import TVKTensor

OUTSIDE_OPS = "(outside aten ops)"


@dataclass
class OpEvent:
    """An aten op or a record_function region; times in µs from the profile's start (host clock).
    Kernels first_kernel .. end_kernel - 1 (numbered from 0 in this profile) were recorded during it."""
    name: str
    kind: str  # "op" or "region"
    start_us: float
    end_us: float
    first_kernel: int
    end_kernel: int
    depth: int  # regions and ops open around it


@dataclass
class KernelEvent:
    name: str  # the kernel's label
    op: str  # the innermost op or region it was recorded in, or OUTSIDE_OPS
    start_us: float  # GPU clock, shifted onto the host track (module docstring)
    duration_us: float


@dataclass
class Row:
    """One line of key_averages(): an op or region (`launched_by` empty), or a kernel label with
    the op that launched it. Times in µs; an op's GPU time is that of the kernels it launched."""
    key: str
    kind: str  # "op", "region" or "kernel"
    launched_by: str = ""
    count: int = 0
    kernels: int = 0
    host_time_total: float = 0.0
    gpu_time_total: float = 0.0

    @property
    def host_time_avg(self) -> float:
        return self.host_time_total / self.count if self.count else 0.0

    @property
    def gpu_time_avg(self) -> float:
        return self.gpu_time_total / self.count if self.count else 0.0


SORT_KEYS = ("gpu_time_total", "gpu_time_avg", "host_time_total", "host_time_avg", "count", "kernels")
# torch.profiler's names for the same columns
_SORT_ALIASES = {"device_time_total": "gpu_time_total", "cuda_time_total": "gpu_time_total",
                 "self_device_time_total": "gpu_time_total", "self_cuda_time_total": "gpu_time_total",
                 "cpu_time_total": "host_time_total", "self_cpu_time_total": "host_time_total"}


class EventList(list):
    """key_averages()'s rows, with the totals the table's percentages and footer use."""

    def __init__(self, rows, host_time_total: float, gpu_time_total: float):
        super().__init__(rows)
        self.host_time_total, self.gpu_time_total = host_time_total, gpu_time_total

    def table(self, sort_by: str | None = None, row_limit: int = 100) -> str:
        """The rows as torch.profiler formats them, largest first by `sort_by` (one of SORT_KEYS,
        or torch's device_time_total / cpu_time_total ...); row_limit < 0 shows all."""
        rows = list(self)
        if sort_by is not None:
            key = _SORT_ALIASES.get(sort_by, sort_by)
            if key not in SORT_KEYS:
                raise ValueError(f"sort_by={sort_by!r} is not a column; use one of {list(SORT_KEYS)} "
                                 f"(or torch's {sorted(_SORT_ALIASES)})")
            rows.sort(key=lambda r: getattr(r, key), reverse=True)
        if row_limit >= 0:
            rows = rows[:row_limit]
        gpu_total = self.gpu_time_total
        lines = [[r.key, r.launched_by,
                  "-" if r.kind == "kernel" else _format_us(r.host_time_total),
                  "-" if r.kind == "kernel" else _format_us(r.host_time_avg),
                  _format_us(r.gpu_time_total), f"{100 * r.gpu_time_total / gpu_total:.2f}%" if gpu_total else "-",
                  _format_us(r.gpu_time_avg), str(r.count), "-" if r.kind == "kernel" else str(r.kernels)]
                 for r in rows]
        header = ["Name", "Launched by", "Host total", "Host avg", "GPU total", "GPU %", "GPU avg",
                  "# of Calls", "# of Kernels"]
        widths = [max([len(header[i])] + [min(len(line[i]), 55) for line in lines]) for i in range(len(header))]

        def fmt(cells):
            texts = [c if len(c) <= w else c[:w - 3] + "..." for c, w in zip(cells, widths)]
            return "  ".join(t.ljust(w) if i < 2 else t.rjust(w) for i, (t, w) in enumerate(zip(texts, widths)))

        rule = "  ".join("-" * w for w in widths)
        n_kernels = sum(r.count for r in self if r.kind == "kernel")
        return "\n".join([rule, fmt(header), rule] + [fmt(line) for line in lines] + [
            rule, f"Host time total: {_format_us(self.host_time_total)}",
            f"GPU time total: {_format_us(gpu_total)} ({n_kernels} kernels)", ""])


def _format_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


# ------------------------------------------------------------------ recording
_thread = threading.local()  # .profiles: the profiles open on this thread, outermost first


def _open_profiles() -> list:
    profiles = getattr(_thread, "profiles", None)
    if profiles is None:
        profiles = _thread.profiles = []
    return profiles


@contextmanager
def record_function(name: str):
    """Charge the kernels recorded inside the block to `name` (its own row and host-track span),
    as torch.profiler.record_function does; nothing happens when no profile is open on this thread."""
    profiles = list(_open_profiles())
    events = [p._begin(name, "region") for p in profiles]
    try:
        yield
    finally:
        for p, event in zip(profiles, events):
            p._end(event)


class profile:
    """Context manager: profiles the kernels launched on one tvk device (the current one by
    default) inside the block. Results (key_averages, export_chrome_trace, `ops`, `kernels`)
    are there once the block has ended (empty if it raised); profiles may be nested."""

    def __init__(self, device=None):
        self._device = _tvk_device(device)
        self.ops: list[OpEvent] = []  # set once the block has ended without an exception
        self.kernels: list[KernelEvent] = []
        self._events: list[OpEvent] = []  # while recording
        self.host_time_total = 0.0  # µs, the block's
        self._owner: list[OpEvent | None] = []  # per kernel
        self._gpu_prefix = [0.0]  # GPU µs of kernels 0 .. i - 1
        self._state = "new"

    def __enter__(self):
        if self._state != "new":
            raise RuntimeError("a torchvk.profiler.profile is used for one block; make a new one for each")
        self._state = "open"
        # a dispatch mode's handler runs under torch._dynamo.disable, which imports Dynamo at its first op
        # lazy: Dynamo takes ~1 s to import; here, so that no op's host time includes it
        import torch._dynamo  # noqa: F401
        stream = self._stream = self._device.stream
        self._stack = ExitStack()
        try:
            # one timing session per stream: an enclosing profile's is shared (kernels are numbered)
            self._owns_session = stream.profile_records is None
            if self._owns_session:
                self._stack.enter_context(stream.profiling(exclusive=True))
            else:
                stream.synchronize()  # the kernels before this profile get their times first
            self._records, self._start_ticks = stream.profile_records, stream.profile_start_ticks
            self._first_record, self._first_kernel = len(self._records), stream.total_dispatches
            self._open: list[OpEvent] = []
            self._t0 = time.perf_counter_ns()
            self._stack.enter_context(_OpRecorder(self))
            _open_profiles().append(self)
            self._stack.callback(_open_profiles().remove, self)
        except BaseException:
            self._state = "done"
            self._stack.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        self._state = "done"
        end_kernel = self._stream.total_dispatches
        self.host_time_total = self._now_us()
        # stops recording ops, then ends the stream's timing if this profile started it (which waits
        # for the kernels); on an exception nothing is waited for, and nothing is collected
        self._stack.__exit__(exc_type, exc, tb)
        if exc_type is None:
            if not self._owns_session:
                self._stream.synchronize()
            self._collect(end_kernel - self._first_kernel)
        return False

    # called by _OpRecorder and record_function
    def _now_us(self) -> float:
        return (time.perf_counter_ns() - self._t0) / 1e3

    def _begin(self, name: str, kind: str) -> OpEvent:
        event = OpEvent(name, kind, self._now_us(), 0.0, self._stream.total_dispatches - self._first_kernel, 0,
                        len(self._open))
        self._open.append(event)
        return event

    def _end(self, event: OpEvent, keep: bool = True):
        event.end_us = self._now_us()
        event.end_kernel = self._stream.total_dispatches - self._first_kernel
        self._open.pop()
        if keep:
            self._events.append(event)

    def _collect(self, n: int):
        records = self._records[self._first_record:self._first_record + n]
        ticks = self._start_ticks[self._first_record:self._first_record + n]
        if len(records) < n:
            raise RuntimeError(f"{n - len(records)} of the {n} kernels launched in torchvk.profiler.profile() were "
                               "not timed: a Stream.profiling() block inside it took the stream's timestamps over. "
                               "Time those kernels outside the profile.")
        events = sorted(self._events, key=lambda e: e.start_us)
        owner: list[OpEvent | None] = [None] * n
        for event in sorted(events, key=lambda e: e.depth):  # inner events overwrite outer ones
            owner[event.first_kernel:event.end_kernel] = [event] * (event.end_kernel - event.first_kernel)
        facts, bits = self._device.facts, self._device.timestamp_bits
        mask = (1 << bits) - 1 if bits < 64 else (1 << 64) - 1
        gpu_us = [((t - ticks[0]) & mask) * facts.timestamp_period_ns / 1e3 for t in ticks]
        # the least shift of the GPU clock that starts no kernel before the op that recorded it
        shift = max((o.start_us if o is not None else 0.0) - g for o, g in zip(owner, gpu_us)) if n else 0.0
        # max(): (start - g) + g can round below start, which would draw the kernel before its op
        self.kernels = [KernelEvent(label, o.name if o is not None else OUTSIDE_OPS,
                                    max(g + shift, o.start_us if o is not None else 0.0), seconds * 1e6)
                        for (label, seconds), o, g in zip(records, owner, gpu_us)]
        self._owner = owner
        self._gpu_prefix = [0.0] + list(accumulate(k.duration_us for k in self.kernels))
        self.ops = events

    # ------------------------------------------------------------------ results
    def _check_done(self):
        if self._state != "done":
            raise RuntimeError("torchvk.profiler results are there once the `with profile()` block has ended")

    def _gpu_us(self, event: OpEvent) -> float:
        return self._gpu_prefix[event.end_kernel] - self._gpu_prefix[event.first_kernel]

    def key_averages(self) -> EventList:
        """One row per op or region name, and one per (kernel label, op that launched it)."""
        self._check_done()
        rows: dict = {}
        for event in self.ops:
            row = rows.setdefault((event.name, event.kind, ""), Row(event.name, event.kind))
            row.count += 1
            row.kernels += event.end_kernel - event.first_kernel
            row.host_time_total += event.end_us - event.start_us
            row.gpu_time_total += self._gpu_us(event)
        for k in self.kernels:
            row = rows.setdefault((k.name, "kernel", k.op), Row(k.name, "kernel", k.op))
            row.count += 1
            row.kernels += 1
            row.gpu_time_total += k.duration_us
        return EventList(rows.values(), self.host_time_total, self._gpu_prefix[-1])

    def export_chrome_trace(self, path):
        """Chrome trace JSON (chrome://tracing, ui.perfetto.dev): ops and regions on the host track,
        kernels on the GPU track, µs, an arrow from each op to the kernels it launched."""
        self._check_done()
        events = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "host: aten ops"}},
                  {"ph": "M", "name": "process_name", "pid": 1,
                   "args": {"name": f"GPU: {self._device.facts.name} (Vulkan timestamps)"}}]
        for e in self.ops:
            events.append({"ph": "X", "cat": e.kind, "name": e.name, "pid": 0, "tid": 0, "ts": e.start_us,
                           "dur": e.end_us - e.start_us,
                           "args": {"kernels": e.end_kernel - e.first_kernel, "gpu_time_us": self._gpu_us(e)}})
        for i, (k, o) in enumerate(zip(self.kernels, self._owner)):
            events.append({"ph": "X", "cat": "kernel", "name": k.name, "pid": 1, "tid": 0, "ts": k.start_us,
                           "dur": k.duration_us, "args": {"op": k.op}})
            if o is not None:  # a flow arrow: from the op's span to the kernel
                events.append({"ph": "s", "cat": "launch", "name": "launch", "id": i, "pid": 0, "tid": 0,
                               "ts": o.start_us})
                events.append({"ph": "f", "bp": "e", "cat": "launch", "name": "launch", "id": i, "pid": 1,
                               "tid": 0, "ts": k.start_us})
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


class _OpRecorder(TorchDispatchMode):
    """Notes each aten op that touches a tvk tensor (arguments or result) as an OpEvent."""

    supports_higher_order_operators = True  # torch.cond & co. pass through, noted as one op

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        return True  # else Dynamo skips compiling under this mode: torch.compile would run eagerly

    def __init__(self, profile):
        super().__init__()
        self.profile = profile

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        event = self.profile._begin(_op_name(func), "op")
        out = None
        try:
            out = func(*args, **kwargs)
            return out
        finally:  # fake tensors (torch.compile tracing) and CPU work are not tvk ops
            self.profile._end(event, keep=any(type(x) is TVKTensor for x in tree_leaves((args, kwargs, out))))


_op_names: dict = {}


def _op_name(func) -> str:
    name = _op_names.get(func)
    if name is None:
        schema = getattr(func, "_schema", None)
        name = _op_names[func] = schema.name if schema is not None else str(func)  # aten::mm, as torch.profiler
    return name


def _tvk_device(device):
    if device is None or isinstance(device, int):
        return get_device(device)
    d = torch.device(device)
    if d.type != "tvk":
        raise ValueError(f"torchvk.profiler.profile profiles a tvk device, not {d}")
    return get_device(d.index)
