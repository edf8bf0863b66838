"""torch.compile(model, backend="tvk"): Dynamo's graphs compiled onto TorchVK kernels, checked
against eager tvk training (itself checked against torch CPU in test_torchvk_train.py)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchvk
from torchvk.compile import GraphBreakError
from torchvk.compile import backend  # an installed TorchVK registers through its entry point too

from test_torchvk_train import TinyGPT, _batches, cnn


def _train(model, batches, step_fn=None):
    """SGD steps; step_fn(model, opt, x, y) -> loss replaces the plain eager step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for x, y in batches:
        x, y = x.to("tvk"), y.to("tvk")
        if step_fn is None:
            opt.zero_grad(set_to_none=True)
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()
        else:
            loss = step_fn(model, opt, x, y)
        losses.append(loss.item())
    return losses


def _pair(make):
    torch.manual_seed(0)
    eager = make().to("tvk")
    return eager, copy.deepcopy(eager)


def _new_graphs():
    torch._dynamo.reset()
    backend.compiled_graphs.clear()
    torchvk.reset_op_counts()


def test_cnn_trains_like_eager_replays_and_recompiles_for_a_new_batch_size():
    _new_graphs()
    eager, model = _pair(cnn)
    compiled = torch.compile(model, backend="tvk")
    batches = _batches(4, (3, 8, 8), 4) + _batches(3, (3, 8, 8), 4, batch=5)
    assert _train(compiled, batches) == pytest.approx(_train(eager, batches), rel=1e-5, abs=1e-6)
    for p_c, p_e in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p_c.cpu(), p_e.cpu(), rtol=1e-5, atol=1e-6)
    assert torchvk.op_counts()["cpu"] == {}
    stats = [s for g in backend.compiled_graphs for s in g.compile_stats()]
    assert len(stats) >= 2  # batch 8, then batch 5 (Dynamo may make the second graph dynamic: still compiled)
    assert stats[0]["forward"]["replays"] >= 2 and stats[0]["backward"]["replays"] >= 2
    assert "aten.convolution.default" in torchvk.op_counts()["vulkan"]


def test_tiny_transformer_trains_like_eager():
    _new_graphs()
    def make():
        m = TinyGPT(ctx=6)
        m.block.drop.p = 0.0  # dropout makes eager and compiled draw different numbers
        return m

    eager, model = _pair(make)
    compiled = torch.compile(model, backend="tvk")
    g = torch.Generator().manual_seed(3)
    batches = [(torch.randint(0, 13, (4, 6), generator=g), torch.randint(0, 13, (4, 6), generator=g))
               for _ in range(3)]
    assert _train(compiled, batches) == pytest.approx(_train(eager, batches), rel=1e-5, abs=1e-6)
    assert len(backend.compiled_graphs) == 1
    assert torchvk.op_counts()["cpu"] == {}


def test_a_whole_training_step_compiles():
    _new_graphs()
    eager, model = _pair(cnn)

    @torch.compile(backend="tvk")
    def step(model, opt, x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    batches = _batches(3, (3, 8, 8), 4)
    assert _train(model, batches, step) == pytest.approx(_train(eager, batches), rel=1e-5, abs=1e-6)
    assert backend.compiled_graphs  # the forward and loss, at least, ran as a compiled graph
    assert torchvk.op_counts()["cpu"] == {}


class _ReadsAScalar(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 8), nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        scale = 2.0 if h.sum().item() > 0 else 1.0  # host read: Dynamo splits the graph here
        return self.b(h * scale)


def test_a_graph_break_splits_the_model_into_compiled_graphs():
    _new_graphs()
    eager, model = _pair(_ReadsAScalar)
    compiled = torch.compile(model, backend="tvk")
    x = torch.randn(5, 4).to("tvk")
    torch.testing.assert_close(compiled(x).cpu(), eager(x).cpu())
    assert len(backend.compiled_graphs) == 2


class _Igamma(nn.Module):
    def forward(self, x):
        return torch.special.gammainc(x, x)


def test_a_float_that_varies_between_calls_is_a_graph_input():
    """A Python float that changes between calls (which Dynamo would make a 0-dim float64 CPU input
    read with .item()) and a 0-dim float64 CPU tensor argument both work as the numbers they hold."""
    torch._dynamo.reset()
    scale = torch.compile(lambda x, s: (x * s).sum(), backend="tvk")
    x = torch.randn(4, 5)
    for s in (0.5, 0.25, 3.0, 1.5):  # a float that changes: a constant per value (no .item() in a graph)
        torch.testing.assert_close(scale(x.to("tvk"), s).cpu(), (x * s).sum())
    for s in (0.5, 0.25):  # a 0-dim float64 CPU tensor given as such: the float32 number it holds, as eager
        torch.testing.assert_close(scale(x.to("tvk"), torch.tensor(s, dtype=torch.float64)).cpu(), (x * s).sum())


def test_an_op_without_a_kernel_is_a_clear_error():
    _new_graphs()
    with pytest.raises(GraphBreakError, match="igamma.*no Vulkan kernel"):
        torch.compile(_Igamma(), backend="tvk")(torch.rand(3).to("tvk"))


def test_cpu_input_to_a_tvk_model_is_an_error_with_advice():
    _new_graphs()
    compiled = torch.compile(nn.Linear(3, 2).to("tvk"), backend="tvk")
    with pytest.raises(Exception, match=r"tvk:0 and cpu.*move it with \.to\('tvk'\)"):
        compiled(torch.randn(2, 3))
    # the runtime is still usable
    x = torch.randn(2, 3).to("tvk")
    assert compiled(x).shape == (2, 2)


def test_a_graph_without_tvk_inputs_runs_on_the_default_device():
    """Dynamo may split off a graph of factories alone (a mask built from sizes): it has no tvk input to
    take a device from, and runs on the default one."""
    torch._dynamo.reset()
    try:
        made = torch.compile(lambda n: (torch.arange(n, device="tvk") * 2).float().cumsum(0), backend="tvk")(6)
        assert made.device.type == "tvk"
        assert made.cpu().tolist() == (torch.arange(6) * 2).float().cumsum(0).tolist()
    finally:
        torch._dynamo.reset()


def test_a_constant_made_while_tracing_moves_to_tvk():
    """Hugging Face's sliding-window caches make `torch.tensor(window)` while Dynamo traces and move it to
    the model's device: torch's fake mode folds that move on the real constant, and a tvk result could not
    be its constant (an AssertionError stopped Gemma 2 under torch.compile with use_cache=True)."""

    class Window(nn.Module):
        def forward(self, x):
            window = torch.tensor(3, dtype=torch.long).to(x.device)
            positions = torch.arange(x.shape[-1], device=x.device)
            return torch.where(positions < window, x, -x).sum(-1)

    torch._dynamo.reset()
    try:
        x = torch.randn(2, 5)
        got = torch.compile(Window(), backend="tvk")(x.to("tvk"))
        torch.testing.assert_close(got.cpu(), Window()(x))
    finally:
        torch._dynamo.reset()
