"""TVKTensor: the wrapper tensor subclass every tvk tensor is."""
from __future__ import annotations

import collections
import contextlib

import numpy as np
import torch

from tvk_kernels.runtime.lock import runtime_lock

from ._glue import hooks
from .op_registry import TABLE
from ._storage import (Storage, alloc_storage, check_dtype, download_bytes, get_device, np_dtype, span_elements,
                       torch_device, upload_bytes)

_make_wrapper = torch.Tensor._make_wrapper_subclass
_fill = torch.ops.aten.fill_.Scalar  # the table's fill_ (aten/copies.py)
_data_descr = torch._C.TensorBase.data


def contiguous_strides(size) -> list:
    strides, acc = [], 1
    for s in reversed(list(size)):
        strides.append(acc)
        acc *= max(int(s), 1)
    return strides[::-1]


def _flatten(t):
    return ["_geometry"], t.device.index


_in_backward = torch._C._current_graph_task_id  # -1 unless the autograd engine is running a backward


class _FlattenOutsideBackward:
    """`__tensor_flatten__`, absent while a backward runs. torch tells a traceable subclass by
    hasattr; Dynamo needs it when tracing and in its guards, but AOTAutograd's backward would
    then expect a compiled graph's incoming grads to be subclasses too, and compiled graphs are
    traced on plain fakes (trace.py). On the class it is the function, as torch calls it both ways."""

    def __get__(self, obj, objtype=None):
        if obj is None:
            return _flatten
        if _in_backward() != -1:
            raise AttributeError("__tensor_flatten__")
        return _flatten.__get__(obj, objtype)


_torch_devices: dict = {}  # runtime Device -> its torch.device


