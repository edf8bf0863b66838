"""F.scaled_dot_product_attention on tvk_kernels.kernels.attention (fused, the L x L scores never stored).

torch picks an SDPA backend per device with a C++ stub a Python backend cannot fill, so on tvk
SDPA would run its math decomposition (softmax of a materialised L x L matrix). Instead
`scaled_dot_product_attention` is registered for the AutogradPrivateUse1 key (a composite op
never reaches TVKTensor's Python dispatch): it calls
aten._scaled_dot_product_fused_attention_overrideable, the op torch keeps for out-of-tree
backends, whose autograd formula calls ..._overrideable_backward; both are in the op table.
Inputs the kernel does not cover (not 4-d, head dim over 128, other dtypes, a value head dim
unlike the query's, both a mask and is_causal: torch's error) take torch's math decomposition.
While tracing (Dynamo's fake tvk tensors, torchvk.compile) `traced_sdpa` puts the same fused op
in the graph (torchvk/compile/whole_ops.py).

Dropout keeps what torch's fused kernels keep: philox_seed and philox_offset are one-element
int64 tvk tensors the forward kernel writes the (seed, offset) it drew with, and the backward
regenerates the same mask from them.
"""
from __future__ import annotations

import math

import torch

from tvk_kernels.kernels import attention as attention_kernels
from tvk_kernels.runtime.device import get_device

from .. import _rng
from ..op_registry import register, register_composite, register_meta
from .._repeat import mark, offer
from .._storage import alloc_storage
from .._tensor import TVKTensor, alias, new_tensor
from ._util import addr, dev
from .copies import cast, contig, device_copy, fill

aten = torch.ops.aten
_DT = {torch.float32: "float32", torch.float16: "float16"}
_SDPA = aten.scaled_dot_product_attention.default
_FUSED = aten._scaled_dot_product_fused_attention_overrideable.default
_MATH = aten._scaled_dot_product_attention_math.default


