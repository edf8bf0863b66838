"""The general elementwise family (templates/elementwise_nd.comp) and the RNG kernels
(templates/elementwise_rng.comp) against torch CPU.

Error bounds (torch.testing.assert_close rtol / atol):
  float32 arithmetic, copies, where, clamp, min/max: rtol 1e-5, atol 1e-6 (exact in practice)
  float32 transcendental (exp, log, sqrt, rsqrt, pow, sigmoid, tanh, gelu, silu, their
    backwards, div): rtol 1e-4, atol 1e-5 (Vulkan allows a few ulp; erfc is fitted to 1.2e-7)
  float16 results: rtol 1e-3, atol 1e-3 (computed in float32, rounded once)
  int64 / int32 / bool results: exact
"""
import math
import shutil
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tvk_kernels.kernels import elementwise as elementwise_kernels
from tvk_kernels.kernels import rng as vrng
from tvk_kernels.kernels.elementwise import Operand

SIZES = [1, 7, 127, 1000, 4099]  # 1000 and 4099 are not multiples of any WG*ITEMS*VEC
TOL = {"arith": (1e-5, 1e-6), "transc": (1e-4, 1e-5), "half": (1e-3, 1e-3), "exact": (0.0, 0.0)}
NAMES = {torch.float32: "float32", torch.float16: "float16", torch.int64: "int64", torch.int32: "int32",
         torch.bool: "bool"}
NP = {torch.float32: np.float32, torch.float16: np.float16, torch.int64: np.int64, torch.int32: np.int32,
      torch.bool: np.bool_}
TORCH = {v: k for k, v in NAMES.items()}


class VK:
    """Moves torch tensors (views included: their whole storage goes up) to device Operands."""

    def __init__(self, device):
        self.d = device
        self.store = {}  # Operand -> (buffer, storage numel, torch dtype)

    def put(self, t: torch.Tensor) -> Operand:
        flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())
        buf = self.d.upload(flat.numpy() if flat.numel() else np.zeros(1, NP[t.dtype]))
        op = Operand(buf.address + t.storage_offset() * t.element_size(), tuple(t.shape), tuple(t.stride()),
                     NAMES[t.dtype])
        self.store[op] = (buf, flat.numel(), t.dtype, t.storage_offset())
        return op

    def empty(self, shape, dtype=torch.float32) -> Operand:
        n = math.prod(shape)
        buf = self.d.allocator.alloc(max(n, 1) * torch.empty(0, dtype=dtype).element_size())
        op = Operand(buf.address, tuple(shape), None, NAMES[dtype])
        self.store[op] = (buf, n, dtype, 0)
        return op

    def get(self, op: Operand) -> torch.Tensor:
        buf, n, dtype, offset = self.store[op]
        flat = torch.from_numpy(self.d.download(buf, NP[dtype], (n,)).copy())
        return flat.as_strided(op.shape, op.strides, offset)


# its module fixture runs once: keep its tests on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("elementwise")

@pytest.fixture(scope="module")
def vk(device):
    return VK(device)


def check(got, ref, kind="arith"):
    if ref.dtype == torch.float16:
        kind = "half"
    if ref.dtype in (torch.int64, torch.int32, torch.bool):
        kind = "exact"
    rtol, atol = TOL[kind]
    torch.testing.assert_close(got, ref, rtol=rtol, atol=atol, equal_nan=True)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ unary
def _pos(x):
    return x.abs() + 0.1


UNARY = {  # op -> (torch fn, input transform, tolerance)
    "neg": (torch.neg, None, "arith"),
    "abs": (torch.abs, None, "arith"),
    "relu": (torch.relu, None, "arith"),
    "exp": (torch.exp, None, "transc"),
    "log": (torch.log, _pos, "transc"),
    "sqrt": (torch.sqrt, _pos, "transc"),
    "rsqrt": (torch.rsqrt, _pos, "transc"),
    "gelu": (F.gelu, None, "transc"),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), None, "transc"),
    "silu": (F.silu, None, "transc"),
    "sigmoid": (torch.sigmoid, None, "transc"),
    "tanh": (torch.tanh, None, "transc"),
    "square": (torch.square, None, "arith"),
    "reciprocal": (torch.reciprocal, _pos, "transc"),
    "copy": (lambda x: x.clone(), None, "arith"),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(vk, device, op):
    fn, prep, kind = UNARY[op]
    for n in SIZES:
        x = torch.randn(n, generator=gen(n)) * 3
        x = prep(x) if prep else x
        out = vk.empty((n,))
        elementwise_kernels.unary(device, op, vk.put(x), out)
        check(vk.get(out), fn(x), kind)
    # transposed input (strided path), tails of large magnitude
    base = torch.randn(9, 13, generator=gen(1)) * 6
    base = prep(base) if prep else base
    xt = base.t()
    out = vk.empty(xt.shape)
    elementwise_kernels.unary(device, op, vk.put(xt), out)
    check(vk.get(out), fn(xt), kind)


