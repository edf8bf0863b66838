"""Ops that torchvk.compile traces whole, as eager mode runs them (declared in the op registry:
`traced_whole` kernels and `traced` composites, torchvk/op_registry.py).

Under AOTAutograd's Python dispatcher, torch replaces some ops at the Autograd key with Python
decompositions (torch/_decomp: upsampling becomes aten.index gathers, whose backward scatters
with accumulation). TorchVK has kernels for these ops and for their backward ops, so while a
module is traced those Python kernels are hidden: the graph records the op, and autograd its
usual backward op (derivatives.yaml), exactly as in eager mode.

Composites are traced through a function of their own: torch's composite differs between versions
(one_hot's range check is missing from torch 2.11's on the fake CPU tensors traced here), or picks
a CPU kernel on them (SDPA would trace as aten._scaled_dot_product_flash_attention_for_cpu: ours
traces the fused op TorchVK runs, and autograd its backward op); LSTM and GRU trace whole
sequences; cdist, weight norm, embedding_bag and the others of aten/composites.py their compositions.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from .. import op_registry

_KEYS = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)
_IMPLICIT = torch._C.DispatchKey.CompositeImplicitAutograd
_AUTOGRAD = torch._C.DispatchKey.Autograd


def _is_composite(op) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


@contextmanager
def traced_whole():
    """Hide torch's Python decompositions of the ops declared `traced_whole` and put the declared
    `traced` functions in place of the composites' (op_registry.py), then restore them."""
    hidden = []
    for op in op_registry.traced_whole_ops():
        for key in _KEYS:
            if key in op.py_kernels:
                hidden.append((op, key, op.py_kernels.pop(key)))
        op._dispatch_cache.clear()
    for op, fn in op_registry.traced_ops().items():
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
