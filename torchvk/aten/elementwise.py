"""Pointwise ops on tvk_kernels.kernels.elementwise: N-d strided, broadcasting, mixed dtypes.

Type promotion follows torch (torch._prims_common.elementwise_dtypes on dtype-only
stand-ins, cached); the kernel computes in float when any input is floating, else in
int64/int32, and casts to the output dtype. 0-dim CPU tensors and Python numbers go in
as push-constant scalars.
"""
from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as _KIND, elementwise_dtypes as _edt

from tvk_kernels.kernels import activations
from tvk_kernels.kernels import elementwise as E

from .._glue import register
from .._storage import alloc_storage, check_dtype
from .._tensor import TVKTensor, new_tensor
from ._layout import result_strides
from ._util import operand
from .copies import clone

aten = torch.ops.aten
DEFAULT, INT_TO_FLOAT, ALWAYS_BOOL = _KIND.DEFAULT, _KIND.INT_TO_FLOAT, _KIND.ALWAYS_BOOL


def _value(x):
    """tvk tensor -> itself; CPU 0-dim tensor -> Python number; number -> number."""
    if isinstance(x, TVKTensor):
        return x
    if isinstance(x, torch.Tensor):
        return x.item()
    return x


def _kernel_arg(x):
    return operand(x) if isinstance(x, TVKTensor) else x


_promo_cache: dict = {}


def _key(x):
    if isinstance(x, torch.Tensor):
        return (x.dtype, x.dim() == 0)
    return type(x)


def promote(args, kind=DEFAULT):
    """torch's result dtype of an elementwise op over args (tensors or numbers)."""
    key = (kind,) + tuple(_key(x) for x in args)
    r = _promo_cache.get(key)
    if r is None:
        stand = []
        for x in args:
            if isinstance(x, torch.Tensor):
                stand.append(torch.empty(() if x.dim() == 0 else (1,), dtype=x.dtype, device="meta"))
            else:
                stand.append(x)
        r = _promo_cache[key] = _edt(*stand, type_promotion_kind=kind)[1]
    return r


def _shape(args):
    shapes = [tuple(x.shape) for x in args if isinstance(x, TVKTensor)]
    if not shapes:
        return ()
    first = shapes[0]
    if all(s == first for s in shapes):  # the common case; torch.broadcast_shapes costs ~60 us
        return first
    return E.broadcast_shapes(*shapes)


def _device(args):
    for x in args:
        if isinstance(x, TVKTensor):
            return x._tvk.device
    raise RuntimeError("no tvk tensor among the operands")


def run(kop, args, *, out=None, dtype=None, kind=DEFAULT, scalars=(), compute=None, contiguous=False):
    """out = kop(*args) (new tensor of the promoted dtype unless out/dtype given), laid out as torch
    lays out the op's result: like its inputs (aten/_layout.py), or contiguous where torch's op is."""
    if out is None:
        key = (kop, dtype, kind, compute, len(scalars), contiguous) + tuple(map(_signature, args))
        launch = _launches.get(key)
        if launch is not None:
            return launch(args, scalars)
    vals = [_value(a) for a in args]
    fresh = out is None
    if fresh:
        if dtype is None:
            dtype = promote(args, kind)
        check_dtype(dtype, "aten." + kop)
        shape = _shape(vals)
        layout = None if contiguous else result_strides(shape, [v for v in vals if type(v) is TVKTensor])
        out = new_tensor(shape, dtype, _device(vals), stride=layout)
    if out.numel() == 0:
        return out
    device = _device(vals)
    inputs, out_op = tuple(_kernel_arg(v) for v in vals), operand(out)
    if fresh and len(_launches) < _MAX_LAUNCHES:
        fam, plan = E.planned(device, kop, inputs, out_op, compute)
        _launches[key] = _Launch(kop, device, fam, plan, out)
    E.elementwise(device, kop, inputs, out_op, scalars, compute)
    return out