def test_unary_scalar_ops(vk, device):
    x = torch.randn(11, 6, generator=gen(2)) * 4
    xo = vk.put(x)
    for op, scalars, ref in [
        ("clamp", (-1.5, 2.0), x.clamp(-1.5, 2.0)),
        ("clamp", (None, 0.5), x.clamp(max=0.5)),
        ("clamp", (-0.25, None), x.clamp(min=-0.25)),
        ("pow_scalar", (3.0,), x.pow(3.0)),
        ("pow_scalar", (2.0,), x.pow(2.0)),
        ("pow_scalar", (-2.0,), x.pow(-2.0)),
        ("pow_scalar", (0.5,), x.abs().pow(0.5)),
        ("rpow_scalar", (2.0,), torch.pow(2.0, x)),
        ("leaky_relu", (0.2,), F.leaky_relu(x, 0.2)),
    ]:
        src = vk.put(x.abs()) if op == "pow_scalar" and scalars == (0.5,) else xo
        out = vk.empty(x.shape)
        elementwise_kernels.unary(device, op, src, out, scalars)
        check(vk.get(out), ref, "transc")


def test_special_values(vk, device):
    nan, inf = float("nan"), float("inf")
    a = torch.tensor([nan, 1.0, -2.0, inf, -inf, 0.0, 3.0, -0.5])
    b = torch.tensor([1.0, nan, 3.0, 2.0, 3.0, -1.0, 0.0, 2.0])
    A, B = vk.put(a), vk.put(b)
    for op, ref in [("maximum", torch.maximum(a, b)), ("minimum", torch.minimum(a, b)),
                    ("pow", torch.pow(a, b)), ("relu", torch.relu(a))]:
        out = vk.empty(a.shape)
        if op == "relu":
            elementwise_kernels.unary(device, op, A, out)
        else:
            elementwise_kernels.binary_nd(device, op, A, B, out)
        check(vk.get(out), ref, "transc")
    # torch's gelu(+inf) is nan on CPU; ours is +inf (the limit): compare gelu on the rest
    gelu_ref = F.gelu(a).where(a != inf, torch.tensor(inf))
    for op, ref in [("exp", torch.exp(a)), ("sigmoid", torch.sigmoid(a)), ("tanh", torch.tanh(a)),
                    ("gelu", gelu_ref), ("silu", F.silu(a))]:
        out = vk.empty(a.shape)
        elementwise_kernels.unary(device, op, A, out)
        check(vk.get(out), ref, "transc")


# ------------------------------------------------------------------ binary
BINARY = {
    "add": (lambda a, b: torch.add(a, b, alpha=0.5), "arith", {"alpha": 0.5}),
    "sub": (lambda a, b: torch.sub(a, b, alpha=2.0), "arith", {"alpha": 2.0}),
    "mul": (torch.mul, "arith", {}),
    "div": (torch.div, "transc", {}),
    "pow": (lambda a, b: torch.pow(a.abs() + 0.1, b), "transc", {}),
    "maximum": (torch.maximum, "arith", {}),
    "minimum": (torch.minimum, "arith", {}),
    "eq": (torch.eq, "exact", {}),
    "ne": (torch.ne, "exact", {}),
    "lt": (torch.lt, "exact", {}),
    "le": (torch.le, "exact", {}),
    "gt": (torch.gt, "exact", {}),
    "ge": (torch.ge, "exact", {}),
}


def _binary_inputs(op, a, b):
    if op in ("eq", "ne", "le", "ge"):  # make ties happen
        a, b = a.round(), b.round()
    if op == "pow":
        a = a.abs() + 0.1
    return a, b


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary(vk, device, op):
    fn, kind, kw = BINARY[op]
    ref_fn = (lambda a, b: fn(a, b)) if op != "pow" else torch.pow
    odt = torch.bool if OPS_BOOL(op) else torch.float32
    for n in SIZES:  # contiguous, same shape: the vectorized path (legacy kernel for add/sub/mul/div)
        a, b = _binary_inputs(op, torch.randn(n, generator=gen(n)), torch.randn(n, generator=gen(n + 1)))
        out = vk.empty((n,), odt)
        elementwise_kernels.binary_nd(device, op, vk.put(a), vk.put(b), out, **kw)
        check(vk.get(out), ref_fn(a, b) if op == "pow" else fn(a, b), kind)
    # row broadcast (5,7) op (7,)
    a, b = _binary_inputs(op, torch.randn(5, 7, generator=gen(3)), torch.randn(7, generator=gen(4)))
    out = vk.empty((5, 7), odt)
    elementwise_kernels.binary_nd(device, op, vk.put(a), vk.put(b), out, **kw)
    check(vk.get(out), ref_fn(a, b) if op == "pow" else fn(a, b), kind)


