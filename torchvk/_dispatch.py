"""The dispatch path: how an aten op on tvk tensors finds what runs it.

Every op on a tvk tensor reaches `TVKTensor.__torch_dispatch__` (the Python dispatch
key sits below autograd, so autograd runs first as for any backend) and comes here:

  0. torch's own argument checks (`_checks.py`: meta kernels, remembered per signature);
  1. the op table (`op_registry.py`): `TABLE[OpOverload]` or `TABLE[OpOverloadPacket]`, generated
     from the declarations of the modules in `torchvk/aten/` (`@register(...)`); each entry calls
     tvk_kernels kernels with byte addresses, sizes and strides;
  2. a decomposition into other aten ops (torch._decomp), for a chosen list of
     composite ops whose pieces are all in the table (runs on Vulkan, op by op);
  3. otherwise: NotImplementedError naming the op and its inputs, or, only when
     TVK_CPU_FALLBACK=1 / set_cpu_fallback(True), the op on CPU (logged once, counted).

Factory ops (no tensor argument) reach the PrivateUse1 key directly; they are
registered with torch.library in `torchvk/aten/factories.py` and also land in step 1.
"""
from __future__ import annotations

import logging
from collections import defaultdict

import torch

from tvk_kernels.env_flags import env_flag
from tvk_kernels.runtime.interrupts import raise_pending, state as _interrupts

from ._autograd import in_backward_node, stop_node
from ._checks import call_key, check_call, keep_op, overlap_screened, writes_nothing
from ._repeat import Direct, Listening, keep
from ._glue import hooks
from .op_registry import DECOMPOSE, NO_DEVICE_CHECK, TABLE
from ._tensor import TVKTensor, from_cpu, set_geometry, to_cpu

log = logging.getLogger("torchvk")

_counts = {"vulkan": defaultdict(int), "cpu": defaultdict(int)}
_fallback = [env_flag("TVK_CPU_FALLBACK")]
_logged: set = set()


# --------------------------------------------------------------------- public knobs
def set_cpu_fallback(enabled: bool = True):
    """Opt in (or out) of running ops without a Vulkan kernel on the CPU (logged and counted)."""
    _fallback[0] = bool(enabled)


def cpu_fallback_enabled() -> bool:
    return _fallback[0]


def op_counts() -> dict:
    """{"vulkan": {op: n}, "cpu": {op: n}} since the last reset_op_counts()."""
    return {k: dict(v) for k, v in _counts.items()}


def reset_op_counts():
    for v in _counts.values():
        v.clear()


def restore_op_counts(saved: dict):
    """Put the counts back to `saved` (an op_counts() result): a dry run leaves no trace."""
    for kind, counts in _counts.items():
        counts.clear()
        counts.update(saved.get(kind, {}))


def count_vulkan_ops(histogram: dict):
    """Count ops that ran without passing through dispatch (a compiled program's nodes): {name: n}."""
    for name, n in histogram.items():
        _vk_counts[name] += n


# --------------------------------------------------------------------- dispatch
_vk_counts = _counts["vulkan"]
_names: dict = {}
_Tensor = torch.Tensor


_repeats: dict = {}  # call key -> Repeat (_repeat.py): how a call made before runs again
_unrepeated: set = set()  # ids of ops whose repeat would be their implementation anyway: no key is built for them


def dispatch(func, args, kwargs):
    try:
        if id(func) in _unrepeated:  # by id, as in call_key: an OpOverload hashes in Python
            key = repeat = None
        else:
            key = call_key(func, args, kwargs)
            try:
                repeat = _repeats.get(key)
            except TypeError:  # an unhashable argument
                key = repeat = None
        if repeat is not None and repeat.holds(args, kwargs):
            if repeat.name is not None:  # a decomposition is not counted: its pieces are (as on its first call)
                _vk_counts[repeat.name] += 1
            out = repeat(args, kwargs)
        else:
            out = _dispatch(func, args, kwargs, key)
        if _interrupts.caught:  # a Ctrl-C that came during the op: raised once it is whole (runtime/interrupts.py)
            raise_pending()
        return out
    except BaseException as e:  # KeyboardInterrupt too
        if in_backward_node():  # raising here would abort the process: _autograd.py
            return stop_node(func, e)
        raise


# ops whose `indices` may be CPU tensors beside a device `self`, as torch allows (x[cpu_mask] = v)
_aten = torch.ops.aten
_INDEX_LIST_OPS = {_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default,
                   _aten._index_put_impl_.default}


def _indices_to_device(args):
    self, indices = args[0], args[1]
    moved = [i.to(self.device) if isinstance(i, _Tensor) and type(i) is not TVKTensor else i for i in indices]
    return (self, moved) + tuple(args[2:])


