"""Compiled mode (torchvk.compile): same results as eager, replay, recompiles, clear errors."""
import copy
import gc

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchvk
from torchvk.compile import GraphBreakError

from test_torchvk_train import TinyGPT, _batches, cnn


def _loss(run, x, y):
    out = run(x.to("tvk"))
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.to("tvk").reshape(-1))


def _steps(model, opt, batches, compiled=None, loss_fn=None):
    """SGD steps; loss_fn(x, y) overrides the loss (a model compiled with its loss)."""
    losses = []
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(x.to("tvk"), y.to("tvk")) if loss_fn else _loss(compiled or model, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _eager_and_compiled(make, opt, batches, **options):
    torch.manual_seed(0)
    eager = make().to("tvk")
    model = copy.deepcopy(eager)
    lo_e = _steps(eager, opt(eager.parameters()), batches)
    compiled = torchvk.compile(model, **options)
    torchvk.reset_op_counts()
    lo_c = _steps(model, opt(model.parameters()), batches, compiled)
    return lo_e, lo_c, compiled, eager, model


def test_cnn_training_matches_eager_and_replays():
    batches = _batches(5, (3, 8, 8), 4)
    lo_e, lo_c, compiled, eager, model = _eager_and_compiled(
        cnn, lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), batches)
    assert lo_c == pytest.approx(lo_e, rel=1e-5, abs=1e-6)
    assert torchvk.op_counts()["cpu"] == {}
    (stats,) = compiled.compile_stats()
    assert stats["forward"]["replays"] >= 3 and stats["backward"]["replays"] >= 3
    assert stats["forward"]["peak_bytes"] > 0
    # batch norm running statistics are updated by the compiled forward too
    bn_e, bn_c = eager[1], model[1]
    assert torch.allclose(bn_c.running_mean.cpu(), bn_e.running_mean.cpu(), atol=1e-6)
    assert torch.allclose(bn_c.running_var.cpu(), bn_e.running_var.cpu(), atol=1e-5)


def test_tiny_transformer_training_matches_eager():
    def make():
        m = TinyGPT()
        m.block.drop.p = 0.0  # dropout makes eager and compiled draw different numbers
        return m

    g = torch.Generator().manual_seed(3)
    data = [torch.randint(0, 13, (4, 9), generator=g) for _ in range(4)]
    batches = [(d[:, :-1], d[:, 1:]) for d in data]
    lo_e, lo_c, compiled, _, _ = _eager_and_compiled(make, lambda p: torchvk.optim.AdamW(p, lr=1e-2), batches)
    assert lo_c == pytest.approx(lo_e, rel=1e-4, abs=1e-5)
    assert torchvk.op_counts()["cpu"] == {}
    assert compiled.compile_stats()[0]["backward"]["replays"] >= 2


def test_new_batch_size_recompiles():
    torch.manual_seed(0)
    model = cnn().to("tvk").eval()
    compiled = torchvk.compile(model)
    with torch.no_grad():
        for batch in (4, 4, 4, 2, 2, 4):
            x = torch.randn(batch, 3, 8, 8).to("tvk")
            torch.testing.assert_close(compiled(x).cpu(), model(x).cpu(), rtol=1e-5, atol=1e-6)
    assert len(compiled.compile_stats()) == 2


def test_outputs_the_user_keeps_are_not_overwritten_by_replay():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3)).to("tvk").eval()
    compiled = torchvk.compile(model)
    xs = [torch.randn(4, 6) for _ in range(5)]
    with torch.no_grad():
        kept = [compiled(x.to("tvk")) for x in xs]  # every call after the second is a replay
        want = [model(x.to("tvk")).cpu() for x in xs]
    for k, w in zip(kept, want):
        torch.testing.assert_close(k.cpu(), w, rtol=1e-5, atol=1e-6)
    stats = compiled.compile_stats()[0]["inference"]
    assert stats["replays"] >= 3 and stats["moved_outputs"] >= 3


def test_two_forwards_then_one_backward_gives_eager_grads():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)).to("tvk")
    model = copy.deepcopy(eager)
    compiled = torchvk.compile(model)
    xs = [torch.randn(5, 6).to("tvk") for _ in range(2)]
    for _ in range(3):  # warm-up, record, replay
        for m, run in ((eager, eager), (model, compiled)):
            m.zero_grad(set_to_none=True)
            (run(xs[0]).square().sum() + run(xs[1]).sum()).backward()
        for pe, pc in zip(eager.parameters(), model.parameters()):
            torch.testing.assert_close(pc.grad.cpu(), pe.grad.cpu(), rtol=1e-5, atol=1e-6)


def test_grads_accumulate_without_zero_grad():
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2)).to("tvk")
    model = copy.deepcopy(eager)
    compiled = torchvk.compile(model)
    for i in range(4):
        x = torch.randn(5, 6).to("tvk")
        eager(x).sum().backward()
        compiled(x).sum().backward()
    for pe, pc in zip(eager.parameters(), model.parameters()):
        torch.testing.assert_close(pc.grad.cpu(), pe.grad.cpu(), rtol=1e-5, atol=1e-5)


class _Igamma(nn.Module):
    def forward(self, x):
        return torch.special.gammainc(x, x) * 2


def test_op_without_kernel_is_a_clear_compile_error():
    with pytest.raises(GraphBreakError, match="igamma.*no Vulkan kernel"):
        torchvk.compile(_Igamma())(torch.rand(3).to("tvk"))


