"""torch.optim's multi-tensor ops: `_foreach_*` (its default path) and `_fused_sgd_` / `_fused_adam_` /
`_fused_adamw_` (fused=True), each one dispatch for all tensors (tvk_kernels/kernels/optim.py).

The multi-tensor kernels take float32 tensors that are dense and share their strides within
each position of the call; any other call (other dtypes, broadcasting, tensor weights) runs
per tensor on the implementation registered before this module (elementwise.py, reductions.py),
which raises NotImplementedError where no kernel exists. Those checks and the tensors' addresses
are remembered per list between optimizer steps (_tensor_lists.py), and the kernels' device
tables per set of addresses (optim.py): a repeated step packs its scalars and records a dispatch.
"""
from __future__ import annotations

import numbers

import torch

from tvk_kernels.kernels import optim as optim_kernels

from .. import _checks
from .._dispatch import check_devices, missing
from ..op_registry import TABLE, register
from .._tensor import TVKTensor, alias, from_cpu, is_dense, new_tensor
from ._tensor_lists import checked, remember_outputs
from .copies import copy_into
from .reductions import foreach_norm_per_tensor

aten = torch.ops.aten
_F32 = torch.float32


def _fit(self, *others):
    """(self's remembered checks, [the addresses of self's tensors, then of each other list's]) when
    one multi-tensor launch takes them, else None. It takes equal lengths of float32 tvk tensors on
    one device, those of self dense and not sharing memory, each other tensor of self[i]'s shape and
    strides and not overlapping another tensor of self (one dispatch runs all tensors at once: a
    tensor read at position i while position j writes it would race). Runs once per op on the
    optimizer's path: a list seen before is not read again (_tensor_lists.py)."""
    a = checked(self)
    if a is None or not a.dense or not a.disjoint:
        return None
    addresses = [a.addresses(self)]
    for lst in others:
        b = a if lst is self else checked(lst)
        if b is None or not a.fits(b):
            return None
        addresses.append(addresses[0] if b is a else b.addresses(lst))
    return None if None in addresses else (a, addresses)


def _real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _flat_scalar(t) -> bool:
    """One float32 element on the device: read by the kernel for every element (b_scalar)."""
    return type(t) is TVKTensor and t.dtype == _F32 and t.numel() == 1


def _run(kop, self, fit, b, c, value, values, b_scalar, inplace):
    """One launch of kernel op `kop` over self (fit: from _fit) and operands b, c (address tuples or
    None), into self or into new tensors; those are remembered, as the next op often takes them."""
    a, src = fit[0], fit[1][0]
    outs, dst = None, src
    if not inplace:
        outs = [new_tensor(s, _F32, a.device) for s in a.shapes] if a.contiguous else \
            [new_tensor(s, _F32, a.device, stride=st) for s, st in zip(a.shapes, a.strides)]
        dst = remember_outputs(outs, a).addresses(outs)
    optim_kernels.foreach_pointwise(a.device, kop, (dst, src, b, c, a.numels), value=value, values=values, b_scalar=b_scalar)
    return outs


def _values(vs, sign=1.0, n=None):
    """A ScalarList as the kernel's per-tensor values; one shared value when all are equal."""
    if (n is not None and len(vs) != n) or not (set(map(type, vs)) <= {float, int} or all(map(_real, vs))):
        return None
    vs = list(map(float, vs)) if sign == 1.0 else [sign * float(v) for v in vs]  # maps: one per step, 60 values
    return (vs[0], None) if vs.count(vs[0]) == len(vs) else (0.0, vs)


