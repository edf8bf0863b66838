"""2-D pooling over NCHW (templates/pool.comp): max (with int64 indices), avg, adaptive avg,
forward and backward. `dtype` (every entry point): the planes' storage, float32 or float16/bfloat16
where the device has 16-bit storage (float32 arithmetic, each output rounded once).

Backward kernels run one invocation per *input* element and gather over the output windows
that cover it, so they are race-free for overlapping windows (kernel 3, stride 2) and need no
zero-filled output or atomics. Max-pool indices follow torch: the flat index ih*W + iw
within each (n, c) plane, int64.

Buffers are plain byte addresses (ints, or anything with `.address`); shapes are tuples.
Search space: tuning/pool.json.
"""
from __future__ import annotations

import struct

from . import dtypes
from .conv_geometry import pair
from .launch import Family, address, family, grid_1d, positive
from ..errors import InvalidConfigError
from ..search_space import candidates as space_candidates

OPS = {"max_fwd": 1, "max_bwd": 2, "avg_fwd": 3, "avg_bwd": 4, "adaptive_fwd": 5, "adaptive_bwd": 6}
_PUSH = struct.Struct("<3Q14If")  # src dst idx; planes h w oh; ow kh kw sh; sw ph pw dh; dw flags; divisor
_WRITE_IDX, _INCLUDE_PAD, _DIVISOR = 1, 2, 4


class Pool(Family):
    family = "pool"
    template = "pool.comp"

    def check_config(self, params: dict) -> dict:
        return positive(self.family, params, "WG", "ITEMS")


def defines(op: str, params: dict, dtype: str = "float32") -> dict:
    """The template's defines for one op and parameter set (the runtime's and the tuner's); DTYPE only
    for 16-bit storage."""
    return {"OP": OPS[op], "ITEMS": params["ITEMS"], **dtypes.storage_define(dtype)}


def candidates(device, max_count: int | None = None) -> list[dict]:
    """Every valid parameter set of tuning/pool.json on `device` (for the autotuner)."""
    return space_candidates(Pool.family, device.facts, max_count)


# ------------------------------------------------------------------ shapes
def _out_size(size, k, s, p, d, ceil_mode):
    eff = d * (k - 1) + 1
    num = size + 2 * p - eff + ((s - 1) if ceil_mode else 0)
    out = num // s + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window must start inside the image or left padding
        out -= 1
    return out


def pool2d_output_shape(x_shape, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False) -> tuple:
    """(N, C, OH, OW) of max_pool2d / avg_pool2d, torch's formula (stride defaults to kernel_size)."""
    n, c, h, w = (int(v) for v in x_shape)
    kh, kw = pair(kernel_size, "kernel_size")
    sh, sw = pair(kernel_size if stride is None or stride == () else stride, "stride")
    ph, pw = pair(padding, "padding")
    dh, dw = pair(dilation, "dilation")
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise ValueError("kernel_size, stride and dilation must be >= 1, padding >= 0")
    if 2 * ph > dh * (kh - 1) + 1 or 2 * pw > dw * (kw - 1) + 1:
        raise ValueError(f"padding {padding} should be at most half of the effective kernel size")
    oh, ow = _out_size(h, kh, sh, ph, dh, ceil_mode), _out_size(w, kw, sw, pw, dw, ceil_mode)
    if oh < 1 or ow < 1:
        raise ValueError(f"pooling output of input {tuple(x_shape)} would be {oh}x{ow}")
    return (n, c, oh, ow)


def _geometry(x_shape, kernel_size, stride, padding, dilation, ceil_mode):
    out = pool2d_output_shape(x_shape, kernel_size, stride, padding, dilation, ceil_mode)
    kh, kw = pair(kernel_size, "kernel_size")
    sh, sw = pair(kernel_size if stride is None or stride == () else stride, "stride")
    ph, pw = pair(padding, "padding")
    dh, dw = pair(dilation, "dilation")
    return out, (kh, kw, sh, sw, ph, pw, dh, dw)


