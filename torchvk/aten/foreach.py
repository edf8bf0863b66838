"""torch.optim's multi-tensor ops: `_foreach_*` (its default path) and `_fused_sgd_` / `_fused_adam_` /
`_fused_adamw_` (fused=True), each one dispatch for all tensors (tvk_kernels/kernels/optim.py).

The multi-tensor kernels take float32 tensors that are dense and share their strides within
each position of the call; any other call (other dtypes, broadcasting, tensor weights) runs
per tensor on the implementation registered before this module (elementwise.py, reductions.py),
which raises NotImplementedError where no kernel exists.
"""
from __future__ import annotations

import numbers

import torch

from tvk_kernels.kernels import optim as K

from .. import _checks
from .._dispatch import TABLE, missing, register
from .._tensor import TVKTensor, alias, from_cpu, is_dense, new_tensor

aten = torch.ops.aten
_F32 = torch.float32


def _all_fit(self, *lists) -> bool:
    """The multi-tensor kernels take these lists: equal lengths; float32 tvk tensors on one device,
    those of self dense, each other tensor of self[i]'s shape and strides and not overlapping
    another tensor of self (one dispatch runs all tensors at once: a tensor read at position i while
    position j writes it would race). Runs once per op on the optimizer's path: kept cheap."""
    n = len(self)
    if any(len(lst) != n for lst in lists) or type(self[0]) is not TVKTensor:
        return False
    dev = self[0]._tvk.device
    for t in self:
        if type(t) is not TVKTensor or t.dtype != _F32 or t._tvk.device is not dev or \
                not (t.is_contiguous() or is_dense(t)):
            return False
    written = {id(t._tvk) for t in self} if lists else ()
    for lst in lists:
        for o, t in zip(lst, self):
            if o is t:
                continue
            if type(o) is not TVKTensor or o.dtype != _F32 or o._tvk.device is not dev or o.shape != t.shape or \
                    (o.stride() != t.stride() and o.numel() > 1):
                return False
            if id(o._tvk) in written and not (o._tvk is t._tvk and o.storage_offset() == t.storage_offset()):
                return False  # shares memory with a tensor of self: per tensor, in order
    return True


def _real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _flat_scalar(t) -> bool:
    """One float32 element on the device: read by the kernel for every element (b_scalar)."""
    return type(t) is TVKTensor and t.dtype == _F32 and t.numel() == 1


def _run(kop, self, bs, cs, value, values, b_scalar, inplace):
    outs = self if inplace else [new_tensor(t.shape, t.dtype, t._tvk.device, stride=t.stride()) for t in self]
    n = len(self)
    bs = bs if bs is not None else [None] * n
    cs = cs if cs is not None else [None] * n
    K.foreach_pointwise(self[0]._tvk.device, kop,
                        [(o.tvk_address, t.tvk_address, b.tvk_address if b is not None else 0,
                          c.tvk_address if c is not None else 0, t.numel())
                         for o, t, b, c in zip(outs, self, bs, cs)],
                        value=value, values=values, b_scalar=b_scalar)
    return None if inplace else outs


def _values(vs, sign=1.0, n=None):
    """A ScalarList as the kernel's per-tensor values; one shared value when all are equal."""
    if (n is not None and len(vs) != n) or not all(_real(v) for v in vs):
        return None
    vs = [sign * float(v) for v in vs]
    return (vs[0], None) if all(v == vs[0] for v in vs) else (0.0, vs)


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
                fit = _all_fit(self) and other._tvk.device is self[0]._tvk.device
                bs = [other] * len(self)
            else:
                fit = _all_fit(self, *(lst for lst in (bs, cs) if lst is not None))
            if fit:
                return _run(kop, self, bs, cs, value, values, b_scalar, inplace)
        _checks.check_now(op, (self,) + args, kwargs)
        if per_tensor is None:
            return missing(op, (self,) + args, kwargs)
        return per_tensor(self, *args, **kwargs)

    # addcmul/addcdiv's `scalars` tensor is a CPU tensor of values beside tvk tensors, as torch requires
    register(op, cross_device=name in ("addcmul", "addcdiv") and ov == "Tensor")(impl)
    # the dispatcher's argument check remembers calls by their values too, and optimizers pass new
    # ones every step (Adam's bias corrections, a schedule's lr): its meta kernels would run on every
    # step (~1 ms for 60 tensors). The kernels' own conditions (_all_fit, _plan) are checked above;
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


def _register_per_tensor():
    """Every `_foreach_*` overload whose first argument is the tensor list, not yet in the table."""
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
            if ov.endswith("out") or str(first.type) != "List[Tensor]" or op in TABLE:
                continue
            register(op, cross_device=True)(_per_tensor(base, inplace))


_register_per_tensor()


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
        from .copies import copy_into

        for d, r in zip(self, functional(self, *args, **kwargs)):
            copy_into(d, r)

    return impl


for _name, _ovs in _OVERLOADS.items():
    for _inplace in (False, True):
        _packet = getattr(aten, f"_foreach_{_name}{'_' if _inplace else ''}", None)
        for _ov in _ovs:
            if _packet is not None and _ov in _packet.overloads():
                _prev = TABLE.get(getattr(_packet, _ov))
                if _prev is None and _inplace:
                    _prev = TABLE.get(getattr(getattr(aten, f"_foreach_{_name}"), _ov))
                    _prev = _prev and _in_place_by_copy(_prev)
                _foreach(_name, _ov, _inplace, _prev)
