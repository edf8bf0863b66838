"""Elementwise kernels.

* `binary()` / `add()`: the original contiguous float32 binary kernel
  (templates/elementwise_binary.comp), kept as is: a benchmark and the tuner use it.
* `unary()`, `binary_nd()`, `ternary()`, `fill()`, `copy()`, `elementwise()`: the general
  family (templates/elementwise_nd.comp): N-d strided operands with broadcasting (stride 0),
  per-operand dtypes (float32, float16, bfloat16, int64, int32, bool as uint8), a compute type, an
  output that may alias an input (same layout), Python numbers as operands.

Ops are data: `OPS` maps a name to its arity, a GLSL expression in `a, b, c` (the operands
in the compute type `CT`) and `S(k)` (push-constant scalars), and how its compute type is
picked. The expression becomes the OP_EXPR define; no Python per-op code.

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
Float16 and bfloat16 are storage only: they are computed in float32.
"""
from __future__ import annotations

import itertools
import math
import struct
from dataclasses import dataclass

from ..errors import TVKError
from .launch import Family, family, grid_1d

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
SMALL = 1 << 16


class Binary(Family):
    def __init__(self, device):
        super().__init__(device, "elementwise", "elementwise_binary.comp")

    def variant(self, op: str, bucket: str, vec: int | None = None):
        params, _ = self.params(bucket)
        vec = params["VEC"] if vec is None else vec
        key = (op, bucket, vec)
        return self.pipeline(key, lambda: self.device.pipelines.get(
            self.template, {"OP(x,y)": BINARY_OPS[op], "VEC": vec, "ITEMS": params["ITEMS"]},
            local_size=(params["WG"], 1, 1), push_size=_PUSH.size)), params, vec