# ------------------------------------------------------------------ the eager fast path
# An eager op repeats with the same operand geometry: everything run() works out from the
# geometry (result dtype and shape, the kernel plan) is kept per signature, and a repeated call
# allocates the output and records the kernel. A new geometry, dtype or scalar type is a miss
# that takes the full path above (with its checks) once. Design note 23.
_launches: dict = {}
_MAX_LAUNCHES = 4096  # a model's distinct eager geometries; a miss beyond it just takes the full path


def _signature(x):
    t = type(x)
    if t is TVKTensor:
        return x.shape, x.stride(), x.dtype, x._tvk.device
    if isinstance(x, torch.Tensor):  # a CPU scalar tensor, pushed as a number
        return x.device.type, x.dim(), x.dtype
    return t  # a Python number: its type decides the promotion, its value is pushed


class _Launch:
    __slots__ = ("kop", "device", "fam", "plan", "shape", "stride", "dtype", "nbytes")

    def __init__(self, kop, device, fam, plan, out):
        self.kop, self.device, self.fam, self.plan = kop, device, fam, plan
        self.shape, self.stride, self.dtype = list(out.shape), list(out.stride()), out.dtype
        self.nbytes = out._tvk.nbytes

    def __call__(self, args, scalars):
        out = TVKTensor(alloc_storage(self.nbytes, self.device), self.shape, self.stride, 0, self.dtype)
        addrs, numbers = [], []
        for a in args:
            if type(a) is TVKTensor:
                addrs.append(a.tvk_address)
            else:
                numbers.append(a.item() if isinstance(a, torch.Tensor) else a)
        addrs.append(out.tvk_address)
        E.launch(self.device, self.fam, self.plan, self.kop, addrs, scalars, numbers)
        return out


def run_(kop, self, args, *, kind=DEFAULT, scalars=(), compute=None, opname=""):
    """In place into self (self is the first operand unless args says otherwise)."""
    dtype = promote(args, kind)
    if not _can_cast(dtype, self.dtype):
        raise RuntimeError(f"result type {str(dtype).replace('torch.', '').capitalize()} can't be cast to the "
                           f"desired output type {str(self.dtype).replace('torch.', '').capitalize()} ({opname})")
    shape = _shape([_value(a) for a in args])
    if tuple(torch.broadcast_shapes(shape, tuple(self.shape))) != tuple(self.shape):
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(shape)}")
    return run(kop, args, out=self, scalars=scalars, compute=compute)


def _can_cast(src, dst) -> bool:
    return torch.can_cast(src, dst)


# ------------------------------------------------------------------ helpers for other modules
def add_into(out, other, alpha=1.0):
    return run("add", (out, other), out=out, scalars=(alpha,))


def axpby_into(out, other, a=1.0, b=1.0):
    """out = a * out + b * other (other broadcasts)."""
    if a != 1.0:
        run("mul", (out, a), out=out)
    return run("add", (out, other), out=out, scalars=(b,))


def ew(kop, *args, dtype=None, kind=DEFAULT, scalars=()):
    return run(kop, args, dtype=dtype, kind=kind, scalars=scalars)


# ------------------------------------------------------------------ binary arithmetic
@register(aten.add.Tensor, aten.add.Scalar)
def add(self, other, *, alpha=1):
    return run("add", (self, other), scalars=(alpha,))


@register(aten.add_.Tensor, aten.add_.Scalar)
def add_(self, other, *, alpha=1):
    return run_("add", self, (self, other), scalars=(alpha,), opname="add_")


@register(aten.sub.Tensor, aten.sub.Scalar)
def sub(self, other, *, alpha=1):
    if self.dtype == torch.bool if isinstance(self, torch.Tensor) else False:
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported.")
    return run("sub", (self, other), scalars=(alpha,))


@register(aten.sub_.Tensor, aten.sub_.Scalar)
def sub_(self, other, *, alpha=1):
    return run_("sub", self, (self, other), scalars=(alpha,), opname="sub_")


@register(aten.rsub.Tensor, aten.rsub.Scalar)
def rsub(self, other, *, alpha=1):
    return run("sub", (other, self), scalars=(alpha,)) if isinstance(other, TVKTensor) else \
        run("sub", (_as_scalar_operand(other), self), scalars=(alpha,))


