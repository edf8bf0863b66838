"""Pointwise ops on tvk_kernels.kernels.elementwise: N-d strided, broadcasting, mixed dtypes.

Type promotion is torch's, one way for every op (promotion.py): run() computes an op in torch's
common dtype of its operands (in that dtype's compute type), casting the Python numbers and
0-dim CPU tensors among them into it as torch does (they go in as push-constant scalars). The
ops with scalar parameters (alpha, clamp's bounds, pow's exponent ...) convert them with torch's
checks, and raise what torch raises for their operand types (refuse_as_cpu).
"""
from __future__ import annotations

import math

import torch

from tvk_kernels.kernels import activations
from tvk_kernels.kernels import elementwise as elementwise_kernels

from ..op_registry import ElementwiseRule, register
from .._storage import alloc_storage, check_dtype
from .._repeat import mark, offer
from .._tensor import TVKTensor, new_tensor
from ._layout import result_strides
from ._util import operand
from .copies import cast as cast_tensor
from .promotion import (COMPUTE, DEFAULT, INT_TO_FLOAT, UNROUNDED_SECOND, cast, checked, common_dtype, fill_value,
                        loads_exactly, number, opmath, promote, refuse_as_cpu, torch_name)

aten = torch.ops.aten


def _shape(args):
    shapes = [tuple(x.shape) for x in args if isinstance(x, TVKTensor)]
    if not shapes:
        return ()
    first = shapes[0]
    if all(s == first for s in shapes):  # the common case; torch.broadcast_shapes costs ~60 us
        return first
    return elementwise_kernels.broadcast_shapes(*shapes)


def _device(args):
    for x in args:
        if isinstance(x, TVKTensor):
            return x._tvk.device
    raise RuntimeError("no tvk tensor among the operands")


def _number_operand(kop, slot, v, common):
    """A number operand (slot: its place among the operands) as torch casts it into the common dtype."""
    if slot == 1 and kop in UNROUNDED_SECOND and common.is_floating_point:
        return float(v)
    return cast(v, common)


# llvmpipe (LLVM 15) miscompiles comparisons of sign-extended values in int64 kernels (int64 ** int32
# and int64 % int32 come out wrong in some lanes): narrower signed integers go into those cast first
_SIGN_EXTENDED = (torch.int32, torch.int16, torch.int8)


def _operands(kop, args, common):
    """(the operands as the kernel takes them, whether every tensor went in as it is): numbers
    cast into the common dtype, a tensor whose load would not be torch's cast into it cast first."""
    vals, as_is = [], True
    for slot, a in enumerate(args):
        if isinstance(a, TVKTensor):
            if not loads_exactly(a.dtype, common) or (common == torch.int64 and a.dtype in _SIGN_EXTENDED):
                a, as_is = cast_tensor(a, common), False
            vals.append(a)
        else:
            vals.append(_number_operand(kop, slot, number(a), common))
    return vals, as_is


def _compute(kop, common):
    """The kernel's compute type: the common dtype's, float32 for an op the kernel computes in float only."""
    return torch.float32 if elementwise_kernels.OPS[kop].float_only else COMPUTE[common]


def run(kop, args, *, out=None, dtype=None, common=None, kind=DEFAULT, scalars=(), contiguous=False):
    """out = kop(*args) (a new tensor of `dtype`, by default the common dtype, unless out is given),
    laid out as torch lays out the op's result: like its inputs (aten/_layout.py), or contiguous
    where torch's op is. args: tvk tensors, 0-dim CPU tensors and numbers; common: the dtype torch
    computes the op in (by default promoted from args by `kind`); scalars: the op's own, converted
    by the caller."""
    if out is None:
        key = (kop, dtype, common, kind, len(scalars), contiguous) + tuple(map(_signature, args))
        launch = _launches.get(key)
        if launch is not None:
            begun = mark()
            result = launch(args, scalars)
            if begun is not None:
                offer(begun, result, args, _Again(launch, scalars))
            return result
    if common is None:
        common = promote(args, kind)
    check_dtype(common, "aten." + kop)
    vals, as_is = _operands(kop, args, common)
    fresh = out is None
    if fresh:
        if dtype is None:
            dtype = common
        check_dtype(dtype, "aten." + kop)
        shape = _shape(vals)
        layout = None if contiguous else result_strides(shape, [v for v in vals if type(v) is TVKTensor])
        out = new_tensor(shape, dtype, _device(vals), stride=layout)
    if out.numel() == 0:
        return out
    device = _device(vals)
    compute = _compute(kop, common)
    inputs = tuple(operand(v) if isinstance(v, TVKTensor) else v for v in vals)
    out_op = operand(out)
    again = None
    if fresh and as_is and len(_launches) < _MAX_LAUNCHES:
        fam, plan = elementwise_kernels.planned(device, kop, inputs, out_op, compute)
        launch = _launches[key] = _Launch(kop, device, fam, plan, out, common)
        again = _Again(launch, scalars)
    elif not fresh and as_is and mark() is not None:
        into = [slot for slot, a in enumerate(args) if a is out]  # in place: out is one of the operands
        if into:
            fam, plan = elementwise_kernels.planned(device, kop, inputs, out_op, compute)
            again = _Again(_Launch(kop, device, fam, plan, out, common), scalars, into[0])
    begun = mark()
    elementwise_kernels.elementwise(device, kop, inputs, out_op, scalars, compute)
    if again is not None and begun is not None:
        offer(begun, out, args, again)
    return out


