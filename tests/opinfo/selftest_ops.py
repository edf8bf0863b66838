"""Fake OpInfo ops that misbehave on tvk on purpose, so tests/test_opinfo.py can show that
the check and the runner catch each kind of failure (a wrong value, a wrong grad, an error,
a missing kernel, an abort, a hang). Their names start with "_selftest."."""
from __future__ import annotations

import os
import time

import torch
from torch.testing import make_tensor
from torch.testing._internal.opinfo.core import SampleInput


def _on_tvk(x) -> bool:
    return x.device.type == "tvk"


class _ScaleGradOnTVK(torch.autograd.Function):
    """Identity forward; backward scales the grad by 2, on tvk only."""

    @staticmethod
    def forward(ctx, x):
        ctx.tvk = _on_tvk(x)
        return x * 1

    @staticmethod
    def backward(ctx, g):
        return g * 2 if ctx.tvk else g


def _missing(x):
    if _on_tvk(x):
        from torchvk._dispatch import missing

        return missing(torch.ops.aten.special_zeta.default, (x, x), {})
    return x


def _raise(x):
    if _on_tvk(x):
        raise ValueError("selftest: fails on tvk only")
    return x * 2


def _abort(x):
    if _on_tvk(x):
        os.abort()
    return x * 2


def _hang(x):
    if _on_tvk(x):
        time.sleep(3600)
    return x * 2


class FakeOp:
    """What check.py uses of an OpInfo: name, variant, autograd support, samples, calling it."""

    variant_test_name = ""
    supports_autograd = True

    def __init__(self, name, fn):
        self.name, self.fn = "_selftest." + name, fn

    def sample_inputs(self, device, dtype, requires_grad=False):
        yield SampleInput(make_tensor((3, 4), device=device, dtype=dtype, low=-2, high=2, requires_grad=requires_grad))

    def supported_dtypes(self, device_type):
        return {torch.float32}

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


OPS = {op.name: op for op in [
    FakeOp("match", lambda x: x * 2),
    FakeOp("wrong_value", lambda x: x * (3 if _on_tvk(x) else 2)),
    FakeOp("wrong_grad", _ScaleGradOnTVK.apply),
    FakeOp("error", _raise),
    FakeOp("same_error", lambda x: x.view(5)),  # CPU and tvk both raise RuntimeError: a match
    FakeOp("missing", _missing),
    FakeOp("abort", _abort),
    FakeOp("hang", _hang),
]}