def _as_scalar_operand(x):
    return x.item() if isinstance(x, torch.Tensor) else x


@register(aten.mul.Tensor, aten.mul.Scalar)
def mul(self, other):
    return run("mul", (self, other))


@register(aten.mul_.Tensor, aten.mul_.Scalar)
def mul_(self, other):
    return run_("mul", self, (self, other), opname="mul_")


@register(aten.div.Tensor, aten.div.Scalar)
def div(self, other):
    return run("div", (self, other), kind=INT_TO_FLOAT)


@register(aten.div_.Tensor, aten.div_.Scalar)
def div_(self, other):
    return run_("div", self, (self, other), kind=INT_TO_FLOAT, opname="div_")


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(self, other, *, rounding_mode=None):
    if rounding_mode is None:
        return div(self, other)
    if rounding_mode not in ("floor", "trunc"):
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                         f"'{rounding_mode}'")
    return _int_division("floor_divide" if rounding_mode == "floor" else "trunc_divide", self, other)


@register(aten.maximum.default)
def maximum(self, other):
    return run("maximum", (self, other))


@register(aten.minimum.default)
def minimum(self, other):
    return run("minimum", (self, other))


@register(aten.pow.Tensor_Scalar)
def pow_ts(self, exponent):
    if exponent == 2:
        return run("square", (self,), dtype=promote((self, exponent)))
    if exponent == 1:
        return clone(self)
    if exponent == 0.5:
        return run("sqrt", (self,), dtype=promote((self, exponent)))
    return run("pow_scalar", (self,), dtype=promote((self, exponent)), scalars=(exponent,))


@register(aten.pow_.Scalar)
def pow_ts_(self, exponent):
    return run("pow_scalar", (self,), out=self, scalars=(exponent,))


@register(aten.pow.Scalar)
def pow_st(self, exponent):
    return run("rpow_scalar", (exponent,), dtype=promote((self, exponent)), scalars=(self,))


@register(aten.pow.Tensor_Tensor)
def pow_tt(self, exponent):
    return run("pow", (self, exponent))


# ------------------------------------------------------------------ unary
def _unary(kop, kind=DEFAULT):
    def impl(self):
        return run(kop, (self,), kind=kind)

    def impl_(self):
        return run_(kop, self, (self,), kind=kind, opname=kop + "_")

    return impl, impl_


for _name, _kop, _kind in [("neg", "neg", DEFAULT), ("abs", "abs", DEFAULT), ("exp", "exp", INT_TO_FLOAT),
                           ("log", "log", INT_TO_FLOAT), ("sqrt", "sqrt", INT_TO_FLOAT),
                           ("rsqrt", "rsqrt", INT_TO_FLOAT), ("reciprocal", "reciprocal", INT_TO_FLOAT)]:
    _f, _f_ = _unary(_kop, _kind)
    register(getattr(aten, _name).default)(_f)
    if hasattr(aten, _name + "_"):
        register(getattr(aten, _name + "_").default)(_f_)


@register(aten.square.default)
def square(self):
    return run("square", (self,), dtype=promote((self, 2)))


# ------------------------------------------------------------------ activations: from their table
# Every activation of tvk_kernels/kernels/activations.py with an aten op registers that op, its
# in-place form and its backward where torch has them (relu's backward is threshold_backward).
# Entries sharing an aten op (gelu and gelu_tanh) share the registration: select() picks one per call.
def _activation_forward(name):
    def forward(self, **kwargs):
        act = activations.select(name, kwargs)
        if act.ints == "refuse":
            require_floating(name, self)
        elif act.ints == "keep" and self.dtype == torch.bool:  # as torch on every device
            raise RuntimeError(f"Boolean inputs not supported for {name}")
        return run(act.name, (self,), kind=INT_TO_FLOAT if act.ints == "float" else DEFAULT)

    return forward


