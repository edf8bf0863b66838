"""Small helpers shared by the op modules (they import nothing above _tensor)."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import elementwise as elementwise_kernels

from .._tensor import TVKTensor, new_tensor

DTYPE_NAME = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def dev(t: TVKTensor):
    return t._tvk.device


def addr(t: TVKTensor) -> int:
    return t.tvk_address


def empty(size, dtype, device, op="aten") -> TVKTensor:
    return new_tensor(size, dtype, device, op=op)


_EW_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.int64: "int64", torch.int32: "int32",
              torch.bool: "bool", torch.bfloat16: "bfloat16", torch.uint8: "uint8", torch.int8: "int8",
              torch.int16: "int16"}


def operand(t: TVKTensor) -> elementwise_kernels.Operand:
    """t as an operand of the elementwise kernels (tvk_kernels.kernels.elementwise)."""
    name = _EW_DTYPES.get(t.dtype)
    if name is None:
        raise TypeError(f"TorchVK elementwise kernels do not support dtype {t.dtype}")
    return elementwise_kernels.Operand.trusted(t.tvk_address, tuple(t.shape), t.stride(), name)


def need_float(t: TVKTensor, op: str, allowed=(torch.float32,)):
    if t.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"TorchVK: {op} does not support dtype {t.dtype} (supported: {names})")


def norm_dims(ndim: int, dims) -> list:
    if dims is None:
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    dims = list(dims)
    if not dims:
        return list(range(ndim))
    return sorted({d % max(ndim, 1) for d in dims})