def _dispatch(func, args, kwargs, key=None):
    if func in _INDEX_LIST_OPS and type(args[0]) is TVKTensor:
        args, key = _indices_to_device(args), None
    impl = TABLE.get(func)
    if impl is None:
        impl = TABLE.get(func.overloadpacket)
    if impl is not None:
        cross = func in NO_DEVICE_CHECK or func.overloadpacket in NO_DEVICE_CHECK
        checked_args, kwargs = check_call(func, args, kwargs, None if cross else check_devices, key)
        name = _names.get(func)
        if name is None:
            name = _names[func] = str(func)
        _vk_counts[name] += 1
        if key is None or checked_args is not args:
            return impl(*checked_args, **kwargs)
        with Listening() as listening:
            out = impl(*args, **kwargs)
        if writes_nothing(func):
            repeat = listening.repeat(name, out, args, kwargs, None)
        elif overlap_screened(func):  # a written tensor's overlap is judged on every call
            repeat = listening.repeat(name, out, args, kwargs, func)
        else:  # an op that writes and judges its own calls (torch.optim's foreach ops): not worth a key
            keep_op(func)
            _unrepeated.add(id(func))
            return out
        keep(_repeats, key, repeat or Direct(name, impl, func if overlap_screened(func) else None), func)
        return out
    decomp = DECOMPOSE.get(func)
    if decomp is None:
        decomp = _variant(func)
    if decomp is None:
        decomp = _composite(func)
    if decomp is not None:
        checked_args, kwargs = check_call(func, args, kwargs, check_devices, key)
        if key is not None and checked_args is args and writes_nothing(func):
            # its repeat: the decomposition called directly (its pieces repeat on their own), without the
            # lookups and checks above, which depend on the key alone; a reshape inside an op's code comes here
            keep(_repeats, key, Direct(None, decomp, None), func)
        return decomp(*checked_args, **kwargs)
    return missing(func, args, kwargs)


def implementation(op):
    """The function that runs `op` on tvk tensors (compiled mode calls it per node): its table
    entry, else the dispatch path (a decomposition, an out=/in-place variant, torch's composite
    kernel), else None."""
    fn = TABLE.get(op) or TABLE.get(op.overloadpacket)
    if fn is not None:
        return fn
    if op in DECOMPOSE or _variant(op) is not None or _composite(op) is not None:
        return lambda *a, _op=op, **k: _dispatch(_op, a, k)
    return None


# The copy an out= or in-place variant ends with is the table's copy_ (aten/copies.py), looked
# up when it runs: the op modules sit above this one (foreach.py calls `missing`), so importing
# them here would close a ring.
_aten_copy, _aten_resize = _aten.copy_.default, _aten.resize_.default


def _copy_into(dst, src):
    TABLE[_aten_copy](dst, src)


_variants: dict = {}


def _lookup(op):
    fn = TABLE.get(op) or TABLE.get(op.overloadpacket) or DECOMPOSE.get(op)
    if fn is None:
        return None
    return lambda *a, _op=op, **k: dispatch(_op, a, k)


def _functional_of(func, base, outs):
    """The functional overload an `op.out` computes: the one taking the same inputs (mul.out is
    mul.Tensor, sum.IntList_out is sum.dim_IntList: the names do not always say)."""
    inputs = [str(a.type) for a in func._schema.arguments if a.name not in outs]
    for name in base.overloads():
        ov = getattr(base, name)
        if not ov._schema.is_mutable and [str(a.type) for a in ov._schema.arguments] == inputs:
            return ov
    raise AttributeError(f"no functional overload of {func}")


def _variant(func):
    """`op.out(..., out=o)` or `op_(self, ...)` through the table's functional `op`: compute, then copy."""
    fn = _variants.get(func, False)
    if fn is not False:
        return fn
    fn = None
    name, ov = func.overloadpacket.__name__, func._overloadname
    try:
        if ov == "out" or ov.endswith("_out"):
            base = getattr(torch.ops.aten, name)
            outs = [a.name for a in func._schema.arguments if a.kwarg_only and a.alias_info is not None
                    and a.alias_info.is_write]
            named = ov[:-4] if ov != "out" else None
            functional = getattr(base, named) if named in base.overloads() else _functional_of(func, base, outs)
            call = _lookup(functional)
            if call is not None and outs:
                def fn(*args, _call=call, _outs=outs, **kwargs):
                    dsts = [kwargs.pop(n) for n in _outs]
                    res = _call(*args, **kwargs)
                    res_t = res if isinstance(res, (tuple, list)) else (res,)
                    for d, r in zip(dsts, res_t):
                        if tuple(d.shape) != tuple(r.shape):
                            TABLE[_aten_resize](d, r.shape)
                        _copy_into(d, r)
                    return dsts[0] if len(dsts) == 1 else tuple(dsts)
        elif name.endswith("_") and not name.startswith("_"):
            base = getattr(torch.ops.aten, name[:-1], None)
            functional = getattr(base, ov, None) if base is not None else None
            call = _lookup(functional) if functional is not None else None
            if call is not None and functional.is_view:
                # squeeze_, unsqueeze_, transpose_, t_: self takes the view's geometry, no data moves
                def fn(self, *args, _call=call, **kwargs):
                    set_geometry(self, _call(self, *args, **kwargs))
                    return self
            elif call is not None:
                def fn(self, *args, _call=call, **kwargs):
                    _copy_into(self, _call(self, *args, **kwargs))
                    return self
    except AttributeError:
        fn = None
    _variants[func] = fn
    return fn