def _activation_inplace(name):
    def forward_(self, **kwargs):
        act = activations.select(name, kwargs)
        if act.ints == "refuse":
            require_floating(name + "_", self)
        elif act.ints == "keep" and self.dtype == torch.bool:
            raise RuntimeError(f"Boolean inputs not supported for {name}")
        return run_(act.name, self, (self,), kind=INT_TO_FLOAT if act.ints == "float" else DEFAULT,
                    opname=name + "_")

    return forward_


def _activation_backward(name):
    def backward(grad_output, self_or_output, **kwargs):
        return run(activations.select(name, kwargs).name + "_backward", (grad_output, self_or_output))

    return backward


def _register_activation(act):
    if act.aten is None:
        return
    register(getattr(aten, act.aten).default)(_activation_forward(act.aten))
    inplace = getattr(aten, act.aten + "_", None)
    if inplace is not None:
        register(inplace.default)(_activation_inplace(act.aten))
    backward = getattr(aten, act.aten + "_backward", None)
    if act.grad and backward is not None:
        register(backward.default)(_activation_backward(act.aten))


activations.each(_register_activation)  # the table's entries now, and any added later


@register(aten.threshold_backward.default)
def threshold_backward(grad_output, self, threshold):
    return run("threshold_backward", (grad_output, self), dtype=grad_output.dtype, scalars=(threshold,))


@register(aten.leaky_relu.default)
def leaky_relu(self, negative_slope=0.01):
    return run("leaky_relu", (self,), dtype=self.dtype, scalars=(negative_slope,))


@register(aten.leaky_relu_.default)
def leaky_relu_(self, negative_slope=0.01):
    return run("leaky_relu", (self,), out=self, scalars=(negative_slope,))


