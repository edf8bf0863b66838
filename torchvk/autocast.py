"""`torch.autocast("tvk", dtype=torch.float16 or torch.bfloat16)`: CUDA's autocast policy on tvk.

torch ships autocast kernels in C++ for CUDA, CPU, XPU, MPS, ... but none for the PrivateUse1
key a Python backend gets, so without this every op under autocast("tvk") fails with "Could
not run 'aten::linear' with arguments from the 'Autocasttvk' backend". `install()` registers:

* a fallthrough for every op (ops not listed below run as they are, as on CUDA);
* for each listed op, a kernel on the AutocastPrivateUse1 key that casts the op's floating tvk
  tensors (float64 excepted) as CUDA's policy does, then runs the op with autocast off; each is
  declared in the op registry (torchvk/op_registry.py: its autocast aspect).

The op lists are CUDA's (aten/src/ATen/autocast_mode.cpp), so a model gets the dtypes it would
get on CUDA. As on CUDA, the lower-precision cast of a weight (a float32 leaf that requires grad,
not a view) is made once per autocast region and reused by every op that takes it there (a
weight tied or used at every step of a loop is cast once); the region's end drops the casts
(`install` wraps `torch.clear_autocast_cache`, which torch.autocast calls there), and
`torch.autocast(..., cache_enabled=False)` turns it off. Unlike CUDA's, a cached cast is not
reused once its weight changed in place (its version moved); traced (fake) tensors are not cached.
"""
from __future__ import annotations

import threading
import weakref

import torch

from . import op_registry

# ops that run in the autocast dtype (float16 or bfloat16): the matmul and conv family
LOWER_PRECISION = (
    "_convolution", "_convolution.deprecated", "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d",
    "conv3d.padding", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input",
    "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear",
    "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
    "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
# ops that run in float32: pointwise ops that overflow or lose precision in 16 bits, norms, losses
FLOAT32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
    "native_layer_norm", "group_norm", "frobenius_norm.dim", "nuclear_norm", "nuclear_norm.dim",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "cross_entropy_loss", "norm.Scalar", "norm.ScalarOpt_dim",
    "upsample_nearest1d", "upsample_nearest1d.vec", "_upsample_nearest_exact1d", "_upsample_nearest_exact1d.vec",
    "upsample_nearest2d", "upsample_nearest2d.vec", "_upsample_nearest_exact2d", "_upsample_nearest_exact2d.vec",
    "upsample_nearest3d", "upsample_nearest3d.vec", "_upsample_nearest_exact3d", "_upsample_nearest_exact3d.vec",
    "upsample_linear1d", "upsample_linear1d.vec", "upsample_bilinear2d", "upsample_bilinear2d.vec",
    "_upsample_bilinear2d_aa", "_upsample_bilinear2d_aa.vec", "upsample_trilinear3d", "upsample_trilinear3d.vec",
    "upsample_bicubic2d", "upsample_bicubic2d.vec", "_upsample_bicubic2d_aa", "_upsample_bicubic2d_aa.vec",
)
# ops with a `dtype` argument: left unset, it becomes float32 (softmax of a float16 input is float32)
FLOAT32_DTYPE_ARG = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum", "linalg_vector_norm",
    "linalg_matrix_norm", "sum", "sum.dim_IntList",
)
# ops whose tensors are cast to the widest floating dtype among them
PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "tensordot",
    "scatter_add", "cat", "stack", "index_copy",
)
# refused under autocast, as on CUDA
BANNED = {
    "binary_cross_entropy": "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
                            "autocast. Many models use a sigmoid layer right before the binary cross entropy "
                            "layer. In this case, combine the two layers using "
                            "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss. "
                            "binary_cross_entropy_with_logits and BCEWithLogits are safe to autocast.",
}

_KEY = "AutocastPrivateUse1"
_libs: list = []


def _eligible(t) -> bool:
    return (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
            and t.device.type == torch._C._get_privateuse1_backend_name())


# per thread, as CUDA's: id(weight) -> (a weak reference to it, its version, its cast) of the region
_local = threading.local()


