"""Kept calls: a kernel entry point's launches, worked out once per geometry and replayed.

An eager training step calls the same kernel entry points (conv2d_forward, layer_norm, reduce ...)
with the same geometry every step, and each call works out its config, split and grid again in
Python before it records one or two dispatches. `@kept_call("x_addr", "out_addr", ...)` keeps, per
call key (every argument but the named addresses, which count by whether they are 0, by their
alignment and by which of them are equal), the dispatches the first call made, and replays them on later calls with the new
addresses written into their push constants.

Where each address goes is found, not declared: the first call of a key runs twice with its
dispatches captured instead of recorded, the second time with every address moved by a distinct
multiple of 2**36 (alignments kept). A push-constant word that moves by an address's shift holds
that address plus a fixed offset; anything else must be equal in both runs.

Scratch memory (split-K partials, two-pass reductions) is kept too: the call's allocations are
seen, and in the probe each scratch buffer shows the first run's address moved the same way, so
its words are found as an argument's are; a replay allocates buffers of the same sizes, writes
their addresses, and keeps alive the ones the call kept alive. A scratch buffer that outlives the
call (held by a table or returned) is not scratch: such a call is not kept.

A call that differs in any other way (another pipeline, grid, word or scratch size), copies, fills
or keeps anything else alive is not kept: it runs in full every time, as does every call in
benchmark mode, while shapes are recorded for the tuner, with explicit `params`, or after the
configs reload (the kept launches are then dropped).
"""
from __future__ import annotations

import functools
import inspect
import struct
import weakref

from .. import benchmark_mode
from ..config import generation
from .launch import recording

_U64 = struct.Struct("<Q")
_SHIFT = 1 << 36  # address i moves by (i + 1) * _SHIFT in the probe: alignments and low words kept
_MAX_KEPT = 4096
_NOT_KEPT = object()  # a call key whose launches cannot be replayed
_SEEN = object()  # a call key seen once


class _Capture:
    """What a call did to the stream and the allocator while captured: its dispatches, its scratch
    buffers, and whether it did anything else. moved: in the probe, the address each scratch
    buffer is to show (the first run's, moved), so its push words are found as an argument's."""

    def __init__(self, moved=None):
        self.dispatches: list = []
        self.other = False  # a copy, fill or other keep_alive: not replayable
        self.scratch: list = []  # (nbytes, the address the call saw, weak reference) per allocation
        self.kept: list = []  # the scratch buffers (indices) the call kept alive
        self.moved = moved

    def allocated(self, buf):
        k = len(self.scratch)
        if self.moved is not None:
            if k < len(self.moved) and self.moved[k][0] == buf.nbytes:
                buf.address = self.moved[k][1]  # nothing is recorded: the buffer's memory is never used
            else:
                self.other = True
        self.scratch.append((buf.nbytes, buf.address, weakref.ref(buf)))

    def kept_alive(self, obj):
        for k, (_, _, ref) in enumerate(self.scratch):
            if ref() is obj:
                self.kept.append(k)
                return
        self.other = True

    def outlived(self) -> bool:
        """Whether a scratch buffer is still in use after the call: it belongs to something else. In
        the probe such a buffer gets its own address back (a table may use it on later calls)."""
        alive = [buf for buf in (ref() for _, _, ref in self.scratch) if buf is not None and not buf.freed]
        if self.moved is not None:
            for buf in alive:
                buf.address = buf.block.address + buf.offset
        return bool(alive)


class _Kept:
    __slots__ = ("launches", "result", "generation", "scratch", "kept")

    def __init__(self, launches, result, scratch, kept):
        self.launches, self.result, self.generation = launches, result, generation()
        self.scratch, self.kept = scratch, kept  # scratch sizes to allocate, and which of them to keep alive