@register(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    return run("leaky_relu_backward", (grad_output, self), dtype=grad_output.dtype, scalars=(negative_slope,))


def _clamp_args(self, lo, hi):
    return (None if lo is None else _as_scalar_operand(lo)), (None if hi is None else _as_scalar_operand(hi))


@register(aten.clamp.default)
def clamp(self, min=None, max=None):
    lo, hi = _clamp_args(self, min, max)
    args = (self,) + tuple(x for x in (lo, hi) if x is not None)
    return run("clamp", (self,), dtype=promote(args), scalars=(lo, hi))


@register(aten.clamp_.default)
def clamp_(self, min=None, max=None):
    lo, hi = _clamp_args(self, min, max)
    return run("clamp", (self,), out=self, scalars=(lo, hi))


@register(aten.clamp_min.default)
def clamp_min(self, min):
    return clamp(self, min, None)


@register(aten.clamp_max.default)
def clamp_max(self, max):
    return clamp(self, None, max)


@register(aten.clamp_min_.default)
def clamp_min_(self, min):
    return clamp_(self, min, None)


@register(aten.clamp_max_.default)
def clamp_max_(self, max):
    return clamp_(self, None, max)


@register(aten.clamp.Tensor)
def clamp_t(self, min=None, max=None):
    out = self
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out if out is not self else run("copy", (self,), dtype=self.dtype)


@register(aten.hardtanh.default)
def hardtanh(self, min_val=-1, max_val=1):
    return run("clamp", (self,), dtype=self.dtype, scalars=(min_val, max_val))


@register(aten.hardtanh_backward.default)
def hardtanh_backward(grad_output, self, min_val, max_val):
    inside = logical_and(gt(self, min_val), lt(self, max_val))
    return where(inside, grad_output, 0.0)


@register(aten.sign.default, aten.sgn.default)
def sign(self):
    return run("sub", (gt(self, 0), lt(self, 0)), dtype=self.dtype, compute="int32" if not self.dtype.is_floating_point else None) \
        if self.dtype != torch.bool else run("copy", (self,), dtype=torch.bool)


# ------------------------------------------------------------------ comparisons and logic
def _cmp(kop):
    """Registers aten.<kop> and aten.<kop>_ (Tensor and Scalar overloads); returns the out-of-place one."""
    def impl(self, other):
        return run(kop, (self, other), dtype=torch.bool)

    def impl_(self, other):
        return run(kop, (self, other), out=self)

    register(getattr(aten, kop).Tensor, getattr(aten, kop).Scalar)(impl)
    register(getattr(aten, kop + "_").Tensor, getattr(aten, kop + "_").Scalar)(impl_)
    return impl


eq, ne, lt, le, gt, ge = (_cmp(_name) for _name in ("eq", "ne", "lt", "le", "gt", "ge"))


@register(aten.logical_not.default)
def logical_not(self):
    return run("eq", (self, 0), dtype=torch.bool)


@register(aten.logical_and.default)
def logical_and(self, other):
    return run("mul", (ne(self, 0) if self.dtype != torch.bool else self,
                       ne(other, 0) if isinstance(other, TVKTensor) and other.dtype != torch.bool else other),
               dtype=torch.bool, compute="int32")


@register(aten.logical_or.default)
def logical_or(self, other):
    return run("maximum", (ne(self, 0) if self.dtype != torch.bool else self,
                           ne(other, 0) if isinstance(other, TVKTensor) and other.dtype != torch.bool else other),
               dtype=torch.bool, compute="int32")


_INTS = (torch.int32, torch.int64)


def _bitwise(name, self, other=None):
    """An integer bitwise op (the kernel's compute type is the promoted integer type). Floats are
    refused with torch's exception type, NotImplementedError."""
    args = (self,) if other is None else (self, other)
    dtype = promote(args)
    if dtype not in _INTS or any(isinstance(a, torch.Tensor) and a.dtype not in _INTS + (torch.bool,) for a in args):
        dtypes = ", ".join(str(a.dtype) if isinstance(a, torch.Tensor) else type(a).__name__ for a in args)
        raise NotImplementedError(f"TorchVK has no Vulkan implementation of aten.{name} for {dtypes} (int32 and "
                                  f"int64 tensors, or bool ones); compute it on the CPU (.cpu())")
    return run(name, args, dtype=dtype)


# NotImplementedError, not TypeError, for what is missing: Tensor.__and__ turns a TypeError into
# NotImplemented, and the user would see Python's generic message instead of this one.
@register(aten.bitwise_not.default)
def bitwise_not(self):
    if self.dtype == torch.bool:
        return logical_not(self)
    return _bitwise("bitwise_not", self)


def _bool_pair(self, other):
    return self.dtype == torch.bool and (other.dtype == torch.bool if isinstance(other, torch.Tensor)
                                         else isinstance(other, bool))


@register(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar)
def bitwise_and(self, other):
    return logical_and(self, other) if _bool_pair(self, other) else _bitwise("bitwise_and", self, other)


@register(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar)
def bitwise_or(self, other):
    return logical_or(self, other) if _bool_pair(self, other) else _bitwise("bitwise_or", self, other)


@register(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar)
def bitwise_xor(self, other):
    if _bool_pair(self, other):
        return ne(self, other)
    return _bitwise("bitwise_xor", self, other)


# ------------------------------------------------------------------ ternary
@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(condition, self, other):
    dtype = promote((self, other))
    return run("where", (condition, self, other), dtype=dtype)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(self, mask, value):  # torch fills a contiguous clone
    return run("where", (mask, _as_scalar_operand(value), self), dtype=self.dtype, contiguous=True)


@register(aten.masked_fill_.Scalar, aten.masked_fill_.Tensor)
def masked_fill_(self, mask, value):
    return run("where", (mask, _as_scalar_operand(value), self), out=self)


@register(aten.addcmul.default)
def addcmul(self, tensor1, tensor2, *, value=1):
    return run("addcmul", (self, tensor1, tensor2), scalars=(value,))


@register(aten.addcmul_.default)
def addcmul_(self, tensor1, tensor2, *, value=1):
    return run("addcmul", (self, tensor1, tensor2), out=self, scalars=(value,))


@register(aten.addcdiv.default)
def addcdiv(self, tensor1, tensor2, *, value=1):
    return run("addcdiv", (self, tensor1, tensor2), scalars=(value,))


@register(aten.addcdiv_.default)
def addcdiv_(self, tensor1, tensor2, *, value=1):
    return run("addcdiv", (self, tensor1, tensor2), out=self, scalars=(value,))


@register(aten.lerp.Scalar)
def lerp(self, end, weight):
    return run("lerp_scalar", (self, end), scalars=(_as_scalar_operand(weight),))


@register(aten.lerp_.Scalar)
def lerp_(self, end, weight):
    return run("lerp_scalar", (self, end), out=self, scalars=(_as_scalar_operand(weight),))


@register(aten.lerp.Tensor)
def lerp_t(self, end, weight):
    return run("addcmul", (self, weight, sub(end, self)))


@register(aten.lerp_.Tensor)
def lerp_t_(self, end, weight):
    return run("addcmul", (self, weight, sub(end, self)), out=self)


# ------------------------------------------------------------------ math: one kernel op each (OPS)
# aten name -> kernel op; integer inputs give float32 (torch's INT_TO_FLOAT)
_FLOAT_UNARY = {
    "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "erf": "erf", "erfc": "erfc", "erfinv": "erfinv", "special_erfcx": "erfcx", "special_log_ndtr": "log_ndtr",
    "special_ndtri": "ndtri", "expm1": "expm1", "log1p": "log1p", "log2": "log2", "log10": "log10",
    "exp2": "exp2", "lgamma": "lgamma", "digamma": "digamma", "i0": "i0", "special_i0e": "i0e",
    "special_i1": "i1", "special_i1e": "i1e", "special_entr": "entr", "sinc": "sinc", "angle": "angle",
    "special_modified_bessel_i0": "i0", "special_modified_bessel_i1": "i1",
    "special_spherical_bessel_j0": "spherical_bessel_j0",
}
for _name, _kop in _FLOAT_UNARY.items():
    _f, _f_ = _unary(_kop, INT_TO_FLOAT)
    register(getattr(aten, _name).default)(_f)
    if hasattr(aten, _name + "_"):
        register(getattr(aten, _name + "_").default)(_f_)


def _rounding(kop):
    """ceil, floor, trunc, round: integers are already whole (a copy, as torch)."""
    def impl(self):
        return run(kop if self.dtype.is_floating_point else "copy", (self,), dtype=self.dtype)

    def impl_(self):
        return run(kop, (self,), out=self) if self.dtype.is_floating_point else self

    return impl, impl_


for _name in ("ceil", "floor", "trunc", "round"):
    _f, _f_ = _rounding(_name)
    register(getattr(aten, _name).default)(_f)
    register(getattr(aten, _name + "_").default)(_f_)


@register(aten.round.decimals)
def round_decimals(self, *, decimals):
    if decimals == 0 or not self.dtype.is_floating_point:
        return run("round" if self.dtype.is_floating_point else "copy", (self,), dtype=self.dtype)
    return run("round_decimals", (self,), dtype=self.dtype, scalars=(10.0 ** abs(decimals), decimals < 0))


@register(aten.frac.default)
def frac(self):
    require_floating("frac", self)
    return run("frac", (self,))


@register(aten.signbit.default)
def signbit(self):
    return run("signbit", (self,), dtype=torch.bool)


@register(aten.nan_to_num.default)
def nan_to_num(self, nan=None, posinf=None, neginf=None):
    if not self.dtype.is_floating_point:
        return run("copy", (self,), dtype=self.dtype)
    info = torch.finfo(self.dtype)
    return run("nan_to_num", (self,), dtype=self.dtype, scalars=(0.0 if nan is None else nan,
                                                                  info.max if posinf is None else posinf,
                                                                  info.min if neginf is None else neginf))


@register(aten.polygamma.default)
def polygamma(n, self):
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return run("polygamma", (self,), dtype=promote((self,), INT_TO_FLOAT), scalars=(n,))


@register(aten.polygamma_.default)
def polygamma_(self, n):
    return run_("polygamma", self, (self,), kind=INT_TO_FLOAT, scalars=(n,), opname="polygamma_")


@register(aten.logit.default)
def logit(self, eps=None):
    return run("logit", (self,), kind=INT_TO_FLOAT, scalars=(-1.0 if eps is None else eps,))


@register(aten.logit_backward.default)
def logit_backward(grad_output, self, eps=None):
    return run("logit_backward", (grad_output, self), scalars=(-1.0 if eps is None else eps,))


def require_floating(opname, *tensors):
    """torch's error for an op that has no integer kernel."""
    for t in tensors:
        if isinstance(t, TVKTensor) and not t.dtype.is_floating_point:
            raise NotImplementedError(f'"{opname}" not implemented for \'{_TORCH_NAMES.get(t.dtype, t.dtype)}\'')


_TORCH_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.bool: "Bool"}


