"""The two ops `torch.amp.GradScaler("tvk")` needs, on tvk_kernels.kernels.amp (templates/amp.comp)
and the fused multi-tensor kernel (templates/optim.comp): one kernel for all contiguous float32
gradients (others, 16-bit or strided, one each) and one for the scale update, no host sync
(GradScaler's one `.item()` per step on found_inf stays the only one, as on CUDA).

* `_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)`: found_inf = 1 when a
  grad holds an inf or a NaN; every grad *= inv_scale.
* `_amp_update_scale_(scale, growth_tracker, found_inf, growth, backoff, interval)`: CUDA's rule:
  an inf backs the scale off and resets the tracker; `interval` clean steps in a row grow it
  (when the grown scale is finite).

GradScaler.unscale_ takes the reciprocal of the scale in float64 (`scale.double().reciprocal()`),
a dtype tvk has no kernels for; `install_grad_scaler_fix()` makes it take it in float32 on tvk, as
torch does on MPS (exact for the default power-of-two scales).
"""
from __future__ import annotations

import torch
from torch.amp.grad_scaler import GradScaler, OptState

from tvk_kernels.kernels import amp as amp_kernels, optim as optim_kernels

from ..op_registry import register
from .._tensor import TVKTensor
from ._util import DTYPE_NAME, addr, dev
from .copies import contig, device_copy

aten = torch.ops.aten


def _check_one(t, name, op, dtype=torch.float32):
    if not isinstance(t, TVKTensor):
        raise RuntimeError(f"{op}: {name} must be a tvk tensor, got one on {t.device}")
    if t.dtype != dtype or t.numel() != 1:
        raise RuntimeError(f"{op}: {name} must be a 1-element {str(dtype).replace('torch.', '')} tensor, got "
                           f"{t.dtype} with {t.numel()} elements")


@register(aten._amp_foreach_non_finite_check_and_unscale_.default)
def amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    op = "_amp_foreach_non_finite_check_and_unscale_"
    _check_one(found_inf, "found_inf", op)
    _check_one(inv_scale, "inv_scale", op)
    for g in grads:
        if g.dtype not in DTYPE_NAME:
            raise TypeError(f"{op}: gradients must be float32, float16 or bfloat16 on tvk, got {g.dtype}")
    fused = [g for g in grads if g.dtype == torch.float32 and g.is_contiguous() and g.numel()]
    if fused:  # one dispatch for them all, however many parameters the model has
        optim_kernels.foreach_unscale(dev(found_inf), (tuple(addr(g) for g in fused), tuple(g.numel() for g in fused)),
                                      addr(found_inf), addr(inv_scale))
    for g in grads:
        if g.numel() == 0 or (g.dtype == torch.float32 and g.is_contiguous()):
            continue
        flat = contig(g)
        amp_kernels.unscale(dev(g), addr(flat), flat.numel(), addr(found_inf), addr(inv_scale), DTYPE_NAME[g.dtype])
        if flat is not g:  # a strided grad: unscaled in a contiguous copy, copied back
            device_copy(g, flat)


@register(aten._amp_update_scale_.default)
def amp_update_scale_(scale, growth_tracker, found_inf, scale_growth_factor, scale_backoff_factor,
                      growth_interval):
    op = "_amp_update_scale_"
    _check_one(scale, "current_scale", op)
    _check_one(growth_tracker, "growth_tracker", op, torch.int32)
    _check_one(found_inf, "found_inf", op)
    amp_kernels.update_scale(dev(scale), addr(scale), addr(growth_tracker), addr(found_inf), float(scale_growth_factor),
                    float(scale_backoff_factor), int(growth_interval))
    return scale


def install_grad_scaler_fix():
    """GradScaler.unscale_ on tvk: the inverse scale in float32 (tvk has no float64), the rest torch's."""
    if getattr(GradScaler.unscale_, "_tvk", False):
        return
    torch_unscale = GradScaler.unscale_

    def unscale_(self, optimizer):
        if not self._enabled or self._scale is None or not isinstance(self._scale, TVKTensor):
            return torch_unscale(self, optimizer)
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = self._scale.reciprocal()
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=self._scale.device)
        state["found_inf_per_device"] = self._unscale_grads_(optimizer, inv_scale, found_inf, False)
        state["stage"] = OptState.UNSCALED

    unscale_._tvk = True
    unscale_.__doc__ = torch_unscale.__doc__
    GradScaler.unscale_ = unscale_


install_grad_scaler_fix()
