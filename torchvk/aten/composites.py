"""Ops TorchVK runs as compositions of ops it has, registered above autograd.

`cdist`, `_weight_norm` and `embedding_bag` are composite ops whose CPU/CUDA paths end in kernels
with their own backward ops (`_cdist_forward`/`_cdist_backward`, `_weight_norm_interface`,
`_embedding_bag`); 3-d average and max pooling and trilinear upsampling are separable, so they are two
passes of the 2-d ops (boxes and linear weights factor per axis, padding and ceil_mode included);
F.bilinear is one einsum; bicubic upsampling and grid_sample gather the input's pixels with weights
computed on the device (so autograd differentiates the grid too). Here each is written once with differentiable ops and registered for the
AutogradPrivateUse1 key (eager mode: autograd differentiates the pieces) and traced the same way
in compiled mode (compile/whole_ops.py), so no backward op is needed.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..op_registry import register_composite



def cdist(x1, x2, p=2.0, compute_mode=None):
    """torch.cdist: the p-norm of every pair of rows. Euclidean distances of more than 25 rows (or
    with compute_mode="use_mm_for_euclid_dist") go through one matmul, as torch computes them,
    which also keeps memory at the output's size; other norms take the differences of all pairs."""
    many = x1.shape[-2] > 25 or x2.shape[-2] > 25
    if p == 2 and (compute_mode == "use_mm_for_euclid_dist" or (many and compute_mode != "donot_use_mm_for_euclid_dist")):
        return _euclidean(x1, x2)
    return torch.linalg.vector_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), ord=p, dim=-1)


def _euclidean(x1, x2):
    """sqrt(|a|^2 + |b|^2 - 2 a.b) for every pair of rows, the products in one matmul (torch's _euclidean_dist)."""
    n1, n2 = x1.pow(2).sum(-1, keepdim=True), x2.pow(2).sum(-1, keepdim=True)
    a = torch.cat([-2 * x1, n1, torch.ones_like(n1)], -1)
    b = torch.cat([x2, torch.ones_like(n2), n2], -1)
    return (a @ b.mT).clamp_min(0).sqrt()


def weight_norm(v, g, dim=0):
    """torch._weight_norm: v scaled to norm g along every dim but `dim` (-1: over all of v)."""
    if dim == -1:
        return v * (g / torch.linalg.vector_norm(v))
    dims = [d for d in range(v.dim()) if d != dim % v.dim()]
    return v * (g / torch.linalg.vector_norm(v, 2, dim=dims, keepdim=True))


_SUM, _MEAN, _MAX = 0, 1, 2


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """torch.embedding_bag: (output, offset2bag, bag_size, max_indices), sum/mean/max of each bag's rows."""
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("TorchVK: embedding_bag with scale_grad_by_freq or sparse gradients has no "
                                  "Vulkan implementation; use the defaults (dense gradients)")
    device = weight.device
    if indices.dim() == 2:  # fixed-size bags, one per row
        bags, length = indices.shape
        offsets = torch.arange(0, bags * length, length, device=device)
        indices = indices.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    n = indices.numel()
    starts = offsets[:-1] if include_last_offset else offsets
    nbags, dim = starts.numel(), weight.shape[1]
    offset2bag = torch.searchsorted(starts.contiguous(), torch.arange(n, device=device), right=True) - 1
    rows = F.embedding(indices, weight)  # index-range checked
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    keep = None
    if padding_idx is not None and padding_idx >= 0:
        keep = indices != padding_idx
        rows = rows * keep.unsqueeze(1).to(rows.dtype)
    counted = keep.to(torch.int64) if keep is not None else torch.ones(n, dtype=torch.int64, device=device)
    bag_size = torch.zeros(nbags, dtype=torch.int64, device=device).index_add(0, offset2bag, counted)
    spread = offset2bag.unsqueeze(1).expand(n, dim)
    if mode == _MAX:
        low = torch.full((nbags, dim), float("-inf"), dtype=rows.dtype, device=device)
        if keep is not None:
            rows = torch.where(keep.unsqueeze(1), rows, torch.full_like(rows, float("-inf")))
        best = low.scatter_reduce(0, spread, rows, "amax", include_self=True)
        empty = (bag_size == 0).unsqueeze(1)
        out = torch.where(empty, torch.zeros_like(best), best)
        # the first position holding each bag's maximum, as the CPU reports it (-1: an empty bag)
        position = torch.arange(n, device=device).unsqueeze(1).expand(n, dim)
        at_max = torch.where(rows == best.detach()[offset2bag], position, torch.full_like(position, n))
        first = torch.full((nbags, dim), n, dtype=torch.int64, device=device).scatter_reduce(0, spread, at_max, "amin")
        max_indices = torch.where(first < n, indices[first.clamp(max=max(n - 1, 0))], torch.full_like(first, -1))
        return out, offset2bag, bag_size, max_indices
    out = torch.zeros(nbags, dim, dtype=rows.dtype, device=device).index_add(0, offset2bag, rows)
    if mode == _MEAN:
        out = out / bag_size.clamp(min=1).unsqueeze(1).to(rows.dtype)
    return out, offset2bag, bag_size, torch.zeros(nbags, dtype=torch.int64, device=device)