class TVKTensor(torch.Tensor):
    """A tensor on device `tvk`: torch metadata plus a shared device `Storage` (`._tvk`)."""

    @staticmethod
    def __new__(cls, storage: Storage, size, stride, offset: int, dtype, requires_grad: bool = False):
        device = _torch_devices.get(storage.device)
        if device is None:
            device = _torch_devices[storage.device] = torch.device("tvk", storage.device.index)
        if offset or requires_grad:
            t = _make_wrapper(cls, size, strides=stride, storage_offset=offset, dtype=dtype, device=device,
                              requires_grad=requires_grad)
        else:  # a fresh output: each keyword costs the call ~0.2 us
            t = _make_wrapper(cls, size, strides=stride, dtype=dtype, device=device)
        t._tvk = storage
        if stride is None:
            stride = t.stride()
        # what every op reads of its operands, read here once: a tensor subclass's getters cost
        # ~0.5 us each (see `_remember_geometry` for when it changes)
        t._geometry_key = (tuple(size), tuple(stride), dtype, storage.device)
        t._byte_offset = offset * dtype.itemsize
        return t

    def __init__(self, *args, **kwargs):
        pass

    __torch_function__ = torch._C._disabled_torch_function_impl

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """torch's backward (which runs on the calling thread: torchvk/_autograd.py). A loss's
        implicit gradient of one is made here with one fill: torch's ones_like took two
        dispatched ops (empty_like, fill_), 77 us against 16 us on this machine."""
        if gradient is None and self.requires_grad and self.numel() == 1:
            gradient = TABLE[_fill](new_tensor(self.shape, self.dtype, self._tvk.device), 1.0)
        return super().backward(gradient, retain_graph, create_graph, inputs=inputs)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        with runtime_lock:  # an op's steps are not interleaved with another thread's (runtime/lock.py)
            return hooks.dispatch(func, args, kwargs or {})  # _dispatch.dispatch

    # torch.compile: Dynamo traces tensor subclasses that flatten into inner tensors. A tvk tensor
    # flattens into its geometry (a `meta` tensor: shape, strides, dtype, no data); Dynamo fakes it
    # and rebuilds a FakeTVKTensor around the fake (torchvk/compile/fake.py), so models trace
    # without touching the GPU.
    __tensor_flatten__ = _FlattenOutsideBackward()

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return hooks.fake_tensor.around(inner["_geometry"], ctx, outer_size, outer_stride)

    @property
    def _geometry(self) -> torch.Tensor:
        g = self.__dict__.get("_geometry_memo")  # Dynamo's guards read it on every call: built once
        if g is None or g.shape != self.shape or g.stride() != self.stride() or \
                g.storage_offset() != self.storage_offset() or g.dtype != self.dtype:
            n = span_elements(list(self.shape), list(self.stride())) + self.storage_offset()
            # a normal tensor, in inference mode too: Dynamo guards on its dispatch keys, and it builds the
            # memo of a graph's inputs outside inference mode while it compiles; an inference tensor made
            # by a later call's guard would not match them (a recompile per call, under inference_mode)
            with torch.inference_mode(False) if torch.is_inference_mode_enabled() else contextlib.nullcontext():
                g = torch.empty(n, dtype=self.dtype, device="meta").as_strided(self.shape, self.stride(),
                                                                                self.storage_offset())
            self.__dict__["_geometry_memo"] = g
        return g

    # AOTAutograd checks a backward's incoming grads against the type it traced with (a plain
    # tensor, on a fake device): a tvk tensor stands for itself
    def __coerce_same_metadata_as_tangent__(self, expected_metadata=None, expected_type=None):
        return self

    # `.data = x` copies TensorImpl metadata only; keep the storage in step with it
    @property
    def data(self):
        return _data_descr.__get__(self)

    @data.setter
    def data(self, new):
        _data_descr.__set__(self, new)
        if isinstance(new, TVKTensor):
            self._tvk = new._tvk
        _remember_geometry(self)

    # byte address of element 0 of this view
    @property
    def tvk_address(self) -> int:
        buffer = self._tvk.buffer
        if buffer.freed:
            buffer.check_alive()  # raises
        return buffer.address + self._byte_offset

    def __repr__(self, *, tensor_contents=None):
        if tensor_contents is None and self.numel() > 0:
            cpu = to_cpu(self)
            if cpu.dtype in (torch.float16, torch.bfloat16):
                cpu = cpu.float()
            tensor_contents = torch._tensor_str._tensor_str(cpu, len("tensor("))
        text = torch._tensor_str._str(self, tensor_contents=tensor_contents)
        if text.startswith("TVKTensor("):
            text = "tensor(" + text[len("TVKTensor("):]
        if getattr(self, "_is_param", False):
            text = "Parameter containing:\n" + text
        return text

    def __reduce_ex__(self, proto):
        # saved as torch saves a storage-less backend tensor: its data as a CPU tensor plus its
        # device, rebuilt there or where torch.load's map_location says (torchvk/_serialization.py);
        # torch.load(weights_only=True) allows both rebuild functions
        if getattr(self, "_is_param", False):  # an nn.Parameter of a subclass is marked, not typed
            return torch._utils._rebuild_parameter, (self.detach(), self.requires_grad, collections.OrderedDict())
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (to_cpu(self.detach()), self.dtype, str(self.device), self.requires_grad))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        out = self.detach().clone()
        out.requires_grad_(self.requires_grad)
        if getattr(self, "_is_param", False):
            out._is_param = True
        memo[id(self)] = out
        return out

    def tolist(self):
        return to_cpu(self).tolist()

    def numpy(self, *, force=False):
        raise TypeError("can't convert tvk tensor to numpy; use Tensor.cpu() to copy it to host memory first")


def _remember_geometry(t) -> None:
    """Read a tvk tensor's geometry into the attributes every op reads (`_geometry_key`: the
    dispatcher's key of it, `_byte_offset`). Each TVKTensor is made with them; an in-place change
    of its geometry goes through `.data =` (resize_, Module.to) or `set_geometry` (t_, transpose_,
    as_strided_...), and both call this. torch.utils.swap_tensors swaps the attributes with the
    tensors."""
    t._geometry_key = (tuple(t.shape), tuple(t.stride()), t.dtype, t._tvk.device)
    t._byte_offset = t.storage_offset() * t.element_size()


def set_geometry(t, view) -> None:
    """t takes the sizes, strides and offset of `view` (a view of its storage), keeping its autograd
    state: an in-place view op (t_, squeeze_, as_strided_)."""
    _data_descr.__set__(t, view)
    _remember_geometry(t)


def is_dense(t) -> bool:
    """Non-overlapping and dense: the elements fill a contiguous range in some dim order."""
    dims = sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz != 1)
    expected = 1
    for st, sz in dims:
        if st != expected:
            return False
        expected *= sz
    return True


def is_tvk(t) -> bool:
    return isinstance(t, TVKTensor)