# ------------------------------------------------------------------ the eager fast path
# An eager op repeats with the same operand geometry: everything run() works out from the
# geometry (result dtype and shape, the kernel plan) is kept per signature, and a repeated call
# allocates the output and records the kernel. A new geometry, dtype or scalar type is a miss
# that takes the full path above (with its checks) once. Design notes 23 and 37.
_launches: dict = {}
_MAX_LAUNCHES = 4096  # a model's distinct eager geometries; a miss beyond it just takes the full path


def _signature(x):
    t = type(x)
    if t is TVKTensor:
        return x._geometry_key
    if isinstance(x, torch.Tensor):  # a CPU scalar tensor, pushed as a number
        return x.device.type, x.dim(), x.dtype
    return t  # a Python number: its type decides the promotion, its value is pushed


class _Launch:
    __slots__ = ("kop", "device", "fam", "plan", "shape", "stride", "dtype", "nbytes", "common")

    def __init__(self, kop, device, fam, plan, out, common):
        self.kop, self.device, self.fam, self.plan, self.common = kop, device, fam, plan, common
        self.shape, self.stride, self.dtype = tuple(out.shape), out.stride(), out.dtype
        self.nbytes = out._tvk.nbytes

    def __call__(self, args, scalars):
        return self.record(args, self.values(args, scalars))

    def values(self, args, scalars) -> list:
        """The kernel's push-constant scalars: the op's own, then the numbers among the operands."""
        numbers = [_number_operand(self.kop, slot, number(a), self.common) for slot, a in enumerate(args)
                   if type(a) is not TVKTensor]
        return elementwise_kernels.scalar_values(self.plan, self.kop, scalars, numbers)

    def record(self, args, values, out=None):
        """Record the op on args into out (a new tensor where None); returns out."""
        addrs = []
        for a in args:  # tvk_address, inlined: this runs for every operand of every elementwise op
            if type(a) is TVKTensor:
                buffer = a._tvk.buffer
                if buffer.freed:
                    buffer.check_alive()  # raises
                addrs.append(buffer.address + a._byte_offset)
        if out is None:
            out = TVKTensor(alloc_storage(self.nbytes, self.device), self.shape, self.stride, 0, self.dtype)
            addrs.append(out._tvk.buffer.address)
        else:
            addrs.append(out.tvk_address)
        elementwise_kernels.record(self.device, self.fam, self.plan, self.kop, addrs, values)
        return out


class _Again:
    """A kept launch with this call's scalars: the dispatcher's repeat of the call (torchvk/_repeat.py),
    whose number operands are constants, so the push-constant scalars are converted once."""

    __slots__ = ("launch", "scalars", "values", "into")

    def __init__(self, launch, scalars, into=None):
        # into: the operand an in-place op writes (its slot), or None for a new output
        self.launch, self.scalars, self.values, self.into = launch, scalars, None, into

    def __call__(self, operands):
        if self.values is None:
            self.values = self.launch.values(operands, self.scalars)
        return self.launch.record(operands, self.values, None if self.into is None else operands[self.into])