_foreach("zero", "default", True, TABLE.get(aten._foreach_zero_.default))
_foreach("copy", "default", True, TABLE.get(aten._foreach_copy_.default))


# ------------------------------------------------------------------ norms (clip_grad_norm_)
_per_tensor_norm = TABLE.get(aten._foreach_norm.Scalar)


@register(aten._foreach_norm.Scalar)
def _foreach_norm(self, ord=2, dtype=None):
    ord_f = float(ord) if _real(ord) else None
    if len(self) and ord_f in (2.0, float("inf")) and dtype in (None, _F32) and _all_fit(self) and \
            (ord_f == 2.0 or all(t.numel() for t in self)):
        dev = self[0]._tvk.device
        out = new_tensor([len(self)], _F32, dev)
        K.foreach_norms(dev, [(t.tvk_address, t.numel()) for t in self], out.tvk_address, ord_f)
        return [alias(out, [], [], i) for i in range(len(self))]
    if _per_tensor_norm is None:
        return missing(aten._foreach_norm.Scalar, (self, ord), {"dtype": dtype})
    return _per_tensor_norm(self, ord, dtype)


# ------------------------------------------------------------------ fused optimizers (fused=True)
def _not_fusable(op: str, what: str):
    raise NotImplementedError(f"TorchVK: torch.optim's fused=True ({op}) runs contiguous float32 tvk tensors; {what}. "
                              f"Use the optimizer without fused=True (its foreach path, the default) for these.")


def _check_fusable(op, self, *lists):
    """lists: those the kernel reads (None: one it does not)."""
    lists = tuple(lst for lst in lists if lst is not None)
    if not _all_fit(self, *lists):
        bad = [t for lst in (self,) + lists for t in lst
               if type(t) is not TVKTensor or t.dtype != _F32 or not is_dense(t)]
        _not_fusable(op, f"got a {bad[0].dtype} tensor of shape {list(bad[0].shape)} on {bad[0].device}" if bad else
                     "got lists of other lengths than the parameters', or grads or states whose shapes or strides "
                     "differ from their parameters'")


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


@register(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr)
def _fused_sgd_(self, grads, momentum_buffer_list, *, weight_decay, momentum, lr, dampening, nesterov, maximize,
                is_first_step, grad_scale=None, found_inf=None):
    if not self:
        return
    _check_fusable("_fused_sgd_", self, grads, momentum_buffer_list if momentum != 0 else None)
    dev = self[0]._tvk.device
    lr_v, lr_addr = _lr(lr, "_fused_sgd_", dev)
    bufs = momentum_buffer_list if momentum != 0 else [None] * len(self)
    K.fused_sgd(dev,
                [(p.tvk_address, g.tvk_address, b.tvk_address if b is not None else 0, p.numel())
                 for p, g, b in zip(self, grads, bufs)],
                lr_v, momentum, dampening, weight_decay, nesterov, maximize, bool(is_first_step) and momentum != 0,
                lr_addr=lr_addr, grad_scale=_device_scalar(grad_scale, "_fused_sgd_", "grad_scale", dev),
                found_inf=_device_scalar(found_inf, "_fused_sgd_", "found_inf", dev))


def _fused_adam(op, decoupled, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
                weight_decay, eps, amsgrad, maximize, grad_scale, found_inf):
    if not self:
        return
    _check_fusable(op, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else None)
    if len(state_steps) != len(self) or not all(_flat_scalar(s) for s in state_steps):
        _not_fusable(op, "each step count must be a float32 tvk tensor of one element "
                         "(torch.optim makes them so for fused=True)")
    dev = self[0]._tvk.device
    lr_v, lr_addr = _lr(lr, op, dev)
    mxs = max_exp_avg_sqs if amsgrad else [None] * len(self)
    K.fused_adam(dev,
                 [(p.tvk_address, g.tvk_address, m.tvk_address, v.tvk_address, mx.tvk_address if mx is not None else 0,
                   s.tvk_address, p.numel())
                  for p, g, m, v, mx, s in zip(self, grads, exp_avgs, exp_avg_sqs, mxs, state_steps)],
                 lr_v, beta1, beta2, eps, weight_decay, amsgrad, decoupled, maximize, lr_addr=lr_addr,
                 grad_scale=_device_scalar(grad_scale, op, "grad_scale", dev),
                 found_inf=_device_scalar(found_inf, op, "found_inf", dev))


@register(aten._fused_adam_.default, aten._fused_adam_.tensor_lr)
def _fused_adam_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    _fused_adam("_fused_adam_", False, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)


@register(aten._fused_adamw_.default, aten._fused_adamw_.tensor_lr)
def _fused_adamw_(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, *, lr, beta1, beta2,
                  weight_decay, eps, amsgrad, maximize, grad_scale=None, found_inf=None):
    _fused_adam("_fused_adamw_", True, self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1,
                beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)


# checked by _check_fusable (the kernel's conditions), not by the dispatcher's remembered meta check:
# lr changes every step under a schedule, and the check's key alone costs ~0.3 ms for 60 parameters
for _op in (aten._fused_sgd_, aten._fused_adam_, aten._fused_adamw_):
    for _ov in ("default", "tensor_lr"):
        _checks.skip_check(getattr(_op, _ov))
