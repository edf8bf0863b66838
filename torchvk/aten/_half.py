"""float16/bfloat16 tensors on kernel families that store float32 only (RNN cells; conv's 3-D and
mixed-dtype calls): float32 copies in, results cast back. Families on templates/common/storage.glsl
(conv, norm, pooling) read and write 16-bit tensors in place instead."""
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
