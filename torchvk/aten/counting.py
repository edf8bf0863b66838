"""Counting and sampling ops as compositions of tvk kernels: bincount, repeat_interleave's index
form, randperm, multinomial.

Their output sizes depend on the data (bincount's on the largest value, repeat_interleave's on
the repeats' sum), so, as on CUDA, they read one number back before allocating. randperm sorts
uniform keys; multinomial draws with replacement by searching each uniform draw in the rows'
cumulative sums, and without replacement by the largest log(u) / p keys (Efraimidis-Spirakis),
which picks each next index with probability proportional to p among those not yet drawn.
"""
from __future__ import annotations

import torch

from ..op_registry import register

aten = torch.ops.aten
_INTEGRAL = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@register(aten.bincount.default)
def bincount(self, weights=None, minlength=0):
    if self.dim() != 1 or self.dtype not in _INTEGRAL:
        raise RuntimeError(f"bincount only supports 1-d non-negative integral inputs (got {self.dim()}-d {self.dtype})")
    if minlength < 0:
        raise RuntimeError(f"minlength should be >= 0, got {minlength}")
    if weights is not None and weights.shape != self.shape:
        raise RuntimeError("weights should be 1-d and have the same length as input")
    dtype = torch.int64 if weights is None else weights.dtype
    if self.numel() == 0:
        return torch.zeros(minlength, dtype=dtype, device=self.device)
    low, high = torch.aminmax(self)
    if int(low) < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    counts = torch.zeros(max(int(high) + 1, minlength), dtype=dtype, device=self.device)
    add = torch.ones(self.shape, dtype=dtype, device=self.device) if weights is None else weights
    return counts.index_add_(0, self.to(torch.int64), add)


@register(aten.repeat_interleave.Tensor)
def repeat_interleave_indices(repeats, *, output_size=None):
    """The index of every output position: i repeated repeats[i] times."""
    if repeats.dim() != 1 or repeats.dtype not in _INTEGRAL:
        raise RuntimeError("repeat_interleave: repeats must be a 1-d tensor of integers")
    ends = repeats.to(torch.int64).cumsum(0)
    total = output_size if output_size is not None else (int(ends[-1]) if repeats.numel() else 0)
    if repeats.numel() and int(repeats.min()) < 0:
        raise RuntimeError("repeat_interleave: repeats can not be negative")
    positions = torch.arange(total, device=repeats.device)
    return torch.searchsorted(ends, positions, right=True)


@register(aten.randperm.generator_out, aten.randperm.out)
def randperm_out(n, generator=None, *, out):
    keys = torch.rand(n, generator=generator, device=out.device)
    return out.copy_(torch.argsort(keys).to(out.dtype) if n else keys.to(out.dtype))


@register(aten.randperm.default, aten.randperm.generator)
def randperm(n, generator=None, *, dtype=None, layout=None, device=None, pin_memory=None):
    out = torch.empty(n, dtype=dtype or torch.int64, device=device)
    return randperm_out(n, generator, out=out)


@register(aten.multinomial.default)
def multinomial(self, num_samples, replacement=False, *, generator=None):
    if self.dim() not in (1, 2) or not self.is_floating_point():
        raise RuntimeError("multinomial: prob_dist must be a 1 or 2 dim floating-point tensor")
    rows = self.reshape(-1, self.shape[-1])
    n = rows.shape[1]
    if num_samples <= 0:
        raise RuntimeError("multinomial: cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > n:
        raise RuntimeError("multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    p = rows.float()
    if bool((p < 0).any()) or not bool(torch.isfinite(p).all()):
        raise RuntimeError("multinomial: probability tensor contains either `inf`, `nan` or element < 0")
    total = p.sum(1, keepdim=True)
    if bool((total <= 0).any()):
        raise RuntimeError("multinomial: invalid multinomial distribution (sum of probabilities <= 0)")
    if replacement:
        cdf = (p / total).cumsum(1).contiguous()
        draws = torch.rand(rows.shape[0], num_samples, generator=generator, device=self.device)
        picked = torch.searchsorted(cdf, draws.contiguous(), right=True).clamp_(max=n - 1)
    else:
        if bool(((p > 0).sum(1) < num_samples).any()):
            raise RuntimeError("multinomial: invalid multinomial distribution (with replacement=False, not "
                               "enough non-negative category to sample)")
        u = torch.rand(rows.shape, generator=generator, device=self.device).clamp_(min=1e-30)
        keys = torch.where(p > 0, u.log() / p, torch.full_like(p, float("-inf")))
        picked = torch.topk(keys, num_samples, dim=1).indices
    return picked if self.dim() == 2 else picked.reshape(num_samples)
