"""Random samplers built on the uniform and normal kernels (aten/rng.py): bernoulli with tensor
probabilities, normal with tensor mean/std, and the in-place exponential_, geometric_,
log_normal_ and cauchy_ by their inverse CDFs."""
from __future__ import annotations

import math

import torch

from ..op_registry import register
from .rng import _no_generator

aten = torch.ops.aten


def _uniform(like, generator, op):
    _no_generator(generator, op)
    return torch.empty(like.shape, dtype=torch.float32, device=like.device).uniform_()


def _fill(self, values):
    return self.copy_(values)


@register(aten.bernoulli_.Tensor)
def bernoulli_tensor_(self, p, *, generator=None):
    return _fill(self, _uniform(self, generator, "aten.bernoulli_") < p)


@register(aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor)
def normal(mean, std=1.0, *, generator=None):
    _no_generator(generator, "aten.normal")
    tensors = [t for t in (mean, std) if isinstance(t, torch.Tensor)]
    if isinstance(std, torch.Tensor) and bool((std < 0).any()):
        raise RuntimeError("normal expects all elements of std >= 0.0")
    if not isinstance(std, torch.Tensor) and std < 0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
    shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    dtype = tensors[0].dtype
    return mean + std * torch.empty(shape, dtype=dtype, device=tensors[0].device).normal_()


@register(aten.exponential_.default)
def exponential_(self, lambd=1.0, *, generator=None):
    if lambd <= 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={lambd}")
    return _fill(self, -torch.log1p(-_uniform(self, generator, "aten.exponential_")) / lambd)


@register(aten.geometric_.default)
def geometric_(self, p, *, generator=None):
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p}")
    u = _uniform(self, generator, "aten.geometric_")
    return _fill(self, torch.ceil(torch.log1p(-u) / math.log1p(-p)).clamp_(min=1))


@register(aten.log_normal_.default)
def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    _no_generator(generator, "aten.log_normal_")
    if std <= 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={std}")
    return _fill(self, torch.empty(self.shape, dtype=torch.float32, device=self.device).normal_(mean, std).exp_())


@register(aten.cauchy_.default)
def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    if sigma <= 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={sigma}")
    u = _uniform(self, generator, "aten.cauchy_")
    return _fill(self, median + sigma * torch.tan(math.pi * (u - 0.5)))
