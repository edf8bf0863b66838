"""Argument checks before an op runs: torch itself judges shapes, dtypes and dims.

Before a table implementation (or a decomposition) runs, the op is run on meta tensors (no
data) with the same sizes, strides and dtypes. A call torch refuses raises there, before any
kernel reads memory, with torch's exception. Meta kernels word some errors differently from
the CPU ones users know (and a few raise AssertionError or ValueError where the CPU raises
RuntimeError), so a refused call is then run on zero-filled CPU stand-ins, when they are small,
and the CPU's own exception is raised; if the CPU accepts the call, the meta kernel was stricter
than torch and the call goes on.

A call that passed is remembered by its signature (the op; per argument the shape, stride and
dtype, or the scalar with its type), so a repeated call costs building that key and one dict
lookup. Ops without a meta kernel, or whose meta kernel needs data (item, nonzero), go unchecked.
"""
from __future__ import annotations

import torch

from ._storage import span_elements
from ._tensor import TVKTensor

_Tensor = torch.Tensor
_passed: dict = {}       # signature -> True: calls torch accepted (or could not judge)
_MAX_PASSED = 8192       # floats that change every step (a schedule's lr) must not grow it forever
_CPU_CONFIRM_BYTES = 16 << 20  # stand-ins up to this size re-run a refused call on the CPU
_unchecked: dict = {}    # op -> True when its calls are never checked

# ops whose meta kernel cannot judge a call: they need the data, or the real storage's size
_NEED_DATA = {"aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal", "aten::as_strided_", "aten::set_"}


def _never_checked(func) -> bool:
    skip = _unchecked.get(func)
    if skip is None:
        # view ops already get their geometry from torch's meta kernels (aten/views.py)
        skip = _unchecked[func] = func.is_view or func._schema.name in _NEED_DATA
    return skip


def _key(x):
    t = type(x)
    if t is TVKTensor:
        return (x.shape, x.stride(), x.dtype)
    if t is list or t is tuple:
        return tuple(map(_key, x))
    if isinstance(x, _Tensor):
        return (x.device, x.shape, x.stride(), x.dtype)
    return (t, x)  # the type too: 2 and 2.0 are equal keys but not equal arguments (an int tensor's alpha)


def check_call(func, args, kwargs, first=None):
    """Raise torch's exception if torch refuses this call (shapes, dtypes, dims); else return.
    `first(func, args, kwargs)` (the dispatcher's device check) runs before the meta check on
    every call not remembered: a remembered signature passed it already."""
    if _never_checked(func):
        if first is not None:
            first(func, args, kwargs)
        return
    key = (func, tuple(map(_key, args)), tuple((k, _key(v)) for k, v in kwargs.items()) if kwargs else ())
    try:
        if key in _passed:
            return
    except TypeError:  # an unhashable argument: check it every time
        key = None
    if first is not None:
        first(func, args, kwargs)
    check_now(func, args, kwargs)
    if key is not None:
        if len(_passed) >= _MAX_PASSED:
            _passed.clear()
        _passed[key] = True


def check_now(func, args, kwargs):
    """Raise torch's exception if torch refuses this call; nothing is remembered."""
    err = _meta_error(func, args, kwargs)
    if err is not None:
        err = _torch_error(func, args, kwargs, err)
        if err is not None:
            raise err


def skip_check(op):
    """The dispatcher does not check calls of `op`: its implementation checks them (with
    check_now where it needs torch's judgement), e.g. where the remembered signature would
    miss on every call (an optimizer's per-step scalars) or a meta kernel cannot judge."""
    _unchecked[op] = True


def _stand_ins(x, make, device):
    """x with each tensor (tvk, or CPU: a scalar, a copy's source) replaced by make(tensor), on `device`."""
    if isinstance(x, _Tensor):
        return make(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_stand_ins(y, make, device) for y in x)
    if isinstance(x, torch.device):
        return torch.device(device)
    if isinstance(x, torch.Generator):
        return None
    return x


def _meta(x):
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")


def _cpu(x):
    n = span_elements(list(x.shape), list(x.stride()))
    return torch.zeros(n, dtype=x.dtype).as_strided(x.shape, x.stride())


def _arguments(args, kwargs, make, device):
    return [_stand_ins(a, make, device) for a in args], {k: _stand_ins(v, make, device) for k, v in kwargs.items()}


def _meta_error(func, args, kwargs):
    """The exception the meta kernel raises for this call; None if it accepts it or cannot judge it."""
    try:
        margs, mkwargs = _arguments(args, kwargs, _meta, "meta")
    except Exception:  # noqa: BLE001 - a geometry meta tensors cannot have: no check
        return None
    try:
        func(*margs, **mkwargs)
    except NotImplementedError:
        return None  # no meta kernel
    except Exception as e:  # noqa: BLE001 - torch's own error, judged below
        if "meta tensor" in str(e):
            return None  # the meta kernel needs data (".item() cannot be called on meta tensors")
        return e
    return None


def _tensor_bytes(x) -> int:
    if isinstance(x, _Tensor):
        return span_elements(list(x.shape), list(x.stride())) * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_tensor_bytes(y) for y in x)
    return 0


def _torch_error(func, args, kwargs, meta_err):
    """torch's CPU exception for the call the meta kernel refused; None if the CPU accepts it."""
    fallback = RuntimeError(str(meta_err)) if isinstance(meta_err, AssertionError) else meta_err
    if _tensor_bytes(args) + _tensor_bytes(list(kwargs.values())) > _CPU_CONFIRM_BYTES:
        return fallback
    try:
        cargs, ckwargs = _arguments(args, kwargs, _cpu, "cpu")
    except Exception:  # noqa: BLE001 - no CPU stand-ins for this geometry
        return fallback
    try:
        with torch.no_grad():
            func(*cargs, **ckwargs)
    except Exception as e:  # noqa: BLE001 - torch's own error
        return e
    return None
