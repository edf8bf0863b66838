"""The bottom of the torch layer: what its modules share without importing each other.

Imports point one way: compile/ -> aten/* -> _dispatch -> _checks -> _tensor -> _storage,
and this module and op_registry.py (the op table) under them all (they import nothing from
torchvk). What lives here: the tensor's hooks into the layers above it. TVKTensor (_tensor.py)
hands every op to the dispatcher (`hooks.dispatch`, set by _dispatch.py) and rebuilds Dynamo's
flattened tensors as FakeTVKTensors (`hooks.fake_tensor`, set by compile/fake.py). Those modules
import _tensor, so _tensor cannot import them; `import torchvk` imports both.
"""
from __future__ import annotations

import types

hooks = types.SimpleNamespace(
    dispatch=None,     # dispatch(func, args, kwargs): every op on a tvk tensor (_dispatch.py)
    fake_tensor=None,  # the FakeTVKTensor class Dynamo traces (compile/fake.py)
)
