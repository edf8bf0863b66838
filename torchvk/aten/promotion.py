"""torch's type promotion for the elementwise ops: the dtype an op computes in, the dtypes it
refuses, and what a Python number becomes in it. Every op of aten/elementwise.py that takes
scalars goes this one way.

An op's operands are tvk tensors, 0-dim CPU tensors and Python numbers (torch hands `x + 2`
and `2 - x` over with the 2 as a number). torch's rules:

* The common dtype (torch.result_type): by category, bool < integer < floating. Dimensioned
  tensors decide first, then 0-dim tensors, then numbers, and a later group changes the dtype
  only where its category is higher: an int32 tensor with a 0-dim int64 one gives int32, with a
  0-dim float16 one float16, with 2.5 float32 (a number gives its category's default dtype).
  Ops that always give floats (true division) say so with their promotion kind.
* A number operand is cast into the common dtype as C casts (`cast`): integers wrap (int32
  + 2**40 adds 0, uint8 -1 is 255), half types round. torch's CPU mul and div take their second
  operand unrounded, in float32 (`UNROUNDED_SECOND`).
* An op's parameters (add's alpha, clamp's bounds, pow's exponent, masked_fill's value) convert
  with a check (`checked`): 2**40 into int32, or 1e5 into float16, raises torch's "value cannot
  be converted to type int without overflow". Some check in the op's float32 math type (`opmath`:
  addcmul's value, lerp's weight); where's values and fill values convert as fill does
  (`fill_value`: half types round unchecked).
* Some dtypes an op refuses: its CPU kernel has none for them (the remainder of bools, lerp of
  integers: NotImplementedError), or torch refuses the pair (bool subtraction, int64 += float).
  `refuse_as_cpu` asks torch, once per op and operand types, on 1-element CPU stand-ins.

The kernel computes in the compute type of the common dtype (COMPUTE: half types in float32,
the small integer types and bool in int32), loading each tensor operand into it; an operand
whose load would differ from torch's cast into the common dtype is cast first (`loads_exactly`).
"""
from __future__ import annotations

import math

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as _KIND, elementwise_dtypes as _edt

DEFAULT, INT_TO_FLOAT = _KIND.DEFAULT, _KIND.INT_TO_FLOAT

# ------------------------------------------------------------------ tables
# the common dtype -> the dtype the kernel computes in (torch's opmath for half types); a dtype
# tvk stores joins here and in NAMES
COMPUTE = {
    torch.float32: torch.float32, torch.float16: torch.float32, torch.bfloat16: torch.float32,
    torch.int64: torch.int64, torch.int32: torch.int32, torch.int16: torch.int32, torch.int8: torch.int32,
    torch.uint8: torch.int32, torch.bool: torch.int32,
}
# torch's names of a dtype in its messages: c10::ScalarType's, and the C++ type checked_convert names
NAMES = {
    torch.float64: ("Double", "double"), torch.float32: ("Float", "float"), torch.float16: ("Half", "c10::Half"),
    torch.bfloat16: ("BFloat16", "c10::BFloat16"), torch.int64: ("Long", "int64_t"), torch.int32: ("Int", "int"),
    torch.int16: ("Short", "int16_t"), torch.int8: ("Char", "int8_t"), torch.uint8: ("Byte", "uint8_t"),
    torch.bool: ("Bool", "bool"),
}
_HALF_TYPES = (torch.float16, torch.bfloat16)
UNROUNDED_SECOND = frozenset({"mul", "div", "floor_divide", "trunc_divide"})  # kernel ops, see the docstring


def torch_name(dtype) -> str:
    """'Long' for torch.int64: the name torch's messages give a dtype."""
    return NAMES[dtype][0] if dtype in NAMES else str(dtype).removeprefix("torch.")


# ------------------------------------------------------------------ the common dtype
_promoted: dict = {}


def _key(x):
    """What torch's promotion (and its refusals) see of an operand: a tensor's dtype and whether it is
    0-dim, a number's type; anything else (None, a rounding mode) as it is."""
    t = type(x)
    if t in _NUMBERS:
        return t
    return (x.dtype, x.dim() == 0) if isinstance(x, torch.Tensor) else x


_NUMBERS = (bool, int, float)


def promote(args, kind=DEFAULT):
    """torch's common dtype of an elementwise op over args (tensors or numbers), by promotion kind."""
    key = (kind,) + tuple(map(_key, args))
    r = _promoted.get(key)
    if r is None:
        stand = [torch.empty(() if x.dim() == 0 else (1,), dtype=x.dtype, device="meta")
                 if isinstance(x, torch.Tensor) else x for x in args]
        r = _promoted[key] = _edt(*stand, type_promotion_kind=kind)[1]
    return r