def _plan(name, ov, n, args, kwargs):
    """(kernel op, b list, c list, value, per-tensor values, b_scalar) for a call over n tensors, or None."""
    sign = -1.0 if name == "sub" else 1.0
    base = {"sub": "add"}.get(name, name)
    if name in ("add", "sub", "mul", "div"):
        other = args[0] if args else kwargs.get("scalar", kwargs.get("other", kwargs.get("scalars")))
        alpha = kwargs.get("alpha", args[1] if len(args) > 1 else 1)
        if not _real(alpha):
            return None
        if ov == "Scalar" and _real(other):
            v = sign * float(other)
            return base + "_s", None, None, v, None, False
        if ov == "ScalarList":
            r = _values(other, sign, n)
            return r and (base + "_s", None, None, r[0], r[1], False)
        if ov == "List":
            return base, other, None, sign * float(alpha), None, False
        if ov == "Tensor" and isinstance(other, torch.Tensor):
            if type(other) is not TVKTensor:  # a CPU scalar tensor
                if other.numel() != 1 or other.dtype.is_complex:
                    return None
                v = other.item()
                v = v * sign * float(alpha) if base == "add" else v
                return base + "_s", None, None, float(v), None, False
            if _flat_scalar(other) and other.dim() == 0:
                return base, None, None, sign * float(alpha), None, True
        return None
    if name in ("neg", "sqrt", "reciprocal", "abs", "zero"):
        return ("fill" if name == "zero" else name), None, None, 0.0, None, False
    if name == "copy":
        return "copy", args[0], None, 0.0, None, False
    if name == "lerp" and ov in ("Scalar", "ScalarList"):
        w = args[1] if len(args) > 1 else kwargs.get("weight", kwargs.get("weights"))
        r = _values([w] if ov == "Scalar" else w, n=None if ov == "Scalar" else n)
        return r and ("lerp", args[0], None, r[0], r[1], False)
    if name in ("addcmul", "addcdiv"):
        t1, t2 = args[0], args[1]
        v = args[2] if len(args) > 2 else kwargs.get("value", kwargs.get("scalars", 1))
        if ov == "Tensor":
            if type(v) is TVKTensor:  # per-tensor values would need a read back
                return None
            v = v.tolist()
        r = _values([v] if ov == "Scalar" else v, n=None if ov == "Scalar" else n)
        return r and (name, t1, t2, r[0], r[1], False)
    if name in ("maximum", "minimum", "clamp_min", "clamp_max"):
        other = args[0] if args else next(iter(kwargs.values()))
        if ov == "List":
            return ("maximum" if name in ("maximum", "clamp_min") else "minimum"), other, None, 0.0, None, False
        r = _values([other] if ov == "Scalar" else other, n=None if ov == "Scalar" else n) \
            if ov in ("Scalar", "ScalarList") else None
        kop = "clamp_min" if name in ("maximum", "clamp_min") else "clamp_max"
        return r and (kop, None, None, r[0], r[1], False)
    return None


def _foreach(name, ov, inplace, per_tensor):
    packet = getattr(aten, f"_foreach_{name}{'_' if inplace else ''}")
    op = getattr(packet, ov)

    def impl(self, *args, **kwargs):
        if len(self) == 0:
            return None if inplace else []
        plan = _plan(name, ov, len(self), args, kwargs)
        if plan is not None:
            kop, bs, cs, value, values, b_scalar = plan
            if b_scalar:
                other = args[0] if args else kwargs["other"]
                fit = _fit(self)
                if fit is not None and other._tvk.device is fit[0].device:
                    return _run(kop, self, fit, (other.tvk_address,) * len(self), None, value, values, True, inplace)
            else:
                fit = _fit(self, *(lst for lst in (bs, cs) if lst is not None))
                if fit is not None:
                    operands = iter(fit[1][1:])
                    b = next(operands) if bs is not None else None
                    c = next(operands) if cs is not None else None
                    return _run(kop, self, fit, b, c, value, values, False, inplace)
        _checks.check_now(op, (self,) + args, kwargs)
        if per_tensor is None:
            return missing(op, (self,) + args, kwargs)
        return per_tensor(self, *args, **kwargs)

    # addcmul/addcdiv's `scalars` tensor is a CPU tensor of values beside tvk tensors, as torch requires
    register(op, cross_device=name in ("addcmul", "addcdiv") and ov == "Tensor")(impl)
    # the dispatcher's argument check remembers calls by their values too, and optimizers pass new
    # ones every step (Adam's bias corrections, a schedule's lr): its meta kernels would run on every
    # step (~1 ms for 60 tensors). The kernels' own conditions (_fit, _plan) are checked above;
    # a call they do not take gets torch's check there.
    _checks.skip_check(op)




