"""Elementwise kernels.

* `binary()` / `add()`: the original contiguous float32 binary kernel
  (templates/elementwise_binary.comp; tuning/elementwise.json): eager float32 add/sub/mul/div
  of contiguous tensors, a benchmark and the tuner's reference target use it.
* `unary()`, `binary_nd()`, `ternary()`, `fill()`, `copy()`, `elementwise()`: the general
  family (templates/elementwise_nd.comp; tuning/elementwise_nd.json): N-d strided operands with
  broadcasting (stride 0), per-operand dtypes (float32, float16, bfloat16, int64, int32, bool as
  uint8, uint8, int8, int16), a compute type, an output that may alias an input (same layout),
  Python numbers as operands.

Ops are data: `OPS` maps a name to its arity, a GLSL expression in `a, b, c` (the operands
in the compute type `CT`) and `S(k)` (push-constant scalars), and how its compute type is
picked. The expression becomes the OP_EXPR define; no Python per-op code. A row naming aten ops
(`aten=`) is also their eager kernel and compiled-mode fusion rule in torchvk: adding an op is
one row (`add_op`, or a line of the table).

On the host, dims of size 1 are dropped, dims are ordered by output stride and adjacent
dims that are contiguous in every operand are merged, so most real cases become 1-3
dims. A result that is dense in every operand (same shape, same layout) takes the
vectorized contiguous path; float32 add/sub/mul/div there run on the original binary
kernel. Shape and strides go into push constants when they fit (128 bytes on lavapipe),
otherwise into a small cached device buffer.

Type promotion is the caller's: each operand carries its dtype, the output has its own,
and the compute type is float when any input is floating (or the op is a float op such
as exp or div), else int64 when any input is int64, else int32. Pass `compute=` to
override. The result is cast to the output dtype; a bool output stores `value != 0`.
Float16 and bfloat16 are storage only: they are computed in float32; uint8, int8 and int16 are
computed in int32 and stored by truncation, which is torch's wraparound (a float result stored
into them truncates toward zero, then wraps, as torch's cast through int64 does). Python numbers
come in as the caller converted them (torch's casts and checks: torchvk/aten/promotion.py).
"""
from __future__ import annotations

import itertools
import math
import numbers
import struct
from dataclasses import dataclass

from ..errors import TVKError
from . import activations
from .dtypes import DTYPES, DType
from .launch import Family, address, family, grid_1d, record_shape, recording
from .strides import contiguous_strides

# ============================================================== the original binary kernel
# op name -> GLSL expression in x, y (and p.alpha)
BINARY_OPS = {
    "add": "((x) + p.alpha * (y))",
    "sub": "((x) - p.alpha * (y))",
    "mul": "((x) * (y))",
    "div": "((x) / (y))",
    "maximum": "max(x, y)",
    "minimum": "min(x, y)",
}
_PUSH = struct.Struct("<QQQIf")


class Binary(Family):
    """The contiguous float32 binary kernel, tuned as `elementwise` (tune/targets/elementwise.py: a vector add)."""

    family = "elementwise"
    template = "elementwise_binary.comp"

    def kernel(self, params: dict, op: str, vec: int):
        return self.variant(binary_defines(params, op, vec), params["WG"], _PUSH.size)


def binary_defines(params: dict, op: str, vec: int) -> dict:
    """The defines of one binary kernel (the runtime and the tuner target build them here)."""
    return {"OP(x,y)": BINARY_OPS[op], "VEC": vec, "ITEMS": params["ITEMS"]}


def binary(device, op: str, a, b, out, n: int, alpha: float = 1.0, params: dict | None = None):
    """out[:n] = op(a[:n], b[:n]); a, b, out are DeviceBuffers (or addresses). params: an explicit
    parameter set (WG, VEC, ITEMS), merged over the tuned/default one."""
    fam = family(device, Binary)
    params = fam.resolve({"n": n}, params)
    a, b, out = address(a), address(b), address(out)
    vec = params["VEC"] if (a | b | out) & 15 == 0 else 1  # vector loads need 16-byte aligned addresses
    _launch_binary(device, fam.kernel(params, op, vec), params, vec, a, b, out, n, alpha, op)