def opmath(dtype):
    """The dtype torch's CPU kernels do their math in: float32 for the half types."""
    return torch.float32 if dtype in _HALF_TYPES else dtype


def loads_exactly(dtype, common) -> bool:
    """Whether a `dtype` tensor loaded into the compute type of `common` holds what torch's cast into
    `common` gives. The load converts as C does (an int64 load into int32 wraps as the cast does), so
    only a common dtype narrower than its compute type can differ: an int64 0-dim tensor beside int16
    ones, an int32 tensor beside float16 ones."""
    if dtype == common or dtype == torch.bool or COMPUTE[common] == common:
        return True
    integers = not dtype.is_floating_point and not common.is_floating_point
    return integers and torch.promote_types(dtype, common) == common


# ------------------------------------------------------------------ numbers
def _int_range(dtype):
    info = torch.iinfo(dtype)
    return info.min, info.max


def cast(v, dtype):
    """A number as C's static_cast puts it into dtype: torch's cast of an operand into the common
    dtype. Integers wrap around; half types round (float32 rounding is the kernel's, at push)."""
    if dtype == torch.bool:
        return bool(v)
    if dtype.is_floating_point:
        if dtype in _HALF_TYPES:
            return torch.tensor(float(v), dtype=torch.float64).to(dtype).item()
        return float(v)
    lo, hi = _int_range(dtype)
    return (int(v) - lo) % (hi - lo + 1) + lo  # a float operand never meets an integer common dtype


def checked(v, dtype):
    """A parameter converted into dtype as torch's Scalar.to<T>() (c10::checked_convert) does: one
    out of range raises torch's RuntimeError; a float goes into an integer type truncated, and a
    negative integer may wrap into an unsigned one (uint8 takes -255..255)."""
    if dtype == torch.bool:
        return bool(v)
    if dtype.is_floating_point:
        fits = math.isinf(v) or math.isnan(v) or abs(v) <= torch.finfo(dtype).max
    else:
        lo, hi = _int_range(dtype)
        if isinstance(v, float):
            fits = lo <= v <= hi  # nan fails too
        else:
            fits = (-hi if lo == 0 else lo) <= v <= hi
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {NAMES[dtype][1]} without overflow")
    return cast(v, dtype)


def fill_value(v, dtype):
    """A number as torch's fill_ puts it into dtype (and where its values): checked, but half types
    are rounded unchecked (65520 into float16 is inf)."""
    return cast(v, dtype) if dtype in _HALF_TYPES else checked(v, dtype)


def number(x):
    """A 0-dim CPU tensor's value (torch treats it as a scalar beside device tensors); a number as is."""
    return x.item() if isinstance(x, torch.Tensor) else x


# ------------------------------------------------------------------ what torch refuses
_judged: dict = {}  # (op, promotion kind, operand kinds) -> (torch's exception or None, the common dtype)


def _stand_in(kind):
    if isinstance(kind, tuple):
        dtype, zero_dim = kind
        return torch.ones(() if zero_dim else (1,), dtype=dtype)
    if kind in (bool, int, float):
        return kind(1)
    return kind  # None, a rounding mode


def _judge(op, args, kwargs, kind):
    key = (op, kind, tuple(map(_key, args)), tuple((k, _key(v)) for k, v in kwargs.items()) if kwargs else ())
    judged = _judged.get(key)
    if judged is None:
        refusal = None
        try:
            with torch.no_grad():
                op(*map(_stand_in, key[2]), **{k: _stand_in(v) for k, v in key[3]})
        except Exception as e:  # noqa: BLE001 - torch's own refusal, raised for every such call
            refusal = e
        judged = _judged[key] = (refusal, None if refusal is not None or kind is None else promote(args, kind))
    if judged[0] is not None:
        raise type(judged[0])(*judged[0].args)
    return judged[1]


def refuse_as_cpu(op, *args, **kwargs):
    """Raise what torch raises for `op` over operands of these dtypes and number types: its CPU
    kernels lack some dtypes the promotion allows, and it refuses some type pairs (bool `-`, an
    in-place op whose result type does not cast to self). torch is asked once per op and operand
    kinds, on 1-element CPU stand-ins with value 1, so it judges the types, never the values."""
    _judge(op, args, kwargs, None)


def common_dtype(op, *args, kind=DEFAULT, **kwargs):
    """refuse_as_cpu, then the common dtype of the operands `args`: one lookup for both."""
    return _judge(op, args, kwargs, kind)