def _slots(first, moved, addresses):
    """[(byte offset, address index, offset from that address)] of the push words that hold an address
    (first: the call's push bytes, moved: the probe's), or None when a difference is not an address's."""
    if len(first) != len(moved):
        return None
    if first == moved:
        return []
    slots, o = [], 0
    while o + 8 <= len(first):
        a, b = _U64.unpack_from(first, o)[0], _U64.unpack_from(moved, o)[0]
        if a != b:
            for i, addr in enumerate(addresses):
                if addr and b - a == (i + 1) * _SHIFT:
                    slots.append((o, i, a - addr))
                    break
            else:
                return None
            o += 8
        else:
            o += 4
    rebuilt = bytearray(moved)
    for o, i, delta in slots:
        _U64.pack_into(rebuilt, o, addresses[i] + delta)
    return slots if bytes(rebuilt) == first else None


def _plan(captures, addresses):
    """addresses: the call's, then its scratch buffers' in the first run."""
    first, moved = captures
    if first.other or moved.other or len(first.dispatches) != len(moved.dispatches) or \
            [n for n, _, _ in first.scratch] != [n for n, _, _ in moved.scratch] or first.kept != moved.kept:
        return None
    launches = []
    for (pipe, groups, push, label), (pipe2, groups2, push2, label2) in zip(first.dispatches, moved.dispatches):
        if pipe is not pipe2 or groups != groups2 or label != label2:
            return None
        slots = _slots(push, push2, addresses)
        if slots is None:
            return None
        write = _PushWriter(push, slots) if slots else None
        if write is not None and write(addresses) != push:  # it must rebuild the call's own bytes
            return None
        launches.append((pipe, groups, push, write, label))
    return launches


class _PushWriter:
    """Writes a kept launch's push constants for new addresses in one struct.pack: the fixed bytes
    between the address words go in as they were."""

    __slots__ = ("layout", "values", "fill")

    def __init__(self, push: bytes, slots):
        fmt, self.values, self.fill, at = "<", [], [], 0
        for offset, index, delta in sorted(slots):
            if offset > at:
                fmt += f"{offset - at}s"
                self.values.append(push[at:offset])
            self.fill.append((len(self.values), index, delta))
            self.values.append(0)
            fmt, at = fmt + "Q", offset + 8
        if at < len(push):
            fmt += f"{len(push) - at}s"
            self.values.append(push[at:])
        self.layout = struct.Struct(fmt)

    def __call__(self, addrs) -> bytes:
        values = self.values.copy()
        for place, index, delta in self.fill:
            values[place] = addrs[index] + delta
        return self.layout.pack(*values)


