"""uint8, int8 and int16 tensors on tvk against the CPU, bit for bit (issue 28, item 6).

Image tensors come out of decoders as uint8. These three dtypes are stored as themselves and
computed in int32 (tvk_kernels/kernels/dtypes.py): the store truncates, which is torch's
wraparound (250 + 10 == 4 in uint8), and Python numbers convert into them as torch converts
them (uint8 `x < 300` compares with 44; `x.clamp(0, 300)` raises). Every test computes the
same thing on the CPU and on tvk and compares values and dtypes exactly (floating results within
float32's tolerance).

float -> integer casts: torch truncates toward zero. Into uint8 it goes through int64, so
-1.5 -> 255 and 300.7 -> 44 are defined and tested. Into int8 and int16 a value outside the
dtype's range is undefined behaviour in C (torch's CPU gives whatever the compiler made of it),
so those casts are tested in range only; tvk gives the low bits of the truncated value there too.
"""
from __future__ import annotations

import pytest
import torch

import torchvk
from torchvk import _storage

U8, I8, I16 = torch.uint8, torch.int8, torch.int16
SMALL = [U8, I8, I16]
EDGES = {  # the ends of each range, where arithmetic wraps
    U8: [0, 1, 3, 127, 128, 250, 255],
    I8: [-128, -127, -1, 0, 1, 5, 127],
    I16: [-32768, -32767, -300, -1, 0, 300, 32767],
}
OTHER_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool]


def edges(dtype):
    return torch.tensor(EDGES[dtype], dtype=dtype)


def divisors(dtype):
    """A second operand with no zero: the edge values reversed, odd."""
    return edges(dtype).flip(0) | 1


def tvk(t):
    return t.to("tvk") if isinstance(t, torch.Tensor) else t


def same(fn, *inputs):
    """fn on the CPU inputs and on tvk copies of them: equal values and dtypes."""
    want = fn(*inputs)
    got = fn(*(tvk(x) for x in inputs))
    for w, g in zip(*((want, got) if isinstance(want, tuple) else ((want,), (got,)))):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape, (g, w)
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w, equal_nan=True)
        else:
            assert torch.equal(g, w), f"tvk {g.tolist()} != cpu {w.tolist()}"


ids = [str(d).removeprefix("torch.") for d in SMALL]


# ------------------------------------------------------------------ creation and transfer
@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_round_trip_and_factories(dtype):
    x = edges(dtype)
    assert torch.equal(x.to("tvk").cpu(), x)
    assert torch.equal(torch.tensor(EDGES[dtype], dtype=dtype, device="tvk").cpu(), x)
    for make in (lambda d: torch.zeros(5, dtype=dtype, device=d), lambda d: torch.ones(2, 3, dtype=dtype, device=d),
                 lambda d: torch.full((3,), -1 if dtype != U8 else 255, dtype=dtype, device=d),
                 lambda d: torch.full((2,), -2, dtype=dtype, device=d),  # wraps into uint8: 254
                 lambda d: torch.arange(0, 100, 7, dtype=dtype, device=d),
                 lambda d: torch.arange(250, 260, dtype=dtype, device=d),  # wraps in uint8 and int8
                 lambda d: torch.zeros_like(torch.ones(3, dtype=dtype, device=d)).add(1)):
        assert torch.equal(make("tvk").cpu(), make("cpu"))
    empty = torch.empty(2, 3, dtype=dtype, device="tvk")
    assert empty.dtype == dtype and empty.shape == (2, 3)


# ------------------------------------------------------------------ casts, both ways
PAIRS = [(d, o) for d in SMALL for o in OTHER_DTYPES + SMALL if o != d]


@pytest.mark.parametrize("dtype, other", PAIRS, ids=[f"{a}-{b}".replace("torch.", "") for a, b in PAIRS])
def test_cast_to_and_from(dtype, other):
    same(lambda x: x.to(other), edges(dtype))
    src = edges(other) if other in SMALL else torch.tensor([-3, 0, 1, 2, 100, 127], dtype=other) \
        if other != torch.bool else torch.tensor([True, False, True])
    same(lambda x: x.to(dtype), src)


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_named_casts(dtype):
    for cast in (torch.Tensor.float, torch.Tensor.half, torch.Tensor.long, torch.Tensor.int, torch.Tensor.bool,
                 torch.Tensor.byte, torch.Tensor.char, torch.Tensor.short):
        same(cast, edges(dtype))