def _embedding_bag_plain(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                         per_sample_weights=None, include_last_offset=False):
    return embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights,
                         include_last_offset, None)


def _triple(v, default=None):
    v = default if (v is None or (isinstance(v, (list, tuple)) and len(v) == 0)) else v
    return tuple(v) * (3 // len(v)) if isinstance(v, (list, tuple)) else (v, v, v)


def _volumes(x):
    """(x as N, C, D, H, W, a function giving a result back x's batch dims): 4-d input is unbatched."""
    if x.dim() == 4:
        return x.unsqueeze(0), lambda y: y.squeeze(0)
    return x, lambda y: y


def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None):
    """avg_pool2d over (H, W) with D as channels, then over D: a box's mean (or count) is the product
    of its axes' (padding, ceil_mode and count_include_pad act per axis); divisor_override: the two
    passes sum and the total is divided once."""
    v, back = _volumes(x)
    (kd, kh, kw), (sd, sh, sw), (pd, ph, pw) = _triple(kernel_size), _triple(stride, kernel_size), _triple(padding)
    N, C, D, H, W = v.shape
    div = None if divisor_override is None else 1
    y = F.avg_pool2d(v.reshape(N * C, D, H, W), (kh, kw), (sh, sw), (ph, pw), ceil_mode, count_include_pad, div)
    Ho, Wo = y.shape[-2:]
    y = F.avg_pool2d(y.reshape(N * C, 1, D, Ho * Wo), (kd, 1), (sd, 1), (pd, 0), ceil_mode, count_include_pad, div)
    y = y.reshape(N, C, -1, Ho, Wo)
    return back(y if divisor_override is None else y / divisor_override)