def binary(device, op: str, a, b, out, n: int, alpha: float = 1.0, params: dict | None = None):
    """out[:n] = op(a[:n], b[:n]); a, b, out are DeviceBuffers (or anything with .address)."""
    fam = family(device, Binary)
    bucket = "small" if n < SMALL else "large"
    if params is None:
        aligned = (a.address | b.address | out.address) & 15 == 0
        pipe, params, vec = fam.variant(op, bucket, None if aligned else 1)
    else:  # explicit parameters: the tuner and ablations
        vec = params["VEC"]
        pipe = device.pipelines.get(fam.template, {"OP(x,y)": BINARY_OPS[op], "VEC": vec, "ITEMS": params["ITEMS"]},
                                    local_size=(params["WG"], 1, 1), push_size=_PUSH.size)
    per_group = params["WG"] * params["ITEMS"] * vec
    groups = grid_1d((n + per_group - 1) // per_group, device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, groups, _PUSH.pack(a.address, b.address, out.address, n, alpha), op)


def add(device, a, b, out, n: int, alpha: float = 1.0, params: dict | None = None):
    binary(device, "add", a, b, out, n, alpha, params)


# ============================================================== dtypes
@dataclass(frozen=True)
class DType:
    name: str
    code: int        # DT code in elementwise_nd.comp
    itemsize: int
    kind: str        # "f" floating, "i" integer, "b" bool
    feature: str | None  # device.facts.features key it needs
    define: str | None   # USE_* define that enables its storage extension


DTYPES = {
    "float32": DType("float32", 0, 4, "f", None, None),
    "float16": DType("float16", 1, 2, "f", "storage_16bit", "USE_F16"),
    "int64": DType("int64", 2, 8, "i", "shader_int64", "USE_I64"),
    "int32": DType("int32", 3, 4, "i", None, None),
    "bool": DType("bool", 4, 1, "b", "storage_8bit", "USE_U8"),
    # raw 16-bit words (the high half of a float32), computed in float32: no bf16 arithmetic needed
    "bfloat16": DType("bfloat16", 5, 2, "f", "storage_16bit", "USE_F16"),
}
_ALIASES = {"float": "float32", "half": "float16", "long": "int64", "int": "int32", "bool_": "bool",
            "f4": "float32", "f2": "float16", "i8": "int64", "i4": "int32", "?": "bool",
            "bf16": "bfloat16"}


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
        import numpy as np

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
    "neg": _u("-a"),
    "abs": _u("abs(a)"),
    "square": _u("a * a"),
    "reciprocal": _u("1.0 / a", **_F),
    "exp": _u("exp(a)", **_F),
    "log": _u("log(a)", **_F),
    "sqrt": _u("sqrt(a)", **_F),
    "rsqrt": _u("inversesqrt(a)", **_F),
    "relu": _u("(a < CT(0) ? CT(0) : a)"),
    "gelu": _u("a * tvk_ncdf(a)", **_F),
    "gelu_tanh": _u("tvk_gelu_tanh(a)", **_F),
    "silu": _u("a / (1.0 + exp(-a))", **_F),
    "sigmoid": _u("tvk_sigmoid(a)", **_F),
    "tanh": _u("tvk_tanh(a)", **_F),
    "pow_scalar": _u("TVK_POW(a, S(0))", nscalars=1),       # x ** s
    "rpow_scalar": _u("TVK_POW(S(0), a)", nscalars=1),      # s ** x
    "clamp": _u("tvk_min(tvk_max(a, S(0)), S(1))", nscalars=2, unbounded=("lo", "hi")),
    "leaky_relu": _u("(a < CT(0) ? a * S(0) : a)", nscalars=1, defaults=(0.01,), **_F),
    # unary math (helpers in the template: "math helpers of the OPS table")
    "sin": _u("tvk_sin(a)", **_F),
    "cos": _u("tvk_cos(a)", **_F),
    "tan": _u("tvk_tan(a)", **_F),
    "asin": _u("tvk_asin(a)", **_F),
    "acos": _u("tvk_acos(a)", **_F),
    "atan": _u("(isnan(a) ? a : atan(a))", **_F),
    "sinh": _u("tvk_sinh(a)", **_F),
    "cosh": _u("tvk_cosh(a)", **_F),
    "asinh": _u("tvk_asinh(a)", **_F),
    "acosh": _u("tvk_acosh(a)", **_F),
    "atanh": _u("tvk_atanh(a)", **_F),
    "erf": _u("tvk_erf(a)", **_F),
    "erfc": _u("tvk_erfc(a)", **_F),
    "erfinv": _u("tvk_erfinv(a)", **_F),
    "erfcx": _u("tvk_erfcx(a)", **_F),
    "log_ndtr": _u("tvk_log_ndtr(a)", **_F),
    "ndtri": _u("tvk_ndtri(a)", **_F),
    "expm1": _u("tvk_expm1(a)", **_F),
    "log1p": _u("tvk_log1p(a)", **_F),
    "log2": _u("log2(a)", **_F),
    "log10": _u("(log2(a) * 0.30102999566398120)", **_F),
    "exp2": _u("exp2(a)", **_F),
    "ceil": _u("ceil(a)", **_F),
    "floor": _u("floor(a)", **_F),
    "trunc": _u("trunc(a)", **_F),
    "round": _u("roundEven(a)", **_F),
    "round_decimals": _u("tvk_round_decimals(a, S(0), S(1))", nscalars=2, **_F),  # 10^|d|, d < 0
    "frac": _u("(a - trunc(a))", **_F),
    "signbit": _u("B2CT(tvk_signbit(a))", **_CMP),
    "nan_to_num": _u("(isnan(a) ? S(0) : (isinf(a) ? (a > 0.0 ? S(1) : S(2)) : a))", nscalars=3, **_F),
    "lgamma": _u("tvk_lgamma(a)", **_F),
    "digamma": _u("tvk_digamma(a)", **_F),
    "polygamma": _u("tvk_polygamma(S(0), a)", nscalars=1, **_F),
    "i0": _u("tvk_i0(a)", **_F),
    "i0e": _u("tvk_i0e(a)", **_F),
    "i1": _u("tvk_i1(a)", **_F),
    "i1e": _u("tvk_i1e(a)", **_F),
    "spherical_bessel_j0": _u("tvk_spherical_bessel_j0(a)", **_F),
    "entr": _u("tvk_entr(a)", **_F),
    "sinc": _u("tvk_sinc(a)", **_F),
    "logit": _u("tvk_logit(a, S(0))", nscalars=1, defaults=(-1.0,), **_F),   # eps < 0: no clamp
    "angle": _u("(isnan(a) ? a : (a < 0.0 ? TVK_PI : 0.0))", **_F),
    # activations
    # elu: S = alpha * scale, scale, input_scale
    "elu": _u("(a <= 0.0 ? tvk_expm1(a * S(2)) * S(0) : a * S(1))", nscalars=3, **_F),
    "softplus": _u("(a * S(0) > S(1) ? a : tvk_log1p(exp(a * S(0))) / S(0))", nscalars=2, **_F),  # beta, threshold
    "hardshrink": _u("((a >= -S(0) && a <= S(0)) ? 0.0 : a)", nscalars=1, **_F),
    "softshrink": _u("(a > S(0) ? a - S(0) : (a < -S(0) ? a + S(0) : (isnan(a) ? a : 0.0)))", nscalars=1, **_F),
    "hardsigmoid": _u("(tvk_relu6(a + 3.0) / 6.0)", **_F),
    "hardswish": _u("(a * tvk_relu6(a + 3.0) / 6.0)", **_F),
    "mish": _u("(a * tvk_tanh(tvk_log1p(exp(a))))", **_F),
    "threshold": _u("(a <= S(0) ? S(1) : a)", nscalars=2),                    # threshold, value
    "log_sigmoid": _u("(min(a, 0.0) - tvk_log1p(exp(-abs(a))))", **_F),
    # binary arithmetic
    "add": _b("a + S(0) * b", nscalars=1, defaults=(1,)),
    "sub": _b("a - S(0) * b", nscalars=1, defaults=(1,)),
    "mul": _b("a * b"),
    "div": _b("a / b", **_F),
    "pow": _b("TVK_POW(a, b)"),
    "maximum": _b("tvk_max(a, b)"),
    "minimum": _b("tvk_min(a, b)"),
    "lerp_scalar": _b("a + S(0) * (b - a)", nscalars=1, **_F),
    "atan2": _b("tvk_atan2(a, b)", **_F),
    "remainder": _b("tvk_remainder(a, b)"),      # sign of the divisor
    "fmod": _b("tvk_fmod(a, b)"),                # sign of the dividend
    "floor_divide": _b("tvk_floor_div(a, b)"),
    "trunc_divide": _b("tvk_trunc_div(a, b)"),
    "copysign": _b("tvk_copysign(a, b)", **_F),
    "hypot": _b("tvk_hypot(a, b)", **_F),
    "logaddexp": _b("tvk_logaddexp(a, b)", **_F),
    "logaddexp2": _b("tvk_logaddexp2(a, b)", **_F),
    "xlogy": _b("tvk_xlogy(a, b)", **_F),
    "xlog1py": _b("tvk_xlog1py(a, b)", **_F),
    "fmax": _b("tvk_fmax(a, b)"),                # a nan loses, unlike maximum
    "fmin": _b("tvk_fmin(a, b)"),
    "heaviside": _b("(a == CT(0) ? b : B2CT(a > CT(0)))"),
    "nextafter": _b("tvk_nextafter(a, b)", **_F),
    "zeta": _b("tvk_zeta(a, b)", **_F),                  # Hurwitz zeta(x = a, q = b)
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
    "relu_backward": _b("(b > CT(0) ? a : CT(0))"),
    "threshold_backward": _b("(b > S(0) ? a : CT(0))", nscalars=1, defaults=(0,)),
    "gelu_backward": _b("a * tvk_gelu_grad(b)", **_F),
    "gelu_tanh_backward": _b("a * tvk_gelu_tanh_grad(b)", **_F),
    "silu_backward": _b("a * tvk_silu_grad(b)", **_F),
    "sigmoid_backward": _b("a * b * (1.0 - b)", **_F),   # b = sigmoid output
    "tanh_backward": _b("a * (1.0 - b * b)", **_F),      # b = tanh output
    "leaky_relu_backward": _b("(b > 0.0 ? a : a * S(0))", nscalars=1, defaults=(0.01,), **_F),
    # elu_backward: S = alpha * scale, scale, input_scale, whether b is elu's result (else its input)
    "elu_backward": _b("(b <= 0.0 ? (S(3) != 0.0 ? a * S(2) * (b + S(0)) : a * S(2) * S(0) * exp(b * S(2)))"
                       " : a * S(1))", nscalars=4, **_F),
    "softplus_backward": _b("(b * S(0) > S(1) ? a : a * tvk_sigmoid(b * S(0)))", nscalars=2, **_F),
    "shrink_backward": _b("((b >= -S(0) && b <= S(0)) ? 0.0 : a)", nscalars=1, **_F),   # hard and soft
    "hardsigmoid_backward": _b("((b > -3.0 && b < 3.0) ? a / 6.0 : 0.0)", **_F),
    "hardswish_backward": _b("(b < -3.0 ? 0.0 : (b <= 3.0 ? a * (b / 3.0 + 0.5) : a))", **_F),
    "mish_backward": _b("a * tvk_mish_grad(b)", **_F),
    "log_sigmoid_backward": _b("a * tvk_log_sigmoid_grad(b)", **_F),
    "logit_backward": _b("tvk_logit_grad(a, b, S(0))", nscalars=1, defaults=(-1.0,), **_F),
    "prelu_backward_weight": _b("(b > 0.0 ? 0.0 : b * a)", **_F),                 # a = grad, b = x
    "glu_backward_gate": OpSpec(3, "a * b * tvk_sigmoid(c) * (1.0 - tvk_sigmoid(c))", **_F),  # grad, first half, gate
    "prelu_backward_input": OpSpec(3, "(b > 0.0 ? a : c * a)", **_F),           # grad, x, weight
    # ternary
    "where": OpSpec(3, "(a != CT(0) ? b : c)", compute="values"),   # where(cond, b, c)
    "addcmul": OpSpec(3, "a + S(0) * b * c", nscalars=1, defaults=(1,)),
    "addcdiv": OpSpec(3, "a + S(0) * b / c", nscalars=1, defaults=(1,), **_F),
}