def fused_supported(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, enable_gqa=False) -> bool:
    """Whether the fused kernel computes this call (else torch's math decomposition runs it, with
    torch's checks and errors)."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4 or query.dtype not in _DT:
        return False
    if key.dtype != query.dtype or value.dtype != query.dtype:
        return False
    b, hq, lq, d = query.shape
    if key.shape[0] != b or value.shape[0] != b or key.shape[3] != d or value.shape[3] != d or not 1 <= d <= attention_kernels.MAX_HEAD:
        return False
    if key.shape[1] != value.shape[1] or key.shape[2] != value.shape[2] or key.shape[1] < 1:
        return False
    if key.shape[1] != hq and (not enable_gqa or hq % key.shape[1]):
        return False
    if attn_mask is not None:
        if is_causal or attn_mask.dim() > 4 or attn_mask.dtype not in (torch.bool, query.dtype):
            return False
        try:
            torch.broadcast_shapes(tuple(attn_mask.shape), (b, hq, lq, key.shape[2]))
        except RuntimeError:
            return False
    sizes = (_example(n) for n in (b, hq, max(lq, key.shape[2]), d))
    if not attention_kernels.fits(get_device(query.device.index), *sizes):  # fake tensors too
        return False
    return 0.0 <= dropout_p <= 1.0


def _example(size) -> int:
    """A size as an int; a symbolic one (Dynamo's dynamic shapes) as its example value, with no guard:
    the choice only shapes the fake output while Dynamo traces (the same either way), and the backend
    compiles each call again on its concrete sizes (compile/backend.py)."""
    if isinstance(size, int):
        return size
    hint = size.node.hint
    return int(size) if hint is None else int(hint)


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """F.scaled_dot_product_attention for tvk tensors (AutogradPrivateUse1)."""
    if type(query) is not TVKTensor:  # a tracing wrapper (Dynamo's fake tvk tensors)
        return traced_sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if not fused_supported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        return _SDPA.decompose(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
    return _FUSED(query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]


def traced_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """SDPA as one fused op in a traced graph where the kernel covers it; torch's math otherwise."""
    if fused_supported(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        return _FUSED(query, key, value, attn_mask, dropout_p, is_causal, False, scale=scale)[0]
    # torch's math, named: this function stands in SDPA's composite kernel while tracing, so
    # _SDPA.decompose would call it again (Falcon's heads, 4 for q and 1 for k without enable_gqa, recursed
    # without end). The math op takes an additive mask: SDPA turns a boolean one into 0 / -inf first
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        attn_mask = torch.zeros_like(attn_mask, dtype=query.dtype).masked_fill(attn_mask.logical_not(), float("-inf"))
    return _MATH(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)[0]


register_composite(aten.scaled_dot_product_attention.default, traced=traced_sdpa)(sdpa)


# ---------------------------------------------------------------- the fused op and its backward
def _rows(t: TVKTensor) -> TVKTensor:
    """t as the kernels read it: in place where each row of d elements is contiguous (a view that
    splits heads off [batch, l, heads * d], or slices q/k/v from one projection), else a copy."""
    return t if t.stride(3) == 1 or t.shape[3] == 1 else contig(t)


def _strides(*tensors) -> tuple:
    """Each tensor's (batch, head, row) strides in elements, for the kernels' `strides`."""
    return tuple(tuple(t.stride()[:3]) for t in tensors)


def _order(like) -> list:
    return sorted(range(4), key=lambda i: like.stride()[i], reverse=True)


def _empty_like_layout(like) -> TVKTensor:
    """A new tensor of like's shape in like's dim order, as torch's meta kernels allocate (a compiled
    graph's later views assume that layout), for the kernel to write in place; contiguous where d is
    not like's innermost dim (the kernel writes rows of d: _in_layout copies it into like's order)."""
    shape, order = like.shape, _order(like)
    if like.is_contiguous() or order[3] != 3:
        return new_tensor(shape, like.dtype, dev(like))
    stride, step = [0] * 4, 1
    for i in reversed(order):
        stride[i], step = step, step * shape[i]
    return new_tensor(shape, like.dtype, dev(like), stride=stride)


def _in_layout(src: TVKTensor, like) -> TVKTensor:
    """src (from _empty_like_layout(like)) in like's dim order: itself, or where d is not like's
    innermost dim, a copy."""
    order = _order(like)
    if like.is_contiguous() or order[3] == 3:
        return src
    phys = new_tensor([src.shape[i] for i in order], src.dtype, dev(src))
    return device_copy(phys.permute([order.index(i) for i in range(4)]), src)


def _shape(query, key):
    b, hq, lq, d = query.shape
    return b, hq, key.shape[1], lq, key.shape[2], d


def _mask(attn_bias, query, lk):
    """(address, kind, strides over [B, Hq, Lq, Lk]) of the mask, broadcast by stride 0."""
    if attn_bias is None:
        return None
    b, hq, lq, _ = query.shape
    m = attn_bias.expand(b, hq, lq, lk)
    return addr(m), "bool" if m.dtype == torch.bool else "float", tuple(m.stride())


def _scale(scale, d) -> float:
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def _int64_scalar(device):
    return new_tensor((), torch.int64, device)


@register(_FUSED)
def fused_attention(query, key, value, attn_bias=None, dropout_p=0.0, is_causal=False, return_debug_mask=False,
                    *, scale=None):
    if return_debug_mask:
        raise NotImplementedError("TorchVK's fused attention has no debug attention mask; pass return_debug_mask=False")
    if not fused_supported(query, key, value, attn_bias, dropout_p, False, enable_gqa=True):
        raise NotImplementedError(
            f"TorchVK's fused attention takes 4-d float32/float16 q, k, v of one dtype with the same head dim (at most "
            f"{attention_kernels.MAX_HEAD}), query heads a multiple of key/value heads and a bool or same-dtype mask broadcastable to "
            f"[B, H, Lq, Lk]; got q {tuple(query.shape)} {query.dtype}, k {tuple(key.shape)}, v {tuple(value.shape)}. "
            "F.scaled_dot_product_attention takes every input (the others through its math decomposition).")
    begun = mark()
    d = dev(query)
    q, k, v = _rows(query), _rows(key), _rows(value)
    shape = _shape(q, k)
    b, hq, hkv, lq, lk, hd = shape
    out = _empty_like_layout(query)  # written in place by the kernel: no copy into query's layout
    lse = new_tensor((b, hq, lq), torch.float32, d)
    seed_t, offset_t = _int64_scalar(d), _int64_scalar(d)
    rng, rng_out = (0, 0, None), None
    if dropout_p > 0:
        rng, rng_out = _rng.kernel_seed(b * hq * lq * lk), (addr(seed_t), addr(offset_t))
    call = dict(dtype=_DT[q.dtype], scale=_scale(scale, hd), causal=is_causal, dropout_p=float(dropout_p),
                strides=_strides(q, k, v, out))
    if lse.numel():
        attention_kernels.attention_forward(d, addr(q), addr(k), addr(v), addr(out), addr(lse), shape,
                                            mask=_mask(attn_bias, q, lk), rng=rng, rng_out=rng_out, **call)
    result = (_in_layout(out, query), lse, None, None, lq, lk, seed_t, offset_t, None)
    if lse.numel() and _same((q, k, v, result[0]), (query, key, value, out)):
        offer(begun, result, (query, key, value, attn_bias), _Again(d, shape, call, attn_bias, q, (out, lse)),
              draws=dropout_p > 0)  # a repeat draws its own dropout mask
    return result


def _same(used, given) -> bool:
    """Whether the kernels read and wrote the call's own tensors (no copy in between)."""
    return all(a is b for a, b in zip(used, given))


def _geometry(t: TVKTensor) -> tuple:
    return t._tvk.nbytes, tuple(t.shape), t.stride(), t.dtype


def _fresh(device, geometry) -> TVKTensor:
    nbytes, shape, stride, dtype = geometry
    return TVKTensor(alloc_storage(nbytes, device), shape, stride, 0, dtype)


class _Again:
    """The repeat of a fused attention call, or of its backward, that read every tensor in place and drew no
    random numbers (torchvk/_repeat.py): fresh outputs of the first call's geometry, the same kernel call."""

    __slots__ = ("device", "shape", "call", "mask", "outputs")

    def __init__(self, device, shape, call, attn_bias, q, outputs):
        self.device, self.shape, self.call = device, shape, call
        self.outputs = [_geometry(t) for t in outputs]  # not the tensors: the first call's outputs are not kept alive
        self.mask = None if attn_bias is None else _mask(attn_bias, q, shape[4])[1:]  # kind and strides

    def _mask(self, attn_bias):
        return None if self.mask is None else (addr(attn_bias),) + self.mask  # expand() keeps the address

    def __call__(self, operands):
        d, dropout = self.device, self.call["dropout_p"] > 0
        if len(operands) == 4:  # forward: query, key, value, attn_bias
            query, key, value, attn_bias = operands
            out, lse = (_fresh(d, g) for g in self.outputs)
            seed_t, offset_t = _int64_scalar(d), _int64_scalar(d)
            rng, rng_out = (0, 0, None), None
            if dropout:  # a new mask, drawn as the first call drew its own
                b, hq, _, lq, lk, _ = self.shape
                rng, rng_out = _rng.kernel_seed(b * hq * lq * lk), (addr(seed_t), addr(offset_t))
            attention_kernels.attention_forward(d, addr(query), addr(key), addr(value), addr(out), addr(lse), self.shape,
                                                mask=self._mask(attn_bias), rng=rng, rng_out=rng_out, **self.call)
            return (out, lse, None, None, self.shape[3], self.shape[4], seed_t, offset_t, None)
        grad_out, query, key, value, attn_bias, out, lse, philox_seed, philox_offset = operands
        dq, dk, dv, delta = (_fresh(d, g) for g in self.outputs)
        rng_state = _rng_state(d, philox_seed, philox_offset) if dropout else None
        attention_kernels.attention_backward(d, addr(query), addr(key), addr(value), addr(out), addr(grad_out), addr(lse),
                                             addr(dq), addr(dk), addr(dv), self.shape, mask=self._mask(attn_bias),
                                             rng_state=None if rng_state is None else addr(rng_state),
                                             delta=addr(delta), **self.call)
        return dq, dk, dv, None


_BWD = aten._scaled_dot_product_fused_attention_overrideable_backward.default


def _backward_meta(grad_out, query, key, value, attn_bias, grad_input_mask, *args, scale=None):
    return (torch.empty_like(query), torch.empty_like(key), torch.empty_like(value),
            None if attn_bias is None else torch.empty_like(attn_bias))


# torch 2.11 has no meta kernel for the backward (2.13 does): tracing on fake tensors needs one
register_meta(_BWD, _backward_meta)


@register(_BWD)
def fused_attention_backward(grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q,
                             cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    begun = mark()
    d = dev(query)
    q, k, v = _rows(query), _rows(key), _rows(value)
    o, g, lse = _rows(out), _rows(cast(grad_out, query.dtype)), contig(logsumexp)
    shape = _shape(q, k)
    b, hq, hkv, lq, lk, hd = shape
    dq, dk, dv = _empty_like_layout(query), _empty_like_layout(key), _empty_like_layout(value)
    want_bias = attn_bias is not None and attn_bias.dtype != torch.bool and len(grad_input_mask) > 3 \
        and grad_input_mask[3]
    ds = new_tensor((b, hq, lq, lk), torch.float32, d) if want_bias else None
    rng_state = _rng_state(d, philox_seed, philox_offset) if dropout_p > 0 else None
    delta = None
    if lk == 0 or lq == 0:
        for t in (dq, dk, dv) + ((ds,) if ds is not None else ()):
            fill(t, 0.0)
    else:
        delta = new_tensor((b, hq, lq), torch.float32, d)
        call = dict(dtype=_DT[q.dtype], scale=_scale(scale, hd), causal=is_causal, dropout_p=float(dropout_p),
                    strides=_strides(q, k, v, o, g, dq, dk, dv))
        attention_kernels.attention_backward(d, addr(q), addr(k), addr(v), addr(o), addr(g), addr(lse), addr(dq),
                              addr(dk), addr(dv), shape, mask=_mask(attn_bias, q, lk),
                              rng_state=None if rng_state is None else addr(rng_state),
                              ds=None if ds is None else addr(ds), delta=addr(delta), **call)
    grad_bias = _bias_grad(ds, attn_bias) if want_bias else None
    result = _in_layout(dq, query), _in_layout(dk, key), _in_layout(dv, value), grad_bias
    if delta is not None and not want_bias and \
            _same((q, k, v, o, g, lse) + result[:3], (query, key, value, out, grad_out, logsumexp, dq, dk, dv)):
        offer(begun, result, (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset),
              _Again(d, shape, call, attn_bias, q, (dq, dk, dv, delta)))
    return result


def _rng_state(device, philox_seed, philox_offset) -> TVKTensor:
    """The forward's dropout seed and offset side by side, as the backward kernel reads them (16 contiguous
    bytes). The caller holds it until the kernel is recorded: freed sooner, its memory could be the kernel's
    own scratch."""
    rng_state = new_tensor((2,), torch.int64, device)
    device_copy(alias(rng_state, (), (), 0), philox_seed)
    device_copy(alias(rng_state, (), (), 1), philox_offset)
    return rng_state


def _bias_grad(ds, attn_bias):
    """dS summed over the dims the mask broadcast over, in the mask's shape and dtype."""
    lead = ds.dim() - attn_bias.dim()
    dims = list(range(lead)) + [lead + i for i, s in enumerate(attn_bias.shape) if s == 1 and ds.shape[lead + i] != 1]
    g = aten.sum.dim_IntList(ds, dims, True) if dims else ds
    g = aten.reshape.default(g, tuple(attn_bias.shape))
    return cast(contig(g), attn_bias.dtype)


# ------------------------------------------------------------------ nn.TransformerEncoderLayer's fast path
@register(aten._transformer_encoder_layer_fwd.default)
def transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu,
                                  norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                                  ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask=None, mask_type=None):
    """The fused inference path torch takes for an eval-mode, batch-first TransformerEncoderLayer under
    no_grad: the same layer written with functional ops (attention through the fused SDPA kernel).
    mask_type (torch's merge_masks): 0 an attention mask [L, L], 1 a key padding mask [N, L], 2 both
    merged [N, heads, L, L]."""
    F = torch.nn.functional
    n, length, _ = src.shape
    key_padding = attn_mask = None
    if mask is not None:
        if mask_type == 1:
            key_padding = mask
        elif mask_type == 2:
            attn_mask = mask.reshape(n * num_heads, length, length)
        else:
            attn_mask = mask

    def self_attention(x):
        out, _ = F.multi_head_attention_forward(
            x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1), embed_dim, num_heads, qkv_weight, qkv_bias,
            None, None, False, 0.0, proj_weight, proj_bias, training=False, key_padding_mask=key_padding,
            need_weights=False, attn_mask=attn_mask)
        return out.transpose(0, 1)

    def feed_forward(x):
        h = F.linear(x, ffn_weight_1, ffn_bias_1)
        return F.linear(F.gelu(h) if use_gelu else F.relu(h), ffn_weight_2, ffn_bias_2)

    def norm(x, w, b):
        return F.layer_norm(x, (embed_dim,), w, b, eps)

    x = src
    if norm_first:
        x = x + self_attention(norm(x, norm_weight_1, norm_bias_1))
        return x + feed_forward(norm(x, norm_weight_2, norm_bias_2))
    x = norm(x + self_attention(x), norm_weight_1, norm_bias_1)
    return norm(x + feed_forward(x), norm_weight_2, norm_bias_2)


@register(aten._nested_tensor_from_mask_left_aligned.default)
def nested_tensor_from_mask_left_aligned(src, mask):
    """nn.TransformerEncoder's inference path asks this before packing padded sequences into a
    nested tensor; tvk has no nested tensors."""
    raise NotImplementedError("TorchVK has no nested tensors, which nn.TransformerEncoder uses in eval mode with a "
                              "src_key_padding_mask: build it with enable_nested_tensor=False (the layers then take "
                              "the padding mask directly)")
