"""GradScaler's kernels (templates/amp.comp): unscale-and-check one gradient, update the scale.

`unscale(device, grad, n, found_inf, inv_scale, dtype)` multiplies n contiguous gradient values
by the float32 at inv_scale and writes 1.0 to the float32 at found_inf when one of them is inf
or NaN; `update_scale(...)` applies CUDA's growth/backoff rule to the float32 scale and int32
growth tracker. Both read and write device memory only: no host sync. Like index_check, a fixed
grid of WG-wide workgroups strides over the elements, so there is nothing to tune (no tuning/ file).
"""
from __future__ import annotations

import struct

from . import dtypes
from .launch import Family, family, grid_1d

_UNSCALE_PUSH = struct.Struct("<QQQI")
_UPDATE_PUSH = struct.Struct("<QQQffi")
WG = 128
MAX_GROUPS = 1024  # enough to fill a GPU; more elements are strided over
CHUNK = 1 << 30    # elements per launch: the kernel counts in 32 bits
DTYPES = {n: (dtypes.DTYPES[n].code, dtypes.DTYPES[n].itemsize) for n in ("float32", "float16", "bfloat16")}  # DTYPE define, element bytes


class Amp(Family):
    family = "amp"
    template = "amp.comp"


def unscale(device, grad: int, n: int, found_inf: int, inv_scale: int, dtype: str = "float32"):
    """grad[:n] *= inv_scale[0]; found_inf[0] = 1.0 if any grad value is inf or NaN (addresses)."""
    if dtype not in DTYPES:
        raise TypeError(f"GradScaler's unscale kernel takes float32, float16 or bfloat16 gradients, not {dtype}")
    code, size = DTYPES[dtype]
    pipe = family(device, Amp).variant({"MODE": 0, "DTYPE": code}, WG, _UNSCALE_PUSH.size)
    for start in range(0, n, CHUNK):
        count = min(n - start, CHUNK)
        groups = grid_1d(min((count + WG - 1) // WG, MAX_GROUPS), device.facts.max_workgroup_count[0])
        device.stream.dispatch(pipe, groups, _UNSCALE_PUSH.pack(grad + start * size, found_inf, inv_scale, count),
                               "amp.unscale")


def update_scale(device, scale: int, tracker: int, found_inf: int, growth: float, backoff: float, interval: int):
    """CUDA's _amp_update_scale_ on a float32 scale and an int32 growth tracker (addresses)."""
    pipe = family(device, Amp).variant({"MODE": 1, "DTYPE": 0}, 1, _UPDATE_PUSH.size)
    device.stream.dispatch(pipe, (1, 1, 1), _UPDATE_PUSH.pack(scale, tracker, found_inf, growth, backoff, interval),
                           "amp.update_scale")
