"""Random samplers on tvk (torchvk/aten/distributions.py): shapes, dtypes and the moments of each
distribution from many samples; their argument errors."""
import math

import pytest
import torch

import torchvk

M = 200_000


def _moments(x):
    x = x.cpu().double()
    return x.mean().item(), x.var().item()


def test_samplers_have_their_distributions():
    torch.manual_seed(0)
    torchvk.reset_op_counts()
    p = torch.tensor([0.1, 0.5, 0.9]).to("tvk")
    b = torch.empty(M, 3, device="tvk").bernoulli_(p.expand(M, 3))
    torch.testing.assert_close(b.mean(0).cpu(), p.cpu(), atol=0.01, rtol=0)
    assert torch.bernoulli(p.expand(4, 3)).shape == (4, 3)
    n = torch.normal(torch.full((M,), 2.0).to("tvk"), torch.full((M,), 3.0).to("tvk"))
    assert n.shape == (M,) and n.device.type == "tvk"
    mean, var = _moments(n)
    assert abs(mean - 2) < 0.05 and abs(var - 9) < 0.2
    mean, var = _moments(torch.normal(torch.zeros(M).to("tvk"), 0.5))
    assert abs(mean) < 0.01 and abs(var - 0.25) < 0.01
    mean, var = _moments(torch.empty(M, device="tvk").exponential_(2.0))
    assert abs(mean - 0.5) < 0.01 and abs(var - 0.25) < 0.01
    g = torch.empty(M, device="tvk").geometric_(0.25)
    mean, var = _moments(g)
    assert g.min().item() >= 1 and abs(mean - 4) < 0.05 and abs(var - 12) < 0.5
    mean, _ = _moments(torch.empty(M, device="tvk").log_normal_(0.0, 0.5).log())
    assert abs(mean) < 0.01
    c = torch.empty(M, device="tvk").cauchy_(1.0, 2.0).cpu()
    assert abs(c.median().item() - 1.0) < 0.05 and abs((c - 1).abs().median().item() - 2.0) < 0.05
    assert torchvk.op_counts()["cpu"] == {}


def test_argument_errors():
    x = torch.empty(3, device="tvk")
    for call, match in [(lambda: x.exponential_(0.0), "lambda"), (lambda: x.geometric_(1.5), "geometric_"),
                        (lambda: x.log_normal_(0.0, -1.0), "std"), (lambda: x.cauchy_(0.0, 0.0), "sigma"),
                        (lambda: torch.normal(x, -1.0), "std")]:
        with pytest.raises(RuntimeError, match=match):
            call()
    assert math.isfinite(x.normal_().sum().item())  # still usable