def OPS_BOOL(op):
    return elementwise_kernels.OPS[op].bool_result


@pytest.mark.parametrize("op", ["add", "mul", "div", "maximum", "lt", "pow"])
def test_broadcasting(vk, device, op):
    fn, kind, kw = BINARY[op]
    ref_fn = torch.pow if op == "pow" else fn
    odt = torch.bool if OPS_BOOL(op) else torch.float32
    cases = [((6, 9), (1, 1)),          # scalar-like tensor
             ((6, 9), (6, 1)),          # column
             ((4, 3, 5), (4, 1, 5)),    # middle dim
             ((3, 1, 5), (1, 4, 1)),    # both sides broadcast
             ((2, 3, 4, 5), (5,))]      # 4-d with a row
    for sa, sb in cases:
        a, b = _binary_inputs(op, torch.randn(sa, generator=gen(5)), torch.randn(sb, generator=gen(6)))
        shape = torch.broadcast_shapes(sa, sb)
        assert elementwise_kernels.broadcast_shapes(sa, sb) == tuple(shape)
        out = vk.empty(shape, odt)
        elementwise_kernels.binary_nd(device, op, vk.put(a), vk.put(b), out, **kw)
        check(vk.get(out), ref_fn(a, b), kind)
    # Python number operands, either side
    a = _binary_inputs(op, torch.randn(7, 5, generator=gen(7)), torch.zeros(1))[0]
    out = vk.empty(a.shape, odt)
    elementwise_kernels.binary_nd(device, op, vk.put(a), 1.5, out, **kw)
    check(vk.get(out), ref_fn(a, torch.tensor(1.5)), kind)
    out = vk.empty(a.shape, odt)
    elementwise_kernels.binary_nd(device, op, 0.75, vk.put(a), out, **kw)
    check(vk.get(out), ref_fn(torch.tensor(0.75), a), kind)


def test_strided_views(vk, device):
    base = torch.randn(10, 12, generator=gen(8))
    other = torch.randn(12, 10, generator=gen(9))
    cases = [
        (base.t(), other),                       # transposed
        (base[::2, 1:11], other[1:6, ::1][:, :10]),  # sliced, step and offset (unaligned address)
        (base[3:4, :].expand(10, 12), other.t()),  # expanded (stride 0) + transposed
        (base[:, 5:6], other[2:7, 1:2].t()),      # column views
    ]
    for a, b in cases:
        shape = torch.broadcast_shapes(a.shape, b.shape)
        out = vk.empty(shape)
        elementwise_kernels.binary_nd(device, "mul", vk.put(a), vk.put(b), out)
        check(vk.get(out), a * b)
    # strided output: write into a transposed view of a bigger buffer
    dst = torch.zeros(14, 10)
    view = dst[2:14:1, :].t()[:, :12]
    D = vk.put(view)
    elementwise_kernels.binary_nd(device, "add", vk.put(base), 1.0, D)
    expect = dst.clone()
    expect[2:14, :].t()[:, :12].copy_(base + 1)
    got = vk.get(D)
    check(got, base + 1)
    buf, n, _, _ = vk.store[D]
    whole = torch.from_numpy(device.download(buf, np.float32, (n,)).copy()).view(14, 10)
    check(whole, expect)


def test_in_place(vk, device):
    x = torch.randn(33, 17, generator=gen(10))
    y = torch.randn(17, generator=gen(11))
    X = vk.put(x)
    elementwise_kernels.binary_nd(device, "add", X, vk.put(y), X, alpha=-1.0)  # x -= y, broadcast, in place
    check(vk.get(X), x - y)
    elementwise_kernels.unary(device, "sigmoid", X, X)
    check(vk.get(X), torch.sigmoid(x - y), "transc")
    # in place on a transposed view (same layout in and out)
    z = torch.randn(8, 6, generator=gen(12))
    Zt = vk.put(z.t())
    elementwise_kernels.binary_nd(device, "mul", Zt, 3.0, Zt)
    check(vk.get(Zt), z.t() * 3)