# float32 ops that the original binary kernel computes identically (contiguous fast path)
_LEGACY = {"add", "sub", "mul", "div"}


def result_dtype(op: str, *dtypes) -> str:
    """A convenience default for the output dtype: bool for comparisons, else the compute type
    (float32 when computed in float; every input float16 (or every one bfloat16) stays so)."""
    spec = OPS[op]
    if spec.bool_result:
        return "bool"
    names = [dtype_name(d) for d in dtypes]
    ct = _promote(names, spec.float_only)
    if ct == CT_FLOAT:
        for half in ("float16", "bfloat16"):
            if names and all(n == half for n in names):
                return half
        return "float32"
    return "int64" if ct == CT_INT64 else "int32"


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


def contiguous_strides(shape) -> tuple:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


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
_PLAN_CACHE_MAX = 8192


class _Plan:
    __slots__ = ("legacy", "contig", "n", "nt", "ct", "ns", "slots", "defines", "wg", "items",
                 "vec_max", "pipes", "push_fmt", "meta", "meta_key", "outer", "label", "itemsizes")


class Elementwise(Family):
    """The N-d family. It shares the `elementwise` tuning entry (and its template checksum) with
    the binary kernel: the contiguous path uses WG/VEC/ITEMS, the strided path ND_WG/ND_ITEMS."""

    TEMPLATE = "elementwise_nd.comp"

    def __init__(self, device):
        super().__init__(device, "elementwise", "elementwise_binary.comp")
        self.plans: dict = {}
        self.meta_bufs: dict = {}
        self.push_limit = min(128, device.facts.max_push_constants)

    # ---------------------------------------------------------------- planning
    def plan(self, op: str, inputs: tuple, out: Operand, compute) -> _Plan:
        key = (op, tuple((x.shape, x.strides, x.dtype) if isinstance(x, Operand) else type(x) for x in inputs),
               out.shape, out.strides, out.dtype, compute)
        pl = self.plans.get(key)
        if pl is None:
            if len(self.plans) >= _PLAN_CACHE_MAX:
                self.plans.clear()
            pl = self.plans[key] = self._make_plan(op, inputs, out, compute)
        return pl

    def _make_plan(self, op, inputs, out, compute) -> _Plan:
        spec = OPS[op]
        feats = self.device.facts.features
        tensors = [x for x in inputs if isinstance(x, Operand)]
        shape = broadcast_shapes(out.shape, *(t.shape for t in tensors))
        if shape != out.shape:
            raise ValueError(f"{op}: output shape {out.shape} is not the broadcast shape {shape} of the operands")
        # compute type
        if compute is not None:
            ct = _promote([dtype_name(compute)])
        elif spec.compute == "out":
            ct = _promote([out.dtype], spec.float_only)
        else:
            vals = inputs[1:] if spec.compute == "values" else inputs
            ct = _promote([x.dtype if isinstance(x, Operand) else type(x) for x in vals], spec.float_only)
        used = {t.dtype for t in tensors} | {out.dtype}
        for name in used:
            need = DTYPES[name].feature
            if need and not feats.get(need):
                raise TVKError(f"{self.device.facts.name} lacks {need}, which {name} tensors need")
        if ct == CT_INT64 and not feats.get("shader_int64"):
            raise TVKError(f"{self.device.facts.name} lacks shaderInt64, which int64 arithmetic needs")

        pl = _Plan()
        pl.label = op
        pl.nt = len(tensors)
        pl.ct = ct
        pl.ns = spec.nscalars + (len(inputs) - len(tensors))
        pl.n = math.prod(shape)
        if pl.n == 0:
            return pl
        if pl.n >= 1 << 32:
            raise ValueError(f"{op}: {pl.n} elements; the elementwise kernels index with 32 bits")
        pl.itemsizes = tuple(t.itemsize for t in tensors) + (out.itemsize,)
        # operand expressions: tensor slot values x0.., scalar operands S(k)
        ins, t_i, s_i = [], 0, spec.nscalars
        for x in inputs:
            if isinstance(x, Operand):
                ins.append(f"x{t_i}")
                t_i += 1
            else:
                ins.append(f"S({s_i})")
                s_i += 1
        defines = {"NT": pl.nt, "DTO": DTYPES[out.dtype].code, "CT_KIND": ct, "NS": pl.ns,
                   "OP_EXPR": spec.expr}
        for i, t in enumerate(tensors):
            defines[f"DT{i}"] = DTYPES[t.dtype].code
        for name, expr in zip(("IN_A", "IN_B", "IN_C"), ins):
            defines[name] = expr
        for name in used:
            if DTYPES[name].define:
                defines[DTYPES[name].define] = 1
        if ct == CT_INT64:
            defines["USE_I64"] = 1

        # layout
        strides = [_expand_strides(t.shape, t.strides, shape) for t in tensors]
        strides.append(list(out.strides))
        if any(s < 0 for st in strides for s in st):
            raise ValueError(f"{op}: negative strides are not supported")
        if any(s == 0 and size > 1 for s, size in zip(out.strides, shape)):
            raise ValueError(f"{op}: the output has broadcast (stride 0) dims; it must not overlap itself")
        cshape, cstrides = collapse_dims(shape, strides)
        pl.contig = all(all(s == 1 for s in st) for st in cstrides) and len(cshape) <= 1
        pl.legacy = (pl.contig and op in _LEGACY and ct == CT_FLOAT and pl.nt == 2 and len(inputs) == 2
                     and all(t.dtype == "float32" for t in tensors) and out.dtype == "float32")
        params, _ = self.params("small" if pl.n < SMALL else "large")
        pl.pipes = {}
        pl.outer = None
        pl.meta = None
        pl.meta_key = None
        sc = _CT_PACK[ct] * pl.ns
        if pl.contig:
            pl.wg, pl.items, pl.vec_max = params["WG"], params["ITEMS"], params["VEC"]
            defines.update(CONTIG=1, ITEMS=pl.items)
            pl.push_fmt = struct.Struct("<" + "Q" * (pl.nt + 1) + sc + "I")
            pl.defines = defines
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
        pl.wg, pl.items, pl.vec_max = params["ND_WG"], params["ND_ITEMS"], 1
        inline = 8 * (pl.nt + 1) + struct.calcsize("<" + sc) + 4 + 4 * len(meta)
        meta_buf = inline > self.push_limit
        defines.update(CONTIG=0, NDIM=nd, META_BUF=int(meta_buf), ITEMS=pl.items)
        if meta_buf:
            pl.push_fmt = struct.Struct("<" + "Q" * (pl.nt + 2) + sc + "I")
            pl.meta_key = tuple(meta)
        else:
            pl.push_fmt = struct.Struct("<" + "Q" * (pl.nt + 1) + sc + "I" + "I" * len(meta))
            pl.meta = tuple(meta)
        pl.defines = defines
        return pl

    def pipe(self, pl: _Plan, vec: int):
        p = pl.pipes.get(vec)
        if p is None:
            defines = dict(pl.defines)
            if pl.contig:
                defines["VEC"] = vec
            p = pl.pipes[vec] = self.device.pipelines.get(self.TEMPLATE, defines, local_size=(pl.wg, 1, 1),
                                                          push_size=pl.push_fmt.size)
        return p

    def meta_buffer(self, key: tuple):
        buf = self.meta_bufs.get(key)
        if buf is None:
            import numpy as np

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
        if isinstance(v, float):  # integer compute: round a bound inwards, truncate anything else
            v = math.ceil(v) if side == "lo" else math.floor(v) if side == "hi" else int(v)
        lo, hi = _INT_RANGE[ct]
        out.append(min(max(int(v), lo), hi))
    return out


