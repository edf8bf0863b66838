"""layer norm and batch norm (all of torch's aten entry points) on tvk_kernels.kernels.norm.

float16/bfloat16 activations (autocast's batch norm, a .half() model's norms) are read and
written in place by the kernels (16-bit storage, float32 arithmetic; weights, statistics and
their gradients float32), with no cast copies; where the input and the gradient differ in dtype
both are computed from float32 copies."""
from __future__ import annotations


import torch
from torch._prims_common import suggest_memory_format

from tvk_kernels.kernels import norm as norm_kernels

from ..op_registry import register, register_decomposition
from .._repeat import mark, offer
from .._tensor import new_tensor
from ._util import DTYPE_NAME, addr, dev
from .copies import cast, contig, contig_dtype

aten = torch.ops.aten


def _a(t):
    return addr(t) if t is not None else 0


def _f32(t):
    return contig_dtype(t, torch.float32) if t is not None else None


def _activations(*tensors):
    """(the kernels' storage name, the tensors as the kernels read them): float16/bfloat16 tensors of
    one dtype in place (contiguous), anything else as float32 copies."""
    dtype = tensors[0].dtype
    if dtype in (torch.float16, torch.bfloat16) and all(t.dtype == dtype for t in tensors):
        return DTYPE_NAME[dtype], [contig(t) for t in tensors]
    return "float32", [_f32(t) for t in tensors]


# ------------------------------------------------------------------ layer norm
@register(aten.native_layer_norm.default)
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    k = len(normalized_shape)
    storage, (x,) = _activations(input)
    w, b = _f32(weight), _f32(bias)
    d = dev(input)
    shape, stat_shape = tuple(x.shape), list(x.shape[: x.dim() - k]) + [1] * k

    def run(operands):
        x, w, b = operands
        out = new_tensor(shape, x.dtype, d)
        mean, rstd = (new_tensor(stat_shape, torch.float32, d) for _ in range(2))
        norm_kernels.layer_norm(d, addr(x), addr(out), shape, k, _a(w), _a(b), float(eps), addr(mean), addr(rstd),
                                dtype=storage)
        return out, mean, rstd

    begun = mark()
    out, mean, rstd = run((x, w, b))
    result = cast(out, input.dtype), mean, rstd
    offer(begun, result, (x, w, b), run)  # kept where no cast came before or after (torchvk/_repeat.py)
    return result


@register(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask):
    k = len(normalized_shape)
    storage, (x, g) = _activations(input, grad_out)
    w = _f32(weight)
    d = dev(input)
    mean, rstd = contig(mean), contig(rstd)
    sizes = (tuple(x.shape) if output_mask[0] else None,
             tuple(weight.shape) if output_mask[1] and weight is not None else None,
             tuple(bias.shape) if output_mask[2] and bias is not None else None)

    def run(operands):
        g, x, mean, rstd, w = operands
        gi, gw, gb = (new_tensor(size, x.dtype if i == 0 else torch.float32, d) if size is not None else None
                      for i, size in enumerate(sizes))
        norm_kernels.layer_norm_backward(d, addr(g), addr(x), addr(mean), addr(rstd), tuple(x.shape), k, _a(w),
                                         _a(gi), _a(gw), _a(gb), dtype=storage)
        return gi, gw, gb

    begun = mark()
    gi, gw, gb = run((g, x, mean, rstd, w))
    result = (cast(gi, input.dtype) if gi is not None else None, gw, gb)
    offer(begun, result, (g, x, mean, rstd, w), run)
    return result


# ------------------------------------------------------------------ batch norm
def _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps, relu=False):
    storage, (x,) = _activations(input)
    w, b = _f32(weight), _f32(bias)
    d = dev(input)
    C = x.shape[1]
    for name, r in (("running_mean", running_mean), ("running_var", running_var)):
        if r is not None and (r.dtype != torch.float32 or not r.is_contiguous()):
            raise TypeError(f"TorchVK batch norm needs contiguous float32 {name}, got {r.dtype}")
    shape, stats = tuple(x.shape), [C] if training else [0]

    def run(operands):
        x, w, b, running_mean, running_var = operands
        out = new_tensor(shape, x.dtype, d)
        save_mean, save_invstd = new_tensor(stats, torch.float32, d), new_tensor(stats, torch.float32, d)
        norm_kernels.batch_norm(d, addr(x), addr(out), shape, _a(w), _a(b), _a(running_mean), _a(running_var),
                                bool(training), float(momentum), float(eps), _a(save_mean) if training else 0,
                                _a(save_invstd) if training else 0, relu=relu, dtype=storage)
        return out, save_mean, save_invstd

    operands = (x, w, b, running_mean, running_var)
    begun = mark()
    out, save_mean, save_invstd = run(operands)
    result = cast(out, input.dtype), save_mean, save_invstd
    offer(begun, result, operands, run)  # kept where no cast came before or after (torchvk/_repeat.py)
    return result