def _weight_casts() -> dict:
    casts = getattr(_local, "casts", None)
    if casts is None:
        casts = _local.casts = {}
    return casts


def _cast(value, dtype, weights: bool = False):
    """value (or the tensors of a list/tuple) cast to dtype; weights=True: the lower-precision cast, whose
    weight casts are kept for the autocast region (_cached_cast)."""
    if _eligible(value):
        if value.dtype == dtype:
            return value
        return _cached_cast(value, dtype) if weights else value.to(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype, weights) for v in value)
    return value


def _cached_cast(value, dtype):
    if not (value.dtype == torch.float32 and value.requires_grad and value.is_leaf and not value._is_view()
            and torch.is_autocast_cache_enabled() and not torch.compiler.is_compiling()
            and not torch._subclasses.fake_tensor.is_fake(value)):
        return value.to(dtype)
    casts = _weight_casts()
    kept = casts.get(id(value))
    if kept is not None and kept[0]() is value and kept[1] == value._version and kept[2].dtype == dtype:
        return kept[2]
    cast = value.to(dtype)
    casts[id(value)] = (weakref.ref(value), value._version, cast)
    return cast


def _clear_autocast_cache(torch_clear=torch.clear_autocast_cache):
    """torch.clear_autocast_cache, which torch.autocast calls on leaving its outermost region: tvk's too."""
    _weight_casts().clear()
    torch_clear()


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def _widest(args) -> torch.dtype | None:
    widest = None
    for t in _tensors(args):
        if _eligible(t):
            widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    return widest


def _run(op, args, kwargs):
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, _KEY))):
        return op(*args, **kwargs)


def _lower_precision(op):
    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype(torch._C._get_privateuse1_backend_name())
        return _run(op, _cast(args, dtype, True), {k: _cast(v, dtype, True) for k, v in kwargs.items()})
    return kernel


def _float32(op):
    def kernel(*args, **kwargs):
        return _run(op, _cast(args, torch.float32), {k: _cast(v, torch.float32) for k, v in kwargs.items()})
    return kernel


def _float32_dtype_arg(op):
    names = [a.name for a in op._schema.arguments]
    if "dtype" not in names:  # another torch's schema: cast to float32 instead
        return _float32(op)
    pos = names.index("dtype")

    def kernel(*args, **kwargs):
        given = args[pos] if len(args) > pos else kwargs.get("dtype")
        if given is None and args and _eligible(args[0]):
            if len(args) > pos:
                args = args[:pos] + (torch.float32,) + args[pos + 1:]
            else:
                kwargs = {**kwargs, "dtype": torch.float32}
        return _run(op, args, kwargs)
    return kernel


def _promote(op):
    def kernel(*args, **kwargs):
        dtype = _widest((args, tuple(kwargs.values())))
        if dtype is None:
            return _run(op, args, kwargs)
        return _run(op, _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()})
    return kernel


def _banned(message):
    def kernel(*args, **kwargs):
        raise RuntimeError(message)
    return kernel


def _overload(name):
    """aten OpOverload for "op" or "op.overload"; None where this torch has no such op."""
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None)
    return None if packet is None else getattr(packet, overload or "default", None)


def install():
    """Register the fallthrough and the policy kernels (once)."""
    if _libs:
        return
    torch.clear_autocast_cache = _clear_autocast_cache
    fallback = torch.library.Library("_", "IMPL")
    try:
        fallback.fallback(torch.library.fallthrough_kernel, _KEY)
    except RuntimeError:  # a later torch that registers its own fallthrough for this key
        pass
    policies = [(LOWER_PRECISION, "lower_precision", _lower_precision), (FLOAT32, "float32", _float32),
                (FLOAT32_DTYPE_ARG, "float32_dtype_arg", _float32_dtype_arg), (PROMOTE, "promote", _promote)]
    for names, policy, make in policies:
        for name in names:
            op = _overload(name)
            if op is not None:
                op_registry.register_autocast(op, policy, make(op))
    for name, message in BANNED.items():
        op = _overload(name)
        if op is not None:
            op_registry.register_autocast(op, "banned", _banned(message))
    _libs.append(fallback)