def test_cpu_inputs_are_rejected_with_advice():
    compiled = torchvk.compile(nn.Linear(3, 2).to("tvk"))
    with pytest.raises(TypeError, match=r"input 0 is cpu.*\.to\('tvk'\)"):
        compiled(torch.randn(2, 3))


def test_dropout_replays_with_fresh_masks_equal_to_eager():
    model = nn.Sequential(nn.Linear(4, 64), nn.Dropout(0.5)).to("tvk")
    compiled = torchvk.compile(model)
    x = torch.ones(8, 4).to("tvk")
    torchvk.manual_seed(5)
    eager = [model(x).detach().cpu() for _ in range(4)]
    torchvk.manual_seed(5)
    outs = [compiled(x).detach().cpu() for _ in range(4)]
    assert not torch.equal(outs[2], outs[3])  # replays draw fresh masks
    for o, e in zip(outs, eager):  # and the very numbers eager mode draws
        torch.testing.assert_close(o, e)
    stats = compiled.compile_stats()[0]["forward"]
    assert stats["replay"] is True and stats["replays"] >= 2


def test_other_random_ops_run_without_replay():
    class Noisy(nn.Module):
        def forward(self, x):
            return x + torch.rand_like(x)

    compiled = torchvk.compile(Noisy())
    x = torch.zeros(64).to("tvk")
    outs = [compiled(x).cpu() for _ in range(3)]
    assert not torch.equal(outs[1], outs[2])
    stats = compiled.compile_stats()[0]["inference"]
    assert stats["replay"] is False and stats["why_not"] == "random ops"


def test_fused_and_unfused_compiled_training_agree():
    batches = _batches(3, (28,), 5)
    make = lambda: nn.Sequential(nn.Linear(28, 16), nn.ReLU(), nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 5))  # noqa
    opt = lambda p: torch.optim.SGD(p, lr=0.1)  # noqa
    _, lo_plain, _, _, _ = _eager_and_compiled(make, opt, batches, fuse=False)
    lo_e, lo_fused, compiled, _, _ = _eager_and_compiled(make, opt, batches, fuse=True)
    assert lo_fused == pytest.approx(lo_plain, rel=1e-5, abs=1e-6)
    assert lo_fused == pytest.approx(lo_e, rel=1e-5, abs=1e-6)
    fusion = compiled.compile_stats()[0]["forward"]["fusion"]
    assert fusion.get("epilogues", 0) + fusion.get("fused_groups", 0) >= 1


def test_model_and_loss_compiled_together_match_eager():
    batches = _batches(4, (3, 8, 8), 4)
    torch.manual_seed(0)
    eager = cnn().to("tvk")
    model = copy.deepcopy(eager)
    lo_e = _steps(eager, torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9), batches)
    compiled = torchvk.compile(model, loss_fn=F.cross_entropy)
    torchvk.reset_op_counts()
    lo_c = _steps(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), batches, loss_fn=compiled)
    assert lo_c == pytest.approx(lo_e, rel=1e-5, abs=1e-6)
    counts = torchvk.op_counts()
    assert counts["cpu"] == {}
    # the loss and its backward ran inside the compiled graphs: compiled programs count their ops,
    # and the forward graph holds the loss
    (graphs,) = compiled._signatures.values()
    assert "aten.nll_loss_forward.default" in graphs.programs["forward"]["program"].op_histogram
    stats = compiled.compile_stats()[0]
    assert stats["forward"]["replays"] >= 2 and stats["backward"]["replays"] >= 2


def test_mnist_cnn_with_dropout_compiled_matches_eager():
    """The experiments' MNIST CNN (dropout included): compiled and eager draw the same dropout masks,
    so a few SGD steps give the same losses."""
    from torchvk.experiments import models

    g = torch.Generator().manual_seed(2)
    batches = [(torch.randn(4, 1, 28, 28, generator=g), torch.randint(0, 10, (4,), generator=g)) for _ in range(4)]
    eager = models.build("cnn").to("tvk")
    model = copy.deepcopy(eager)
    torchvk.manual_seed(7)
    lo_e = _steps(eager, torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9), batches)
    compiled = torchvk.compile(model, loss_fn=F.cross_entropy)
    torchvk.manual_seed(7)
    lo_c = _steps(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), batches, loss_fn=compiled)
    assert lo_c == pytest.approx(lo_e, rel=1e-5, abs=1e-6)
    stats = compiled.compile_stats()[0]
    assert stats["forward"]["replays"] >= 2 and stats["forward"]["why_not"] == ""


def test_forward_and_backward_share_their_temporaries(monkeypatch):
    """The backward's recording puts its temporaries in the forward's scratch: less memory held
    than with each graph keeping its own, and the same losses as eager mode."""
    batches = _batches(7, (3, 8, 8), 4)
    held = {}
    for share in ("0", "1"):
        monkeypatch.setenv("TVK_SHARE_GRAPH_SCRATCH", share)
        gc.collect()  # earlier tests' graphs and tensors freed now, not in the middle of this measurement
        torch.tvk.synchronize()
        before = torchvk.memory_allocated()
        lo_e, lo_c, compiled, eager, model = _eager_and_compiled(cnn, lambda p: torch.optim.SGD(p, lr=0.05), batches)
        assert lo_c == pytest.approx(lo_e, rel=1e-5, abs=1e-6)
        stats = compiled.compile_stats()[0]
        assert stats["backward"]["shared_scratch"] is (share == "1")
        assert stats["forward"]["replays"] >= 4 and stats["backward"]["replays"] >= 4
        torch.tvk.synchronize()
        del eager
        gc.collect()
        held[share] = torchvk.memory_allocated() - before
        del compiled, model
    assert held["1"] < held["0"], held