# ------------------------------------------------------------------ ternary, backward
def test_where_and_ternary(vk, device):
    cond = torch.randn(6, 1, 5, generator=gen(13)) > 0
    a = torch.randn(4, 5, generator=gen(14))
    b = torch.randn(6, 4, 1, generator=gen(15))
    out = vk.empty((6, 4, 5))
    elementwise_kernels.ternary(device, "where", vk.put(cond), vk.put(a), vk.put(b), out)
    check(vk.get(out), torch.where(cond, a, b))
    out = vk.empty((6, 4, 5))
    elementwise_kernels.ternary(device, "where", vk.put(cond), vk.put(a), 0.0, out)  # masked_fill-like
    check(vk.get(out), torch.where(cond, a, torch.tensor(0.0)))
    t, u, v = (torch.randn(50, generator=gen(16 + i)) for i in range(3))
    out = vk.empty((50,))
    elementwise_kernels.ternary(device, "addcmul", vk.put(t), vk.put(u), vk.put(v), out, (0.3,))
    check(vk.get(out), torch.addcmul(t, u, v, value=0.3))
    out = vk.empty((50,))
    elementwise_kernels.ternary(device, "addcdiv", vk.put(t), vk.put(u), vk.put(v.abs() + 0.5), out, (-0.3,))
    check(vk.get(out), torch.addcdiv(t, u, v.abs() + 0.5, value=-0.3), "transc")


BACKWARD = {  # op -> (forward, uses the output)
    "relu_backward": (torch.relu, False),
    "gelu_backward": (F.gelu, False),
    "gelu_tanh_backward": (lambda x: F.gelu(x, approximate="tanh"), False),
    "silu_backward": (F.silu, False),
    "sigmoid_backward": (torch.sigmoid, True),
    "tanh_backward": (torch.tanh, True),
    "threshold_backward": (lambda x: F.threshold(x, 0.3, 0.0), False),
    "leaky_relu_backward": (lambda x: F.leaky_relu(x, 0.01), False),
}


@pytest.mark.parametrize("op", sorted(BACKWARD))
def test_backward(vk, device, op):
    fwd, from_output = BACKWARD[op]
    for n in (7, 1000):
        x = (torch.randn(n, generator=gen(n)) * 3).requires_grad_()
        g = torch.randn(n, generator=gen(n + 5))
        y = fwd(x)
        y.backward(g)
        saved = y.detach() if from_output else x.detach()
        out = vk.empty((n,))
        scalars = (0.3,) if op == "threshold_backward" else ()
        elementwise_kernels.binary_nd(device, op, vk.put(g), vk.put(saved), out, scalars=scalars)
        check(vk.get(out), x.grad, "transc")


# ------------------------------------------------------------------ dtypes
CAST_DTYPES = [torch.float32, torch.float16, torch.int64, torch.bool, torch.int32]


def _sample(dtype, shape, seed):
    x = torch.randn(shape, generator=gen(seed)) * 40
    if dtype == torch.bool:
        return x > 0
    if dtype in (torch.int64, torch.int32):
        y = x.round().to(dtype)
        y.view(-1)[::3] = 0
        return y
    x.view(-1)[::5] = 0.0
    x.view(-1)[1::7] = 0.25
    return x.to(dtype)


@pytest.mark.parametrize("src_dt", CAST_DTYPES, ids=lambda d: NAMES[d])
def test_copy_cast(vk, device, src_dt):
    base = _sample(src_dt, (9, 14), 20)
    for dst_dt in CAST_DTYPES:
        src = base.t()  # a strided source: .contiguous() / .to(dtype)
        out = vk.empty(src.shape, dst_dt)
        elementwise_kernels.copy(device, vk.put(src), out)
        check(vk.get(out), src.to(dst_dt))
    # contiguous source of this dtype into float32 and back (vectorized path)
    flat = _sample(src_dt, (1001,), 21)
    mid = vk.empty((1001,), torch.float32)
    elementwise_kernels.copy(device, vk.put(flat), mid)
    back = vk.empty((1001,), src_dt)
    elementwise_kernels.copy(device, mid, back)
    check(vk.get(back), flat.float().to(src_dt))