def test_float_to_uint8_truncates_and_wraps():
    """Toward zero, then modulo 256 (torch goes through int64): defined for every value below 2**63."""
    x = torch.tensor([-1.5, -0.7, 0.0, 2.5, 255.9, 256.0, 300.7, -129.7, -256.0, 1e6, -1e6, 2.0 ** 31 + 256])
    same(lambda t: t.to(U8), x)
    same(lambda t: t.half().to(U8), x[:9])
    same(lambda t: t.bfloat16().to(U8), x[:9])


@pytest.mark.parametrize("dtype", [I8, I16], ids=["int8", "int16"])
def test_float_to_signed_truncates_toward_zero(dtype):
    """In range only: outside it the C cast torch uses is undefined."""
    hi = torch.iinfo(dtype).max
    x = torch.tensor([-hi - 0.9, -hi + 0.5, -2.5, -0.7, 0.0, 0.7, 2.5, hi - 0.5, hi + 0.9])
    same(lambda t: t.to(dtype), x)


def test_int_to_small_wraps():
    same(lambda t: t.to(U8), torch.tensor([-1, 256, 300, 70000, -70000, 2 ** 40 + 3]))
    same(lambda t: t.to(I8), torch.tensor([-129, 128, 255, 70000], dtype=torch.int32))
    same(lambda t: t.to(I16), torch.tensor([-32769, 32768, 70000, -2 ** 40], dtype=torch.int64))


# ------------------------------------------------------------------ arithmetic
SCALARS = [10, -1, 1, 300, 2 ** 40]  # 300 and 2**40 wrap into the tensor's dtype first, as in torch


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_wraparound_edges(dtype):
    """The brief's values: 250 + 10, -128 - 1, 32767 + 1."""
    if dtype == U8:
        same(lambda x: x + 10, torch.tensor([250, 3], dtype=U8))
        same(lambda x: x - 10, torch.tensor([3, 250], dtype=U8))
    if dtype == I8:
        same(lambda x: x - 1, torch.tensor([-128, 0], dtype=I8))
        same(lambda x: -x, torch.tensor([-128, 127], dtype=I8))
    if dtype == I16:
        same(lambda x: x + 1, torch.tensor([32767, -1], dtype=I16))
        same(lambda x: x * x, torch.tensor([32767, -32768, 300], dtype=I16))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "rsub", "alpha"])
