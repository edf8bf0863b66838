"""FakeTVKTensor: what Dynamo (torch.compile's front end) traces in place of a tvk tensor.

Dynamo fakes every input before tracing. For a tensor subclass it flattens the tensor
(`TVKTensor.__tensor_flatten__`: the geometry as a `meta` tensor), fakes the inner tensor, and
rebuilds the subclass around the fake (`__tensor_unflatten__` -> `FakeTVKTensor.around`).
A FakeTVKTensor reports device tvk and computes every op on its inner fake: shapes, strides
and dtypes come out right and nothing runs on the GPU or the CPU. The graph Dynamo records is
then compiled by the "tvk" backend (backend.py) and run on real tvk tensors.
"""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensor, maybe_get_fake_mode
from torch.utils._pytree import tree_map

from .._dispatch import raise_mixed_devices
from .._glue import hooks
from ..op_registry import NO_DEVICE_CHECK
from .._tensor import TVKTensor

_make_wrapper = torch.Tensor._make_wrapper_subclass


class FakeTVKTensor(TVKTensor):
    @staticmethod
    def __new__(cls, *args, **kwargs):  # built only by `around`
        raise TypeError("FakeTVKTensor is made by Dynamo's tracing (FakeTVKTensor.around), not directly")

    @classmethod
    def around(cls, inner: torch.Tensor, device_index, size=None, stride=None) -> "FakeTVKTensor":
        t = _make_wrapper(cls, inner.shape if size is None else size, strides=inner.stride() if stride is None else stride,
                          storage_offset=inner.storage_offset(), dtype=inner.dtype,
                          device=torch.device("tvk", device_index or 0), requires_grad=inner.requires_grad)
        t._tvk = None
        t._inner = inner
        return t

    @property
    def _geometry(self) -> torch.Tensor:
        return self._inner

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
        check = func not in NO_DEVICE_CHECK and func.overloadpacket not in NO_DEVICE_CHECK
        for a in leaves:  # the error eager mode gives, not a fake-tensor one about `meta`
            if check and isinstance(a, torch.Tensor) and a.device.type not in ("tvk", "meta") and \
                    not (a.device.type == "cpu" and a.dim() == 0):
                raise_mixed_devices(func, a)
        first = next(a for a in leaves if isinstance(a, FakeTVKTensor))
        index = first.device.index
        if any(type(a) is TVKTensor for a in leaves):  # a real one among the fakes: computed on its geometry
            mode = maybe_get_fake_mode(first._inner)
            args, kwargs = tree_map(lambda a: _fake_of(a, mode), (args, kwargs))
        target = kwargs.get("device")
        if target is not None and torch.device(target).type == "tvk":
            # an op asked for tvk (mask.to(device=x.device, dtype=torch.bool): Hugging Face's attention mask)
            # computes on meta like the inner fakes; a fake on tvk inside the result would meet meta ones in a
            # later op, a device mismatch
            kwargs = {**kwargs, "device": torch.device("meta")}
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        # results stay on tvk, unless the op was asked for another device (x.cpu(), x.to("cpu"))
        if target is not None and torch.device(target).type != "tvk":
            return out
        wrap = lambda o: cls.around(o, index) if isinstance(o, torch.Tensor) else o  # noqa: E731
        return tree_map(wrap, out)

    def __repr__(self, *, tensor_contents=None):
        return f"FakeTVKTensor({list(self.shape)}, dtype={self.dtype}, device={self.device})"


hooks.fake_tensor = FakeTVKTensor  # TVKTensor.__tensor_unflatten__ builds one (_glue.py)


def _fake_of(a, mode):
    """A real tvk tensor that meets fakes while Dynamo traces: a tensor the model made at trace time
    from constants (Hugging Face's empty KV cache, torch.tensor([], device=x.device)), which Dynamo
    keeps as a constant of the graph. Fake ops need only its geometry: a fake of it, in the inner fakes'
    mode (Dynamo's), on meta."""
    if type(a) is not TVKTensor or mode is None:
        return a
    with mode:
        inner = torch.empty_strided(tuple(a.shape), a.stride(), dtype=a.dtype, device="meta")
    return inner


def _unwrap(a):
    if isinstance(a, FakeTVKTensor):
        return a._inner
    if isinstance(a, FakeTensor) and a.device.type == "tvk":
        # made by a factory op in the model (torch.arange(n, device=x.device)): Dynamo's fake
        # mode made a plain fake on tvk; an alias of it on meta computes with the inner fakes
        m = torch.ops.aten.alias.default(a)
        m.fake_device = torch.device("meta")
        return m
    return a
