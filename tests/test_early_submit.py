"""Early submit (tvk_kernels/runtime/stream.py): the stream hands recorded kernels to an idle GPU
every `early_submit` dispatches so the GPU works while Python records. Where the submits fall
must never change a result: a training step gives the same numbers with a submit after every
kernel, at the default, and only at sync points."""
import pytest
import torch

import torchvk  # noqa: F401
from tvk_kernels import get_device


def _train_steps(steps: int = 3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(8, 12), torch.randint(0, 4, (8,))
    model = model.to("tvk")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x.to("tvk")), y.to("tvk"))
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses).cpu(), [p.detach().cpu() for p in model.parameters()]


def _reference(steps: int = 3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(8, 12), torch.randint(0, 4, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses), list(model.parameters())


@pytest.fixture
def stream():
    s = get_device(0).stream
    saved = s.early_submit
    yield s
    s.early_submit = saved


def test_results_do_not_depend_on_where_submits_fall(stream):
    _train_steps(1)  # its pipelines built: while a build is pending the stream holds commands, never submitting early
    results = {}
    for every in (1, 16, 0):  # after each kernel, the default, never (sync points only)
        stream.early_submit = every
        before = stream.early_submits
        results[every] = _train_steps()
        if every == 1:  # the GPU is idle after each tiny kernel: the stream must have submitted early
            assert stream.early_submits > before
        if every == 0:
            assert stream.early_submits == before
    want_losses, want_params = _reference()
    for losses, params in results.values():
        torch.testing.assert_close(losses, want_losses.detach(), rtol=1e-5, atol=1e-6)
        for got, want in zip(params, want_params):
            torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)
    base_losses, base_params = results[0]
    for losses, params in (results[1], results[16]):
        assert torch.equal(losses, base_losses)  # the same kernels in the same order: bit-identical
        assert all(torch.equal(a, b) for a, b in zip(params, base_params))


def test_a_busy_gpu_is_not_fed_early(stream, monkeypatch):
    """While the last submitted work still runs, recording goes on into the open command buffer."""
    x = torch.randn(16, 16)
    t = x.to("tvk")
    ((t + 1) * 2).relu() @ t - 1  # the kernels' pipelines built first: a pending build holds commands
    get_device(0).synchronize()
    stream.early_submit = 1
    monkeypatch.setattr(stream, "_gpu_idle", lambda: False)
    submits = stream.submits
    y = ((t + 1) * 2).relu() @ t
    assert stream.submits == submits  # four kernels recorded, none submitted
    monkeypatch.setattr(stream, "_gpu_idle", lambda: True)
    z = y - 1
    assert stream.submits == submits + 1  # idle: the open command buffer goes at the next kernel
    torch.testing.assert_close(z.cpu(), ((x + 1) * 2).relu() @ x - 1, rtol=1e-5, atol=1e-5)