def run_(kop, self, args, *, common=None, kind=DEFAULT, scalars=()):
    """In place into self (self is the first operand unless args says otherwise)."""
    if common is None:
        common = promote(args, kind)
    if not torch.can_cast(common, self.dtype):
        raise RuntimeError(f"result type {torch_name(common)} can't be cast to the desired output type "
                           f"{torch_name(self.dtype)}")
    shape = _shape(args)
    if shape != tuple(self.shape) and tuple(torch.broadcast_shapes(shape, tuple(self.shape))) != tuple(self.shape):
        raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape {list(shape)}")
    return run(kop, args, out=self, common=common, scalars=scalars)


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
@register(aten.add.Tensor, aten.add.Scalar, fusion=ElementwiseRule("add", ("self", "other"), ("alpha",)))
def add(self, other, *, alpha=1):
    common = common_dtype(aten.add, self, other, alpha=alpha)  # alpha's type too: 0.5 for integers
    return run("add", (self, other), common=common, scalars=(checked(alpha, common),))


@register(aten.add_.Tensor, aten.add_.Scalar)
def add_(self, other, *, alpha=1):
    common = common_dtype(aten.add_, self, other, alpha=alpha)
    return run_("add", self, (self, other), common=common, scalars=(checked(alpha, common),))


@register(aten.sub.Tensor, aten.sub.Scalar, fusion=ElementwiseRule("sub", ("self", "other"), ("alpha",)))
def sub(self, other, *, alpha=1):
    common = common_dtype(aten.sub, self, other, alpha=alpha)  # bool operands too
    return run("sub", (self, other), common=common, scalars=(checked(alpha, common),))


@register(aten.sub_.Tensor, aten.sub_.Scalar)
def sub_(self, other, *, alpha=1):
    common = common_dtype(aten.sub_, self, other, alpha=alpha)
    return run_("sub", self, (self, other), common=common, scalars=(checked(alpha, common),))


@register(aten.rsub.Tensor, aten.rsub.Scalar, fusion=ElementwiseRule("sub", ("other", "self"), ("alpha",)))
def rsub(self, other, *, alpha=1):  # other - alpha * self: `2 - x`
    common = common_dtype(aten.rsub, self, other, alpha=alpha)
    return run("sub", (other, self), common=common, scalars=(checked(alpha, common),))


@register(aten.mul.Tensor, aten.mul.Scalar, fusion=ElementwiseRule("mul", ("self", "other")))
def mul(self, other):
    return run("mul", (self, other), common=common_dtype(aten.mul, self, other))


@register(aten.mul_.Tensor, aten.mul_.Scalar)
def mul_(self, other):
    return run_("mul", self, (self, other), common=common_dtype(aten.mul_, self, other))


@register(aten.div.Tensor, aten.div.Scalar, fusion=ElementwiseRule("div", ("self", "other")))
def div(self, other):
    return run("div", (self, other), common=common_dtype(aten.div, self, other, kind=INT_TO_FLOAT))


@register(aten.div_.Tensor, aten.div_.Scalar)
def div_(self, other):
    return run_("div", self, (self, other), common=common_dtype(aten.div_, self, other, kind=INT_TO_FLOAT))


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(self, other, *, rounding_mode=None):
    if rounding_mode is None:
        return div(self, other)
    common = common_dtype(aten.div, self, other, rounding_mode=rounding_mode)  # an unknown mode too
    return _int_division("floor_divide" if rounding_mode == "floor" else "trunc_divide", self, other, common)


@register(aten.maximum.default, fusion=ElementwiseRule("maximum", ("self", "other")))
def maximum(self, other):
    return run("maximum", (self, other), common=common_dtype(aten.maximum, self, other))


@register(aten.minimum.default, fusion=ElementwiseRule("minimum", ("self", "other")))
def minimum(self, other):
    return run("minimum", (self, other), common=common_dtype(aten.minimum, self, other))


def _exponent(self, exponent, dtype):
    """pow's number exponent as torch takes it: refused as a negative integer for an integer (or
    bool) tensor, checked into the result dtype."""
    if not self.dtype.is_floating_point and not isinstance(exponent, float) and exponent < 0:
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    return checked(exponent, dtype)


_POWERS = {2: "square", 1: "copy", 0.5: "sqrt"}  # exponents with a kernel op of their own