_composites: dict = {}
_CEA = torch._C.DispatchKey.CompositeExplicitAutograd


def _has_kernel(func, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), key)


def _composite(func):
    """torch's CompositeExplicitAutograd kernel of func (built from other ops), or None. Outside aten
    that is a custom op's one implementation for every device (torch.library.custom_op without
    device_types: Python made of torch ops), which runs on tvk as it runs on CUDA, its ops ours."""
    fn = _composites.get(func, False)
    if fn is False:
        fn = None
        if _has_kernel(func, "CompositeExplicitAutograd"):
            def fn(*args, _f=func, **kwargs):
                return _f._op_dk(_CEA, *args, **kwargs)
        elif func.namespace == "aten" and _has_kernel(func, "CompositeImplicitAutograd"):
            def fn(*args, _f=func, **kwargs):
                return _f.decompose(*args, **kwargs)
        _composites[func] = fn
    return fn


# element types of a list argument that need no look: tvk tensors and plain values (a foreach op's
# lists of 150 parameters are judged by one set of their types, not element by element)
_PLAIN = frozenset({TVKTensor, int, float, bool, type(None)})


def check_devices(func, args, kwargs):
    """All tensor arguments on tvk, except 0-dim CPU tensors (scalars), as torch allows."""
    for x in (*args, *kwargs.values()):
        kind = type(x)
        if kind is TVKTensor:
            continue
        if kind is list or kind is tuple:
            if _PLAIN.issuperset(map(type, x)):
                continue
            for y in x:
                if isinstance(y, _Tensor) and type(y) is not TVKTensor and not (y.device.type == "cpu" and y.dim() == 0):
                    raise_mixed_devices(func, y)
        elif isinstance(x, _Tensor) and not (x.device.type == "cpu" and x.dim() == 0):
            raise_mixed_devices(func, x)


def raise_mixed_devices(func, other):
    raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                       f"tvk:0 and {other.device}! (op {func}: a {other.device} tensor of shape "
                       f"{tuple(other.shape)} was passed with tvk tensors; move it with .to('tvk') first)")


def describe_inputs(args, kwargs) -> str:
    parts = []

    def one(x):
        if isinstance(x, _Tensor):
            dev = "tvk" if type(x) is TVKTensor else str(x.device)
            return f"{dev} {str(x.dtype).replace('torch.', '')}{list(x.shape)}" + \
                ("" if x.is_contiguous() else " non-contiguous")
        if isinstance(x, (list, tuple)) and any(isinstance(y, _Tensor) for y in x):
            return "[" + ", ".join(one(y) for y in x) + "]"
        r = repr(x)
        return r if len(r) < 40 else r[:37] + "..."

    for a in args:
        parts.append(one(a))
    for k, v in kwargs.items():
        parts.append(f"{k}={one(v)}")
    return "(" + ", ".join(parts) + ")"


def missing(func, args, kwargs):
    if not _fallback[0]:
        raise NotImplementedError(
            f"TorchVK has no Vulkan implementation of {func} for inputs {describe_inputs(args, kwargs)}. "
            f"TorchVK does not fall back to the CPU silently; set TVK_CPU_FALLBACK=1 (or call "
            f"torchvk.set_cpu_fallback(True)) to run such ops on the CPU, logged and counted in torchvk.op_counts().")
    return run_on_cpu(func, args, kwargs)


def run_on_cpu(func, args, kwargs):
    name = str(func)
    if name not in _logged:
        _logged.add(name)
        log.warning("TorchVK: %s has no Vulkan implementation; running it on the CPU (TVK_CPU_FALLBACK=1). "
                    "Inputs: %s", name, describe_inputs(args, kwargs))
    _counts["cpu"][name] += 1
    device = None

    def down(x):
        nonlocal device
        if type(x) is TVKTensor:
            device = x._tvk.device
            return to_cpu(x)
        if isinstance(x, (list, tuple)):
            return type(x)(down(y) for y in x)
        return x

    cargs = [down(a) for a in args]
    ckwargs = {k: down(v) for k, v in kwargs.items()}
    if "device" in ckwargs and isinstance(ckwargs["device"], (torch.device, str)) and \
            torch.device(ckwargs["device"]).type == "tvk":
        ckwargs["device"] = torch.device("cpu")
    out = func(*cargs, **ckwargs)

    # write results of in-place / out= ops back into the tvk tensors they mutated
    schema = func._schema
    mutated = {}
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            if arg.kwarg_only or i >= len(args):
                orig, new = kwargs.get(arg.name), ckwargs.get(arg.name)
            else:
                orig, new = args[i], cargs[i]
            if type(orig) is TVKTensor:
                _copy_into(orig, new)
                mutated[id(new)] = orig

    def up(x):
        if isinstance(x, _Tensor) and not isinstance(x, TVKTensor):
            if id(x) in mutated:
                return mutated[id(x)]
            return from_cpu(x, device)
        if isinstance(x, (list, tuple)):
            return type(x)(up(y) for y in x)
        return x

    return up(out)


hooks.dispatch = dispatch  # TVKTensor.__torch_dispatch__ calls it (_glue.py)
