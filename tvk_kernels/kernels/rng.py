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

from .elementwise import dtype_name
from . import dtypes
from .launch import Family, address, family, grid_1d

_PUSH = struct.Struct("<QQQQQIff")
MODES = {"uniform": 0, "normal": 1, "dropout": 2}
DTYPE_CODES = dtypes.codes("float32", "float16")
_M64 = (1 << 64) - 1


class Rng(Family):
    family = "rng"
    template = "elementwise_rng.comp"


def defines(mode: str, dtype: str, seed_buf: bool) -> dict:
    """The defines of one RNG kernel (the runtime and the tuner target build them here)."""
    return {"MODE": MODES[mode], "DT": DTYPE_CODES[dtype], "SEED_BUF": int(seed_buf)}


def _launch(device, mode, x, out, mask, n, s0, s1, seed, offset, dtype, seed_buffer=None, params=None):
    n = int(n)
    if n <= 0:
        return
    if n >= 1 << 32:
        raise ValueError(f"{n} elements; the RNG kernels index with 32 bits")
    dtype = dtype_name(dtype)
    if dtype not in DTYPE_CODES:
        raise TypeError(f"random kernels write float32 or float16, not {dtype}")
    feats = device.facts.features
    if dtype == "float16" and not feats.get("storage_16bit"):
        raise TypeError(f"{device.facts.name} lacks 16-bit storage for float16 tensors")
    fam = family(device, Rng)
    wg = fam.resolve({"n": n}, params)["WG"]
    pipe = fam.variant(defines(mode, dtype, seed_buffer is not None), wg, _PUSH.size)
    if seed_buffer is not None:  # seed and base offset read from this 16-byte buffer; offset is relative
        seed = address(seed_buffer)
    threads = (n + 3) // 4
    groups = grid_1d((threads + wg - 1) // wg, device.facts.max_workgroup_count[0])
    push = _PUSH.pack(address(x), address(out), address(mask), int(seed) & _M64, int(offset) & _M64, n,
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
             dtype="float32", params: dict | None = None):
    """addr[:n] = U[low, high). params: an explicit WG (the tuner), over the tuned/default one."""
    _launch(device, "uniform", None, addr, None, n, low, high, seed, offset, dtype, params=params)


def normal_(device, addr, n: int, mean: float = 0.0, std: float = 1.0, seed: int = 0, offset: int = 0,
            dtype="float32"):
    """addr[:n] = N(mean, std**2) (Box-Muller)."""
    _launch(device, "normal", None, addr, None, n, mean, std, seed, offset, dtype)


def philox_words(seed: int, offset: int, n: int):
    """The first n uint32 words the kernel draws for (seed, offset), computed on the host (numpy,
    the same Philox4x32-10 as templates/elementwise_rng.comp): word i is element i's."""
    import numpy as np  # lazy: numpy only for the host reference: importing the kernels loads no numpy

    m32 = np.uint64(0xFFFFFFFF)
    t = np.arange((n + 3) // 4, dtype=np.uint64)
    zero = np.zeros_like(t)
    c = [t, zero, zero + np.uint64(offset & 0xFFFFFFFF), zero + np.uint64((offset >> 32) & 0xFFFFFFFF)]
    for r in range(10):  # each round's key: the seed plus r times the Weyl increments
        k0 = np.uint64((seed + r * 0x9E3779B9) & 0xFFFFFFFF)
        k1 = np.uint64(((seed >> 32) + r * 0xBB67AE85) & 0xFFFFFFFF)
        p0, p1 = np.uint64(0xD2511F53) * c[0], np.uint64(0xCD9E8D57) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & m32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & m32]
    return np.stack(c, axis=1).reshape(-1)[:n].astype(np.uint32)