def test_int64_exact(vk, device):
    big = 1 << 40
    a = torch.tensor([big + 1, -big - 3, 5, -7, 0, 123456789012, 3, -2], dtype=torch.int64)
    b = torch.tensor([big, 7, -5, 2, 9, 1, 4, 3], dtype=torch.int64)
    A, B = vk.put(a), vk.put(b)
    for op, kw, ref in [("add", {"alpha": 3}, torch.add(a, b, alpha=3)), ("sub", {}, a - b), ("mul", {}, a * 3),
                        ("maximum", {}, torch.maximum(a, b)), ("minimum", {}, torch.minimum(a, b)),
                        ("pow", {}, torch.pow(a.clamp(-9, 9), b.clamp(0, 5)))]:
        out = vk.empty(a.shape, torch.int64)
        if op == "mul":
            elementwise_kernels.binary_nd(device, op, A, 3, out)
        elif op == "pow":
            elementwise_kernels.binary_nd(device, op, vk.put(a.clamp(-9, 9)), vk.put(b.clamp(0, 5)), out)
        else:
            elementwise_kernels.binary_nd(device, op, A, B, out, **kw)
        check(vk.get(out), ref)
    for op, ref in [("neg", -a), ("abs", a.abs()), ("relu", a.relu())]:
        out = vk.empty(a.shape, torch.int64)
        elementwise_kernels.unary(device, op, A, out)
        check(vk.get(out), ref)
    out = vk.empty(a.shape, torch.int64)
    elementwise_kernels.unary(device, "clamp", A, out, (-6, big))
    check(vk.get(out), a.clamp(-6, big))
    for op in ("eq", "lt", "ge"):
        out = vk.empty(a.shape, torch.bool)
        elementwise_kernels.binary_nd(device, op, A, vk.put(a.clone().fill_(5) + (a == 5).long() * 0), out)
        check(vk.get(out), getattr(torch, op)(a, torch.full_like(a, 5)))
    # where picks int64 values bit-exactly
    cond = torch.tensor([True, False] * 4)
    out = vk.empty(a.shape, torch.int64)
    elementwise_kernels.ternary(device, "where", vk.put(cond), A, B, out)
    check(vk.get(out), torch.where(cond, a, b))
    # int32 arithmetic with broadcasting, int64 + float32 -> float32 (caller's promotion)
    i = torch.arange(-20, 20, dtype=torch.int32).view(8, 5)
    out = vk.empty((8, 5), torch.int32)
    elementwise_kernels.binary_nd(device, "mul", vk.put(i), vk.put(torch.arange(5, dtype=torch.int32)), out)
    check(vk.get(out), i * torch.arange(5, dtype=torch.int32))
    f = torch.randn(8, generator=gen(30))
    out = vk.empty((8,), torch.float32)
    elementwise_kernels.binary_nd(device, "add", A, vk.put(f), out)
    check(vk.get(out), a + f)


def test_float16(vk, device):
    a = torch.randn(3, 1000, generator=gen(31)).half()
    b = torch.randn(1000, generator=gen(32)).half()
    A, B = vk.put(a), vk.put(b)
    out = vk.empty(a.shape, torch.float16)
    elementwise_kernels.binary_nd(device, "add", A, B, out)
    check(vk.get(out), a + b)
    out = vk.empty(a.shape, torch.float16)
    elementwise_kernels.unary(device, "gelu", A, out)
    check(vk.get(out), F.gelu(a.float()).half())
    out = vk.empty(a.shape, torch.float32)  # mixed: half * float -> float
    f = torch.randn(3, 1000, generator=gen(33))
    elementwise_kernels.binary_nd(device, "mul", A, vk.put(f), out)
    check(vk.get(out), a.float() * f)
    out = vk.empty(a.shape, torch.bool)
    elementwise_kernels.binary_nd(device, "gt", A, B, out)
    check(vk.get(out), a > b)
    sl = a[:, 3:]  # 6-byte offset: scalar loads
    out = vk.empty(sl.shape, torch.float16)
    elementwise_kernels.unary(device, "relu", vk.put(sl), out)
    check(vk.get(out), sl.relu())


def test_bool_ops(vk, device):
    x = torch.randn(7, 9, generator=gen(34))
    y = torch.randn(7, 9, generator=gen(35))
    m = vk.empty(x.shape, torch.bool)
    elementwise_kernels.binary_nd(device, "lt", vk.put(x), vk.put(y), m)
    check(vk.get(m), x < y)
    n = vk.empty(x.shape, torch.bool)
    elementwise_kernels.binary_nd(device, "ne", m, True, n)  # logical not through a comparison
    check(vk.get(n), ~(x < y))
    out = vk.empty(x.shape)
    elementwise_kernels.binary_nd(device, "mul", vk.put(x), m, out)  # x * mask (bool -> float)
    check(vk.get(out), x * (x < y))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32, torch.bool],
                         ids=lambda d: NAMES[d])
def test_fill(vk, device, dtype):
    value = {torch.float32: -2.5, torch.float16: 0.333, torch.int64: (1 << 40) + 7, torch.int32: -123456,
             torch.bool: True}[dtype]
    for n in (1, 1027):
        out = vk.empty((n,), dtype)
        elementwise_kernels.fill(device, out, value)
        check(vk.get(out), torch.full((n,), value, dtype=dtype))
    base = torch.zeros(6, 10, dtype=dtype)
    view = base[1:5, ::3]  # strided output
    V = vk.put(view)
    elementwise_kernels.fill(device, V, value)
    expect = base.clone()
    expect[1:5, ::3] = value
    buf, n, _, _ = vk.store[V]
    got = torch.from_numpy(device.download(buf, NP[dtype], (n,)).copy()).view(6, 10)
    check(got, expect)


