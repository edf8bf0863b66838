"""The arguments both conv kernels read the same way: the implicit GEMM (conv.py) and the direct
depthwise kernels (conv_depthwise.py) take the geometry dict `g` built here from the shapes and
int-or-pair arguments, check a forced split count alike, and name their storage with the same
defines. A module of its own, so that conv.py
routes depthwise convs to conv_depthwise.py without either importing the other's internals.
"""
from __future__ import annotations

import math

from . import dtypes


# ------------------------------------------------------------------ shapes
def pair(v, name: str) -> tuple[int, int]:
    """(a, b) from a conv/pool argument given as an int or a 1- or 2-sequence."""
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(e) for e in v)
    if len(t) == 1:
        return (t[0], t[0])
    if len(t) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {v!r}")
    return t


def conv2d_output_shape(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1) -> tuple:
    """(N, OC, OH, OW) of conv2d(x, w); raises ValueError on inconsistent shapes."""
    n, c, h, w = (int(v) for v in x_shape)
    oc, icg, kh, kw = (int(v) for v in w_shape)
    sh, sw = pair(stride, "stride")
    ph, pw = pair(padding, "padding")
    dh, dw = pair(dilation, "dilation")
    if groups < 1 or c % groups or oc % groups:
        raise ValueError(f"groups={groups} must divide in_channels={c} and out_channels={oc}")
    if icg != c // groups:
        raise ValueError(f"weight {tuple(w_shape)} expects {icg * groups} input channels, input has {c}")
    if min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise ValueError("stride and dilation must be >= 1, padding >= 0")
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"input {tuple(x_shape)} is smaller than the dilated kernel {kh}x{kw} (padding {padding})")
    return (n, oc, oh, ow)


def geometry(x_shape, w_shape, stride, padding, dilation, groups, out_hw=None):
    """The kernels' geometry; `out_hw` (oh, ow) cuts the output to fewer rows/columns than the
    shapes give: a transposed conv whose output_padding >= stride has one output row the
    matching conv would compute but the transposed conv's input lacks."""
    out = conv2d_output_shape(x_shape, w_shape, stride, padding, dilation, groups)
    if out_hw is not None:
        oh, ow = (int(v) for v in out_hw)
        if not (1 <= oh <= out[2] and 1 <= ow <= out[3]):
            raise ValueError(f"out_hw {tuple(out_hw)} must lie within the conv's output size {out[2:]}")
        out = out[:2] + (oh, ow)
    n, c, h, w = (int(v) for v in x_shape)
    oc, icg, kh, kw = (int(v) for v in w_shape)
    sh, sw = pair(stride, "stride")
    ph, pw = pair(padding, "padding")
    dh, dw = pair(dilation, "dilation")
    if max(n * c * h * w, math.prod(out), oc * icg * kh * kw) >= 1 << 31:
        raise ValueError("conv2d kernels index with 32-bit ints: split the batch so every tensor has < 2^31 elements")
    return dict(n=n, ic=c, h=h, w=w, oc=oc, oh=out[2], ow=out[3], groups=int(groups), kh=kh, kw=kw,
                sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw), out


# ------------------------------------------------------------------ split-K
def checked_split_k(split_k) -> int:
    """A forced split count (split_k=): a positive int."""
    if not isinstance(split_k, int) or split_k < 1:
        raise ValueError(f"split_k must be a positive int, got {split_k!r}")
    return split_k


# ------------------------------------------------------------------ storage
def storage_defines(dtype: str, partials: bool = False) -> dict:
    """DTYPE (dtypes.storage_define) and, where a 16-bit conv's output is float32 split-K partials
    (summed and rounded by conv2d_reduce.comp), C_F32."""
    return {**dtypes.storage_define(dtype), **({"C_F32": 1} if partials and dtype != "float32" else {})}