def kept_call(*address_names):
    """Decorator of a kernel entry point `fn(device, ...)` whose `address_names` parameters are device
    addresses (ints; 0 or None: absent): see the module docstring."""

    def wrap(fn):
        params = list(inspect.signature(fn).parameters.values())
        where = [(next(k for k, p in enumerate(params) if p.name == name) - 1, name,
                  next(p.default for p in params if p.name == name)) for name in address_names]
        positions = frozenset(pos for pos, _, _ in where)
        memo: dict = {}

        def with_addresses(args, kwargs, values):
            args, kwargs = list(args), dict(kwargs)
            for (pos, name, _), value in zip(where, values):
                if pos < len(args):
                    args[pos] = value
                else:
                    kwargs[name] = value
            return args, kwargs

        others: dict = {}  # number of positional arguments -> the positions that are not addresses

        @functools.wraps(fn)
        def call(device, *args, **kwargs):
            # list comprehensions, not generators, below: this runs on every eager op that calls a kernel entry
            if (kwargs and kwargs.get("params") is not None) or recording() or benchmark_mode.enabled() or \
                    device.stream.call_capture is not None:  # inside another kept call's learning: plain
                return fn(device, *args, **kwargs)
            n = len(args)
            addrs = [args[pos] if pos < n else kwargs.get(name, default) for pos, name, default in where]
            for a in addrs:
                if a is not None and type(a) is not int:
                    return fn(device, *args, **kwargs)  # a buffer object: the plain path
            addrs = [a or 0 for a in addrs]
            # per address: absent, or its alignment and the first address equal to it (a call that
            # passes one buffer twice is kept apart from one that passes two)
            alignments = tuple([a == 0 or (a & 255, addrs.index(a)) for a in addrs])
            kept_positions = others.get(n)
            if kept_positions is None:
                kept_positions = others[n] = [k for k in range(n) if k not in positions]
            try:  # shapes come as lists or tuples of ints: hashable as they are, or as tuples
                key = (id(device), alignments, tuple([tuple(a) if type(a) is list else a
                                                      for a in [args[k] for k in kept_positions]]),
                       tuple([(k, tuple(v) if type(v) is list else v) for k, v in kwargs.items()
                              if k not in address_names]) if kwargs else ())
                kept = memo.get(key)
            except TypeError:  # a nested list or a dict: the slow key
                try:
                    key = (id(device), alignments,
                           tuple(_frozen(a) for k, a in enumerate(args) if k not in positions),
                           tuple(sorted((k, _frozen(v)) for k, v in kwargs.items() if k not in address_names)))
                    kept = memo.get(key)
                except TypeError:  # an unhashable argument
                    return fn(device, *args, **kwargs)
            if type(kept) is _Kept:
                if kept.generation == generation():
                    return _replay(device, kept, addrs)
                kept = _SEEN  # the configs reloaded: learned again
            if kept is _NOT_KEPT:
                return fn(device, *args, **kwargs)
            if kept is None:  # a key seen once is learned the second time: one that changes every call costs nothing
                if len(memo) >= _MAX_KEPT:
                    memo.clear()
                memo[key] = _SEEN
                return fn(device, *args, **kwargs)
            kept = _learn(device, fn, args, kwargs, addrs, with_addresses)
            if len(memo) >= _MAX_KEPT:
                memo.clear()
            memo[key] = kept if kept is not None else _NOT_KEPT
            if kept is None:
                return fn(device, *args, **kwargs)
            return _replay(device, kept, addrs)

        call.kept = memo  # tests look in
        return call

    return wrap


def _frozen(x):
    if isinstance(x, list):
        return ("list",) + tuple(map(_frozen, x))
    if isinstance(x, tuple):
        return tuple(map(_frozen, x))
    if isinstance(x, dict):
        return ("dict",) + tuple(sorted((k, _frozen(v)) for k, v in x.items()))
    return (type(x), x)


def _learn(device, fn, args, kwargs, addrs, with_addresses):
    """Run fn captured twice (real addresses, then moved ones); its kept launches, or None."""
    stream = device.stream
    captures = []
    moved = [a + (i + 1) * _SHIFT if a else 0 for i, a in enumerate(addrs)]
    for values in (addrs, moved):
        if values is addrs:
            capture = _Capture()
        else:  # scratch buffer k shows the first run's address, moved as argument len(addrs) + k would be
            capture = _Capture([(n, address + (len(addrs) + k + 1) * _SHIFT)
                                for k, (n, address, _) in enumerate(captures[0][0].scratch)])
        a, k = with_addresses(args, kwargs, values)
        try:
            with stream.capturing_calls(capture):
                result = fn(device, *a, **k)
        except Exception:  # noqa: BLE001
            capture.outlived()  # a probe buffer something holds gets its own address back
            if values is addrs:
                raise  # the call's own error
            return None  # the probe's addresses refused: not kept, the call runs in full
        capture.other = capture.outlived() or capture.other
        captures.append((capture, result))
    if captures[0][1] != captures[1][1]:
        return None
    first = captures[0][0]
    launches = _plan([c for c, _ in captures], addrs + [address for _, address, _ in first.scratch])
    return None if launches is None else _Kept(launches, captures[0][1], [n for n, _, _ in first.scratch],
                                               first.kept)


def _replay(device, kept, addrs):
    if kept.scratch:
        scratch = [device.allocator.alloc(n) for n in kept.scratch]
        addrs = addrs + [buf.address for buf in scratch]
    dispatch = device.stream.dispatch
    for pipe, groups, push, write, label in kept.launches:
        dispatch(pipe, groups, push if write is None else write(addrs), label)
    for k in kept.kept:
        device.stream.keep_alive(scratch[k])
    return kept.result
