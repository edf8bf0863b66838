"""torch.optim.SGD / Adam / AdamW that run one fused multi-tensor kernel per step on tvk.

Drop-in subclasses: same constructor arguments, same state (momentum_buffer, exp_avg,
exp_avg_sq, max_exp_avg_sq, step) and state_dict format as torch's. Parameter groups whose
tensors are not all contiguous float32 tvk tensors use torch's own implementation (which
runs op by op on tvk).
"""
from __future__ import annotations

import torch

from tvk_kernels.kernels import optim as _O

from ._tensor import TVKTensor

__all__ = ["SGD", "Adam", "AdamW"]


def _fusable(params) -> bool:
    for p in params:
        g = p.grad
        if not isinstance(p, TVKTensor) or not isinstance(g, TVKTensor) or p.dtype != torch.float32 or \
                g.dtype != torch.float32 or not p.is_contiguous() or not g.is_contiguous() or g.is_sparse:
            return False
    return True


def _fused_groups(optimizer):
    """[(group, params with a grad)] when every such tensor can go through the fused kernel
    (contiguous float32 tvk tensors, no differentiable optimizer); None: use torch's step."""
    groups = [(g, [p for p in g["params"] if p.grad is not None]) for g in optimizer.param_groups]
    if not all(_fusable(ps) for _, ps in groups) or any(g.get("differentiable") for g, _ in groups):
        return None
    return [(g, ps) for g, ps in groups if ps]


def _val(x) -> float:
    return float(x.item()) if isinstance(x, torch.Tensor) else float(x)


def _a(t):
    return t.tvk_address


def _closure(closure):
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


class SGD(torch.optim.SGD):
    @torch.no_grad()
    def step(self, closure=None):
        groups = _fused_groups(self)
        if groups is None:
            return super().step(closure)
        loss = _closure(closure)
        for group, params in groups:
            momentum = float(group["momentum"])
            new, old = [], []
            for p in params:
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if momentum != 0 and buf is None:
                    buf = state["momentum_buffer"] = torch.empty_like(p)
                    new.append((_a(p), _a(p.grad), _a(buf), p.numel()))
                else:
                    old.append((_a(p), _a(p.grad), _a(buf) if buf is not None else 0, p.numel()))
            dev = params[0]._tvk.device
            for entries, first in ((new, True), (old, False)):
                if entries:
                    _O.sgd_step(dev, entries, _val(group["lr"]), momentum, float(group["dampening"]),
                                float(group["weight_decay"]), bool(group["nesterov"]), bool(group.get("maximize")),
                                first_step=first)
        return loss


class Adam(torch.optim.Adam):
    _decoupled = False

    @torch.no_grad()
    def step(self, closure=None):
        groups = _fused_groups(self)
        if groups is None:
            return super().step(closure)
        loss = _closure(closure)
        for group, params in groups:
            amsgrad = bool(group["amsgrad"])
            decoupled = bool(group.get("decoupled_weight_decay", self._decoupled))
            by_step: dict = {}
            for p in params:
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    if amsgrad:
                        state["max_exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["step"] += 1
                step = int(_val(state["step"]))
                mx = state.get("max_exp_avg_sq")
                by_step.setdefault(step, []).append(
                    (_a(p), _a(p.grad), _a(state["exp_avg"]), _a(state["exp_avg_sq"]), _a(mx) if mx is not None else 0,
                     p.numel()))
            beta1, beta2 = (_val(b) for b in group["betas"])
            dev = params[0]._tvk.device
            for step, entries in by_step.items():
                _O.adam_step(dev, entries, _val(group["lr"]), beta1, beta2, float(group["eps"]),
                             float(group["weight_decay"]), step, amsgrad, decoupled, bool(group.get("maximize")))
        return loss


class AdamW(Adam, torch.optim.AdamW):
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, **kw):
        torch.optim.AdamW.__init__(self, params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                   amsgrad=amsgrad, **kw)