@register(aten.pow.Tensor_Scalar, fusion=ElementwiseRule("pow_scalar", ("self",), ("exponent",)))
def pow_ts(self, exponent):
    dtype = common_dtype(aten.pow, self, exponent)
    exponent = _exponent(self, exponent, dtype)
    kop = _POWERS.get(exponent, "pow_scalar")
    return run(kop, (self,), common=dtype, scalars=(exponent,) if kop == "pow_scalar" else ())


@register(aten.pow_.Scalar)
def pow_ts_(self, exponent):
    refuse_as_cpu(aten.pow_, self, exponent)
    exponent = _exponent(self, exponent, self.dtype)
    return run_("pow_scalar", self, (self,), scalars=(exponent,))


@register(aten.pow.Scalar)
def pow_st(self, exponent):  # a number to a tensor's powers: `2 ** x`; the base is an operand
    dtype = common_dtype(aten.pow, self, exponent)
    return run("rpow_scalar", (exponent,), common=dtype, scalars=(cast(self, dtype),))


@register(aten.pow.Tensor_Tensor, fusion=ElementwiseRule("pow", ("self", "exponent")))
def pow_tt(self, exponent):
    return run("pow", (self, exponent), common=common_dtype(aten.pow, self, exponent))


@register(aten.pow_.Tensor)
def pow_tt_(self, exponent):
    return run_("pow", self, (self, exponent), common=common_dtype(aten.pow_, self, exponent))


# ------------------------------------------------------------------ unary
def _unary(kop, kind=DEFAULT):
    def impl(self):
        return run(kop, (self,), kind=kind)

    def impl_(self):
        return run_(kop, self, (self,), kind=kind)

    return impl, impl_


@register(aten.square.default, fusion=ElementwiseRule("square", ("self",)))
def square(self):
    return run("square", (self,), common=promote((self, 2)))  # as self ** 2: bools square to int64


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
        return run_(act.name, self, (self,), kind=INT_TO_FLOAT if act.ints == "float" else DEFAULT)

    return forward_


def _activation_backward(name):
    def backward(grad_output, self_or_output, **kwargs):
        return run(activations.select(name, kwargs).name + "_backward", (grad_output, self_or_output))

    return backward


def _activation_kernel_op(name):
    """Compiled mode's choice among the entries of one aten op, from a node's bound arguments."""
    return lambda kwargs: activations.select(name, kwargs).name


def _register_activation(act):
    """The aten op of an activation, its in-place form and its backward; fusable ones also as
    elementwise rules (the backward takes grad_output and self or output) and GEMM/conv epilogues."""
    if act.aten is None or next(a for a in activations.ACTIVATIONS.values() if a.aten == act.aten) is not act:
        return  # the first entry of an aten op declares it
    forward, pick = getattr(aten, act.aten).default, _activation_kernel_op(act.aten)
    rule = ElementwiseRule(pick, (forward._schema.arguments[0].name,), epilogue=pick) if act.fusable else None
    register(forward, fusion=rule)(_activation_forward(act.aten))
    inplace = getattr(aten, act.aten + "_", None)
    if inplace is not None:
        register(inplace.default)(_activation_inplace(act.aten))
    backward = getattr(aten, act.aten + "_backward", None)
    if act.grad and backward is not None:
        operands = tuple(arg.name for arg in backward.default._schema.arguments[:2])
        rule = ElementwiseRule(lambda kwargs: pick(kwargs) + "_backward", operands) if act.fusable else None
        register(backward.default, fusion=rule)(_activation_backward(act.aten))


activations.each(_register_activation)  # the table's entries now, and any added later


@register(aten.threshold_backward.default,
          fusion=ElementwiseRule("threshold_backward", ("grad_output", "self"), ("threshold",)))
def threshold_backward(grad_output, self, threshold):
    return run("threshold_backward", (grad_output, self), dtype=grad_output.dtype, scalars=(threshold,))


@register(aten.leaky_relu.default, fusion=ElementwiseRule("leaky_relu", ("self",), ("negative_slope",)))
def leaky_relu(self, negative_slope=0.01):
    require_floating("leaky_relu", self)
    return run("leaky_relu", (self,), dtype=self.dtype, scalars=(negative_slope,))


@register(aten.leaky_relu_.default)
def leaky_relu_(self, negative_slope=0.01):
    require_floating("leaky_relu", self)
    return run("leaky_relu", (self,), out=self, scalars=(negative_slope,))


