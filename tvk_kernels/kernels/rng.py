"""Counter-based random numbers on the device (templates/elementwise_rng.comp, Philox4x32-10).

Every value is a pure function of (seed, offset, element index): the same call gives the same
numbers whatever the launch shape, and calls with different offsets draw from disjoint
counter ranges (the offset is the upper 64 bits of the 128-bit counter). Callers advance the
offset between calls (any new value gives fresh numbers; torchvk's counter does this).

Addresses are plain ints (or anything with `.address`), n counts elements, data is float32
or float16 (contiguous).
"""
from __future__ import annotations

import struct

from .elementwise import SMALL, dtype_name
from .launch import Family, family, grid_1d

_PUSH = struct.Struct("<QQQQQIff")
_MODES = {"uniform": 0, "normal": 1, "dropout": 2}
_DT = {"float32": 0, "float16": 1}
_M64 = (1 << 64) - 1


class Rng(Family):
    """Shares the `elementwise` tuning entry: its local size is WG."""

    TEMPLATE = "elementwise_rng.comp"

    def __init__(self, device):
        super().__init__(device, "elementwise", "elementwise_binary.comp")

    def variant(self, mode: str, dtype: str, n: int, seed_buf: bool = False):
        params, _ = self.params("small" if n < SMALL else "large")
        wg = params["WG"]
        key = (mode, dtype, wg, seed_buf)
        return self.pipeline(key, lambda: self.device.pipelines.get(
            self.TEMPLATE, {"MODE": _MODES[mode], "DT": _DT[dtype], "SEED_BUF": int(seed_buf)}, local_size=(wg, 1, 1),
            push_size=_PUSH.size)), wg


def _addr(a) -> int:
    return 0 if a is None else int(getattr(a, "address", a))


def _launch(device, mode, x, out, mask, n, s0, s1, seed, offset, dtype, seed_buffer=None):
    n = int(n)
    if n <= 0:
        return
    if n >= 1 << 32:
        raise ValueError(f"{n} elements; the RNG kernels index with 32 bits")
    dtype = dtype_name(dtype)
    if dtype not in _DT:
        raise TypeError(f"random kernels write float32 or float16, not {dtype}")
    feats = device.facts.features
    if dtype == "float16" and not feats.get("storage_16bit"):
        raise TypeError(f"{device.facts.name} lacks 16-bit storage for float16 tensors")
    pipe, wg = family(device, Rng).variant(mode, dtype, n, seed_buffer is not None)
    if seed_buffer is not None:  # seed and base offset read from this 16-byte buffer; offset is relative
        seed = _addr(seed_buffer)
    threads = (n + 3) // 4
    groups = grid_1d((threads + wg - 1) // wg, device.facts.max_workgroup_count[0])
    push = _PUSH.pack(_addr(x), _addr(out), _addr(mask), int(seed) & _M64, int(offset) & _M64, n,
                      float(s0), float(s1))
    device.stream.dispatch(pipe, groups, push, mode)


def dropout(device, in_addr, out_addr, mask_addr, n: int, p: float, seed: int, offset: int = 0,
            dtype="float32", seed_buffer=None):
    """out = x * mask / (1 - p) with mask ~ Bernoulli(1 - p) stored as uint8 (0/1) at
    mask_addr (None: no mask written). p = 1 zeroes everything. out may be in_addr.
    seed_buffer: read (seed, base offset) from this buffer instead (offset is then relative)."""
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    scale = 0.0 if p >= 1.0 else 1.0 / (1.0 - p)
    _launch(device, "dropout", in_addr, out_addr, mask_addr, n, p, scale, seed, offset, dtype, seed_buffer)


def uniform_(device, addr, n: int, low: float = 0.0, high: float = 1.0, seed: int = 0, offset: int = 0,
             dtype="float32"):
    """addr[:n] = U[low, high)."""
    _launch(device, "uniform", None, addr, None, n, low, high, seed, offset, dtype)


def normal_(device, addr, n: int, mean: float = 0.0, std: float = 1.0, seed: int = 0, offset: int = 0,
            dtype="float32"):
    """addr[:n] = N(mean, std**2) (Box-Muller)."""
    _launch(device, "normal", None, addr, None, n, mean, std, seed, offset, dtype)