# ------------------------------------------------------------------ layout machinery
def test_collapse_and_broadcast_helpers():
    assert elementwise_kernels.broadcast_shapes((3, 1, 5), (4, 1), ()) == (3, 4, 5)
    with pytest.raises(ValueError):
        elementwise_kernels.broadcast_shapes((3,), (4,))
    shape, st = elementwise_kernels.collapse_dims((2, 3, 4), [[12, 4, 1], [12, 4, 1]])
    assert shape == [24] and st == [[1], [1]]
    shape, st = elementwise_kernels.collapse_dims((2, 3, 4), [[0, 4, 1], [12, 4, 1]])  # broadcast outer dim
    assert shape == [2, 12] and st == [[0, 1], [12, 1]]
    shape, st = elementwise_kernels.collapse_dims((5, 1, 7), [[1, 0, 5], [7, 7, 1]])  # transposed input
    assert shape == [5, 7] and st == [[1, 5], [7, 1]]


def test_many_dims_and_metadata_buffer(vk, device):
    # 8 non-mergeable dims: more than the kernel's 6, the host loops over the leading two
    x = torch.randn(2, 3, 2, 3, 2, 3, 2, 2, generator=gen(40))
    xp = x.permute(7, 5, 3, 1, 6, 4, 2, 0)
    out = vk.empty(xp.shape)
    elementwise_kernels.unary(device, "neg", vk.put(xp), out)
    check(vk.get(out), -xp)
    # ternary over 5 dims: shape/strides do not fit 128 push bytes -> device metadata buffer
    c = torch.randn(2, 3, 4, 3, 2, generator=gen(41)) > 0
    a = torch.randn(2, 3, 2, 3, 4, generator=gen(42)).permute(0, 1, 4, 3, 2)
    b = torch.randn(3, 4, 1, 2, generator=gen(43))
    out = vk.empty(c.shape)
    elementwise_kernels.ternary(device, "where", vk.put(c), vk.put(a), vk.put(b), out)
    check(vk.get(out), torch.where(c, a, b))
    # binary over 6 dims still fits the push constants
    p = torch.randn(2, 3, 2, 3, 2, 3, generator=gen(44)).permute(5, 3, 1, 4, 2, 0)
    q = torch.randn(3, 3, 1, 2, 2, 2, generator=gen(45))
    out = vk.empty(p.shape)
    elementwise_kernels.binary_nd(device, "sub", vk.put(p), vk.put(q), out)
    check(vk.get(out), p - q)


def test_legacy_binary(device):
    a = np.arange(1003, dtype=np.float32)
    b = np.full(1003, 2.0, np.float32)
    A, B = device.upload(a), device.upload(b)
    O = device.allocator.alloc(a.nbytes)
    elementwise_kernels.add(device, A, B, O, 1003, alpha=0.5)
    np.testing.assert_array_equal(device.download(O, np.float32, (1003,)), a + 1.0)
    elementwise_kernels.binary(device, "mul", A, B, O, 1003)
    np.testing.assert_array_equal(device.download(O, np.float32, (1003,)), a * 2)


def test_explicit_params_run_the_nd_kernel(vk, device):
    """params= (the tuner's candidates) set the N-d kernel's parameters, on every path: a float32 add
    of contiguous operands then takes the N-d kernel, not the binary one."""
    a, b = torch.randn(1000, generator=gen(50)), torch.randn(1000, generator=gen(51))
    out = vk.empty(a.shape)
    inputs = (vk.put(a), vk.put(b))
    elementwise_kernels.elementwise(device, "add", inputs, out, params={"WG": 128, "VEC": 2, "ITEMS": 1})
    check(vk.get(out), a + b)
    fam, plan = elementwise_kernels.planned(device, "add", inputs, out)
    assert plan.legacy  # without params: the binary kernel
    explicit = fam.plan("add", inputs, out, None, {"WG": 128, "VEC": 2, "ITEMS": 1})
    assert not explicit.legacy and (explicit.wg, explicit.vec_max) == (128, 2)
    t = torch.randn(40, 30, generator=gen(52)).t()
    out = vk.empty(t.shape)
    elementwise_kernels.elementwise(device, "copy", (vk.put(t),), out, params={"ND_WG": 128, "ND_ITEMS": 1})
    check(vk.get(out), t)


