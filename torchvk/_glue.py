"""The bottom of the torch layer: what its modules share without importing each other.

Imports point one way: compile/ -> aten/* -> _dispatch -> _checks -> _tensor -> _storage,
and this module under them all (it imports nothing from torchvk). Two things live here:

  - the op table: `TABLE[op]` is the function that runs an aten op on tvk tensors, filled
    by the modules in torchvk/aten/ with `@register(...)`, read by _dispatch.py, compile/ and
    TVKTensor.backward;
  - the tensor's hooks into the layers above it: TVKTensor (_tensor.py) hands every op to the
    dispatcher (`hooks.dispatch`, set by _dispatch.py) and rebuilds Dynamo's flattened tensors
    as FakeTVKTensors (`hooks.fake_tensor`, set by compile/fake.py). Those modules import
    _tensor, so _tensor cannot import them; `import torchvk` imports both.
"""
from __future__ import annotations

import types

import torch
from torch._decomp import decomposition_table

TABLE: dict = {}       # OpOverload or OpOverloadPacket -> implementation
DECOMPOSE: dict = {}   # OpOverload -> torch's python decomposition (runs through the table)
NO_DEVICE_CHECK: set = set()  # ops that take CPU and tvk tensors on purpose (copies)


def register(*ops, cross_device: bool = False):
    """Decorator: the function implements these aten ops (OpOverload or OpOverloadPacket)."""

    def deco(fn):
        for op in ops:
            TABLE[op] = fn
            if cross_device:
                NO_DEVICE_CHECK.add(op)
        return fn

    return deco


def register_decomposition(*ops):
    """Run torch's own decomposition of these ops (their pieces must be in the table)."""
    for op in ops:
        overloads = [getattr(op, o) for o in op.overloads()] if isinstance(op, torch._ops.OpOverloadPacket) else [op]
        for ov in overloads:
            fn = decomposition_table.get(ov)
            if fn is not None:
                DECOMPOSE[ov] = fn


hooks = types.SimpleNamespace(
    dispatch=None,     # dispatch(func, args, kwargs): every op on a tvk tensor (_dispatch.py)
    fake_tensor=None,  # the FakeTVKTensor class Dynamo traces (compile/fake.py)
)