def _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                 output_mask):
    storage, (x, g) = _activations(input, grad_out)
    w = _f32(weight)
    d = dev(input)
    C = x.shape[1]
    if not train and (running_mean is None or running_var is None):
        raise RuntimeError("batch norm backward in eval mode needs running statistics")
    sizes = (tuple(x.shape) if output_mask[0] else None, [C] if output_mask[1] else None,
             [C] if output_mask[2] else None)

    def run(operands):
        g, x, w, running_mean, running_var, save_mean, save_invstd = operands
        gi, gw, gb = (new_tensor(size, x.dtype if i == 0 else torch.float32, d) if size is not None else None
                      for i, size in enumerate(sizes))
        norm_kernels.batch_norm_backward(d, addr(g), addr(x), tuple(x.shape), _a(save_mean) if train else 0,
                                         _a(save_invstd) if train else 0, _a(w), _a(gi), _a(gw), _a(gb), bool(train),
                                         _a(running_mean), _a(running_var), float(eps), dtype=storage)
        return gi, gw, gb

    operands = (g, x, w, running_mean, running_var, save_mean, save_invstd)
    begun = mark()
    gi, gw, gb = run(operands)
    result = (cast(gi, input.dtype) if gi is not None else None, gw, gb)
    offer(begun, result, operands, run)
    return result


@register(aten.native_batch_norm.default)
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


@register(aten._native_batch_norm_legit.default)
def _native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps)


@register(aten._native_batch_norm_legit.no_stats)
def _native_batch_norm_legit_no_stats(input, weight, bias, training, momentum, eps):
    return _bn_forward(input, weight, bias, None, None, training, momentum, eps)


@register(aten._native_batch_norm_legit_no_training.default)
def _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    return _bn_forward(input, weight, bias, running_mean, running_var, False, momentum, eps)


@register(aten._batch_norm_with_update.default)
def _batch_norm_with_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, m, s = _bn_forward(input, weight, bias, running_mean, running_var, True, momentum, eps)
    return out, m, s, new_tensor([0], torch.uint8, dev(input))  # the reserve: empty uint8, as on CPU


@register(aten._batch_norm_no_update.default)
def _batch_norm_no_update(input, weight, bias, running_mean, running_var, momentum, eps):
    out, m, s = _bn_forward(input, weight, bias, running_mean, running_var, False, momentum, eps)
    return out, m, s, new_tensor([0], torch.uint8, dev(input))  # the reserve: empty uint8, as on CPU


@register(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train,
                               eps, output_mask):
    return _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
                        output_mask)


@register(aten.batch_norm_backward.default)
def batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask, reserve):
    return _bn_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
                        output_mask)


# ------------------------------------------------------------------ batch norm + relu (compiled mode)
# torchvk.compile.fusion.BN_RELU: these return what their aten op returns, with output 0 = relu(y)
# written by the batch norm kernel itself.
def batch_norm_relu(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """native_batch_norm / _native_batch_norm_legit (running stats updated in place)."""
    return _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps, relu=True)


def batch_norm_relu_functional(input, weight, bias, running_mean, running_var, training, momentum, eps):
    """_native_batch_norm_legit_functional: the updated running stats are new tensors (outputs 3, 4)."""
    running_mean, running_var = running_mean.clone(), running_var.clone()
    out, mean, invstd = _bn_forward(input, weight, bias, running_mean, running_var, training, momentum, eps,
                                    relu=True)
    return out, mean, invstd, running_mean, running_var


def batch_norm_relu_no_training(input, weight, bias, running_mean, running_var, momentum, eps):
    """_native_batch_norm_legit_no_training (eval / inference graphs)."""
    return _bn_forward(input, weight, bias, running_mean, running_var, False, momentum, eps, relu=True)


# group norm: the forward is torch's composite of our ops, on a contiguous input (the composite views the
# input as (N, groups, -1): a permuted one, as diffusers' attention blocks hand on, cannot be viewed so;
# CUDA's kernel takes any layout); its backward is torch's decomposition
_COMPOSITE = torch._C.DispatchKey.CompositeExplicitAutograd


@register(aten.native_group_norm.default)
def native_group_norm(input, weight, bias, n, channels, spatial, groups, eps):
    out, mean, rstd = aten.native_group_norm.default._op_dk(_COMPOSITE, contig(input), weight, bias, n, channels,
                                                            spatial, groups, eps)
    # the output in the input's memory format, as torch's kernels (and the shapes a compiled graph traced) have it
    return out.contiguous(memory_format=suggest_memory_format(input)), mean, rstd


register_decomposition(aten.native_group_norm_backward.default)
