"""Random ops on tvk_kernels.kernels.rng (Philox, counter-based): normal_, uniform_, dropout, rrelu."""
from __future__ import annotations

import torch

from tvk_kernels.kernels import rng as rng_kernels

from .. import _rng
from ..op_registry import register
from .._tensor import new_tensor
from ._util import addr, dev
from .copies import cast, clone, contig, device_copy, fill
from .elementwise import mul, require_floating, run

aten = torch.ops.aten


def _no_generator(generator, op):
    if generator is not None:
        raise NotImplementedError(f"TorchVK: {op} with an explicit torch.Generator is not supported; seed with "
                                  "torch.manual_seed / torch.tvk.manual_seed")


def _fill_random(self, mode, a, b, op):
    n = self.numel()
    if n == 0:
        return self
    if self.dtype in (torch.float32, torch.float16) and self.is_contiguous():
        target = self
    else:
        target = new_tensor(self.shape, torch.float32, dev(self))
    seed, off = _rng.next_offset(n)
    dt = "float16" if target.dtype == torch.float16 else "float32"
    if mode == "normal":
        rng_kernels.normal_(dev(self), addr(target), n, float(a), float(b), seed, off, dt)
    else:
        rng_kernels.uniform_(dev(self), addr(target), n, float(a), float(b), seed, off, dt)
    if target is not self:
        device_copy(self, target)
    return self


@register(aten.normal_.default)
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    _no_generator(generator, "aten.normal_")
    return _fill_random(self, "normal", mean, std, "aten.normal_")


@register(aten.uniform_.default)
def uniform_(self, from_=0.0, to=1.0, *, generator=None):
    _no_generator(generator, "aten.uniform_")
    require_floating("check_uniform_bounds", self)  # torch's refusal of integer tensors
    return _fill_random(self, "uniform", from_, to, "aten.uniform_")


_C_TYPES = {torch.uint8: "unsigned char", torch.int8: "signed char", torch.int16: "short int", torch.int32: "int"}


def _check_random_bounds(dtype, from_, to):
    """torch's check that [from, to) fits the integer dtype it fills."""
    if dtype not in _C_TYPES:
        return
    info = torch.iinfo(dtype)
    if from_ < info.min or from_ > info.max:
        raise RuntimeError(f"from is out of bounds for {_C_TYPES[dtype]}")
    if to - 1 < info.min or to - 1 > info.max:
        raise RuntimeError(f"to - 1 is out of bounds for {_C_TYPES[dtype]}")


@register(getattr(aten.random_, "from"))
def random_(self, from_=0, to=None, *, generator=None):
    _no_generator(generator, "aten.random_")
    if to is None:
        raise NotImplementedError("TorchVK: aten.random_ needs an upper bound")
    _check_random_bounds(self.dtype, from_, to)
    u = new_tensor(self.shape, torch.float32, dev(self))
    _fill_random(u, "uniform", 0.0, float(to - from_), "aten.random_")
    # whole numbers in [0, to - from_): clamp guards the (rare) rounding up to `to - from_`
    run("floor", (u,), out=u)
    run("clamp", (u,), out=u, scalars=(0.0, float(to - from_ - 1)))
    device_copy(self, u)
    if from_:
        run("add", (self, from_), out=self, scalars=(1,))
    return self


@register(aten.random_.to)
def random_to(self, to, *, generator=None):  # x.random_(to): the one bound is the upper one
    return random_(self, 0, to, generator=generator)


@register(aten.bernoulli_.float)
def bernoulli_(self, p=0.5, *, generator=None):
    _no_generator(generator, "aten.bernoulli_")
    u = new_tensor(self.shape, torch.float32, dev(self))
    _fill_random(u, "uniform", 0.0, 1.0, "aten.bernoulli_")
    return run("lt", (u, float(p)), out=self)


@register(aten.bernoulli.p)
def bernoulli_p(self, p=0.5, *, generator=None):
    """torch.bernoulli(x, p): what torch's composite does (a fresh tensor like x, then bernoulli_),
    as one op, so a compiled graph (which keeps the functional form) runs it too, with eager's numbers."""
    return bernoulli_(new_tensor(tuple(self.shape), self.dtype, dev(self)), p, generator=generator)


@register(aten.native_dropout.default)
def native_dropout(input, p, train):
    d = dev(input)
    if not train or p == 0:
        mask = new_tensor(input.shape, torch.bool, d)
        fill(mask, True)
        return clone(input), mask
    x = contig(input)
    if x.dtype == torch.bfloat16:  # 16-bit storage, float32 arithmetic: through a float32 copy
        out, mask = native_dropout(cast(x, torch.float32), p, train)
        return cast(out, torch.bfloat16), mask
    if x.dtype not in (torch.float32, torch.float16):
        raise TypeError(f"TorchVK: aten.native_dropout supports float32/float16/bfloat16, not {x.dtype}")
    out = new_tensor(x.shape, x.dtype, d)
    mask = new_tensor(x.shape, torch.bool, d)
    n = x.numel()
    if n:
        seed, off, seed_buffer = _rng.kernel_seed(n)
        rng_kernels.dropout(d, addr(x), addr(out), addr(mask), n, float(p), seed, off,
                   "float16" if x.dtype == torch.float16 else "float32", seed_buffer=seed_buffer)
    return out, mask


@register(aten.native_dropout_backward.default)
def native_dropout_backward(grad_output, mask, scale):
    out = run("mul", (grad_output, mask), dtype=grad_output.dtype)
    return run("mul", (out, float(scale)), out=out)


@register(aten.rrelu_with_noise.default)
def rrelu_with_noise(self, noise, lower=0.125, upper=1.0 / 3.0, training=False, generator=None):
    if not training:
        return run("leaky_relu", (self,), dtype=self.dtype, scalars=((lower + upper) / 2,))
    require_floating("rrelu_with_noise", self)
    slopes = uniform_(new_tensor(tuple(self.shape), self.dtype, dev(self)), lower, upper, generator=generator)
    positive = run("gt", (self, 0), dtype=torch.bool)
    run("where", (positive, 1.0, slopes), out=noise)  # noise: 1 where x > 0, else the slope drawn
    return mul(self, noise)


@register(aten.rrelu_with_noise_backward.default)
def rrelu_with_noise_backward(grad_output, self, noise, lower, upper, training, self_is_result):
    if training and upper - lower > 1e-6:
        return mul(grad_output, noise)
    return run("leaky_relu_backward", (grad_output, self), dtype=grad_output.dtype, scalars=((lower + upper) / 2,))
