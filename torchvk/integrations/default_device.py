"""The rule every integration follows: where a library would fall back to the CPU, because it knows
accelerators by name only, it gets tvk if torch's current accelerator is tvk (as torch says when
no other accelerator is present). Where the library finds cuda, xpu, mps, ..., its choice stands."""
from __future__ import annotations

import torch


def tvk_is_torch_accelerator() -> bool:
    accelerator = torch.accelerator.current_accelerator()  # None where torch has no accelerator
    return accelerator is not None and accelerator.type == "tvk"