@register(aten.leaky_relu_backward.default)
def leaky_relu_backward(grad_output, self, negative_slope, self_is_result):
    return run("leaky_relu_backward", (grad_output, self), dtype=grad_output.dtype, scalars=(negative_slope,))


def _clamp(self, min, max):
    """clamp to number bounds (the caller asked torch whether it refuses the types): the result dtype
    takes them in (an integer tensor clamped to 4.5 gives floats) and they are checked into it."""
    dtype = promote(tuple(x for x in (self, min, max) if x is not None))
    bounds = tuple(None if b is None else checked(b, dtype) for b in (min, max))
    return run("clamp", (self,), common=dtype, scalars=bounds)


def _clamp_(self, min, max):
    return run_("clamp", self, (self,), scalars=tuple(None if b is None else checked(b, self.dtype) for b in (min, max)))


@register(aten.clamp.default, fusion=ElementwiseRule("clamp", ("self",), ("min", "max")))
def clamp(self, min=None, max=None):
    refuse_as_cpu(aten.clamp, self, min, max)  # no bound at all too
    return _clamp(self, min, max)


@register(aten.clamp_.default)
def clamp_(self, min=None, max=None):
    refuse_as_cpu(aten.clamp_, self, min, max)  # a bound that makes the result another dtype too
    return _clamp_(self, min, max)


@register(aten.clamp_min.default, fusion=ElementwiseRule("clamp", ("self",), ("min", math.inf)))
def clamp_min(self, min):
    refuse_as_cpu(aten.clamp_min, self, min)
    return _clamp(self, min, None)


@register(aten.clamp_max.default, fusion=ElementwiseRule("clamp", ("self",), (-math.inf, "max")))
def clamp_max(self, max):
    refuse_as_cpu(aten.clamp_max, self, max)
    return _clamp(self, None, max)


@register(aten.clamp_min_.default)
def clamp_min_(self, min):
    refuse_as_cpu(aten.clamp_min_, self, min)
    return _clamp_(self, min, None)


@register(aten.clamp_max_.default)
def clamp_max_(self, max):
    refuse_as_cpu(aten.clamp_max_, self, max)
    return _clamp_(self, None, max)


def _clamp_t(self, min, max):
    """clamp to tensor bounds (tvk tensors, 0-dim CPU ones), in the common dtype of all three."""
    dtype = promote(tuple(x for x in (self, min, max) if x is not None))
    out = self
    if min is not None:
        out = run("maximum", (out, min), common=dtype)
    if max is not None:
        out = run("minimum", (out, max), common=dtype)
    return out


@register(aten.clamp.Tensor)
def clamp_t(self, min=None, max=None):
    refuse_as_cpu(aten.clamp, self, min, max)
    return _clamp_t(self, min, max)


@register(aten.clamp_min.Tensor)
def clamp_min_t(self, min):
    refuse_as_cpu(aten.clamp_min, self, min)
    return _clamp_t(self, min, None)


@register(aten.clamp_max.Tensor)
def clamp_max_t(self, max):
    refuse_as_cpu(aten.clamp_max, self, max)
    return _clamp_t(self, None, max)


@register(aten.hardtanh.default, fusion=ElementwiseRule("clamp", ("self",), ("min_val", "max_val")))
def hardtanh(self, min_val=-1, max_val=1):
    return run("clamp", (self,), scalars=(checked(min_val, self.dtype), checked(max_val, self.dtype)))


@register(aten.hardtanh_backward.default)
def hardtanh_backward(grad_output, self, min_val, max_val):
    inside = logical_and(gt(self, min_val), lt(self, max_val))
    return where(inside, grad_output, 0.0)


@register(aten.sign.default, aten.sgn.default)
def sign(self):
    return run("sub", (gt(self, 0), lt(self, 0)), dtype=self.dtype) if self.dtype != torch.bool else \
        run("copy", (self,))


# ------------------------------------------------------------------ comparisons and logic
def _cmp(kop):
    """Registers aten.<kop> and aten.<kop>_ (Tensor and Scalar overloads); returns the out-of-place one."""
    op, op_ = getattr(aten, kop), getattr(aten, kop + "_")

    def impl(self, other):
        return run(kop, (self, other), dtype=torch.bool, common=common_dtype(op, self, other))

    def impl_(self, other):
        return run(kop, (self, other), out=self, common=common_dtype(op_, self, other))

    register(op.Tensor, op.Scalar)(impl)
    register(op_.Tensor, op_.Scalar)(impl_)
    return impl


