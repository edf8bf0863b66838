"""Repeats: an eager call that repeats an earlier one runs without its implementation's Python.

Eager models call the same ops on the same geometries every step. The dispatcher
(_dispatch.py) keys every call by the op and each argument's geometry (shape, strides, dtype,
device) or value (a number, a dtype, a list of ints): `call_key` in _checks.py. The first call
of a key takes the full path: torch's checks, type promotion, the launch plan. While it runs,
the implementation may offer how to run it again (`offer`): the output it returns, the
operands it computed from, and a function that makes a fresh output from operands of the same
geometry (elementwise ops allocate and record one kernel; views wrap the same storage in the
same geometry). The dispatcher keeps the offer as a Repeat when it is exact:

- the implementation made exactly one offer, returned the offered output, and recorded no GPU
  work before or after the work the offer repeats (an addmm whose GEMM offers and which then
  adds its bias with another kernel is not repeated);
- every tensor operand is one of the call's own top-level arguments, or an item of a list argument
  found there once (by identity), so nothing computed inside the implementation is frozen into the
  repeat; numbers are constants, which
  is exact because the key holds every argument number's value;
- it read no device data back and drew no random numbers (a value from either would be
  frozen too), unless the offer draws them itself on every repeat (fused attention's dropout);
- no CPU tensor is among the arguments (their values are not in the key).

A call that offers nothing exact is repeated by calling its implementation directly (`Direct`),
without the dispatcher's lookups and checks, which passed for its key.

An op that writes a tensor (in place, out=) is repeated only after torch's memory-overlap screen
passes for this call: it depends on which storages the tensors view, which no key holds. One that
writes and judges its own calls (torch.optim's foreach ops) is never repeated, and no key is built
for it (the dispatcher's `_unrepeated`): its lists of tensors made the key cost more than it saved.

Where the first call passed one tensor in two places (`x * x`), the repeat holds only while the
same arguments are again one tensor (`Repeat.same`), as the mapping from arguments to operands
is then ambiguous. Repeats are dropped when the kernel configs reload. Design note 37.
"""
from __future__ import annotations

from operator import itemgetter

import torch

from tvk_kernels.config import generation
from tvk_kernels.runtime.stream import commands_recorded

from . import _rng
from ._checks import check_overlap, keep_op
from ._storage import alloc_storage, readback_count
from ._tensor import TVKTensor

_Tensor = torch.Tensor
_listening: list = [None]  # the offers list of the implementation running under dispatch, or None
_MAX_REPEATS = 8192  # a model's distinct eager calls; beyond it the memo starts afresh


class Repeat:
    """Runs a remembered call again: picks the operands out of the call's arguments and makes a
    fresh output from them."""

    __slots__ = ("name", "again", "pick", "same", "writes", "generation")

    def __init__(self, name, again, pick, same, writes):
        self.name, self.again, self.pick, self.same, self.writes = name, again, pick, same, writes
        self.generation = generation()

    def holds(self, args, kwargs) -> bool:
        """Whether this call may be repeated: configs unchanged, the first call's aliasing, and for an op
        that writes a tensor, torch's memory-overlap screen passing (it depends on storages, not geometry)."""
        if self.generation != generation():
            return False
        for i, j in self.same:
            if args[i] is not args[j]:
                return False
        return self.writes is None or check_overlap(self.writes, args, kwargs)[0] is args

    def __call__(self, args, kwargs):
        pick = self.pick
        return self.again(args if pick is None else pick(args, kwargs))


def mark():
    """Before an implementation records the work it may offer: None where no dispatch listens
    (compiled programs call implementations without one), else where the recorded commands stand."""
    return None if _listening[0] is None else commands_recorded()


def offer(mark, out, operands, again, draws=False):
    """From an implementation, after the work begun at `mark`: `again(operands)` makes what this call
    returns (`out`), recording that same work, for any later call of the same key, given that call's
    operands from the places these came from. draws: the work draws random numbers, and `again` draws
    its own the same way (a dropout mask), so the repeat is not frozen to this call's."""
    if mark is not None:
        _listening[0].append((mark, commands_recorded(), out, operands, again, draws))