def max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    """max_pool2d over (H, W) with D as channels, then over D: a box's maximum is the maximum of
    its slices' maxima, and the first along D of the slices' first maxima is torch's first in
    (d, h, w) order; indices into each D*H*W volume, as torch's."""
    v, back = _volumes(x)
    (kd, kh, kw), (sd, sh, sw) = _triple(kernel_size), _triple(stride, kernel_size)
    (pd, ph, pw), (dd, dh, dw) = _triple(padding), _triple(dilation)
    N, C, D, H, W = v.shape
    y, at_hw = F.max_pool2d(v.reshape(N * C, D, H, W), (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil_mode,
                            return_indices=True)
    Ho, Wo = y.shape[-2:]
    z, at_d = F.max_pool2d(y.reshape(N * C, 1, D, Ho * Wo), (kd, 1), (sd, 1), (pd, 0), (dd, 1), ceil_mode,
                           return_indices=True)
    Do = z.shape[2]
    d = (at_d // (Ho * Wo)).reshape(N * C, Do, Ho * Wo)  # each output's slice
    hw = at_hw.reshape(N * C, D, Ho * Wo).gather(1, d)  # its position within that slice
    index = (d * (H * W) + hw).reshape(N, C, Do, Ho, Wo)
    return back(z.reshape(N, C, Do, Ho, Wo)), back(index)


def adaptive_avg_pool3d(x, output_size):
    """adaptive_avg_pool2d over (H, W) with D as channels, then over D (adaptive windows are boxes)."""
    v, back = _volumes(x)
    N, C, D, H, W = v.shape
    od, oh, ow = (D if o is None else o for o, D in zip(_triple(output_size), (D, H, W)))
    y = F.adaptive_avg_pool2d(v.reshape(N * C, D, H, W), (oh, ow))
    y = F.adaptive_avg_pool2d(y.reshape(N * C, 1, D, oh * ow), (od, oh * ow))
    return back(y.reshape(N, C, od, oh, ow))


def upsample_trilinear3d(x, output_size, align_corners, scales_d=None, scales_h=None, scales_w=None):
    """Bilinear over (H, W) with D as channels, then linear along D (the other axis kept at its size)."""
    N, C, D, H, W = x.shape
    od, oh, ow = output_size
    y = aten.upsample_bilinear2d.default(x.reshape(N * C, D, H, W), [oh, ow], align_corners, scales_h, scales_w)
    y = aten.upsample_bilinear2d.default(y.reshape(N * C, 1, D, oh * ow), [od, oh * ow], align_corners, scales_d, None)
    return y.reshape(N, C, od, oh, ow)


def bilinear(input1, input2, weight, bias=None):
    """F.bilinear: y[..., o] = input1 W[o] input2^T + b[o]."""
    y = torch.einsum("...i,oij,...j->...o", input1, weight, input2)
    return y if bias is None else y + bias


_CUBIC_A = -0.75  # torch's bicubic convolution constant


def _cubic_taps(size_in: int, size_out: int, align_corners: bool, scale, like):
    """(index (4, out) int64, weight (4, out)) of the bicubic taps along one axis, computed on the
    device as torch's upsample_bicubic2d does (source index, clamped taps, cubic convolution)."""
    if align_corners:
        ratio = (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
        real = torch.arange(size_out, device=like.device, dtype=like.dtype) * ratio
    else:
        ratio = 1.0 / scale if scale else size_in / size_out
        real = (torch.arange(size_out, device=like.device, dtype=like.dtype) + 0.5) * ratio - 0.5
    base = torch.floor(real)
    t = real - base
    a = _CUBIC_A
    s1, s2 = t + 1, 1 - t
    s3 = s2 + 1
    weights = torch.stack([((a * s1 - 5 * a) * s1 + 8 * a) * s1 - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
                           ((a + 2) * s2 - (a + 3)) * s2 * s2 + 1, ((a * s3 - 5 * a) * s3 + 8 * a) * s3 - 4 * a])
    first = base.to(torch.int64) - 1
    index = torch.stack([(first + k).clamp(0, size_in - 1) for k in range(4)])
    return index, weights


def upsample_bicubic2d(x, output_size, align_corners, scales_h=None, scales_w=None):
    """Bicubic resampling as two passes of four gathered taps each (rows, then columns)."""
    N, C, H, W = x.shape
    oh, ow = output_size
    idx, w = _cubic_taps(H, oh, align_corners, scales_h, x)
    y = sum(x.index_select(2, idx[k]) * w[k].view(1, 1, oh, 1) for k in range(4))
    idx, w = _cubic_taps(W, ow, align_corners, scales_w, x)
    return sum(y.index_select(3, idx[k]) * w[k].view(1, 1, 1, ow) for k in range(4))


_BILINEAR, _NEAREST = 0, 1
_ZEROS, _BORDER = 0, 1


def grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners):
    """F.grid_sample over 4-d input: bilinear or nearest, zeros or border padding, as gathers of the
    input's pixels weighted by the grid (so autograd differentiates input and grid)."""
    if interpolation_mode not in (_BILINEAR, _NEAREST) or padding_mode not in (_ZEROS, _BORDER):
        raise NotImplementedError("TorchVK: grid_sample runs modes 'bilinear' and 'nearest' with padding 'zeros' "
                                  "or 'border' on tvk; mode 'bicubic' and padding 'reflection' have no Vulkan "
                                  "implementation (run that op on the CPU)")
    N, C, H, W = x.shape
    Ho, Wo = grid.shape[1:3]

    def unnormalize(coord, size):
        c = (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2
        return c.clamp(0, size - 1) if padding_mode == _BORDER else c

    ix, iy = unnormalize(grid[..., 0], W), unnormalize(grid[..., 1], H)
    flat = x.reshape(N, C, H * W)

    def tap(xi, yi):  # the input at integer (xi, yi), (N, C, Ho, Wo), zero outside
        inside = ((xi >= 0) & (xi <= W - 1) & (yi >= 0) & (yi <= H - 1)).to(x.dtype)
        at = (yi.clamp(0, H - 1) * W + xi.clamp(0, W - 1)).to(torch.int64).reshape(N, 1, Ho * Wo)
        return torch.gather(flat, 2, at.expand(N, C, Ho * Wo)).reshape(N, C, Ho, Wo), inside.unsqueeze(1)

    if interpolation_mode == _NEAREST:
        v, inside = tap(torch.round(ix), torch.round(iy))
        # + an exact 0 that depends on the grid: its grad is zeros, as torch's, not None
        never = torch.zeros_like(ix, dtype=torch.bool)
        return v * inside + torch.where(never, ix + iy, 0.0).unsqueeze(1)
    x0, y0 = torch.floor(ix), torch.floor(iy)
    wx1, wy1 = (ix - x0).unsqueeze(1), (iy - y0).unsqueeze(1)
    wx0, wy0 = 1 - wx1, 1 - wy1
    out = 0
    for xi, yi, wgt in ((x0, y0, wx0 * wy0), (x0 + 1, y0, wx1 * wy0), (x0, y0 + 1, wx0 * wy1), (x0 + 1, y0 + 1, wx1 * wy1)):
        v, inside = tap(xi, yi)
        out = out + v * (wgt * inside)
    return out


def pdist(x, p=2.0):
    """The p-norm distance of every pair of rows i < j, in torch's order (row-major upper triangle)."""
    n = x.shape[0]
    i, j = torch.triu_indices(n, n, 1).to(x.device).unbind(0)
    return torch.linalg.vector_norm(x[i] - x[j], ord=p, dim=-1)


def renorm(x, p, dim, maxnorm):
    """Each slice along `dim` scaled down to p-norm maxnorm where its norm exceeds it (torch's 1e-7 guard)."""
    dims = [d for d in range(x.dim()) if d != dim % x.dim()]
    norm = torch.linalg.vector_norm(x, ord=p, dim=dims, keepdim=True)
    return x * torch.where(norm > maxnorm, maxnorm / (norm + 1e-7), torch.ones_like(norm))


def multi_margin_loss(x, target, p=1, margin=1, weight=None, reduction=1):
    """sum over classes c != y of max(0, margin - x[y] + x[c])^p (weighted by weight[y]) / C."""
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    rows = x.reshape(-1, x.shape[-1]) if x.dim() > 1 else x.reshape(1, -1)  # 0-d, 1-d: one sample
    y = target.reshape(-1, 1).to(torch.int64)
    gap = (margin - rows.gather(1, y) + rows).clamp(min=0)
    if p == 2:
        gap = gap * gap
    if weight is not None:
        gap = gap * weight[y]
    others = torch.ones_like(gap).scatter(1, y, 0.0)
    loss = (gap * others).sum(1) / rows.shape[1]
    loss = loss.reshape(target.shape) if x.dim() > 1 else loss.reshape(())
    return loss.mean() if reduction == 1 else loss.sum() if reduction == 2 else loss


aten = torch.ops.aten
COMPOSED = {  # op -> composition (compile/whole_ops.py traces these too)
    aten.cdist.default: cdist,
    aten._weight_norm.default: weight_norm,
    aten.embedding_bag.padding_idx: embedding_bag,
    aten.embedding_bag.default: _embedding_bag_plain,
    aten.avg_pool3d.default: avg_pool3d,
    aten._adaptive_avg_pool3d.default: adaptive_avg_pool3d,
    aten.max_pool3d_with_indices.default: max_pool3d_with_indices,
    aten.upsample_trilinear3d.default: upsample_trilinear3d,
    aten.bilinear.default: bilinear,
    aten.upsample_bicubic2d.default: upsample_bicubic2d,
    aten.grid_sampler_2d.default: grid_sampler_2d,
    aten.pdist.default: pdist,
    aten.renorm.default: renorm,
    aten.multi_margin_loss.default: multi_margin_loss,
}
for _op, _fn in COMPOSED.items():
    register_composite(_op, traced=True)(_fn)
