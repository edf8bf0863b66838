"""Random-number state for tvk: a seed and a counter (counter-based RNG kernels)."""
from __future__ import annotations

import random

import torch

_state = {"seed": 67280421310721, "offset": 0}


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


def next_offset(n: int) -> tuple[int, int]:
    """(seed, offset) for a kernel that draws n numbers; advances the counter."""
    seed_, off = _state["seed"], _state["offset"]
    _state["offset"] = off + ((int(n) + 3) // 4) * 4
    return seed_, off
