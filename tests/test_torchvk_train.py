"""Whole training steps on tvk match torch CPU, with no op on the CPU."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchvk


def _train(model, opt, batches, device, clip=None):
    losses = []
    model.train()
    for x, y in batches:
        x, y = x.to(device), y.to(device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return losses


def _pair(make, opt_cpu, opt_tvk, batches, clip=None):
    torch.manual_seed(0)
    cpu = make()
    tvk = make()
    tvk.load_state_dict(cpu.state_dict())
    tvk.to("tvk")
    torchvk.reset_op_counts()
    lt = _train(tvk, opt_tvk(tvk.parameters()), batches, "tvk", clip)
    counts = torchvk.op_counts()
    lc = _train(cpu, opt_cpu(cpu.parameters()), batches, "cpu", clip)
    return lc, lt, counts, cpu, tvk


def _batches(n, shape, classes, batch=8):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, *shape, generator=g), torch.randint(0, classes, (batch,), generator=g))
            for _ in range(n)]


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(28, 33), nn.ReLU(), nn.Linear(33, 17), nn.GELU(), nn.Linear(17, 5))


def cnn():
    return nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 8, 3, padding=1), nn.ReLU(), nn.AvgPool2d(2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


@pytest.mark.parametrize("opt", ["sgd", "adam", "torchvk_sgd", "torchvk_adamw"])
def test_mlp_matches_cpu(opt):
    makers = {
        "sgd": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
        "adam": (lambda p: torch.optim.Adam(p, lr=1e-2), lambda p: torch.optim.Adam(p, lr=1e-2)),
        "torchvk_sgd": (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3),
                        lambda p: torchvk.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-3)),
        "torchvk_adamw": (lambda p: torch.optim.AdamW(p, lr=1e-2), lambda p: torchvk.optim.AdamW(p, lr=1e-2)),
    }
    oc, ot = makers[opt]
    lc, lt, counts, cpu, tvk = _pair(mlp, oc, ot, _batches(4, (4, 7), 5), clip=1.0)
    assert counts["cpu"] == {}, counts["cpu"]
    torch.testing.assert_close(torch.tensor(lt), torch.tensor(lc), rtol=1e-4, atol=1e-5)
    for (n, a), b in zip(cpu.state_dict().items(), tvk.state_dict().values()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-3, atol=1e-5, msg=n)


def test_cnn_matches_cpu():
    lc, lt, counts, cpu, tvk = _pair(cnn, lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                                     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
                                     _batches(3, (3, 8, 8), 4))
    assert counts["cpu"] == {}, counts["cpu"]
    assert counts["vulkan"]["aten.convolution.default"] == 6
    assert counts["vulkan"]["aten.convolution_backward.default"] == 6
    torch.testing.assert_close(torch.tensor(lt), torch.tensor(lc), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(tvk[1].running_var.cpu(), cpu[1].running_var, rtol=1e-4, atol=1e-5)
    cpu.eval(), tvk.eval()
    x = torch.randn(2, 3, 8, 8)
    torch.testing.assert_close(tvk(x.to("tvk")).cpu(), cpu(x).detach(), rtol=1e-4, atol=1e-4)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        B, T, D = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D // self.heads)
        mask = torch.ones(T, T, device=x.device).tril() == 0
        att = self.drop(att.masked_fill(mask, float("-inf")).softmax(-1))
        y = (att @ v).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab=13, d=16, heads=2, ctx=8):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.block = Block(d, heads)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        return self.head(self.ln(self.block(x)))


def test_tiny_transformer_trains():
    torch.manual_seed(0)
    model = TinyGPT().to("tvk")
    opt = torchvk.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randint(0, 13, (4, 9))
    x, y = data[:, :-1].to("tvk"), data[:, 1:].to("tvk")
    torchvk.reset_op_counts()
    losses = []
    for _ in range(8):
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, 13), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    assert torchvk.op_counts()["cpu"] == {}
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0] - 0.3, losses
    # eval mode (no dropout) matches the same weights on CPU
    model.eval()
    cpu = TinyGPT()
    cpu.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    cpu.eval()
    torch.testing.assert_close(model(x).cpu(), cpu(x.cpu()).detach(), rtol=1e-4, atol=1e-4)


def test_backward_runs_on_the_calling_thread_and_matches_cpu():
    """TVKTensor.backward keeps the engine on the caller's thread (no device-thread round trip)."""
    import threading

    torch.manual_seed(0)
    w_cpu = torch.randn(8, 4, requires_grad=True)
    x_cpu = torch.randn(5, 8)
    w = w_cpu.detach().to("tvk").requires_grad_()
    h = torch.tanh(x_cpu.to("tvk") @ w)
    threads = []
    h.register_hook(lambda g: threads.append(threading.current_thread()))
    (h * h).sum().backward()
    assert threads == [threading.main_thread()]
    (torch.tanh(x_cpu @ w_cpu) ** 2).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad, rtol=1e-5, atol=1e-5)