def _launch(device, op, src, dst, idx, x_shape, out_shape, win, flags=0, divisor=0.0, params=None, dtype="float32"):
    dtypes.check_storage(device, dtype, "pool")
    n, c, h, w = (int(v) for v in x_shape)
    oh, ow = int(out_shape[2]), int(out_shape[3])
    planes = n * c
    elems = planes * (oh * ow if op.endswith("fwd") else h * w)
    if elems == 0:
        return
    if max(elems, planes * h * w) >= 1 << 32:
        raise ValueError("pooling over more than 2^32 elements is not supported; split the batch")
    fam = family(device, Pool)
    params = fam.resolve({"dir": "fwd" if op.endswith("fwd") else "bwd", "n": elems, "window": win[0] * win[1]}, params)
    pipe = fam.variant(defines(op, params, dtype), params["WG"], _PUSH.size)
    per_group = params["WG"] * params["ITEMS"]
    groups = grid_1d(-(-elems // per_group), device.facts.max_workgroup_count[0])
    push = _PUSH.pack(address(src), address(dst), address(idx), planes, h, w, oh, ow, *win, flags, float(divisor))
    device.stream.dispatch(pipe, groups, push, f"pool_{op}")


# ------------------------------------------------------------------ public API
def max_pool2d(device, x_addr, out_addr, idx_addr, x_shape, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode=False, params=None, dtype="float32") -> tuple:
    """out, indices = max_pool2d(x). `idx_addr` (int64, out shape) may be None to skip the indices.
    Returns the output shape."""
    out, win = _geometry(x_shape, kernel_size, stride, padding, dilation, ceil_mode)
    idx = address(idx_addr)
    if idx & 7:
        raise ValueError("max_pool2d indices must be 8-byte aligned (int64)")
    _launch(device, "max_fwd", x_addr, out_addr, idx, x_shape, out, win, _WRITE_IDX if idx else 0, params=params,
            dtype=dtype)
    return out


def max_pool2d_backward(device, grad_out_addr, idx_addr, grad_in_addr, x_shape, kernel_size, stride=None, padding=0,
                        dilation=1, ceil_mode=False, params=None, dtype="float32") -> tuple:
    """grad_in (x_shape) from grad_out and the forward's indices. Returns x_shape."""
    out, win = _geometry(x_shape, kernel_size, stride, padding, dilation, ceil_mode)
    idx = address(idx_addr)
    if not idx or idx & 7:
        raise ValueError("max_pool2d_backward needs the forward's int64 indices (8-byte aligned)")
    _launch(device, "max_bwd", grad_out_addr, grad_in_addr, idx, x_shape, out, win, params=params, dtype=dtype)
    return tuple(int(v) for v in x_shape)


def _avg_flags(count_include_pad, divisor_override):
    flags = _INCLUDE_PAD if count_include_pad else 0
    if divisor_override:
        flags |= _DIVISOR
    return flags, float(divisor_override or 0.0)


def avg_pool2d(device, x_addr, out_addr, x_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None, params=None, dtype="float32") -> tuple:
    """out = avg_pool2d(x) with torch's semantics. Returns the output shape."""
    out, win = _geometry(x_shape, kernel_size, stride, padding, 1, ceil_mode)
    flags, div = _avg_flags(count_include_pad, divisor_override)
    _launch(device, "avg_fwd", x_addr, out_addr, 0, x_shape, out, win, flags, div, params, dtype)
    return out


def avg_pool2d_backward(device, grad_out_addr, grad_in_addr, x_shape, kernel_size, stride=None, padding=0,
                        ceil_mode=False, count_include_pad=True, divisor_override=None, params=None,
                        dtype="float32") -> tuple:
    """grad_in (x_shape) of avg_pool2d. Returns x_shape."""
    out, win = _geometry(x_shape, kernel_size, stride, padding, 1, ceil_mode)
    flags, div = _avg_flags(count_include_pad, divisor_override)
    _launch(device, "avg_bwd", grad_out_addr, grad_in_addr, 0, x_shape, out, win, flags, div, params, dtype)
    return tuple(int(v) for v in x_shape)


def adaptive_output_shape(x_shape, output_size) -> tuple:
    n, c, h, w = (int(v) for v in x_shape)
    if isinstance(output_size, int):
        oh = ow = output_size
    else:
        t = tuple(output_size)
        t = t * 2 if len(t) == 1 else t
        if len(t) != 2:
            raise ValueError(f"output_size must be an int or a pair, got {output_size!r}")
        oh, ow = (h if t[0] is None else int(t[0])), (w if t[1] is None else int(t[1]))
    if oh < 1 or ow < 1:
        raise ValueError(f"adaptive pooling output size must be >= 1, got {output_size}")
    if h < 1 or w < 1:
        raise ValueError(f"adaptive pooling needs a non-empty plane, got input {tuple(x_shape)}")
    return (n, c, oh, ow)


def adaptive_avg_pool2d(device, x_addr, out_addr, x_shape, output_size, params=None, dtype="float32") -> tuple:
    """out = adaptive_avg_pool2d(x, output_size) (None in output_size keeps that dim). Returns the output shape."""
    out = adaptive_output_shape(x_shape, output_size)
    _launch(device, "adaptive_fwd", x_addr, out_addr, 0, x_shape, out, (1, 1, 1, 1, 0, 0, 1, 1), params=params,
            dtype=dtype)
    return out


def adaptive_avg_pool2d_backward(device, grad_out_addr, grad_in_addr, x_shape, output_size, params=None,
                                 dtype="float32") -> tuple:
    """grad_in (x_shape) of adaptive_avg_pool2d. Returns x_shape."""
    out = adaptive_output_shape(x_shape, output_size)
    _launch(device, "adaptive_bwd", grad_out_addr, grad_in_addr, 0, x_shape, out, (1, 1, 1, 1, 0, 0, 1, 1),
            params=params, dtype=dtype)
    return tuple(int(v) for v in x_shape)


__all__ = ["max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward", "adaptive_avg_pool2d",
           "adaptive_avg_pool2d_backward", "pool2d_output_shape", "adaptive_output_shape", "candidates",
           "InvalidConfigError"]