@pytest.mark.parametrize("items", [2, 3])
def test_items_per_thread_reach_every_element(vk, device, items):
    """ITEMS, a specialization constant of both kernels, is the elements each thread handles: the host
    launches 1/ITEMS of the threads, so a kernel that did not get it would leave elements unwritten
    (outputs start as nan). Contiguous binary, contiguous N-d (vectors and the scalar tail), strided N-d."""
    a, b = torch.randn(1003, generator=gen(53)), torch.randn(1003, generator=gen(54))
    nan = torch.full((1003,), math.nan)
    out = vk.put(nan)
    elementwise_kernels.binary(device, "mul", vk.put(a).address, vk.put(b).address, out.address, 1003,
              params={"WG": 32, "VEC": 4, "ITEMS": items})
    check(vk.get(out), a * b)
    out = vk.put(nan)
    elementwise_kernels.elementwise(device, "add", (vk.put(a), vk.put(b)), out, params={"WG": 32, "VEC": 2, "ITEMS": items})
    check(vk.get(out), a + b)
    t = torch.randn(30, 41, generator=gen(55)).t()
    out = vk.put(torch.full(t.shape, math.nan))
    elementwise_kernels.elementwise(device, "copy", (vk.put(t),), out, params={"ND_WG": 32, "ND_ITEMS": items})
    check(vk.get(out), t)


@pytest.mark.parametrize("edited", ["elementwise_binary.comp", "elementwise_nd.comp", "elementwise_rng.comp"])
def test_a_template_edit_retires_the_configs_of_the_family_that_launches_it(device, config_dir, tmp_path,
                                                                            monkeypatch, edited):
    """Each family checks its tuned configs against the template it launches: an edit there makes
    them stale (defaults run), the other families' configs stay in use."""
    import json

    from tvk_kernels import config
    from tvk_kernels.runtime import compiler

    launches = {"elementwise_binary.comp": elementwise_kernels.Binary, "elementwise_nd.comp": elementwise_kernels.Elementwise,
                "elementwise_rng.comp": vrng.Rng}
    tuned = {"WG": 128}  # not a default of any device class
    families = {cls(device).family: {"template_checksum": cls(device).checksum, "buckets": {"*": {"params": tuned}}}
                for cls in launches.values()}
    config_dir.mkdir()
    (config_dir / "tuned.json").write_text(json.dumps({
        "schema": 1, "source": "measured", "device": {**config.device_key(device.facts), "match": "device"},
        "families": families}))
    config.reload()
    for cls in launches.values():
        assert cls(device).params("large")[0]["WG"] == 128
    real = compiler.template_path
    copy = tmp_path / "templates" / edited  # beside copies of its includes
    shutil.copytree(real(edited).parent, copy.parent)
    copy.write_text(copy.read_text() + "\n// an edit\n")
    monkeypatch.setattr(compiler, "template_path", lambda name: copy if name == edited else real(name))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        used = {cls: cls(device).params("large") for cls in launches.values()}
    for cls, (params, source) in used.items():
        stale = cls is launches[edited]
        assert (source == "default") == stale, (cls, source)
        assert (params["WG"] == 128) != stale
    assert [str(w.message) for w in caught if "another version of the kernel template" in str(w.message)]


# ------------------------------------------------------------------ property-based sweep
try:
    from hypothesis import HealthCheck, given, settings, strategies as st
except ImportError:  # pragma: no cover
    st = None


if st is not None:
    @st.composite
    def _bcast_case(draw):
        nd = draw(st.integers(1, 4))
        shape = draw(st.lists(st.integers(1, 5), min_size=nd, max_size=nd))

        def operand():
            drop = draw(st.integers(0, nd - 1))
            s = [1 if draw(st.booleans()) and draw(st.booleans()) else d for d in shape[drop:]]
            perm = draw(st.permutations(range(len(s))))
            return s, perm

        return shape, operand(), operand(), draw(st.sampled_from(["add", "mul", "maximum", "lt"]))

    @settings(max_examples=30, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=_bcast_case())
    def test_property_broadcast(device, case):
        vk = VK(device)
        shape, (sa, pa), (sb, pb), op = case
        g = gen(len(shape))
        # build each operand as a permuted view of a contiguous tensor
        a = torch.randn([sa[i] for i in pa], generator=g).permute(*np.argsort(pa).tolist())
        b = torch.randn([sb[i] for i in pb], generator=g).permute(*np.argsort(pb).tolist())
        out_shape = torch.broadcast_shapes(a.shape, b.shape)
        odt = torch.bool if op == "lt" else torch.float32
        out = vk.empty(out_shape, odt)
        elementwise_kernels.binary_nd(device, op, vk.put(a), vk.put(b), out)
        ref = {"add": torch.add, "mul": torch.mul, "maximum": torch.maximum, "lt": torch.lt}[op](a, b)
        check(vk.get(out), ref)


