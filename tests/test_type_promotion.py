"""Type promotion of ops that take scalars, against the CPU: a generated grid of
(tensor dtype) x (what the other operand is) x (op), comparing the result's dtype and values
(integer wrap-around included), and, where torch raises, that tvk raises the same exception type.

The other operand is a Python bool, int (small, and 2**40 / -2**40 that wrap into 32-bit
types), float; a 0-dim tensor of each dtype (on the CPU: torch's CPU scalars, and on tvk); or a
second tensor of each dtype. The tensor dtypes are the ones tvk supports that this grid knows
(small integer types join when torchvk.supported_dtypes lists them). Tensors have 4 elements:
the grid's cost is its kernels (one per op and dtype pair), so every dtype pair runs for add
(and lt among dimensioned tensors); the other ops see fewer second operands (OPS).
"""
from __future__ import annotations

import pytest
import torch

from torchvk._storage import supported_dtypes

GRID_DTYPES = [torch.float32, torch.float16, torch.int32, torch.int64, torch.bool,
               torch.uint8, torch.int8, torch.int16]
DTYPES = [d for d in GRID_DTYPES if d in supported_dtypes()]
NAMES = {d: str(d).removeprefix("torch.") for d in GRID_DTYPES}

X_VALUES = {"float": [-2.5, 0.0, 1.0, 5.5], "int": [-3, 0, 1, 5]}
OTHER_VALUES = [2, -1, 3, 0]  # a second tensor: a zero divisor too (integer division raises on it)
COND = [True, False, True, False]

PY = [True, 3, -3, 2**40, -2**40, 2.5, -0.5]
CPU0 = [("cpu0", d, 3) for d in DTYPES] + [("cpu0", torch.int64, 2**40)]
TVK0 = [("tvk0", d, 3) for d in DTYPES]
TENSOR = [("tensor", d, None) for d in DTYPES]
SCALARS = [("py", None, v) for v in PY] + CPU0
FEW = [("py", None, v) for v in PY] + [("cpu0", torch.float16, 3)]
ALL = SCALARS + TVK0 + TENSOR
SOME = [o for o in TENSOR if o[1] in (torch.float16, torch.int32, torch.bool)]  # a tensor of each category


def _cond(x):
    return torch.tensor(COND, device=x.device)


# op -> (fn(x, other), the other operands it is run with); the classes' main ops take more of them
OPS = {
    # arithmetic
    "add": (lambda x, o: x + o, ALL),
    "sub": (lambda x, o: x - o, FEW),
    "rsub": (lambda x, o: o - x, FEW),
    "mul": (lambda x, o: x * o, FEW),
    "add_alpha": (lambda x, o: torch.add(x, x, alpha=o), SCALARS[:len(PY)]),
    # division
    "div": (lambda x, o: x / o, SCALARS + SOME),
    "rdiv": (lambda x, o: o / x, FEW),
    "div_floor": (lambda x, o: torch.div(x, o, rounding_mode="floor"), FEW),
    "div_trunc": (lambda x, o: torch.div(x, o, rounding_mode="trunc"), FEW),
    "floordiv": (lambda x, o: x // o, FEW),
    "rfloordiv": (lambda x, o: o // x, FEW),
    "remainder": (lambda x, o: x % o, SCALARS + SOME),
    "rremainder": (lambda x, o: o % x, FEW),
    "fmod": (lambda x, o: torch.fmod(x, o), FEW),
    # powers
    "pow": (lambda x, o: x ** o, SCALARS + SOME),
    "rpow": (lambda x, o: o ** x, FEW),
    # bounds
    "clamp_min": (lambda x, o: x.clamp(min=o), FEW),
    "clamp_max": (lambda x, o: x.clamp(max=o), SCALARS + SOME),
    "clip_both": (lambda x, o: torch.clip(x, o, 4), SCALARS[:len(PY)]),
    "maximum": (lambda x, o: torch.maximum(x, o), CPU0 + SOME),
    "minimum": (lambda x, o: torch.minimum(x, o), CPU0),
    # comparisons
    "eq": (lambda x, o: x == o, FEW),
    "lt": (lambda x, o: x < o, SCALARS + TENSOR),
    "ge": (lambda x, o: x >= o, FEW),
    # selection
    "where": (lambda x, o: torch.where(_cond(x), x, o), SCALARS + SOME),
    "where_r": (lambda x, o: torch.where(_cond(x), o, x), FEW),
    "masked_fill": (lambda x, o: x.masked_fill(_cond(x), o), FEW),
    # bitwise
    "and": (lambda x, o: x & o, SCALARS + SOME),
    "or": (lambda x, o: x | o, FEW),
    "xor": (lambda x, o: x ^ o, FEW),
    # with a scalar parameter
    "addcmul": (lambda x, o: torch.addcmul(x, x, x, value=o), SCALARS[:len(PY)]),
    "lerp": (lambda x, o: torch.lerp(x, x.flip(0), o), FEW),
    # in place
    "add_": (lambda x, o: x.add_(o), SCALARS + SOME),
    "sub_": (lambda x, o: x.sub_(o), FEW),
    "mul_": (lambda x, o: x.mul_(o), FEW),
    "div_": (lambda x, o: x.div_(o), FEW),
    "floor_divide_": (lambda x, o: x.floor_divide_(o), FEW),
    "pow_": (lambda x, o: x.pow_(o), FEW),
    "clamp_": (lambda x, o: x.clamp_(min=o), FEW),
    "lt_": (lambda x, o: x.lt_(o), FEW),
    "bitwise_or_": (lambda x, o: x.bitwise_or_(o), FEW),
    "masked_fill_": (lambda x, o: x.masked_fill_(_cond(x), o), FEW),
}


def _other_id(other):
    kind, dtype, value = other
    return f"{value}" if kind == "py" else f"{kind}_{NAMES[dtype]}" + ("_big" if value == 2**40 else "")


CASES = [pytest.param(op, dtype, other, id=f"{op}-{NAMES[dtype]}-{_other_id(other)}")
         for op, (_, others) in OPS.items() for dtype in DTYPES for other in others]


def _x(dtype, device):
    values = X_VALUES["float" if dtype.is_floating_point else "int"]
    return torch.tensor(values).to(dtype).to(device)


def _other(other, device):
    kind, dtype, value = other
    if kind == "py":
        return value
    if kind == "cpu0":
        return torch.tensor(value).to(dtype)
    if kind == "tvk0":
        return torch.tensor(value).to(dtype).to(device)
    return torch.tensor(OTHER_VALUES).to(dtype).to(device)


def _run(op, dtype, other, device):
    try:
        return OPS[op][0](_x(dtype, device), _other(other, device))
    except Exception as e:  # noqa: BLE001 - the exception itself is what is compared
        return e


@pytest.mark.parametrize("op, dtype, other", CASES)
def test_promotion_matches_the_cpu(op, dtype, other):
    want = _run(op, dtype, other, "cpu")
    got = _run(op, dtype, other, "tvk")
    if isinstance(want, Exception):
        assert isinstance(got, Exception), f"torch raises {type(want).__name__}: {want}; tvk gave {got}"
        assert type(got) is type(want), f"torch raises {type(want).__name__}: {want}; tvk {type(got).__name__}: {got}"
        return
    if isinstance(got, Exception):
        raise got
    assert got.device.type == "tvk"
    assert got.dtype == want.dtype, f"torch gives {want.dtype}, tvk {got.dtype}"
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)