def _pyscalar(x):
    if isinstance(x, (bool, int, float)):
        return x
    if hasattr(x, "address"):
        raise TypeError("pass tensors as Operand(address, shape, strides, dtype), not bare buffers")
    import numbers

    if isinstance(x, bool) or type(x).__name__ in ("bool_", "bool"):
        return bool(x)
    return int(x) if isinstance(x, numbers.Integral) else float(x)


def elementwise(device, op: str, inputs, out: Operand, scalars=(), compute=None):
    """out = OPS[op](*inputs) with broadcasting. inputs: Operands or Python numbers (pushed as
    scalars); scalars: the op's own scalars (alpha, clamp bounds, fill value ...), defaulting to
    OPS[op].defaults; compute: force the compute dtype ('float32', 'int64', 'int32')."""
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
    pl = fam.plan(op, inputs, out, compute)
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
    spec = OPS[op]
    svals = _scalar_values(spec, pl.ct, scalars or spec.defaults, operand_scalars)
    if pl.legacy:
        a, b, o = (_Addr(x) for x in addrs)
        binary(device, op, a, b, o, pl.n, svals[0] if svals else 1.0)
        return
    if pl.contig:
        vec = pl.vec_max
        while vec > 1 and any(addr % (vec * size) for addr, size in zip(addrs, pl.itemsizes)):
            vec //= 2
        pipe = fam.pipe(pl, vec)
        per_group = pl.wg * pl.items * vec
        groups = grid_1d((pl.n + per_group - 1) // per_group, device.facts.max_workgroup_count[0])
        device.stream.dispatch(pipe, groups, pl.push_fmt.pack(*addrs, *svals, pl.n), op)
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


class _Addr:
    __slots__ = ("address",)

    def __init__(self, address):
        self.address = address


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