# ------------------------------------------------------------------ RNG
def test_uniform_normal_statistics(device):
    n = 200_003
    buf = device.allocator.alloc(4 * n)
    vrng.uniform_(device, buf, n, -2.0, 3.0, seed=123, offset=0)
    u = device.download(buf, np.float32, (n,)).astype(np.float64)
    assert u.min() >= -2.0 and u.max() <= 3.0
    assert abs(u.mean() - 0.5) < 0.02          # sd of the mean: 1.44/sqrt(n) = 0.0032
    assert abs(u.var() - 25 / 12) < 0.03
    hist = np.histogram(u, bins=10, range=(-2, 3))[0] / n
    assert np.all(np.abs(hist - 0.1) < 0.005)
    vrng.normal_(device, buf, n, 1.0, 2.0, seed=123, offset=1)
    z = device.download(buf, np.float32, (n,)).astype(np.float64)
    assert abs(z.mean() - 1.0) < 0.02          # sd of the mean: 2/sqrt(n) = 0.0045
    assert abs(z.std() - 2.0) < 0.02
    zs = (z - 1.0) / 2.0
    assert abs(np.mean(zs ** 3)) < 0.03 and abs(np.mean(zs ** 4) - 3.0) < 0.1  # skew, kurtosis
    assert abs(np.mean(np.abs(zs) < 1) - 0.6827) < 0.005
    # neighbours are uncorrelated (also across the 4 words of one Philox block)
    for lag in (1, 2, 4):
        assert abs(np.corrcoef(zs[:-lag], zs[lag:])[0, 1]) < 0.01
    h = device.allocator.alloc(2 * 1001)
    vrng.uniform_(device, h, 1001, 0.0, 1.0, seed=1, offset=0, dtype="float16")
    uh = device.download(h, np.float16, (1001,))
    assert 0.0 <= uh.min() and uh.max() <= 1.0 and abs(uh.astype(np.float64).mean() - 0.5) < 0.05


def test_uniform_is_the_host_philox(device):
    """uniform_ draws exactly the words of Philox4x32-10 (the tuner checks candidates against this)."""
    n, seed, offset = 1027, (7 << 32) | 0x9E3779B9, (3 << 32) | 11
    buf = device.allocator.alloc(4 * n)
    vrng.uniform_(device, buf, n, seed=seed, offset=offset)
    want = (vrng.philox_words(seed, offset, n) >> 8).astype(np.float32) / np.float32(1 << 24)
    np.testing.assert_array_equal(device.download(buf, np.float32, (n,)), want)


def test_rng_determinism(device):
    n = 1027
    bufs = [device.allocator.alloc(4 * n) for _ in range(4)]
    vrng.normal_(device, bufs[0], n, seed=7, offset=10)
    vrng.normal_(device, bufs[1], n, seed=7, offset=10)
    vrng.normal_(device, bufs[2], n, seed=7, offset=11)
    vrng.normal_(device, bufs[3], n, seed=8, offset=10)
    r = [device.download(b, np.float32, (n,)) for b in bufs]
    np.testing.assert_array_equal(r[0], r[1])
    assert np.mean(r[0] == r[2]) < 0.01 and np.mean(r[0] == r[3]) < 0.01
    # a prefix is independent of n
    vrng.normal_(device, bufs[1], 5, seed=7, offset=10)
    np.testing.assert_array_equal(device.download(bufs[1], np.float32, (n,))[:5], r[0][:5])


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 1.0])
def test_dropout(device, p):
    n = 100_001
    x = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    X = device.upload(x)
    out, mask = device.allocator.alloc(4 * n), device.allocator.alloc(n)
    vrng.dropout(device, X, out, mask, n, p, seed=99, offset=3)
    y = device.download(out, np.float32, (n,))
    m = device.download(mask, np.uint8, (n,))
    assert set(np.unique(m)) <= {0, 1}
    drop_rate = 1.0 - m.mean()
    assert abs(drop_rate - p) < 0.01           # sd: sqrt(p(1-p)/n) <= 0.0016
    scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    np.testing.assert_allclose(y, x * m * scale, rtol=1e-6, atol=0)
    # same (seed, offset) -> same mask, in place this time; a new offset -> a new mask
    vrng.dropout(device, X, X, None, n, p, seed=99, offset=3)
    np.testing.assert_array_equal(device.download(X, np.float32, (n,)), y)
    if 0.0 < p < 1.0:
        vrng.dropout(device, out, out, mask, n, p, seed=99, offset=4)
        m2 = device.download(mask, np.uint8, (n,))
        assert abs(np.mean(m2 != m) - 2 * p * (1 - p)) < 0.01