# ------------------------------------------------------------------ per tensor (every other call)
def _per_tensor(name: str, inplace: bool):
    """`_foreach_<name>` (or its in-place `_`) as one op per tensor through the op table, the
    way torch's own slow path runs it: list arguments are taken element by element, a tensor or
    number is shared; a ScalarList given as a CPU tensor (addcmul's `scalars`) becomes numbers."""
    fn = getattr(torch, name, None)
    method = getattr(torch.Tensor, name + "_", None) if inplace else None  # maximum_ has none: compute, copy

    def impl(self, *args, **kwargs):
        args = list(args)
        if name in ("addcmul", "addcdiv") and len(args) > 2:  # the value is keyword-only in torch.addcmul
            kwargs["value"] = args.pop(2)
        for k, v in kwargs.items():
            if isinstance(v, torch.Tensor) and type(v) is not TVKTensor and v.dim() == 1:
                kwargs[k] = v.tolist()
        outs = []
        for i, t in enumerate(self):
            a = [x[i] if isinstance(x, (list, tuple)) else x for x in args]
            kw = {k: (v[i] if isinstance(v, (list, tuple)) else v) for k, v in kwargs.items()}
            if not inplace:
                outs.append(fn(t, *a, **kw))
            elif method is not None:
                method(t, *a, **kw)
            else:
                t.copy_(fn(t, *a, **kw))
        return None if inplace else outs

    return impl