# binary: aten packet -> (kernel op, promotion); every overload of the packet (Tensor, Scalar, ...)
_BINARY = {
    "atan2": ("atan2", INT_TO_FLOAT), "copysign": ("copysign", INT_TO_FLOAT), "xlogy": ("xlogy", INT_TO_FLOAT),
    "special_xlog1py": ("xlog1py", INT_TO_FLOAT), "hypot": ("hypot", DEFAULT), "logaddexp": ("logaddexp", DEFAULT),
    "logaddexp2": ("logaddexp2", DEFAULT), "fmax": ("fmax", DEFAULT), "fmin": ("fmin", DEFAULT),
    "nextafter": ("nextafter", DEFAULT), "special_zeta": ("zeta", INT_TO_FLOAT),
}
_FLOAT_ONLY = {"hypot", "logaddexp", "logaddexp2", "nextafter"}


def _binary(name, kop, kind):
    def impl(self, other):
        if name in _FLOAT_ONLY:
            require_floating(name, self, other)
        return run(kop, (self, other), kind=kind)

    def impl_(self, other):
        return run_(kop, self, (self, other), kind=kind, opname=name + "_")

    return impl, impl_


for _name, (_kop, _kind) in _BINARY.items():
    _f, _f_ = _binary(_name, _kop, _kind)
    _pk = getattr(aten, _name)
    register(*(getattr(_pk, o) for o in _pk.overloads() if "out" not in o.lower() and o not in ("int", "float")))(_f)
    _pk_ = getattr(aten, _name + "_", None)
    if _pk_ is not None:
        register(*(getattr(_pk_, o) for o in _pk_.overloads()))(_f_)