class Listening:
    """Around one implementation call: collects its offers (nested dispatches collect their own)."""

    __slots__ = ("outer", "offers", "readbacks", "rng_offset", "commands")

    def __enter__(self):
        self.outer, self.offers = _listening[0], []
        _listening[0] = self.offers
        self.readbacks, self.rng_offset, self.commands = readback_count(), _rng.offset(), commands_recorded()
        return self

    def __exit__(self, *exc):
        _listening[0] = self.outer
        return False

    def repeat(self, name, out, args, kwargs, writes) -> Repeat | None:
        """The Repeat this call offered, or None where it offered none or none that is exact: the offer
        must account for all the GPU work the call recorded, before and after it."""
        if len(self.offers) != 1 or self.readbacks != readback_count():
            return None
        begun, ended, offered, operands, again, draws = self.offers[0]
        if self.rng_offset != _rng.offset() and not draws:
            return None
        if offered is not out or begun != self.commands or ended != commands_recorded():
            return None
        places = list(enumerate(args)) + list(kwargs.items())
        if any(isinstance(a, _Tensor) and type(a) is not TVKTensor for _, a in places):
            return None
        sources, same = [], []
        for x in operands:
            if isinstance(x, _Tensor):
                found = [place for place, a in places if a is x]
                if not found:  # an item of a list argument (cat's tensors), found once
                    items = [(place, i) for place, a in places if type(a) in (list, tuple)
                             for i, item in enumerate(a) if item is x]
                    if len(items) != 1:
                        return None
                    sources.append(("item", items[0]))
                    continue
                if len(found) > 1:
                    if not all(isinstance(p, int) for p in found):
                        return None
                    same.extend((found[0], p) for p in found[1:])
                sources.append(("argument", found[0]))
            else:
                sources.append(("constant", x))
        return Repeat(name, again, _picker(sources, len(args)), tuple(same), writes)


class Direct:
    """The repeat of a call that offered none: its implementation, called without the dispatcher's
    lookups and checks. Exact: the checks passed for this key (and the overlap screen is run again for
    an op that writes), and everything else the implementation works out again. A decomposition's
    (a composite op torch hands the dispatcher) has no name: it is not counted, its pieces are."""

    __slots__ = ("name", "impl", "writes")

    def __init__(self, name, impl, writes):
        self.name, self.impl, self.writes = name, impl, writes

    def holds(self, args, kwargs) -> bool:
        return self.writes is None or check_overlap(self.writes, args, kwargs)[0] is args

    def __call__(self, args, kwargs):
        return self.impl(*args, **kwargs)


class FreshOutputs:
    """An offer's `again` for an op that writes its kernels' results into fresh tensors: new tensors of the
    first call's outputs' geometry, and `record(operands, outputs)`, the call's kernel work on them. Returns
    the one output, or the tuple of them."""

    __slots__ = ("geometry", "record")

    def __init__(self, outputs, record):
        # the geometry, not the tensors: the first call's outputs are not kept alive
        self.geometry = [(t._tvk.device, t._tvk.nbytes, tuple(t.shape), t.stride(), t.dtype) for t in outputs]
        self.record = record

    def __call__(self, operands):
        outputs = [TVKTensor(alloc_storage(nbytes, device), shape, stride, 0, dtype)
                   for device, nbytes, shape, stride, dtype in self.geometry]
        self.record(operands, outputs)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _picker(sources, n_args: int):
    """A function (args, kwargs) -> the operands, from where each came: a position, a keyword, an item
    of a list argument or a constant; None where the operands are the n_args positional arguments as
    they stand."""
    if sources and all(kind == "argument" and isinstance(place, int) for kind, place in sources):
        places = [place for _, place in sources]
        if places == list(range(n_args)):
            return None
        if len(places) == 1:
            only = places[0]
            return lambda args, kwargs: (args[only],)
        get = itemgetter(*places)
        return lambda args, kwargs: get(args)

    def argument(place, args, kwargs):
        return args[place] if isinstance(place, int) else kwargs[place]

    def pick(args, kwargs):
        return tuple(argument(place, args, kwargs) if kind == "argument" else
                     argument(place[0], args, kwargs)[place[1]] if kind == "item" else place
                     for kind, place in sources)

    return pick


def keep(repeats: dict, key, repeat: Repeat | Direct, func) -> None:
    if len(repeats) >= _MAX_REPEATS:
        repeats.clear()
    keep_op(func)  # the key holds func by id
    repeats[key] = repeat
