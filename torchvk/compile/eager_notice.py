"""The one warning of torch.compile(backend="tvk"), kept apart from backend.py so the
dispatcher can check it without importing torch._dynamo."""
from __future__ import annotations

import warnings

_state = {"active": 0, "warned": False, "skips": False}

MESSAGE = ("torch.compile(backend='tvk') runs this model eagerly: Dynamo cannot trace TorchVK's tvk tensors "
           "(Python wrapper tensors). Use torchvk.compile(model) for the compiled mode (AOTAutograd tracing, fusion, "
           "recorded-step replay).")



def eager_op_inside_torch_compile():
    """Called by the dispatcher when a tvk op runs while a torch.compile(backend='tvk') call is active."""
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn(MESSAGE, RuntimeWarning, stacklevel=4)