eq, ne, lt, le, gt, ge = (_cmp(_name) for _name in ("eq", "ne", "lt", "le", "gt", "ge"))


@register(aten.logical_not.default)
def logical_not(self):
    return run("eq", (self, 0), dtype=torch.bool)


@register(aten.logical_and.default)
def logical_and(self, other):
    return run("mul", (ne(self, 0) if self.dtype != torch.bool else self,
                       ne(other, 0) if isinstance(other, TVKTensor) and other.dtype != torch.bool else other),
               dtype=torch.bool)


@register(aten.logical_or.default)
def logical_or(self, other):
    return run("maximum", (ne(self, 0) if self.dtype != torch.bool else self,
                           ne(other, 0) if isinstance(other, TVKTensor) and other.dtype != torch.bool else other),
               dtype=torch.bool)


def _bitwise(name, self, other=None):
    """An integer bitwise op, in the common integer dtype; floats torch refuses (NotImplementedError)."""
    args = (self,) if other is None else (self, other)
    return run(name, args, common=common_dtype(getattr(aten, name), *args))


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


@register(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
          aten.bitwise_left_shift.Scalar_Tensor, aten.__lshift__.Tensor, aten.__lshift__.Scalar)
def bitwise_left_shift(self, other):
    return _bitwise("bitwise_left_shift", self, other)


@register(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
          aten.bitwise_right_shift.Scalar_Tensor, aten.__rshift__.Tensor, aten.__rshift__.Scalar)
def bitwise_right_shift(self, other):
    return _bitwise("bitwise_right_shift", self, other)


@register(aten.__ilshift__.Scalar, aten.__ilshift__.Tensor)
def ilshift(self, other):  # x <<= n: torch's in-place shifts go by the operators' names
    return run_("copy", self, (bitwise_left_shift(self, other),))


@register(aten.__irshift__.Scalar, aten.__irshift__.Tensor)
def irshift(self, other):
    return run_("copy", self, (bitwise_right_shift(self, other),))


