"""torchvk.graph(): a whole training step captured once and replayed gives eager's losses."""
import pytest
import torch
import torch.nn.functional as F

import torchvk
from torchvk.experiments import models


def _train(model_name, shape, mode, steps=4):
    torch.manual_seed(0)
    xs = [torch.randn(*shape) for _ in range(steps)]
    ys = [torch.randint(0, 10, (shape[0],)) for _ in range(steps)]
    model = models.build(model_name).to("tvk")
    if model_name == "cnn":
        model.eval()  # dropout would replay the same mask: compare deterministic steps
    opt = torchvk.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.empty(*shape, device="tvk")
    y = torch.empty(shape[0], dtype=torch.int64, device="tvk")

    def step():
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    x.copy_(xs[0].to("tvk"))
    y.copy_(ys[0].to("tvk"))
    losses = [step().item()]
    if mode == "eager":
        for i in range(1, steps):
            x.copy_(xs[i].to("tvk"))
            y.copy_(ys[i].to("tvk"))
            losses.append(step().item())
        return losses
    with torchvk.graph() as g:
        loss = step()
    for i in range(1, steps):
        x.copy_(xs[i].to("tvk"))
        y.copy_(ys[i].to("tvk"))
        g.replay()
        losses.append(loss.item())
    assert g.replays == steps - 1
    return losses


@pytest.mark.parametrize("model_name,shape", [("mlp", (16, 1, 28, 28)), ("cnn", (4, 1, 28, 28))])
def test_replayed_step_matches_eager(model_name, shape):
    eager = _train(model_name, shape, "eager")
    replayed = _train(model_name, shape, "graph")
    assert replayed == pytest.approx(eager, rel=1e-5, abs=1e-6)
    assert len(set(round(v, 6) for v in eager)) > 1  # the data changed between steps


def test_item_inside_capture_raises_and_runtime_recovers():
    x = torch.ones(4, device="tvk")
    with pytest.raises(RuntimeError, match="inside a graph capture"):
        with torchvk.graph():
            (x * 2).sum().item()
    assert (x + 1).sum().item() == 8.0