def _int_division(kop, self, other):
    """floor/trunc division and remainders."""
    dtype = promote((self, other))
    _check_divisor(dtype, other)
    return run(kop, (self, other), dtype=dtype)


def _check_divisor(dtype, other):
    """An integer zero divisor raises, as on CPU (the GPU's integer division by 0 is undefined);
    a tensor divisor costs a sync."""
    if dtype.is_floating_point or dtype == torch.bool:
        return
    if isinstance(other, TVKTensor):
        zero = aten.any.default(eq(other, 0)).item()
    else:
        zero = _as_scalar_operand(other) == 0
    if zero:
        raise RuntimeError("ZeroDivisionError")


@register(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor)
def remainder(self, other):
    return _int_division("remainder", self, other)


@register(aten.fmod.Tensor, aten.fmod.Scalar)
def fmod(self, other):
    return _int_division("fmod", self, other)


@register(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(self, other):
    return _int_division("floor_divide", self, other)


@register(aten.floor_divide_.Tensor, aten.floor_divide_.Scalar)
def floor_divide_(self, other):
    _check_divisor(promote((self, other)), other)
    return run_("floor_divide", self, (self, other), opname="floor_divide_")


@register(aten.heaviside.default)
def heaviside(self, values):
    if self.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    return run("heaviside", (self, values))


@register(aten.clamp_min.Tensor)
def clamp_min_t(self, min):
    return maximum(self, min)


@register(aten.clamp_max.Tensor)
def clamp_max_t(self, max):
    return minimum(self, max)


@register(aten.logical_xor.default)
def logical_xor(self, other):
    return run("ne", (ne(self, 0) if self.dtype != torch.bool else self,
                      ne(other, 0) if isinstance(other, TVKTensor) and other.dtype != torch.bool else other),
               dtype=torch.bool, compute="int32")


# ------------------------------------------------------------------ activations and their backward ops
@register(aten.elu.default)
def elu(self, alpha=1, scale=1, input_scale=1):
    require_floating("elu", self)
    return run("elu", (self,), scalars=(alpha * scale, scale, input_scale))


@register(aten.elu_.default)
def elu_(self, alpha=1, scale=1, input_scale=1):
    return run("elu", (self,), out=self, scalars=(alpha * scale, scale, input_scale))


@register(aten.elu_backward.default)
def elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    return run("elu_backward", (grad_output, self_or_result),
               scalars=(alpha * scale, scale, input_scale, 1.0 if is_result else 0.0))


@register(aten.softplus.default)
def softplus(self, beta=1, threshold=20):
    require_floating("softplus", self)
    return run("softplus", (self,), scalars=(beta, threshold))


@register(aten.softplus_backward.default)
def softplus_backward(grad_output, self, beta, threshold):
    return run("softplus_backward", (grad_output, self), scalars=(beta, threshold))


@register(aten.hardshrink.default)
def hardshrink(self, lambd=0.5):
    require_floating("hardshrink", self)
    if self.dtype in (torch.float16, torch.bfloat16):  # torch compares with lambda in the input's dtype
        lambd = float(torch.tensor(lambd, dtype=self.dtype))
    return run("hardshrink", (self,), scalars=(lambd,))


@register(aten.softshrink.default)
def softshrink(self, lambd=0.5):
    require_floating("softshrink", self)
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return run("softshrink", (self,), scalars=(lambd,))


@register(aten.hardshrink_backward.default, aten.softshrink_backward.default)
def shrink_backward(grad_out, self, lambd):
    return run("shrink_backward", (grad_out, self), scalars=(lambd,))


@register(aten.threshold.default)
def threshold(self, threshold, value):
    return run("threshold", (self,), scalars=(threshold, value), dtype=promote((self, threshold, value)))


@register(aten.threshold_.default)
def threshold_(self, threshold, value):
    return run("threshold", (self,), out=self, scalars=(threshold, value))


@register(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(self):
    require_floating("log_sigmoid_forward", self)
    buffer = new_tensor((0,), self.dtype, _device((self,)))  # as on CUDA: the backward needs none
    return run("log_sigmoid", (self,)), buffer


@register(aten.log_sigmoid_backward.default)
def log_sigmoid_backward(grad_output, self, buffer):
    return run("log_sigmoid_backward", (grad_output, self))


@register(aten._prelu_kernel.default)
def prelu_kernel(self, weight):
    return run("prelu", (self, weight))


@register(aten._prelu_kernel_backward.default)
def prelu_kernel_backward(grad_output, self, weight):
    # the weight's grad has the input's shape; autograd sums it to the weight's
    return (run("prelu_backward_input", (grad_output, self, weight), dtype=grad_output.dtype),
            run("prelu_backward_weight", (grad_output, self), dtype=grad_output.dtype))


def _glu_halves(self, dim):
    dim = dim % self.dim()
    if self.shape[dim] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} is size {self.shape[dim]}")
    h = self.shape[dim] // 2
    return self.narrow(dim, 0, h), self.narrow(dim, h, h), dim, h


@register(aten.glu.default)
def glu(self, dim=-1):
    require_floating("glu", self)
    first, gate, _, _ = _glu_halves(self, dim)
    return run("glu", (first, gate))


@register(aten.glu_backward.default)
def glu_backward(grad_output, self, dim):
    first, gate, dim, h = _glu_halves(self, dim)
    grad = new_tensor(tuple(self.shape), grad_output.dtype, _device((self,)))
    run("glu", (grad_output, gate), out=grad.narrow(dim, 0, h))             # d/da: grad * sigmoid(b)
    run("glu_backward_gate", (grad_output, first, gate), out=grad.narrow(dim, h, h))
    return grad
