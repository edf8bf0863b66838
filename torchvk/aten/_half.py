"""float16/bfloat16 tensors on kernel families that compute in float32 only (conv, pooling):
16-bit storage, float32 arithmetic, as everywhere on tvk (no device here has bf16 arithmetic)."""
from __future__ import annotations

import functools

import torch

from .copies import cast

HALF = (torch.float16, torch.bfloat16)


def _narrow(value, dtype):
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return cast(value, dtype)
    if isinstance(value, (tuple, list)):
        return type(value)(_narrow(v, dtype) for v in value)
    return value


def float32_compute(impl):
    """`impl` on float32 copies of its float16/bfloat16 tensor arguments; its float32 results are
    cast back to that dtype (index results stay int64). float32 calls pass straight through."""

    @functools.wraps(impl)
    def wrapper(*args, **kwargs):
        half = next((a.dtype for a in args if isinstance(a, torch.Tensor) and a.dtype in HALF), None)
        if half is None:
            return impl(*args, **kwargs)
        wide = [cast(a, torch.float32) if isinstance(a, torch.Tensor) and a.dtype == half else a for a in args]
        return _narrow(impl(*wide, **kwargs), half)

    return wrapper
