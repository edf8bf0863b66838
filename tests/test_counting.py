"""bincount, repeat_interleave, randperm and multinomial on tvk (torchvk/aten/counting.py): results
against the CPU where they are deterministic, the distribution where they are random, clear errors."""
import pytest
import torch

import torchvk


def test_bincount_matches_cpu():
    torchvk.reset_op_counts()
    x = torch.tensor([4, 1, 1, 0, 7, 4, 4])
    w = torch.linspace(-1, 2, 7)
    for args in ((x,), (x, None, 10), (x, w), (x.to(torch.int32),), (torch.tensor([], dtype=torch.int64), None, 3)):
        want = torch.bincount(*args)
        got = torch.bincount(*(a.to("tvk") if isinstance(a, torch.Tensor) else a for a in args))
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -2]).to("tvk"))
    assert torch.bincount(x.to("tvk")).sum().item() == 7  # still usable
    assert torchvk.op_counts()["cpu"] == {}


def test_repeat_interleave_matches_cpu():
    r = torch.tensor([2, 0, 3, 1])
    torch.testing.assert_close(torch.repeat_interleave(r.to("tvk")).cpu(), torch.repeat_interleave(r))
    x = torch.randn(4, 3)
    for dim in (0, None):
        want = torch.repeat_interleave(x, r, dim=dim) if dim == 0 else torch.repeat_interleave(x, 2)
        got = (torch.repeat_interleave(x.to("tvk"), r.to("tvk"), dim=dim) if dim == 0
               else torch.repeat_interleave(x.to("tvk"), 2))
        torch.testing.assert_close(got.cpu(), want)
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(torch.tensor([1, -1]).to("tvk"))


def test_randperm_is_a_permutation():
    torch.manual_seed(0)
    for n in (0, 1, 7, 1000):
        p = torch.randperm(n, device="tvk")
        assert p.dtype == torch.int64 and p.device.type == "tvk"
        torch.testing.assert_close(p.sort().values.cpu(), torch.arange(n))
    assert not torch.equal(torch.randperm(1000, device="tvk").cpu(), torch.arange(1000))


def test_multinomial_draws_by_probability():
    torch.manual_seed(1)
    torchvk.reset_op_counts()
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25]])
    draws = torch.multinomial(p.to("tvk"), 20000, replacement=True).cpu()
    assert draws.shape == (2, 20000) and draws.dtype == torch.int64
    for row, probs in zip(draws, p):
        freq = torch.bincount(row, minlength=4).float() / row.numel()
        torch.testing.assert_close(freq, probs, atol=0.02, rtol=0)
    # without replacement: distinct, never a zero-probability class, the likeliest first most often
    firsts = torch.stack([torch.multinomial(p[0].to("tvk"), 3).cpu() for _ in range(300)])
    assert all(len(set(r.tolist())) == 3 and 1 not in r.tolist() for r in firsts)
    assert (firsts[:, 0] == 2).float().mean() > 0.45
    assert torchvk.op_counts()["cpu"] == {}
    with pytest.raises(RuntimeError, match="not enough"):
        torch.multinomial(p[0].to("tvk"), 4)
    with pytest.raises(RuntimeError, match="< 0"):
        torch.multinomial(torch.tensor([0.5, -0.1]).to("tvk"), 1)