def _launch_binary(device, pipe, params: dict, vec: int, a: int, b: int, out: int, n: int, alpha: float, label: str):
    per_group = params["WG"] * params["ITEMS"] * vec
    groups = grid_1d((n + per_group - 1) // per_group, device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, groups, _PUSH.pack(a, b, out, n, alpha), label)


def add(device, a, b, out, n: int, alpha: float = 1.0, params: dict | None = None):
    binary(device, "add", a, b, out, n, alpha, params)


# ============================================================== dtypes (the one table: dtypes.py)
_ALIASES = {"float": "float32", "half": "float16", "long": "int64", "int": "int32", "bool_": "bool",
            "f4": "float32", "f2": "float16", "i8": "int64", "i4": "int32", "?": "bool",
            "bf16": "bfloat16", "u1": "uint8", "i1": "int8", "i2": "int16", "short": "int16"}


def dtype_name(dt) -> str:
    """'float32', np.float32, np.dtype('int64'), torch.bool (by name) ... -> a key of DTYPES."""
    if isinstance(dt, DType):
        return dt.name
    s = dt if isinstance(dt, str) else str(dt)
    s = s.removeprefix("torch.")
    s = _ALIASES.get(s, s)
    if s in DTYPES:
        return s
    try:
        import numpy as np  # lazy: numpy only to name a dtype the aliases lack: importing the kernels loads no numpy

        s = np.dtype(dt).name
    except Exception:
        pass
    s = _ALIASES.get(s, s)
    if s not in DTYPES:
        raise TypeError(f"elementwise kernels do not support dtype {dt!r}; supported: {', '.join(DTYPES)}")
    return s


# compute types (CT_KIND in the template)
CT_FLOAT, CT_INT32, CT_INT64 = 0, 1, 2
_CT_NAMES = {CT_FLOAT: "float", CT_INT32: "int32", CT_INT64: "int64"}
_CT_PACK = {CT_FLOAT: "f", CT_INT32: "i", CT_INT64: "q"}
_INT_RANGE = {CT_INT32: (-(1 << 31), (1 << 31) - 1), CT_INT64: (-(1 << 63), (1 << 63) - 1)}


# ============================================================== ops as data
@dataclass(frozen=True)
class OpSpec:
    arity: int
    expr: str                  # GLSL, CT-valued, in a, b, c, S(k); helpers are in the template
    nscalars: int = 0          # op scalars S(0).. (before scalar operands)
    float_only: bool = False   # always computed in float (exp, div, ...)
    bool_result: bool = False  # comparisons: the natural output dtype is bool
    compute: str = "inputs"    # compute type from: "inputs", "values" (skip the condition), "out"
    defaults: tuple = ()       # default scalars
    unbounded: tuple = ()      # per scalar: "lo"/"hi" meaning None -> -inf/+inf (or int min/max)
    # the aten ops the row is, operand for operand, with no scalars: torchvk declares their eager
    # kernels, in-place forms and compiled mode's fusion rule from this row (torchvk/aten/elementwise.py)
    aten: tuple = ()
    ints: str = "keep"         # integer inputs: "keep" (torch's promotion), "float" (they give float), "refuse"


def _u(expr, **kw):
    return OpSpec(1, expr, **kw)


def _b(expr, **kw):
    return OpSpec(2, expr, **kw)


_F = {"float_only": True}
_CMP = {"bool_result": True}
OPS: dict[str, OpSpec] = {
    # nullary / copies
    "fill": OpSpec(0, "S(0)", nscalars=1, compute="out"),
    "copy": _u("a"),
    # unary arithmetic
    "neg": _u("-a", aten=("neg",)),
    "abs": _u("abs(a)", aten=("abs",)),
    "square": _u("a * a"),
    "reciprocal": _u("1.0 / a", **_F, aten=("reciprocal",), ints="float"),
    "exp": _u("exp(a)", **_F, aten=("exp",), ints="float"),
    "log": _u("log(a)", **_F, aten=("log",), ints="float"),
    "sqrt": _u("sqrt(a)", **_F, aten=("sqrt",), ints="float"),
    "rsqrt": _u("inversesqrt(a)", **_F, aten=("rsqrt",), ints="float"),
    # computed in the result's type: an integer tensor with a float scalar gives a float result
    "pow_scalar": _u("TVK_POW(a, S(0))", nscalars=1, compute="out"),                 # x ** s
    "rpow_scalar": _u("TVK_POW(S(0), a)", nscalars=1, compute="out"),                # s ** x
    "clamp": _u("tvk_min(tvk_max(a, S(0)), S(1))", nscalars=2, unbounded=("lo", "hi"), compute="out"),
    "leaky_relu": _u("(a < CT(0) ? a * S(0) : a)", nscalars=1, defaults=(0.01,), **_F),
    # unary math (helpers in the template: "math helpers of the OPS table")
    "sin": _u("tvk_sin(a)", **_F, aten=("sin",), ints="float"),
    "cos": _u("tvk_cos(a)", **_F, aten=("cos",), ints="float"),
    "tan": _u("tvk_tan(a)", **_F, aten=("tan",), ints="float"),
    "asin": _u("tvk_asin(a)", **_F, aten=("asin",), ints="float"),
    "acos": _u("tvk_acos(a)", **_F, aten=("acos",), ints="float"),
    "atan": _u("(isnan(a) ? a : atan(a))", **_F, aten=("atan",), ints="float"),
    "sinh": _u("tvk_sinh(a)", **_F, aten=("sinh",), ints="float"),
    "cosh": _u("tvk_cosh(a)", **_F, aten=("cosh",), ints="float"),
    "asinh": _u("tvk_asinh(a)", **_F, aten=("asinh",), ints="float"),
    "acosh": _u("tvk_acosh(a)", **_F, aten=("acosh",), ints="float"),
    "atanh": _u("tvk_atanh(a)", **_F, aten=("atanh",), ints="float"),
    "erf": _u("tvk_erf(a)", **_F, aten=("erf",), ints="float"),
    "erfc": _u("tvk_erfc(a)", **_F, aten=("erfc",), ints="float"),
    "erfinv": _u("tvk_erfinv(a)", **_F, aten=("erfinv",), ints="float"),
    "erfcx": _u("tvk_erfcx(a)", **_F, aten=("special_erfcx",), ints="float"),
    "log_ndtr": _u("tvk_log_ndtr(a)", **_F, aten=("special_log_ndtr",), ints="float"),
    "ndtri": _u("tvk_ndtri(a)", **_F, aten=("special_ndtri",), ints="float"),
    "expm1": _u("tvk_expm1(a)", **_F, aten=("expm1",), ints="float"),
    "log1p": _u("tvk_log1p(a)", **_F, aten=("log1p",), ints="float"),
    "log2": _u("log2(a)", **_F, aten=("log2",), ints="float"),
    "log10": _u("(log2(a) * 0.30102999566398120)", **_F, aten=("log10",), ints="float"),
    "exp2": _u("exp2(a)", **_F, aten=("exp2",), ints="float"),
    "ceil": _u("ceil(a)", **_F),
    "floor": _u("floor(a)", **_F),
    "trunc": _u("trunc(a)", **_F),
    "round": _u("roundEven(a)", **_F),
    "round_decimals": _u("tvk_round_decimals(a, S(0), S(1))", nscalars=2, **_F),  # 10^|d|, d < 0
    "frac": _u("(a - trunc(a))", **_F),
    "signbit": _u("B2CT(tvk_signbit(a))", **_CMP),
    "nan_to_num": _u("(isnan(a) ? S(0) : (isinf(a) ? (a > 0.0 ? S(1) : S(2)) : a))", nscalars=3, **_F),
    "lgamma": _u("tvk_lgamma(a)", **_F, aten=("lgamma",), ints="float"),
    "digamma": _u("tvk_digamma(a)", **_F, aten=("digamma",), ints="float"),
    "polygamma": _u("tvk_polygamma(S(0), a)", nscalars=1, **_F),
    "i0": _u("tvk_i0(a)", **_F, aten=("i0", "special_modified_bessel_i0"), ints="float"),
    "i0e": _u("tvk_i0e(a)", **_F, aten=("special_i0e",), ints="float"),
    "i1": _u("tvk_i1(a)", **_F, aten=("special_i1", "special_modified_bessel_i1"), ints="float"),
    "i1e": _u("tvk_i1e(a)", **_F, aten=("special_i1e",), ints="float"),
    "spherical_bessel_j0": _u("tvk_spherical_bessel_j0(a)", **_F, aten=("special_spherical_bessel_j0",), ints="float"),
    "entr": _u("tvk_entr(a)", **_F, aten=("special_entr",), ints="float"),
    "sinc": _u("tvk_sinc(a)", **_F, aten=("sinc",), ints="float"),
    "logit": _u("tvk_logit(a, S(0))", nscalars=1, defaults=(-1.0,), **_F),   # eps < 0: no clamp
    "angle": _u("(isnan(a) ? a : (a < 0.0 ? TVK_PI : 0.0))", **_F, aten=("angle",), ints="float"),
    # activations with parameters (the scalar-free ones come from activations.py, below)
    # elu: S = alpha * scale, scale, input_scale
    "elu": _u("(a <= 0.0 ? tvk_expm1(a * S(2)) * S(0) : a * S(1))", nscalars=3, **_F),
    "softplus": _u("(a * S(0) > S(1) ? a : tvk_log1p(exp(a * S(0))) / S(0))", nscalars=2, **_F),  # beta, threshold
    "hardshrink": _u("((a >= -S(0) && a <= S(0)) ? 0.0 : a)", nscalars=1, **_F),
    "softshrink": _u("(a > S(0) ? a - S(0) : (a < -S(0) ? a + S(0) : (isnan(a) ? a : 0.0)))", nscalars=1, **_F),
    "threshold": _u("(a <= S(0) ? S(1) : a)", nscalars=2),                    # threshold, value
    # binary arithmetic
    "add": _b("a + S(0) * b", nscalars=1, defaults=(1,)),
    "sub": _b("a - S(0) * b", nscalars=1, defaults=(1,)),
    "mul": _b("a * b"),
    "div": _b("a / b", **_F),
    "pow": _b("TVK_POW(a, b)"),
    "maximum": _b("tvk_max(a, b)"),
    "minimum": _b("tvk_min(a, b)"),
    "lerp_scalar": _b("a + S(0) * (b - a)", nscalars=1, **_F),
    "atan2": _b("tvk_atan2(a, b)", **_F, aten=("atan2",), ints="float"),
    "remainder": _b("tvk_remainder(a, b)"),      # sign of the divisor
    "bitwise_and": _b("(a & b)"),                 # integer inputs only (bool goes through logical_*)
    "bitwise_or": _b("(a | b)"),
    "bitwise_xor": _b("(a ^ b)"),
    "bitwise_not": _u("(~a)"),
    # torch's shifts: a shift by a negative amount or by the width or more gives 0 (left) or the sign (right)
    "bitwise_left_shift": _b("((b < CT(0) || b >= CT(CT_BITS)) ? CT(0) : (a << b))"),
    "bitwise_right_shift": _b("((b < CT(0) || b >= CT(CT_BITS)) ? (a >> CT(CT_BITS - 1)) : (a >> b))"),
    "fmod": _b("tvk_fmod(a, b)"),                # sign of the dividend
    "floor_divide": _b("tvk_floor_div(a, b)"),
    "trunc_divide": _b("tvk_trunc_div(a, b)"),
    "copysign": _b("tvk_copysign(a, b)", **_F, aten=("copysign",), ints="float"),
    "hypot": _b("tvk_hypot(a, b)", **_F, aten=("hypot",), ints="refuse"),
    "logaddexp": _b("tvk_logaddexp(a, b)", **_F, aten=("logaddexp",), ints="refuse"),
    "logaddexp2": _b("tvk_logaddexp2(a, b)", **_F, aten=("logaddexp2",), ints="refuse"),
    "xlogy": _b("tvk_xlogy(a, b)", **_F, aten=("xlogy",), ints="float"),
    "xlog1py": _b("tvk_xlog1py(a, b)", **_F, aten=("special_xlog1py",), ints="float"),
    "fmax": _b("tvk_fmax(a, b)", aten=("fmax",)),                # a nan loses, unlike maximum
    "fmin": _b("tvk_fmin(a, b)", aten=("fmin",)),
    "heaviside": _b("(a == CT(0) ? b : B2CT(a > CT(0)))"),
    "nextafter": _b("tvk_nextafter(a, b)", **_F, aten=("nextafter",), ints="refuse"),
    "zeta": _b("tvk_zeta(a, b)", **_F, aten=("special_zeta",), ints="float"),                  # Hurwitz zeta(x = a, q = b)
    "prelu": _b("(a > 0.0 ? a : b * a)", **_F),          # b = weight
    "glu": _b("(a * tvk_sigmoid(b))", **_F),             # a, b = the two halves
    # comparisons
    "eq": _b("B2CT(a == b)", **_CMP),
    "ne": _b("B2CT(a != b)", **_CMP),
    "lt": _b("B2CT(a < b)", **_CMP),
    "le": _b("B2CT(a <= b)", **_CMP),
    "gt": _b("B2CT(a > b)", **_CMP),
    "ge": _b("B2CT(a >= b)", **_CMP),
    # backward helpers: a = grad, b = the forward input x (or its output y where named)
    "threshold_backward": _b("(b > S(0) ? a : CT(0))", nscalars=1, defaults=(0,)),
    "leaky_relu_backward": _b("(b > 0.0 ? a : a * S(0))", nscalars=1, defaults=(0.01,), **_F),
    # elu_backward: S = alpha * scale, scale, input_scale, whether b is elu's result (else its input)
    "elu_backward": _b("(b <= 0.0 ? (S(3) != 0.0 ? a * S(2) * (b + S(0)) : a * S(2) * S(0) * exp(b * S(2)))"
                       " : a * S(1))", nscalars=4, **_F),
    "softplus_backward": _b("(b * S(0) > S(1) ? a : a * tvk_sigmoid(b * S(0)))", nscalars=2, **_F),
    "shrink_backward": _b("((b >= -S(0) && b <= S(0)) ? 0.0 : a)", nscalars=1, **_F),   # hard and soft
    "logit_backward": _b("tvk_logit_grad(a, b, S(0))", nscalars=1, defaults=(-1.0,), **_F),
    "prelu_backward_weight": _b("(b > 0.0 ? 0.0 : b * a)", **_F),                 # a = grad, b = x
    "glu_backward_gate": OpSpec(3, "a * b * tvk_sigmoid(c) * (1.0 - tvk_sigmoid(c))", **_F),  # grad, first half, gate
    "prelu_backward_input": OpSpec(3, "(b > 0.0 ? a : c * a)", **_F),           # grad, x, weight
    # ternary
    "where": OpSpec(3, "(a != CT(0) ? b : c)", compute="values"),   # where(cond, b, c)
    "addcmul": OpSpec(3, "a + S(0) * b * c", nscalars=1, defaults=(1,)),
    "addcdiv": OpSpec(3, "a + S(0) * b / c", nscalars=1, defaults=(1,), **_F),
}


_subscribers: list = []  # what derives from each row (torchvk's aten declarations)


def add_op(name: str, spec: OpSpec) -> None:
    """One more row of the table; what subscribed with each_op() derives from it at once. A name
    already in the table raises: a second row would silently replace the first."""
    if name in OPS:
        raise ValueError(f"elementwise op {name!r} is already in the table: {OPS[name]}")
    if spec.ints not in ("keep", "float", "refuse"):
        raise ValueError(f"elementwise op {name!r}: ints must be 'keep', 'float' or 'refuse', not {spec.ints!r}")
    OPS[name] = spec
    for derive in _subscribers:
        derive(name, spec)


def each_op(derive) -> None:
    """Call derive(name, spec) for every row now and for every row added later."""
    for name, spec in list(OPS.items()):
        derive(name, spec)
    _subscribers.append(derive)


def _activation_ops(act):
    """An activation table entry as ops: `name` (a = x) and `name_backward` (a = the gradient,
    b = the forward's input x or output y, as the entry says)."""
    add_op(act.name, _u(act.glsl("a"), float_only=act.ints != "keep"))
    if act.grad:
        add_op(act.name + "_backward", _b(act.grad_glsl("a", "b"), float_only=act.ints != "keep"))


activations.each(_activation_ops)

# float32 ops that the original binary kernel computes identically (contiguous fast path)
_LEGACY = {"add", "sub", "mul", "div"}


def _promote(kinds, float_only=False) -> int:
    """kinds: dtype names, or Python types for scalar operands."""
    if float_only:
        return CT_FLOAT
    ct = CT_INT32
    for k in kinds:
        if k is float or (isinstance(k, str) and DTYPES[k].kind == "f"):
            return CT_FLOAT
        if k == "int64":
            ct = CT_INT64
    return ct


# ============================================================== operands
@dataclass(frozen=True)
class Operand:
    """A strided view: byte address of element 0, shape and strides in elements, dtype.
    `address` may also be given as a DeviceBuffer; strides=None means contiguous."""

    address: int
    shape: tuple
    strides: tuple | None = None
    dtype: str = "float32"

    def __post_init__(self):
        addr = self.address
        if not isinstance(addr, int):
            addr = int(getattr(addr, "address", addr))
        shape = tuple(int(s) for s in self.shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"negative size in shape {shape}")
        strides = contiguous_strides(shape) if self.strides is None else tuple(int(s) for s in self.strides)
        if len(strides) != len(shape):
            raise ValueError(f"shape {shape} and strides {strides} differ in length")
        object.__setattr__(self, "address", addr)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    @classmethod
    def trusted(cls, address: int, shape: tuple, strides: tuple, dtype: str) -> "Operand":
        """No checks, no conversions: for callers (the torch layer) whose values are already
        an int address, int tuples of equal length and a DTYPES key. Saves ~10 us per op."""
        op = object.__new__(cls)
        object.__setattr__(op, "address", address)
        object.__setattr__(op, "shape", shape)
        object.__setattr__(op, "strides", strides)
        object.__setattr__(op, "dtype", dtype)
        return op

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    def is_contiguous(self) -> bool:
        return self.strides == contiguous_strides(self.shape) or self.numel <= 1


def broadcast_shapes(*shapes) -> tuple:
    """numpy/torch broadcasting of shapes (right-aligned, size 1 stretches)."""
    nd = max((len(s) for s in shapes), default=0)
    out = [1] * nd
    for s in shapes:
        for i, d in enumerate(s):
            j = nd - len(s) + i
            if d == out[j] or d == 1:
                continue
            if out[j] == 1:
                out[j] = d
            else:
                raise ValueError(f"shapes {[tuple(x) for x in shapes]} cannot be broadcast together "
                                 f"(dim {j}: {out[j]} vs {d})")
    return tuple(out)


def _expand_strides(shape, strides, out_shape) -> list:
    """Strides of `shape` broadcast to `out_shape` (0 on broadcast dims)."""
    off = len(out_shape) - len(shape)
    res = []
    for i, size in enumerate(out_shape):
        j = i - off
        if j < 0 or shape[j] == 1:
            res.append(0)
        elif shape[j] == size:
            res.append(strides[j])
        else:
            raise ValueError(f"shape {tuple(shape)} does not broadcast to {tuple(out_shape)}")
    return res


def collapse_dims(shape, strides_per_slot):
    """Drop size-1 dims, order dims by the last slot's (output) strides, outermost first, and
    merge neighbours that are contiguous in every slot. Returns (shape, [strides per slot])."""
    dims = [i for i, s in enumerate(shape) if s != 1]
    out_strides = strides_per_slot[-1]
    dims.sort(key=lambda i: -out_strides[i])  # stable: ties keep their order
    new_shape: list = []
    new_strides: list = [[] for _ in strides_per_slot]
    for i in dims:
        size = shape[i]
        if new_shape and all(ns[-1] == st[i] * size for ns, st in zip(new_strides, strides_per_slot)):
            new_shape[-1] *= size
            for ns, st in zip(new_strides, strides_per_slot):
                ns[-1] = st[i]
        else:
            new_shape.append(size)
            for ns, st in zip(new_strides, strides_per_slot):
                ns.append(st[i])
    return new_shape, new_strides


# ============================================================== the N-d family
MAX_DIMS = 6
_NDIM_BUCKETS = (1, 1, 2, 3, 4, 6, 6)  # collapsed dims -> template NDIM (pads with size-1 dims)
_META_CACHE_MAX = 1024


def compute_type(op: str, kinds, out_dtype: str, compute=None) -> int:
    """The compute type (CT_*) of `op` over operands of these kinds (dtype names of tensors,
    Python types of numbers): `compute` if given, else per OPS[op].compute (see the module docstring)."""
    spec = OPS[op]
    if compute is not None:
        return _promote([dtype_name(compute)])
    if spec.compute == "out":
        return _promote([out_dtype], spec.float_only)
    return _promote(kinds[1:] if spec.compute == "values" else kinds, spec.float_only)


def defines(op: str, kinds, out_dtype: str, ct: int, params: dict, vec: int = 1, ndim: int = 0,
            meta_buf: bool = False) -> dict:
    """The defines of one N-d kernel (the runtime and the tuner target build them here): `op` over
    operands of these kinds (dtype names of tensors, Python types of numbers pushed as scalars) in
    compute type `ct`, written as out_dtype; contiguous (ndim 0: `vec` elements per load, the
    tuned ITEMS) or strided over `ndim` dims (their sizes and strides pushed, or in a buffer when
    `meta_buf`; the tuned ND_ITEMS)."""
    spec = OPS[op]
    tensors = [k for k in kinds if isinstance(k, str)]
    out = {"NT": len(tensors), "DTO": DTYPES[out_dtype].code, "CT_KIND": ct,
           "NS": spec.nscalars + len(kinds) - len(tensors), "OP_EXPR": spec.expr}
    for i, name in enumerate(tensors):
        out[f"DT{i}"] = DTYPES[name].code
    t_i, s_i = 0, spec.nscalars  # tensor slots x0.., number operands S(k) after the op's own scalars
    for name, kind in zip(("IN_A", "IN_B", "IN_C"), kinds):
        if isinstance(kind, str):
            out[name], t_i = f"x{t_i}", t_i + 1
        else:
            out[name], s_i = f"S({s_i})", s_i + 1
    for name in {*tensors, out_dtype}:
        if DTYPES[name].define:
            out[DTYPES[name].define] = 1
    if ct == CT_INT64:
        out["USE_I64"] = 1
    if ndim == 0:
        out.update(CONTIG=1, ITEMS=params["ITEMS"], VEC=vec)
    else:
        out.update(CONTIG=0, NDIM=ndim, META_BUF=int(meta_buf), ITEMS=params["ND_ITEMS"])
    return out


class _Plan:
    __slots__ = ("legacy", "contig", "n", "nt", "ct", "ns", "kinds", "out_dtype", "ndim", "meta_buf", "params",
                 "wg", "items", "vec_max", "pipes", "launches", "push_fmt", "meta", "meta_key", "outer", "label",
                 "itemsizes")


class Elementwise(Family):
    """The N-d family, tuned as `elementwise_nd`: the contiguous path uses WG/VEC/ITEMS, the
    strided path ND_WG/ND_ITEMS. float32 add/sub/mul/div over contiguous operands run on the
    binary kernel (Binary, tuned as `elementwise`)."""

    family = "elementwise_nd"
    template = "elementwise_nd.comp"

    def __init__(self, device):
        Family.__init__(self, device)
        self.meta_bufs: dict = {}
        self.push_limit = min(128, device.facts.max_push_constants)

    # ---------------------------------------------------------------- planning
    def plan(self, op: str, inputs: tuple, out: Operand, compute, params: dict | None = None) -> _Plan:
        """The launch plan of `op` on these operand geometries, kept by the family (kept_plan())."""
        key = (op, tuple((x.shape, x.strides, x.dtype) if isinstance(x, Operand) else type(x) for x in inputs),
               out.shape, out.strides, out.dtype, compute, tuple(sorted(params.items())) if params else None)
        return self.kept_plan(key) or self.keep_plan(key, self._make_plan(op, inputs, out, compute, params))

    def _make_plan(self, op, inputs, out, compute, params) -> _Plan:
        spec = OPS[op]
        feats = self.device.facts.features
        tensors = [x for x in inputs if isinstance(x, Operand)]
        shape = broadcast_shapes(out.shape, *(t.shape for t in tensors))
        if shape != out.shape:
            raise ValueError(f"{op}: output shape {out.shape} is not the broadcast shape {shape} of the operands")
        kinds = tuple(x.dtype if isinstance(x, Operand) else type(x) for x in inputs)
        ct = compute_type(op, kinds, out.dtype, compute)
        used = {t.dtype for t in tensors} | {out.dtype}
        for name in used:
            need = DTYPES[name].feature
            if need and not feats.get(need):
                raise TVKError(f"{op}: {self.device.facts.name} lacks {need}, which {name} tensors need")
        if ct == CT_INT64 and not feats.get("shader_int64"):
            raise TVKError(f"{self.device.facts.name} lacks shaderInt64, which int64 arithmetic needs")

        pl = _Plan()
        pl.label = op
        pl.nt = len(tensors)
        pl.ct = ct
        pl.ns = spec.nscalars + (len(inputs) - len(tensors))
        pl.kinds, pl.out_dtype = kinds, out.dtype
        pl.n = math.prod(shape)
        if pl.n == 0:
            return pl
        if pl.n >= 1 << 32:
            raise ValueError(f"{op}: {pl.n} elements; the elementwise kernels index with 32 bits")
        pl.itemsizes = tuple(t.itemsize for t in tensors) + (out.itemsize,)

        # layout
        strides = [_expand_strides(t.shape, t.strides, shape) for t in tensors]
        strides.append(list(out.strides))
        if any(s < 0 for st in strides for s in st):
            raise ValueError(f"{op}: negative strides are not supported")
        cshape, cstrides = collapse_dims(shape, strides)
        pl.contig = all(all(s == 1 for s in st) for st in cstrides) and len(cshape) <= 1
        # explicit params are the N-d kernel's (the tuner's): they never take the binary kernel
        pl.legacy = (params is None and pl.contig and op in _LEGACY and ct == CT_FLOAT and pl.nt == 2
                     and len(inputs) == 2 and all(t.dtype == "float32" for t in tensors) and out.dtype == "float32")
        owner = family(self.device, Binary) if pl.legacy else self
        pl.params = owner.resolve({"n": pl.n}, params)
        pl.pipes, pl.launches = {}, {}
        pl.outer = None
        pl.meta = None
        pl.meta_key = None
        pl.ndim, pl.meta_buf = 0, False
        sc = _CT_PACK[ct] * pl.ns
        if pl.contig:
            pl.wg, pl.items, pl.vec_max = pl.params["WG"], pl.params["ITEMS"], pl.params["VEC"]
            pl.push_fmt = _PUSH if pl.legacy else struct.Struct("<" + "Q" * (pl.nt + 1) + sc + "I")
            return pl
        # strided: more than MAX_DIMS collapsed dims -> the host loops over the leading ones
        if len(cshape) > MAX_DIMS:
            lead = len(cshape) - MAX_DIMS
            pl.outer = (cshape[:lead], [st[:lead] for st in cstrides])
            cshape, cstrides = cshape[lead:], [st[lead:] for st in cstrides]
            pl.n = math.prod(cshape)
        nd = _NDIM_BUCKETS[len(cshape)]
        pad = nd - len(cshape)
        cshape = [1] * pad + cshape
        cstrides = [[0] * pad + st for st in cstrides]
        meta = list(cshape[1:])
        for st in cstrides:
            meta.extend(st)
        if any(v >= 1 << 32 for v in meta):
            raise ValueError(f"{op}: strides or sizes beyond 32 bits are not supported")
        pl.wg, pl.items, pl.vec_max = pl.params["ND_WG"], pl.params["ND_ITEMS"], 1
        inline = 8 * (pl.nt + 1) + struct.calcsize("<" + sc) + 4 + 4 * len(meta)
        pl.ndim, pl.meta_buf = nd, inline > self.push_limit
        if pl.meta_buf:
            pl.push_fmt = struct.Struct("<" + "Q" * (pl.nt + 2) + sc + "I")
            pl.meta_key = tuple(meta)
        else:
            pl.push_fmt = struct.Struct("<" + "Q" * (pl.nt + 1) + sc + "I" + "I" * len(meta))
            pl.meta = tuple(meta)
        return pl

    def pipe(self, pl: _Plan, vec: int):
        p = pl.pipes.get(vec)
        if p is None:
            if pl.legacy:
                p = family(self.device, Binary).kernel(pl.params, pl.label, vec)
            else:
                kernel = defines(pl.label, pl.kinds, pl.out_dtype, pl.ct, pl.params, vec, pl.ndim, pl.meta_buf)
                p = self.variant(kernel, pl.wg, pl.push_fmt.size)
            pl.pipes[vec] = p
        return p

    def meta_buffer(self, key: tuple):
        buf = self.meta_bufs.get(key)
        if buf is None:
            import numpy as np  # lazy: numpy only once shapes overflow the push constants (see above)

            if len(self.meta_bufs) >= _META_CACHE_MAX:
                self.meta_bufs.clear()  # in-flight users hold their buffer through keep_alive
            buf = self.meta_bufs[key] = self.device.upload(np.asarray(key, dtype=np.uint32))
        return buf


def _scalar_values(spec: OpSpec, ct: int, scalars, operand_scalars) -> list:
    """The push-constant scalars in the compute type; None bounds become +-inf (int min/max)."""
    out = []
    for k, v in enumerate(list(scalars) + list(operand_scalars)):
        side = spec.unbounded[k] if k < len(spec.unbounded) else None
        if v is None:
            if side is None:
                raise ValueError(f"scalar {k} of this op may not be None")
            v = (-math.inf if side == "lo" else math.inf) if ct == CT_FLOAT else _INT_RANGE[ct][side == "hi"]
        if ct == CT_FLOAT:
            out.append(float(v))
            continue
        lo, hi = _INT_RANGE[ct]
        if not (isinstance(v, int) or float(v).is_integer()) or not lo <= v <= hi:  # never rounded or clamped here
            raise ValueError(f"scalar {v!r} is no {_CT_NAMES[ct]} value: convert it as the op converts it first "
                             f"(torch's rules: torchvk/aten/promotion.py)")
        out.append(int(v))
    return out


def _pyscalar(x):
    if isinstance(x, (bool, int, float)):
        return x
    if hasattr(x, "address"):
        raise TypeError("pass tensors as Operand(address, shape, strides, dtype), not bare buffers")
    if isinstance(x, bool) or type(x).__name__ in ("bool_", "bool"):
        return bool(x)
    return int(x) if isinstance(x, numbers.Integral) else float(x)


def elementwise(device, op: str, inputs, out: Operand, scalars=(), compute=None, params: dict | None = None):
    """out = OPS[op](*inputs) with broadcasting. inputs: Operands or Python numbers (pushed as
    scalars); scalars: the op's own scalars (alpha, clamp bounds, fill value ...), defaulting to
    OPS[op].defaults; compute: force the compute dtype ('float32', 'int64', 'int32'); params: an
    explicit parameter set of the N-d kernel (WG, VEC, ITEMS, ND_WG, ND_ITEMS: the tuner), merged
    over the tuned/default one."""
    spec = OPS.get(op)
    if spec is None:
        raise KeyError(f"unknown elementwise op {op!r}; known: {', '.join(sorted(OPS))}")
    inputs = tuple(x if isinstance(x, Operand) else _pyscalar(x) for x in inputs)
    if len(inputs) != spec.arity:
        raise TypeError(f"{op} takes {spec.arity} operands, got {len(inputs)}")
    scalars = tuple(scalars) if scalars else tuple(spec.defaults)
    if len(scalars) != spec.nscalars:
        raise TypeError(f"{op} takes {spec.nscalars} scalars, got {len(scalars)}")
    if not isinstance(out, Operand):
        raise TypeError("out must be an Operand")
    fam = family(device, Elementwise)
    pl = fam.plan(op, inputs, out, compute, params)
    if pl.n == 0:
        return
    addrs = [x.address for x in inputs if isinstance(x, Operand)] + [out.address]
    launch(device, fam, pl, op, addrs, scalars, [x for x in inputs if not isinstance(x, Operand)])


def planned(device, op: str, inputs, out: Operand, compute=None):
    """(family, plan) of this op on these operand geometries (checked as elementwise() checks
    them): with launch(), what an eager op repeats on every call (torchvk/aten/elementwise.py)."""
    fam = family(device, Elementwise)
    return fam, fam.plan(op, inputs, out, compute)


def launch(device, fam, pl, op: str, addrs, scalars, operand_scalars):
    """Record a planned op: addrs are the tensor operands' and then the output's addresses,
    scalars the op's own (OPS[op].defaults when empty), operand_scalars the Python numbers
    among its inputs, in order."""
    record(device, fam, pl, op, addrs, scalar_values(pl, op, scalars, operand_scalars))


def scalar_values(pl, op: str, scalars, operand_scalars) -> list:
    """The push-constant scalars of a planned op (launch's arguments), for record()."""
    spec = OPS[op]
    return _scalar_values(spec, pl.ct, scalars or spec.defaults, operand_scalars)


def record(device, fam, pl, op: str, addrs, svals):
    """launch() with its scalars converted (scalar_values): what a repeated eager op records."""
    # the tuner shapes: elementwise's and elementwise_nd's contiguous {"n"}; a strided launch is counted apart
    if recording():
        record_shape(Binary.family if pl.legacy else fam.family, {"n": pl.n}, dtype=pl.out_dtype, op=op,
                     layout="contiguous" if pl.legacy or pl.contig else "strided")
    if pl.contig:  # the binary kernel's plans (legacy) are contiguous too
        vec = pl.vec_max
        if pl.legacy:
            a, b, o = addrs
            if (a | b | o) & 15:  # as binary(): 16-byte aligned vector loads
                vec = 1
            push = _PUSH.pack(a, b, o, pl.n, svals[0] if svals else 1.0)
        else:
            while vec > 1 and any(addr % (vec * size) for addr, size in zip(addrs, pl.itemsizes)):
                vec //= 2
            push = pl.push_fmt.pack(*addrs, *svals, pl.n)
        launch = pl.launches.get(vec)
        if launch is None:  # the pipeline and grid of each vector width, worked out once per plan
            per_group = pl.wg * pl.items * vec
            launch = pl.launches[vec] = (fam.pipe(pl, vec), grid_1d((pl.n + per_group - 1) // per_group,
                                                                     device.facts.max_workgroup_count[0]))
        device.stream.dispatch(launch[0], launch[1], push, op)
        return
    pipe = fam.pipe(pl, 1)
    per_group = pl.wg * pl.items
    groups = grid_1d((pl.n + per_group - 1) // per_group, device.facts.max_workgroup_count[0])
    if pl.meta_key is not None:
        mbuf = fam.meta_buffer(pl.meta_key)
        device.stream.keep_alive(mbuf)
        tail = (mbuf.address, *svals, pl.n)
    else:
        tail = (*svals, pl.n, *pl.meta)
    if pl.outer is None:
        device.stream.dispatch(pipe, groups, pl.push_fmt.pack(*addrs, *tail), op)
        return
    lead_shape, lead_strides = pl.outer
    for idx in itertools.product(*(range(s) for s in lead_shape)):
        moved = [addr + size * sum(i * s for i, s in zip(idx, st))
                 for addr, size, st in zip(addrs, pl.itemsizes, lead_strides)]
        device.stream.dispatch(pipe, groups, pl.push_fmt.pack(*moved, *tail), op)


# ============================================================== public entry points
def unary(device, op: str, x, out: Operand, scalars=(), compute=None):
    """out = op(x) (relu, exp, clamp, pow_scalar, copy, ...); x broadcasts to out."""
    if OPS[op].arity != 1:
        raise TypeError(f"{op} is not a unary op")
    elementwise(device, op, (x,), out, scalars, compute)


def binary_nd(device, op: str, a, b, out: Operand, alpha=1.0, scalars=(), compute=None):
    """out = op(a, b) with broadcasting; a or b may be a Python number. alpha: add/sub's
    multiplier of b; scalars: other ops' scalars (threshold_backward's threshold ...)."""
    if OPS[op].arity != 2:
        raise TypeError(f"{op} is not a binary op")
    if op in ("add", "sub") and not scalars:
        scalars = (alpha,)
    elementwise(device, op, (a, b), out, scalars, compute)


def ternary(device, op: str, a, b, c, out: Operand, scalars=(), compute=None):
    """out = op(a, b, c): where(cond, a, b), addcmul, addcdiv."""
    if OPS[op].arity != 3:
        raise TypeError(f"{op} is not a ternary op")
    elementwise(device, op, (a, b, c), out, scalars, compute)


def fill(device, out: Operand, value):
    """out[...] = value (any strides; cast to out's dtype, bool: value != 0)."""
    elementwise(device, "fill", (), out, (value,))


def copy(device, src: Operand, dst: Operand):
    """dst = src cast to dst.dtype; src broadcasts to dst; any strides (.contiguous(), .to())."""
    elementwise(device, "copy", (src,), dst)