# ------------------------------------------------------------------ ternary
@register(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(condition, self, other):
    refuse_as_cpu(aten.where, condition, self, other)  # a condition that is not bool too
    dtype = promote((self, other))
    self, other = (fill_value(v, dtype) if isinstance(v, (bool, int, float)) else v for v in (self, other))
    return run("where", (condition, self, other), common=dtype)


def _masked_value(self, value):
    """masked_fill's value: a number (or a 0-dim CPU tensor's) checked into self's dtype; a tvk tensor
    is an operand."""
    return value if isinstance(value, TVKTensor) else checked(number(value), self.dtype)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def masked_fill(self, mask, value):  # torch fills a contiguous clone
    refuse_as_cpu(aten.masked_fill, self, mask, value)
    return run("where", (mask, _masked_value(self, value), self), common=self.dtype, contiguous=True)


@register(aten.masked_fill_.Scalar, aten.masked_fill_.Tensor)
def masked_fill_(self, mask, value):
    refuse_as_cpu(aten.masked_fill_, self, mask, value)
    return run("where", (mask, _masked_value(self, value), self), out=self, common=self.dtype)


def _addc(op, kop, self, tensor1, tensor2, value, into=None):
    """self + value * tensor1 * tensor2 (addcmul) or / tensor2 (addcdiv), value checked in the math type."""
    args = (self, tensor1, tensor2)
    common = common_dtype(op, *args, value=value)  # integer tensors for addcdiv too
    scalars = (checked(value, opmath(common)),)
    return run(kop, args, common=common, scalars=scalars) if into is None else \
        run_(kop, into, args, common=common, scalars=scalars)


@register(aten.addcmul.default,
          fusion=ElementwiseRule("addcmul", ("self", "tensor1", "tensor2"), ("value",)))
def addcmul(self, tensor1, tensor2, *, value=1):
    return _addc(aten.addcmul, "addcmul", self, tensor1, tensor2, value)


@register(aten.addcmul_.default)
def addcmul_(self, tensor1, tensor2, *, value=1):
    return _addc(aten.addcmul_, "addcmul", self, tensor1, tensor2, value, into=self)


@register(aten.addcdiv.default,
          fusion=ElementwiseRule("addcdiv", ("self", "tensor1", "tensor2"), ("value",)))
def addcdiv(self, tensor1, tensor2, *, value=1):
    return _addc(aten.addcdiv, "addcdiv", self, tensor1, tensor2, value)


@register(aten.addcdiv_.default)
def addcdiv_(self, tensor1, tensor2, *, value=1):
    return _addc(aten.addcdiv_, "addcdiv", self, tensor1, tensor2, value, into=self)


@register(aten.lerp.Scalar, fusion=ElementwiseRule("lerp_scalar", ("self", "end"), ("weight",)))
def lerp(self, end, weight):
    refuse_as_cpu(aten.lerp, self, end, weight)  # integers, and an end of another dtype
    return run("lerp_scalar", (self, end), scalars=(checked(weight, opmath(self.dtype)),))


@register(aten.lerp_.Scalar)
def lerp_(self, end, weight):
    refuse_as_cpu(aten.lerp_, self, end, weight)
    return run_("lerp_scalar", self, (self, end), scalars=(checked(weight, opmath(self.dtype)),))


def _lerp_t(op, self, end, weight, into=None):
    """self + weight * (end - self), a tensor weight promoting with the others (bool ends lerp in float16
    by a float16 weight)."""
    common = common_dtype(op, self, end, weight)
    args = (self, weight, run("sub", (end, self), common=common))
    return run("addcmul", args, common=common) if into is None else run_("addcmul", into, args, common=common)


@register(aten.lerp.Tensor)
def lerp_t(self, end, weight):
    return _lerp_t(aten.lerp, self, end, weight)


@register(aten.lerp_.Tensor)
def lerp_t_(self, end, weight):
    return _lerp_t(aten.lerp_, self, end, weight, into=self)


# ------------------------------------------------------------------ math: the kernel table's rows
# Each row of tvk_kernels/kernels/elementwise.py's OPS that names aten ops (`aten=`) declares them:
# every functional overload (Tensor and Scalar operands), the in-place forms, and compiled mode's
# fusion rule, its operands the overload's first arguments. `ints` says what integer inputs give.
_INT_PROMOTION = {"keep": DEFAULT, "float": INT_TO_FLOAT, "refuse": DEFAULT}


def _aten_packet(name: str):
    """aten.<name>, or torch.ops.<namespace>.<name> for "namespace::name"."""
    namespace, _, op = name.rpartition("::")
    return getattr(getattr(torch.ops, namespace or "aten"), op, None)


def _takes_tensors(op, mutable: bool) -> bool:
    schema = op._schema
    return schema.is_mutable == mutable and "out" not in op._overloadname and \
        any(str(arg.type).startswith("Tensor") for arg in schema.arguments)


def _row_kernels(kop: str, name: str, ints: str):
    kind = _INT_PROMOTION[ints]

    def impl(*operands):
        if ints == "refuse":
            require_floating(name, *operands)
        return run(kop, operands, kind=kind)

    def impl_(self, *operands):
        return run_(kop, self, (self,) + operands, kind=kind)

    return impl, impl_


def _declare_row(kop: str, spec):
    for name in spec.aten:
        packet = _aten_packet(name)
        if packet is None:
            raise ValueError(f"elementwise op {kop!r} names aten op {name!r}, which this torch does not have")
        impl, impl_ = _row_kernels(kop, name, spec.ints)
        for overload in (getattr(packet, ov) for ov in packet.overloads()):
            if _takes_tensors(overload, mutable=False):
                operands = tuple(arg.name for arg in overload._schema.arguments[:spec.arity])
                register(overload, fusion=ElementwiseRule(kop, operands))(impl)
        inplace = _aten_packet(name + "_")
        for overload in (getattr(inplace, ov) for ov in inplace.overloads()) if inplace is not None else ():
            if _takes_tensors(overload, mutable=True):
                register(overload)(impl_)


elementwise_kernels.each_op(_declare_row)  # the rows now, and any added later


def _rounding(kop):
    """ceil, floor, trunc, round: integers are already whole (a copy, as torch)."""
    def impl(self):
        return run(kop if self.dtype.is_floating_point else "copy", (self,), dtype=self.dtype)

    def impl_(self):
        return run(kop, (self,), out=self) if self.dtype.is_floating_point else self

    return impl, impl_


for _name in ("ceil", "floor", "trunc", "round"):
    _f, _f_ = _rounding(_name)
    register(getattr(aten, _name).default, fusion=ElementwiseRule(_name, ("self",)))(_f)
    register(getattr(aten, _name + "_").default)(_f_)


@register(aten.round.decimals)
def round_decimals(self, *, decimals):
    if decimals != 0:
        require_floating("round_cpu", self)  # torch rounds integers to decimals=0 only
    if decimals == 0 or not self.dtype.is_floating_point:
        return run("round" if self.dtype.is_floating_point else "copy", (self,), dtype=self.dtype)
    return run("round_decimals", (self,), dtype=self.dtype, scalars=(10.0 ** abs(decimals), decimals < 0))


@register(aten.frac.default, fusion=ElementwiseRule("frac", ("self",)))
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
    return run("polygamma", (self,), kind=INT_TO_FLOAT, scalars=(n,))


@register(aten.polygamma_.default)
def polygamma_(self, n):
    return run_("polygamma", self, (self,), kind=INT_TO_FLOAT, scalars=(n,))


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
            raise NotImplementedError(f'"{opname}" not implemented for \'{torch_name(t.dtype)}\'')


def _int_division(kop, self, other, common):
    """floor/trunc division and remainders in the common dtype (common_dtype: torch judged the types)."""
    _check_divisor(common, other)
    return run(kop, (self, other), common=common)


def _check_divisor(common, other):
    """An integer zero divisor raises, as on the CPU (the GPU's integer division by 0 is undefined):
    zero as the common dtype holds it (2**40 is 0 in int32); a tensor divisor costs a sync."""
    if common.is_floating_point or common == torch.bool:
        return
    if isinstance(other, TVKTensor):
        zero = aten.any.default(run("eq", (other, 0), dtype=torch.bool, common=common)).item()
    else:
        zero = cast(number(other), common) == 0
    if zero:
        raise RuntimeError("ZeroDivisionError")


@register(aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor,
          fusion=ElementwiseRule("remainder", ("self", "other")))
def remainder(self, other):  # `2 % x` too
    return _int_division("remainder", self, other, common_dtype(aten.remainder, self, other))


@register(aten.fmod.Tensor, aten.fmod.Scalar, fusion=ElementwiseRule("fmod", ("self", "other")))
def fmod(self, other):
    return _int_division("fmod", self, other, common_dtype(aten.fmod, self, other))


@register(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(self, other):  # `2 // x` too
    return _int_division("floor_divide", self, other, common_dtype(aten.floor_divide, self, other))


@register(aten.floor_divide_.Tensor, aten.floor_divide_.Scalar)
def floor_divide_(self, other):
    common = common_dtype(aten.floor_divide_, self, other)
    _check_divisor(common, other)
    return run_("floor_divide", self, (self, other), common=common)


@register(aten.heaviside.default, fusion=ElementwiseRule("heaviside", ("self", "values")))
def heaviside(self, values):
    if self.dtype != values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different dtypes")
    return run("heaviside", (self, values))


@register(aten.logical_xor.default)
def logical_xor(self, other):
    return run("ne", (ne(self, 0) if self.dtype != torch.bool else self,
                      ne(other, 0) if isinstance(other, TVKTensor) and other.dtype != torch.bool else other),
               dtype=torch.bool)


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


@register(aten.softplus_backward.default,
          fusion=ElementwiseRule("softplus_backward", ("grad_output", "self"), ("beta", "threshold")))
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


@register(aten.hardshrink_backward.default, aten.softshrink_backward.default,
          fusion=ElementwiseRule("shrink_backward", ("grad_out", "self"), ("lambd",)))
def shrink_backward(grad_out, self, lambd):
    return run("shrink_backward", (grad_out, self), scalars=(lambd,))


@register(aten.threshold.default, fusion=ElementwiseRule("threshold", ("self",), ("threshold", "value")))
def threshold(self, threshold, value):  # self's dtype: the numbers do not promote it
    return run("threshold", (self,), scalars=_thresholds(self, threshold, value))


@register(aten.threshold_.default)
def threshold_(self, threshold, value):
    return run("threshold", (self,), out=self, scalars=_thresholds(self, threshold, value))


def _thresholds(self, threshold, value):
    return checked(threshold, opmath(self.dtype)), checked(value, self.dtype)


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
    require_floating("prelu", self)
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
