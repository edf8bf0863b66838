"""Ops that torchvk.compile traces whole, as eager mode runs them.

Under AOTAutograd's Python dispatcher, torch replaces some ops at the Autograd key with Python
decompositions (torch/_decomp: upsampling becomes aten.index gathers, whose backward scatters
with accumulation). TorchVK has kernels for these ops and for their backward ops, so while a
module is traced those Python kernels are hidden: the graph records the op, and autograd its
usual backward op (derivatives.yaml), exactly as in eager mode.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from .._glue import TABLE
from ..aten.attention import traced_sdpa
from ..aten.composites import COMPOSED
from ..aten.one_hot import traced_one_hot
from ..aten.rnn_layers import traced_gru, traced_lstm

aten = torch.ops.aten
_KEYS = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)
WHOLE = (
    aten.upsample_nearest2d.default, aten.upsample_nearest2d.vec,
    aten._upsample_nearest_exact2d.default, aten._upsample_nearest_exact2d.vec,
    aten.upsample_bilinear2d.default, aten.upsample_bilinear2d.vec,
    aten.upsample_nearest1d.default, aten.upsample_nearest1d.vec,
    aten._upsample_nearest_exact1d.default, aten._upsample_nearest_exact1d.vec,
    aten.upsample_linear1d.default, aten.upsample_linear1d.vec,
)
# ops traced through a decomposition of our own: torch's composite differs between versions
# (one_hot's range check is missing from torch 2.11's on the fake CPU tensors traced here), or
# picks a CPU kernel on them (SDPA would trace as aten._scaled_dot_product_flash_attention_for_cpu:
# ours traces the fused op TorchVK runs, and autograd its backward op)
REPLACED = {aten.one_hot.default: traced_one_hot, aten.scaled_dot_product_attention.default: traced_sdpa,
            aten.lstm.input: traced_lstm, aten.gru.input: traced_gru,  # whole sequences (aten/rnn_layers.py)
            **COMPOSED}  # cdist, weight norm, embedding_bag: compositions of our ops (aten/composites.py)
_IMPLICIT = torch._C.DispatchKey.CompositeImplicitAutograd
_AUTOGRAD = torch._C.DispatchKey.Autograd


def _is_composite(op) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


@contextmanager
def traced_whole():
    """Hide torch's Python decompositions of the WHOLE ops that have a TorchVK kernel and put ours
    in place for the REPLACED ones, then restore them."""
    hidden = []
    for op in WHOLE:
        if op not in TABLE:
            continue
        for key in _KEYS:
            if key in op.py_kernels:
                hidden.append((op, key, op.py_kernels.pop(key)))
        op._dispatch_cache.clear()
    for op, fn in REPLACED.items():
        key = _IMPLICIT if _is_composite(op) else _AUTOGRAD  # an op torch differentiates itself: above that
        hidden.append((op, key, op.py_kernels.pop(key, None)))
        op.py_kernels[key] = fn
        op._dispatch_cache.clear()
    try:
        yield
    finally:
        for op, key, fn in hidden:
            if fn is None:
                op.py_kernels.pop(key, None)
            else:
                op.py_kernels[key] = fn
            op._dispatch_cache.clear()
