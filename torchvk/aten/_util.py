"""Small helpers shared by the op modules."""
from __future__ import annotations

import torch

from .._storage import check_dtype
from .._tensor import TVKTensor, new_tensor

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
DTYPE_NAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def dev(t: TVKTensor):
    return t._tvk.device


def addr(t: TVKTensor) -> int:
    return t.tvk_address


def empty(size, dtype, device, op="aten") -> TVKTensor:
    return new_tensor(size, dtype, device, op=op)


def contig(t: TVKTensor) -> TVKTensor:
    if t.is_contiguous():
        return t
    from .copies import contiguous

    return contiguous(t)


def cast(t: TVKTensor, dtype) -> TVKTensor:
    if t.dtype == dtype:
        return t
    from .copies import device_copy

    out = new_tensor(t.shape, dtype, t._tvk.device)
    return device_copy(out, t)


def contig_dtype(t: TVKTensor, dtype) -> TVKTensor:
    return contig(cast(t, dtype))


def need_float(t: TVKTensor, op: str, allowed=(torch.float32,)):
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"TorchVK: {op} does not support dtype {t.dtype} (supported: {names})")


def scalar(x):
    """A Python number from a number or a 0-dim (CPU or tvk) tensor."""
    if isinstance(x, torch.Tensor):
        return x.item()
    return x


def norm_dims(ndim: int, dims) -> list:
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    dims = list(dims)
    if not dims:
        return list(range(ndim))
    return sorted({d % max(ndim, 1) for d in dims})
