"""`torch.compile(model, backend="tvk")`: registered (entry point `torch_dynamo_backends`, or by
importing this module), and honest.

Dynamo, torch.compile's front end, cannot see inside TorchVK's Python wrapper tensors: it
treats them as opaque objects and runs every op eagerly (on Vulkan, through the normal
eager path). Rather than pretend, the backend says so once and points to
`torchvk.compile(model)`, which traces with AOTAutograd directly and is the compiled mode.
"""
from __future__ import annotations

import contextlib
import warnings

from .._dispatch import _vk_counts

_state = {"warned": False, "skips": False}

MESSAGE = ("torch.compile(backend='tvk') runs this model eagerly: Dynamo cannot trace TorchVK's tvk tensors "
           "(Python wrapper tensors). Use torchvk.compile(model) for the compiled mode (AOTAutograd tracing, fusion, "
           "recorded-step replay).")


def _warn_once():
    if not _state["warned"]:
        _state["warned"] = True
        warnings.warn(MESSAGE, RuntimeWarning, stacklevel=3)


@contextlib.contextmanager
def _inside_torch_compile():
    """Entered around every call of a torch.compile(backend='tvk') module: warns once if tvk ops ran
    in it (they ran eagerly). Counting ops before and after keeps the per-op path free of checks."""
    if not _state["skips"]:  # Dynamo must not trace TorchVK's own Python (it would graph-break in it)
        import torch._dynamo.trace_rules as rules

        rules.add("torchvk")
        rules.add("tvk_kernels")
        _state["skips"] = True
    before = sum(_vk_counts.values())
    try:
        yield
    finally:
        if sum(_vk_counts.values()) != before:
            _warn_once()


def tvk_backend(gm, example_inputs):
    """Dynamo hands us only what it could trace, which never includes tvk tensors: run it as traced
    (the CPU-side bits of a model, constants) and say once that the tvk part stays eager."""
    _warn_once()
    return gm.forward


tvk_backend.backend_ctx_ctor = _inside_torch_compile


def register():
    """Register "tvk" with Dynamo directly: an installed TorchVK is found through its entry point,
    a source checkout on PYTHONPATH is not (importing this module registers it)."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "tvk" not in _BACKENDS:
        register_backend(tvk_backend, name="tvk")


register()
