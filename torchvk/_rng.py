"""Random-number state for tvk: a seed and a counter (counter-based RNG kernels)."""
from __future__ import annotations

import random
from contextlib import contextmanager

import numpy as np
import torch

from ._storage import upload_bytes

_state = {"seed": 67280421310721, "offset": 0}


def offset() -> int:
    """The counter: it moves whenever a kernel draws numbers (_repeat.py tells a draw by it)."""
    return _state["offset"]


def manual_seed(seed) -> None:
    _state["seed"] = int(seed) & 0xFFFFFFFFFFFFFFFF
    _state["offset"] = 0


def seed() -> None:
    manual_seed(random.getrandbits(63))


def initial_seed() -> int:
    return _state["seed"]


def get_rng_state(device=None) -> torch.Tensor:
    return torch.tensor([_state["seed"] & 0x7FFFFFFFFFFFFFFF, _state["offset"]], dtype=torch.int64)


def set_rng_state(state, device=None) -> None:
    s = [int(x) for x in state.tolist()]
    _state["seed"], _state["offset"] = s[0], s[1]


def snapshot() -> dict:
    """The seed and counter, for restore() (a dry run that must not advance them)."""
    return dict(_state)


def restore(saved: dict) -> None:
    _state.update(saved)


def next_offset(n: int) -> tuple[int, int]:
    """(seed, offset) for a kernel that draws n numbers; advances the counter."""
    seed_, off = _state["seed"], _state["offset"]
    _state["offset"] = off + ((int(n) + 3) // 4) * 4
    return seed_, off


# ------------------------------------------------------------------ recorded command buffers
# While compiled mode records a program (torchvk/compile/replay.py), random kernels read their
# (seed, base offset) from a 16-byte device buffer and get offsets relative to the base, so each
# replay draws fresh numbers once the host rewrites those bytes (see RecordedRandomness).
_recording: list = []


class RecordedRandomness:
    """The seed buffer of one recorded program and how many counter steps one run draws."""

    def __init__(self, storage):
        self.storage = storage
        self.base = _state["offset"]
        self.draws = 0

    def next_base(self, first: bool) -> None:
        """Before a replay: write the (seed, offset) eager mode would use now, and advance the counter
        (the recording itself already advanced it for the first replay)."""
        if first:
            seed_, base = _state["seed"], self.base
        else:
            seed_, base = next_offset(self.draws)
        upload_bytes(self.storage, np.array([seed_, base], dtype=np.uint64))


@contextmanager
def recording(rec: RecordedRandomness | None):
    """Random kernels launched inside take their seed from rec's buffer; rec None: eager mode's seeds."""
    if rec is not None:
        _recording.append(rec)
    try:
        yield
    finally:
        if rec is not None:
            _recording.pop()


def kernel_seed(n: int):
    """(seed, offset, seed_buffer) for a kernel drawing n numbers: seed_buffer is None in eager mode."""
    seed_, off = next_offset(n)
    if not _recording:
        return seed_, off, None
    rec = _recording[-1]
    rec.draws = _state["offset"] - rec.base
    return 0, off - rec.base, rec.storage.buffer
