"""mm, bmm, addmm, baddbmm, ... on tvk_kernels.kernels.matmul (strided views, no copies)."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import matmul as matmul_kernels

from ..op_registry import register
from .._repeat import mark, offer
from ._util import DTYPE_NAME, addr, dev, empty
from .copies import contig, fill
from .elementwise import add_into, axpby_into

aten = torch.ops.aten


def _check(op, *ts):
    d = ts[0].dtype
    if any(t.dtype != d for t in ts):  # torch's meta kernels let this through, its CPU ones do not
        raise RuntimeError(f"{op}: expected operands to have the same dtype, but got "
                           f"{', '.join(str(x.dtype) for x in ts)}; convert one with .to(dtype)")
    for t in ts:
        if t.dtype not in DTYPE_NAME:
            # NotImplementedError, as for any op without a kernel: `a @ b` turns a TypeError into
            # Python's bare "unsupported operand type(s) for @"
            raise NotImplementedError(f"TorchVK: {op} has no Vulkan kernel for {t.dtype} operands (float32, float16 "
                                      f"and bfloat16 only); convert with .float() first")


def _fix_neg(t):
    if any(s < 0 for s in t.stride()):
        return contig(t)
    return t


def _check_fits(a, b, out, bias, batch, M, N, K):
    """The kernel reads a [batch, M, K], b [batch, K, N] and bias [N], and writes out [batch, M, N]:
    operands of other shapes would be read or written past their ends (torch's argument checks in
    _checks.py refuse such calls first; this guards the kernel against a caller that skips them)."""
    lead = () if a.dim() == 2 else (batch,)
    if tuple(b.shape) != lead + (K, N) or tuple(out.shape) != lead + (M, N) or b.dim() != a.dim() or \
            (bias is not None and tuple(bias.shape) != (N,)):
        raise RuntimeError(f"TorchVK: matmul operands do not fit: {list(a.shape)} @ {list(b.shape)} -> "
                           f"{list(out.shape)}" + (f" + bias {list(bias.shape)}" if bias is not None else ""))


def gemm(a, b, out, *, bias=None, alpha=1.0, activation=None, fresh=False):
    """out[b] = act(alpha * a[b] @ b[b] + bias); a [B, M, K] or [M, K], b likewise, out [B, M, N] / [M, N].
    fresh: out is a new contiguous tensor the caller returns (then a repeat of the call is offered)."""
    a, b = _fix_neg(a), _fix_neg(b)
    if a.dim() == 2:
        M, K = a.shape
        N = b.shape[1]
        batch = 1
        sa = (0, a.stride(0), a.stride(1))
        sb = (0, b.stride(0), b.stride(1))
        so = (0, out.stride(0), out.stride(1))
    else:
        batch, M, K = a.shape
        N = b.shape[2]
        sa, sb, so = tuple(a.stride()), tuple(b.stride()), tuple(out.stride())
    _check_fits(a, b, out, bias, batch, M, N, K)
    if M * N * batch == 0:
        return out
    if K == 0:
        fill(out, 0)
        if bias is not None:
            add_into(out, bias)
        return out
    shape = _Shape(dev(a), M, N, K, dict(batch=batch, a_strides=sa, b_strides=sb, out_strides=so, activation=activation,
                                         alpha=float(alpha), dtype=DTYPE_NAME[a.dtype]))
    begun = mark() if fresh else None
    shape.launch(a, b, bias, out)
    if begun is not None:
        offer(begun, out, (a, b) if bias is None else (a, b, bias), _Again(shape, list(out.shape), out.dtype))
    return out


class _Shape:
    """One GEMM's geometry and settings: everything of a launch but the addresses."""

    __slots__ = ("device", "M", "N", "K", "settings")

    def __init__(self, device, M, N, K, settings):
        self.device, self.M, self.N, self.K, self.settings = device, M, N, K, settings

    def launch(self, a, b, bias, out):
        matmul_kernels.matmul(self.device, a.tvk_address, b.tvk_address, out.tvk_address, self.M, self.N, self.K,
                              bias_addr=0 if bias is None else bias.tvk_address, **self.settings)


class _Again:
    """A GEMM call's repeat (torchvk/_repeat.py): a new output, the same launch on new operands."""

    __slots__ = ("shape", "size", "dtype")

    def __init__(self, shape, size, dtype):
        self.shape, self.size, self.dtype = shape, size, dtype

    def __call__(self, operands):
        out = empty(self.size, self.dtype, self.shape.device)
        self.shape.launch(operands[0], operands[1], operands[2] if len(operands) == 3 else None, out)
        return out


@register(aten.mm.default)
def mm(self, mat2):
    _check("aten.mm", self, mat2)
    out = empty((self.shape[0], mat2.shape[1]), self.dtype, dev(self))
    return gemm(self, mat2, out, fresh=True)


@register(aten.mm.out)
def mm_out(self, mat2, *, out):
    _check("aten.mm", self, mat2)
    return gemm(self, mat2, out)


@register(aten.bmm.default)
def bmm(self, mat2):
    _check("aten.bmm", self, mat2)
    out = empty((self.shape[0], self.shape[1], mat2.shape[2]), self.dtype, dev(self))
    return gemm(self, mat2, out, fresh=True)


def bias_row(bias, N):
    """bias as an N-vector the kernel can add per column, or None."""
    if bias.dim() == 1 and bias.shape[0] == N and (bias.stride(0) == 1 or N == 1):
        return bias
    if bias.dim() == 2 and bias.shape[1] == N and (bias.shape[0] == 1 or bias.stride(0) == 0) and \
            (bias.stride(1) == 1 or N == 1):
        return bias[0]
    return None


@register(aten.addmm.default)
def addmm(self, mat1, mat2, *, beta=1, alpha=1):
    _check("aten.addmm", mat1, mat2)
    M, N = mat1.shape[0], mat2.shape[1]
    out = empty((M, N), mat1.dtype, dev(mat1))
    row = bias_row(self, N) if beta == 1 and self.dtype == mat1.dtype else None
    if row is not None:
        return gemm(mat1, mat2, out, bias=row, alpha=alpha, fresh=True)
    gemm(mat1, mat2, out, alpha=alpha)
    return axpby_into(out, self, 1.0, beta)


@register(aten.baddbmm.default)
def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
    _check("aten.baddbmm", batch1, batch2)
    B, M, N = batch1.shape[0], batch1.shape[1], batch2.shape[2]
    out = empty((B, M, N), batch1.dtype, dev(batch1))
    gemm(batch1, batch2, out, alpha=alpha)
    if beta == 0:
        return out
    return axpby_into(out, self, 1.0, beta)


@register(aten.mv.default)
def mv(self, vec):
    _check("aten.mv", self, vec)
    out = empty((self.shape[0], 1), self.dtype, dev(self))
    gemm(self, vec.unsqueeze(1), out)
    return out.view(self.shape[0])


@register(aten.dot.default)
def dot(self, other):
    _check("aten.dot", self, other)
    out = empty((1, 1), self.dtype, dev(self))
    gemm(self.unsqueeze(0), other.unsqueeze(1), out)
    return out.view(())
