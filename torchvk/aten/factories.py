"""Factory ops: the ones that reach the PrivateUse1 key directly (no tvk tensor argument).

torch.zeros/ones/full/arange/randn/... with device="tvk" are CompositeExplicitAutograd
in torch: they call aten::empty(...) (registered here) and then an in-place op
(zero_, fill_, normal_, ...) on the new TVKTensor, which goes through the op table.
"""
from __future__ import annotations

import torch

from ..op_registry import register, register_backend
from .._storage import current_index, get_device
from .._tensor import from_cpu, is_dense, new_tensor
from .copies import copy_into, resize_

aten = torch.ops.aten


def _device_of(device):
    if device is None:
        return get_device()
    d = torch.device(device)
    return get_device(d.index if d.index is not None else current_index())


def _check_layout(layout, op):
    if layout not in (None, torch.strided):
        raise TypeError(f"TorchVK supports only strided tensors, not {layout} (op {op})")


def _faking() -> bool:
    """Whether a fake tensor mode is running real code with Python dispatch turned off: its constant
    folding while Dynamo traces (`torch.tensor(4).to(x.device)` in Hugging Face's sliding-window
    caches). A tvk tensor made there would come back to the mode as a FakeTVKTensor, which cannot
    hold a constant (an AssertionError stopped Gemma 2 under torch.compile); a meta one tells the
    mode the result is no constant, and it fakes the op as it fakes any other."""
    if not torch._C._dispatch_tls_is_dispatch_key_excluded(torch._C.DispatchKey.Python):
        return False  # every call but a fake mode's (and no_dispatch's) real code: the usual path
    return torch._guards.detect_fake_mode() is not None


@register_backend(aten.empty.memory_format)
def empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _check_layout(layout, "aten.empty.memory_format")
    dtype = dtype or torch.get_default_dtype()
    if _faking():
        return torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format)
    stride = None
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        stride = torch.empty(size, dtype=dtype, device="meta", memory_format=memory_format).stride()
    return new_tensor(size, dtype, _device_of(device), stride, op="aten.empty.memory_format")


@register_backend(aten.empty_strided.default)
def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    _check_layout(layout, "aten.empty_strided")
    if _faking():
        return torch.empty_strided(size, stride, dtype=dtype or torch.get_default_dtype(), device="meta")
    return new_tensor(size, dtype or torch.get_default_dtype(), _device_of(device), stride, op="aten.empty_strided")




@register(aten.new_empty.default)
def new_empty(self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return empty_memory_format(size, dtype=dtype or self.dtype, device=device or self.device)


@register(aten.new_empty_strided.default)
def new_empty_strided(self, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    return empty_strided(size, stride, dtype=dtype or self.dtype, device=device or self.device)


@register(aten.empty_like.default)
def empty_like(self, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    dtype = dtype or self.dtype
    dev = _device_of(device or self.device)
    if memory_format in (None, torch.preserve_format) and is_dense(self):
        return new_tensor(self.shape, dtype, dev, self.stride(), op="aten.empty_like")
    if memory_format in (None, torch.preserve_format):
        memory_format = torch.contiguous_format
    return empty_memory_format(self.shape, dtype=dtype, device=dev_index(dev), memory_format=memory_format)


def dev_index(dev):
    return torch.device("tvk", dev.index)


# ------------------------------------------------------------------ constants made on the host
# arange / linspace / eye are functions of a few scalars: they are generated on the host and
# uploaded (one transfer, no device input is read). Registered for PrivateUse1 so that the
# tensor is created at its final size (a tvk tensor cannot be resized in place).
def _host_const(fn):
    def impl(*args, dtype=None, layout=None, device=None, pin_memory=None, **kw):
        _check_layout(layout, "aten.arange")
        cpu = fn(*args, dtype=dtype, **kw)
        return from_cpu(cpu, _device_of(device))

    return impl


register_backend(aten.arange.default, aten.arange.start, aten.arange.start_step)(
    _host_const(lambda *a, dtype=None: torch.arange(*a, dtype=dtype)))
register_backend(aten.eye.default, aten.eye.m)(_host_const(lambda *a, dtype=None: torch.eye(*a, dtype=dtype)))
register_backend(aten.linspace.default)(_host_const(lambda *a, dtype=None: torch.linspace(*a, dtype=dtype)))


@register_backend(aten._efficientzerotensor.default)
def _efficientzerotensor(size, **kw):
    return torch.zeros(size, dtype=kw.get("dtype"), device=kw.get("device"))


@register(aten.arange.start_out)
def arange_start_out(start, end, step=1, *, out):
    cpu = torch.arange(start, end, step, dtype=out.dtype)
    if tuple(out.shape) != tuple(cpu.shape):
        resize_(out, cpu.shape)
    return copy_into(out, cpu)


@register(aten.linspace.out)
def linspace_out(start, end, steps, *, out):
    return copy_into(out, torch.linspace(start, end, steps, dtype=out.dtype))


@register(aten.logspace.out)
def logspace_out(start, end, steps, base=10.0, *, out):
    return copy_into(out, torch.logspace(start, end, steps, base, dtype=out.dtype))