def _per_tensor_ops() -> dict:
    """{overload: its per-tensor implementation} for every `_foreach_*` overload whose first argument
    is the tensor list: the fused ones below take theirs as the fallback, the rest are declared so."""
    ops = {}
    names = sorted({n.split("::")[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                    if n.startswith("aten::_foreach_")})
    for name in names:
        packet = getattr(aten, name)
        base = name[len("_foreach_"):]
        inplace = base.endswith("_")
        base = base.rstrip("_")
        if getattr(torch, base, None) is None and not (inplace and hasattr(torch.Tensor, base + "_")):
            continue
        for ov in packet.overloads():
            op = getattr(packet, ov)
            first = op._schema.arguments[0]
            if not ov.endswith("out") and str(first.type) == "List[Tensor]":
                ops[op] = _per_tensor(base, inplace)
    return ops


_PER_TENSOR = _per_tensor_ops()


@register(aten._foreach_pow.ScalarAndTensor)
def _foreach_pow_scalar_and_tensor(self, exponent):
    return [torch.pow(self, e) for e in exponent]


_OVERLOADS = {
    "add": ("Scalar", "List", "ScalarList", "Tensor"), "sub": ("Scalar", "List", "ScalarList"),
    "mul": ("Scalar", "List", "ScalarList", "Tensor"), "div": ("Scalar", "List", "ScalarList", "Tensor"),
    "neg": ("default",), "sqrt": ("default",), "reciprocal": ("default",), "abs": ("default",),
    "lerp": ("Scalar", "ScalarList"), "addcmul": ("Scalar", "ScalarList", "Tensor"),
    "addcdiv": ("Scalar", "ScalarList", "Tensor"), "maximum": ("List", "Scalar", "ScalarList"),
    "minimum": ("List", "Scalar", "ScalarList"), "clamp_min": ("Scalar", "List", "ScalarList"),
    "clamp_max": ("Scalar", "List", "ScalarList"),
}
def _in_place_by_copy(functional):
    """Per-tensor in-place fallback where only the out-of-place op has one: compute, then copy."""
    def impl(self, *args, **kwargs):
        for d, r in zip(self, functional(self, *args, **kwargs)):
            copy_into(d, r)

    return impl


for _name, _ovs in _OVERLOADS.items():
    for _inplace in (False, True):
        _packet = getattr(aten, f"_foreach_{_name}{'_' if _inplace else ''}", None)
        for _ov in _ovs:
            if _packet is not None and _ov in _packet.overloads():
                _prev = _PER_TENSOR.pop(getattr(_packet, _ov), None)
                if _prev is None and _inplace:
                    _prev = TABLE.get(getattr(getattr(aten, f"_foreach_{_name}"), _ov))
                    _prev = _prev and _in_place_by_copy(_prev)
                _foreach(_name, _ov, _inplace, _prev)
_foreach("zero", "default", True, _PER_TENSOR.pop(aten._foreach_zero_.default, None))
_foreach("copy", "default", True, _PER_TENSOR.pop(aten._foreach_copy_.default, None))


# ------------------------------------------------------------------ norms (clip_grad_norm_)
_PER_TENSOR.pop(aten._foreach_norm.Scalar, None)


@register(aten._foreach_norm.Scalar)
def _foreach_norm(self, ord=2, dtype=None):
    ord_f = float(ord) if _real(ord) else None
    fit = _fit(self) if len(self) and ord_f in (2.0, float("inf")) and dtype in (None, _F32) else None
    if fit is not None and (ord_f == 2.0 or 0 not in fit[0].numels):
        a, (addresses,) = fit
        out = new_tensor([len(self)], _F32, a.device)
        optim_kernels.foreach_norms(a.device, (addresses, a.numels), out.tvk_address, ord_f)
        return [alias(out, [], [], i) for i in range(len(self))]
    return foreach_norm_per_tensor(self, ord, dtype)


# ------------------------------------------------------------------ fused optimizers (fused=True)
def _not_fusable(op: str, what: str):
    raise NotImplementedError(f"TorchVK: torch.optim's fused=True ({op}) runs contiguous float32 tvk tensors; {what}. "
                              f"Use the optimizer without fused=True (its foreach path, the default) for these.")


def _overload(packet, lr):
    return packet.tensor_lr if isinstance(lr, torch.Tensor) else packet.default


def _fusable(op, self, *lists):
    """_fit of a fused optimizer's lists (lists: those the kernel reads; None: one it does not), or
    its error: torch's for a tensor on another device (the dispatcher's check, skipped for these
    ops), else NotImplementedError."""
    lists = tuple(lst for lst in lists if lst is not None)
    fit = _fit(self, *lists)
    if fit is None:
        check_devices(op, (self,) + lists, {})
        name = op.overloadpacket.__name__
        bad = [t for lst in (self,) + lists for t in lst
               if type(t) is not TVKTensor or t.dtype != _F32 or not is_dense(t)]
        if bad and not isinstance(bad[0], torch.Tensor):
            _not_fusable(name, f"got {type(bad[0]).__name__} in a list of tensors")
        _not_fusable(name, f"got a {bad[0].dtype} tensor of shape {list(bad[0].shape)} on {bad[0].device}" if bad else
                     "got lists of other lengths than the parameters', or grads or states whose shapes or strides "
                     "differ from their parameters', or tensors that share memory")
    return fit


def _device_scalar(t, op, name, device) -> int:
    """Address of a one-element float32 tvk tensor holding t (None: 0)."""
    if t is None:
        return 0
    if type(t) is not TVKTensor:
        t = from_cpu(t.detach().reshape([]).to(_F32), device)
        device.stream.keep_alive(t)  # the kernel reads it after this call returns
    elif t.dtype != _F32 or t.numel() != 1:
        _not_fusable(op, f"{name} must be one float32 element, got a {t.dtype} tensor of shape {list(t.shape)}")
    return t.tvk_address


def _lr(lr, op, device):
    if isinstance(lr, torch.Tensor) and type(lr) is TVKTensor:
        return 0.0, _device_scalar(lr, op, "lr", device)
    return float(lr.item() if isinstance(lr, torch.Tensor) else lr), 0


@register(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr, cross_device=True)
def _fused_sgd_(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov, maximize,
                is_first_step, grad_scale=None, found_inf=None):
    op = _overload(aten._fused_sgd_, lr)
    # the dispatcher's device check of what _fusable does not see: a list the kernel does not read, the scalars
    check_devices(op, (momentum_buffer_list if momentum == 0 else (),),
                  {"lr": lr, "grad_scale": grad_scale, "found_inf": found_inf})
    if not self:
        check_devices(op, (self, grads, momentum_buffer_list), {})
        return
    a, addresses = _fusable(op, self, grads, momentum_buffer_list if momentum != 0 else None)
    dev = a.device
    name = "_fused_sgd_"
    lr_v, lr_addr = _lr(lr, name, dev)
    bufs = addresses[2] if momentum != 0 else None
    optim_kernels.fused_sgd(dev, (addresses[0], addresses[1], bufs, a.numels),
                lr_v, momentum, dampening, weight_decay, nesterov, maximize, bool(is_first_step) and momentum != 0,
                lr_addr=lr_addr, grad_scale=_device_scalar(grad_scale, name, "grad_scale", dev),
                found_inf=_device_scalar(found_inf, name, "found_inf", dev))


def _fused_adam(name, decoupled, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf):
    op = _overload(getattr(aten, name), lr)  # device check of what _fusable does not see, as in _fused_sgd_
    check_devices(op, (max_exp_avg_sqs if not amsgrad else (),),
                  {"lr": lr, "grad_scale": grad_scale, "found_inf": found_inf})
    if not self:
        check_devices(op, (self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps), {})
        return
    a, addresses = _fusable(op, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else None)
    steps = checked(state_steps)
    step_addresses = steps.addresses(state_steps) if steps is not None and steps.float32 and \
        steps.device is a.device and steps.numels.count(1) == len(self) else None
    if step_addresses is None:
        check_devices(op, (state_steps,), {})
        _not_fusable(name, "each step count must be a float32 tvk tensor of one element on the parameters' device "
                         "(torch.optim makes them so for fused=True)")
    dev = a.device
    lr_v, lr_addr = _lr(lr, name, dev)
    optim_kernels.fused_adam(dev, (*addresses[:4], addresses[4] if amsgrad else None, step_addresses, a.numels),
                 lr_v, beta1, beta2, eps, weight_decay, amsgrad, decoupled, maximize, lr_addr=lr_addr,
                 grad_scale=_device_scalar(grad_scale, name, "grad_scale", dev),
                 found_inf=_device_scalar(found_inf, name, "found_inf", dev))


@register(aten._fused_adam_.default, aten._fused_adam_.tensor_lr, cross_device=True)
def _fused_adam_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    _fused_adam("_fused_adam_", False, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)


@register(aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr, cross_device=True)
def _fused_adamw_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                  weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    _fused_adam("_fused_adamw_", True, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)


# checked by _fusable (the kernel's conditions and, for lists it does not take, the device check),
# not by the dispatcher's remembered meta check: lr changes every step under a schedule, and the
# check's key alone costs ~0.3 ms for 60 parameters
for _op in (aten._fused_sgd_, aten._fused_adam_, aten._fused_adamw_):
    for _ov in ("default", "tensor_lr"):
        _checks.skip_check(getattr(_op, _ov))


# every other `_foreach_*` overload: one op per tensor
for _op, _impl in _PER_TENSOR.items():
    register(_op, cross_device=True)(_impl)