_contiguous_geometry: dict = {}  # (size, dtype) -> (size, strides, bytes), tuples: a fresh output's usual shape


def new_tensor(size, dtype, device=None, stride=None, op: str = "aten.empty") -> TVKTensor:
    """Fresh uninitialised tvk tensor (contiguous unless stride is given)."""
    if stride is None:
        try:
            geometry = _contiguous_geometry.get((size if type(size) is tuple else tuple(size), dtype))
        except TypeError:  # sizes that are not hashable ints (SymInts...): the full path
            geometry = None
        if geometry is not None:
            return TVKTensor(alloc_storage(geometry[2], device or get_device()), geometry[0], geometry[1], 0, dtype)
    check_dtype(dtype, op)
    size = [int(s) for s in size]
    contiguous = stride is None
    stride = contiguous_strides(size) if contiguous else [int(s) for s in stride]
    itemsize = torch.tensor([], dtype=dtype).element_size() if dtype not in _ITEMSIZE else _ITEMSIZE[dtype]
    n = span_elements(size, stride)
    storage = alloc_storage(n * itemsize, device or get_device())
    if contiguous and len(_contiguous_geometry) < 4096:
        _contiguous_geometry[(tuple(size), dtype)] = (tuple(size), tuple(stride), n * itemsize)
    return TVKTensor(storage, size, stride, 0, dtype)


_ITEMSIZE = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.int64: 8, torch.int32: 4,
             torch.bool: 1, torch.uint8: 1, torch.int8: 1, torch.int16: 2, torch.float64: 8}


def itemsize(dtype) -> int:
    return _ITEMSIZE[dtype]


def empty_like(t, dtype=None, size=None) -> TVKTensor:
    return new_tensor(t.shape if size is None else size, dtype or t.dtype, t._tvk.device)


def alias(t: TVKTensor, size=None, stride=None, offset=None) -> TVKTensor:
    """A new view of t's storage (no copy)."""
    return TVKTensor(t._tvk, t.shape if size is None else size, t.stride() if stride is None else stride,
                     t.storage_offset() if offset is None else offset, t.dtype)


def to_cpu(t: TVKTensor) -> torch.Tensor:
    """Download a tvk tensor (any view) into a new contiguous CPU tensor; synchronizes."""
    size, stride, off = list(t.shape), list(t.stride()), t.storage_offset()
    isz = itemsize(t.dtype)
    if t.numel() == 0:
        t._tvk.check()
        return torch.empty(size, dtype=t.dtype)
    # the smallest element range the view touches
    lo = off + sum((s - 1) * st for s, st in zip(size, stride) if st < 0)
    hi = off + sum((s - 1) * st for s, st in zip(size, stride) if st > 0)
    raw = download_bytes(t._tvk, lo * isz, (hi - lo + 1) * isz)
    flat = torch.from_numpy(raw.view(np_dtype(t.dtype)))
    if t.dtype == torch.bfloat16:
        flat = flat.view(torch.bfloat16)
    return torch.as_strided(flat, size, stride, off - lo).clone(memory_format=torch.contiguous_format)


def from_cpu(src: torch.Tensor, device=None, dtype=None) -> TVKTensor:
    """Upload a CPU tensor into a new contiguous tvk tensor (recorded, no wait)."""
    dtype = dtype or src.dtype
    check_dtype(dtype, "aten._to_copy")
    src = src.detach()
    if src.dtype != dtype:
        src = src.to(dtype)
    out = new_tensor(src.shape, dtype, device)
    upload_into(out, src)
    return out


def cpu_numpy(src: torch.Tensor) -> np.ndarray:
    src = src.detach().contiguous()
    if src.dtype == torch.bfloat16:
        return src.view(torch.int16).numpy().view(np.uint16)
    if src.is_conj() or src.is_neg():
        src = src.resolve_conj().resolve_neg()
    return src.numpy()


def upload_into(dst: TVKTensor, src: torch.Tensor):
    """dst (contiguous tvk) <- src (CPU, same dtype and shape)."""
    upload_bytes(dst._tvk, cpu_numpy(src), dst.storage_offset() * itemsize(dst.dtype))


__all__ = ["TVKTensor", "is_tvk", "new_tensor", "empty_like", "alias", "to_cpu", "from_cpu", "upload_into",
           "contiguous_strides", "itemsize", "torch_device"]
