"""Random ops inside compiled graphs (torch.compile(backend="tvk"), torchvk.compile): each runs on the
device with eager mode's numbers for the same seed (issue 30: bernoulli.p had no kernel there)."""
import pytest
import torch

import torchvk


def _draws(x):
    return torch.bernoulli(x, 0.3), torch.bernoulli(x), torch.rand_like(x), torch.randint(0, 5, (7,), device=x.device)


@pytest.mark.parametrize("compiler", ["torch.compile", "eager"])
def test_random_ops_draw_eagers_numbers_per_seed(compiler):
    x = torch.rand(64, device="tvk")
    run = torch.compile(_draws, backend="tvk") if compiler == "torch.compile" else _draws
    torch.manual_seed(5)
    expected = [t.cpu() for t in _draws(x)]
    torch.manual_seed(5)
    torchvk.reset_op_counts()
    got = [t.cpu() for t in run(x)]
    assert torchvk.op_counts()["cpu"] == {}
    for e, g in zip(expected, got):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


def test_bernoulli_p_is_a_bernoulli_draw():
    torch.manual_seed(0)
    draws = torch.compile(lambda x: torch.bernoulli(x, 0.3), backend="tvk")(torch.empty(20000, device="tvk")).cpu()
    assert set(draws.unique().tolist()) <= {0.0, 1.0}
    assert abs(draws.mean().item() - 0.3) < 0.02  # 20000 draws: 0.02 is over 6 standard deviations