def test_add_sub_mul(dtype, op):
    fn = {"add": lambda x, s: x + s, "sub": lambda x, s: x - s, "mul": lambda x, s: x * s, "rsub": lambda x, s: s - x,
          "alpha": lambda x, s: torch.add(x, x, alpha=-2 if dtype == U8 else 3)}[op]
    for s in SCALARS:
        same(lambda x: fn(x, s), edges(dtype))
    same(lambda x, y: fn(x, y), edges(dtype), edges(dtype).flip(0))
    same(lambda x: fn(x, torch.tensor(300)), edges(dtype))  # a 0-dim CPU tensor: a scalar, wrapped


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_unary(dtype):
    for fn in (torch.neg, torch.abs, torch.square, torch.sign, torch.Tensor.__neg__):
        same(fn, edges(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_true_division_gives_float(dtype):
    same(lambda x: x / 3, edges(dtype))
    same(lambda x, y: x / y, edges(dtype), divisors(dtype))
    same(lambda x: 7 / (x | 1), edges(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
@pytest.mark.parametrize("op", ["floor", "trunc", "remainder", "fmod"])
def test_integer_division(dtype, op):
    fn = {"floor": lambda x, y: torch.div(x, y, rounding_mode="floor"),
          "trunc": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
          "remainder": lambda x, y: x % y, "fmod": torch.fmod}[op]
    for s in (3, -3, 7, 300):  # -3 and 300 wrap first: uint8 x // -3 divides by 253
        same(lambda x: fn(x, s), edges(dtype))
    same(fn, edges(dtype), divisors(dtype))
    same(lambda x: x // 2, edges(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_division_by_a_wrapped_zero_raises(dtype):
    """256 is 0 in uint8 and int8, 65536 in int16: torch raises ZeroDivisionError."""
    zero = 256 if dtype != I16 else 65536
    for fn in (lambda x: x // zero, lambda x: x % zero):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(edges(dtype))
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(edges(dtype).to("tvk"))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_in_place(dtype):
    same(lambda x: x.clone().add_(5), edges(dtype))
    same(lambda x: x.clone().mul_(3), edges(dtype))
    same(lambda x: x.clone().sub_(x), edges(dtype))
    same(lambda x: x.clone().clamp_(1, 100), edges(dtype))
    same(lambda x: x.clone().fill_(-1), edges(dtype))
    same(lambda x: x.clone().fill_(torch.tensor(300)), edges(dtype))  # a tensor converts as a copy: wraps
    same(lambda x: x.clone().masked_fill_(x > 0, 7), edges(dtype))


def test_mixed_dtypes_promote_like_the_cpu():
    u, c, s = edges(U8), edges(I8), edges(I16)
    same(lambda a, b: a + b, u, c)        # uint8 + int8 -> int16
    same(lambda a, b: a * b, u, s)
    same(lambda a, b: a - b, c, s)
    same(lambda a: a + True, u)
    same(lambda a: a + 1.5, u)            # -> float32
    same(lambda a: a * 0.5, c)
    same(lambda a, b: a + b, s, torch.ones(7, dtype=torch.int64))
    same(lambda a, b: a + b, u, torch.ones(7, dtype=torch.int32))


# ------------------------------------------------------------------ comparisons, clamp, min/max, where
@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_comparisons(dtype):
    for fn in (torch.eq, torch.ne, torch.lt, torch.le, torch.gt, torch.ge):
        for s in (3, -1, 300, 2 ** 40, 2.5):  # 300 wraps: uint8 x < 300 compares with 44
            same(lambda x: fn(x, s), edges(dtype))
        same(fn, edges(dtype), edges(dtype).flip(0))
        same(fn, edges(dtype), edges(I16 if dtype == U8 else U8))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_clamp_and_clip(dtype):
    lo = -5 if dtype == U8 else -100  # -5 wraps into uint8 (251): torch lets negative integers wrap
    for fn in (lambda x: x.clamp(2, 100), lambda x: x.clamp(lo, 100), lambda x: x.clip(min=4), lambda x: x.clamp(max=6),
               lambda x: torch.clamp(x, 1.5, 100.5),  # float bounds: a float result
               lambda x: x.clamp(x.flip(0)), lambda x: torch.clamp(x, torch.tensor(300)),
               lambda x: torch.nn.functional.hardtanh(x, 0, 100), lambda x: torch.relu(x)):
        same(fn, edges(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_minimum_maximum_where(dtype):
    same(torch.minimum, edges(dtype), edges(dtype).flip(0))
    same(torch.maximum, edges(dtype), edges(dtype).flip(0))
    same(lambda x: torch.maximum(x, torch.tensor(200)), edges(dtype))  # 200 wraps into int8: -56
    same(lambda x, y: torch.where(x > y, x, y), edges(dtype), edges(dtype).flip(0))
    same(lambda x: torch.where(x > 3, x, 7), edges(dtype))
    same(lambda x: torch.where(x > 3, 2.5, x), edges(dtype))
    same(lambda x: x.masked_fill(x > 3, 2.5), edges(dtype))  # truncated into the dtype


# ------------------------------------------------------------------ bitwise and shifts
@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_bitwise(dtype):
    for fn in (lambda x: x & 6, lambda x: x | 9, lambda x: x ^ -1, lambda x: x & 300, lambda x: ~x,
               lambda x: x & x.flip(0), lambda x: x | x.flip(0), lambda x: x ^ x.flip(0),
               lambda x: torch.bitwise_not(x), lambda x: x & edges(U8).to(x.device)):
        same(fn, edges(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_shifts(dtype):
    """torch's rule: a shift by a negative amount or by the width or more gives 0 (left) or the sign (right)."""
    for k in (0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 40, -1, 257):
        same(lambda x: x << k, edges(dtype))
        same(lambda x: x >> k, edges(dtype))
    same(lambda x: x << (x.flip(0) & 15), edges(dtype))
    same(lambda x: torch.bitwise_right_shift(x, x.flip(0) & 15), edges(dtype))
    same(lambda x: torch.bitwise_left_shift(x, 2), edges(dtype))

    def shifted_in_place(x):
        y = x.clone()
        y <<= 2
        y >>= 1
        return y

    same(shifted_in_place, edges(dtype))


def test_shifts_of_wider_ints():
    same(lambda x: x << 33, torch.tensor([1, -1, 5], dtype=torch.int32))
    same(lambda x: x >> 40, torch.tensor([1, -1, 5], dtype=torch.int32))
    same(lambda x: x << 63, torch.tensor([1, -1, 5]))
    same(lambda x: x >> 64, torch.tensor([1, -1, 5]))


# ------------------------------------------------------------------ what an image pipeline does
def test_torchvision_style_conversions():
    img = torch.tensor([[[0, 17, 255], [128, 250, 3]], [[1, 2, 3], [4, 5, 6]], [[9, 99, 199], [200, 100, 0]]],
                       dtype=U8)  # C, H, W
    same(lambda x: x.float().div(255), img)
    same(lambda x: (x.float() * 255).round().clamp(0, 255).to(U8), img.float().div(255))
    same(lambda x: (x.float() / 255 - 0.5) / 0.25, img)
    same(lambda x: x.permute(1, 2, 0).contiguous(), img)              # CHW -> HWC
    same(lambda x: x.permute(2, 0, 1).contiguous().view(3, -1), img.permute(1, 2, 0).contiguous())
    same(lambda x: x[:, 1:, ::2], img)
    same(lambda x: x[1], img)
    same(lambda x: x[x > 100], img)
    same(lambda x: x[torch.tensor([2, 0])], img)
    same(lambda x: torch.cat([x, x], 1), img)
    same(lambda x: torch.stack([x, x]), img)
    same(lambda x: x.flip(-1), img)
    same(lambda x: x.flip(0, 2), img)
    same(lambda x: x.flatten(), img)
    same(lambda x: x.unsqueeze(0).contiguous(memory_format=torch.channels_last), img)


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_shape_ops(dtype):
    x = edges(dtype)[:6]
    same(lambda t: t.view(2, 3).t().contiguous(), x)
    same(lambda t: t.view(3, 2)[1:], x)
    same(lambda t: torch.cat([t, t.long()]), x)                       # promoted: int64
    same(lambda t: t.view(2, 3).sort(1), x)
    same(lambda t: t.cumsum(0), x)
    same(lambda t: t.clone(), x)


# ------------------------------------------------------------------ reductions
@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_reductions(dtype):
    x = edges(dtype)[:6].view(2, 3)
    for fn in (torch.sum, lambda t: t.sum(1), lambda t: t.sum(0, keepdim=True), lambda t: t.sum(dtype=dtype),
               lambda t: t.float().mean(), lambda t: t.mean(dtype=torch.float32), lambda t: t.float().mean(1),
               torch.max, torch.min, lambda t: t.amax(1), lambda t: t.amin(0), lambda t: t.max(1), lambda t: t.min(0),
               lambda t: t.argmax(), lambda t: t.any(), lambda t: t.all(), lambda t: t.count_nonzero()):
        same(fn, x)


def test_sum_is_exact_past_float32():
    """A uint8 image sums past 2**24 (float32 partial sums would drop units); the result is int64."""
    x = torch.full((70000,), 255, dtype=U8)
    x[::7] = 3
    same(torch.sum, x)
    same(lambda t: t.view(7, 10000).sum(1), x)
    same(torch.sum, torch.tensor([2 ** 40, 1, -3]))  # int64 sums are exact too


def test_random_fills_whole_numbers_in_range():
    """random_(from, to) and random_(to) draw whole numbers in [from, to), into any dtype."""
    for dtype in (U8, I8, I16, torch.float32):
        x = torch.empty(4000, dtype=dtype, device="tvk").random_(3, 7).cpu()
        assert x.dtype == dtype and set(x.tolist()) == {3, 4, 5, 6}
        assert set(torch.empty(4000, dtype=dtype, device="tvk").random_(5).cpu().tolist()) == {0, 1, 2, 3, 4}


# ------------------------------------------------------------------ scalars that overflow, unsupported ops
@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_numbers_out_of_range_raise_torchs_error(dtype):
    big = 300 if dtype != I16 else 40000
    for fn in (lambda x: x.clamp(0, big), lambda x: x.fill_(big), lambda x: torch.where(x > 0, x, big),
               lambda x: x.masked_fill(x > 0, big), lambda x: torch.add(x, x, alpha=big),
               lambda x: torch.full((2,), big, dtype=dtype, device=x.device), lambda x: x.fill_(-1.5 if dtype == U8 else 1e6)):
        with pytest.raises(RuntimeError, match="without overflow") as ref:
            fn(edges(dtype))
        with pytest.raises(RuntimeError, match="without overflow") as got:
            fn(edges(dtype).to("tvk"))
        assert str(got.value) == str(ref.value)


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_ops_torch_refuses_are_refused(dtype):
    name = {U8: "Byte", I8: "Char", I16: "Short"}[dtype]
    for fn in (lambda x: x.lerp(x, 0.5), lambda x: torch.nn.functional.leaky_relu(x), lambda x: x.frac(),
               lambda x: torch.nn.functional.elu(x)):
        with pytest.raises(NotImplementedError, match=name):
            fn(edges(dtype))
        with pytest.raises(NotImplementedError, match=name):
            fn(edges(dtype).to("tvk"))
    for fn in (lambda x: x.pow(-1), lambda x: x.mean(), lambda x: x.var()):
        with pytest.raises(RuntimeError):
            fn(edges(dtype))
        with pytest.raises(RuntimeError):
            fn(edges(dtype).to("tvk"))


@pytest.mark.parametrize("dtype", SMALL, ids=ids)
def test_operators_run_or_name_what_is_missing(dtype):
    """Python's operators either run or raise NotImplementedError naming the op and dtype, never
    Python's "unsupported operand" (what a TypeError inside Tensor.__add__ turns into)."""
    x = edges(dtype)[:4].view(2, 2)
    for fn in (lambda a: a + 10, lambda a: a - a, lambda a: a * 2, lambda a: a / 2, lambda a: a // 2, lambda a: a % 3,
               lambda a: a ** 2, lambda a: a & 1, lambda a: a | 1, lambda a: a ^ 1, lambda a: a << 1, lambda a: a >> 1,
               lambda a: -a, lambda a: ~a, lambda a: abs(a), lambda a: a < 1, lambda a: a == a):
        same(fn, x)
    with pytest.raises(NotImplementedError, match=f"aten.mm.*{dtype}"):
        x.to("tvk") @ x.to("tvk")


def test_a_device_without_8bit_storage_refuses_them(monkeypatch):
    """Where the device lacks the storage feature a dtype needs, the dtype is not supported there,
    with an error naming it (uint8 may still exist, as torch makes empty uint8 buffers itself)."""
    device = _storage.get_device()
    monkeypatch.setitem(device.facts.features, "storage_8bit", False)
    monkeypatch.setattr(_storage, "_checked", {})
    assert torch.int8 not in torchvk._storage.supported_dtypes() and torch.uint8 not in _storage.supported_dtypes()
    with pytest.raises(TypeError, match="torch.int8"):  # shapes no other test makes: nothing cached
        torch.zeros(13, dtype=I8, device="tvk")
    u = torch.zeros(12, dtype=U8, device="tvk")  # a buffer fill: no kernel
    with pytest.raises(RuntimeError, match="storage_8bit, which uint8 tensors need"):
        (u + 1).cpu()
