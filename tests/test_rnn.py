"""nn.LSTM / GRU / RNN and their cells on tvk, forward and backward, against torch CPU autograd,
with no op on the CPU. torch's own RNN code runs the layers; the fused gate kernels
(templates/rnn_cell.comp via torchvk/aten/rnn.py) run each LSTM / GRU step."""

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import torchvk
from rdna1_check import assert_fits_rdna1, navi10_stats

TOL = dict(atol=1e-5, rtol=1e-4)
I, H, B, T = 3, 4, 2, 4


def _pair(make):
    torch.manual_seed(0)
    cpu = make()
    dev = make()
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to("tvk")


def _leaf(t, device):
    return t.detach().to(device).requires_grad_()


def _states(kind, layers_dirs, batch):
    h0 = torch.randn(layers_dirs, batch, H)
    return (h0, torch.randn(layers_dirs, batch, H)) if kind == "LSTM" else h0


def _flat(x):
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _flat(y)]
    return [x]


def _loss(out):
    """A loss that gives every output a different gradient."""
    return sum((t * torch.linspace(-1, 1, t.numel(), device=t.device).view(t.shape)).sum() for t in _flat(out))


def _compare(cpu_mod, dev_mod, cpu_args):
    """Forward, then the grads of every input and parameter, tvk against CPU; no CPU op on tvk."""
    dev_args = [None if a is None else tuple(_leaf(t, "tvk") for t in a) if isinstance(a, tuple)
                else _leaf(a, "tvk") for a in cpu_args]
    cpu_args = [None if a is None else tuple(_leaf(t, "cpu") for t in a) if isinstance(a, tuple)
                else _leaf(a, "cpu") for a in cpu_args]
    torchvk.reset_op_counts()
    ref, got = cpu_mod(*cpu_args), dev_mod(*dev_args)
    for r, g in zip(_flat(ref), _flat(got)):
        torch.testing.assert_close(g.cpu(), r.detach(), **TOL)
    _loss(ref).backward()
    _loss(got).backward()
    for r, g in zip(_flat(cpu_args) + list(cpu_mod.parameters()), _flat(dev_args) + list(dev_mod.parameters())):
        if r is not None:
            torch.testing.assert_close(g.grad.cpu(), r.grad, **TOL)
    assert torchvk.op_counts()["cpu"] == {}


MODULES = {
    "LSTM": lambda **k: torch.nn.LSTM(I, H, **k),
    "GRU": lambda **k: torch.nn.GRU(I, H, **k),
    "RNN_tanh": lambda **k: torch.nn.RNN(I, H, **k),
    "RNN_relu": lambda **k: torch.nn.RNN(I, H, nonlinearity="relu", **k),
}


@pytest.mark.parametrize("name", list(MODULES))
def test_two_layer_bidirectional_batch_first_with_initial_state(name):
    cpu, dev = _pair(lambda: MODULES[name](num_layers=2, bidirectional=True, batch_first=True))
    _compare(cpu, dev, [torch.randn(B, T, I), _states(name.split("_")[0], 4, B)])


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_no_initial_state_no_bias_unbatched(name):
    cpu, dev = _pair(lambda: MODULES[name](bias=False))
    _compare(cpu, dev, [torch.randn(T, B, I)])
    _compare(cpu, dev, [torch.randn(T, I)])  # an unbatched sequence


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_packed_sequences(name):
    cpu, dev = _pair(lambda: MODULES[name](num_layers=2, bidirectional=True))
    x, lengths = torch.randn(T, 3, I), torch.tensor([4, 2, 3])

    class Packed(torch.nn.Module):
        def __init__(self, rnn):
            super().__init__()
            self.rnn = rnn

        def forward(self, x):
            out, state = self.rnn(pack_padded_sequence(x, lengths, enforce_sorted=False))
            return pad_packed_sequence(out)[0], state

    _compare(Packed(cpu), Packed(dev), [x])


@pytest.mark.parametrize("cell, state", [("LSTMCell", True), ("LSTMCell", False), ("GRUCell", True),
                                         ("GRUCell", False), ("RNNCell", True)])
def test_cells(cell, state):
    cpu, dev = _pair(lambda: getattr(torch.nn, cell)(I, H))
    h = (torch.randn(B, H), torch.randn(B, H)) if cell == "LSTMCell" else torch.randn(B, H)
    _compare(cpu, dev, [torch.randn(B, I)] + ([h] if state else []))


def test_dropout_between_layers_in_train_mode():
    """The dropout mask differs from the CPU's, so: it runs on tvk with grads, drops something
    in train mode, and eval mode (no dropout) matches the CPU."""
    cpu, dev = _pair(lambda: torch.nn.LSTM(I, H, num_layers=2, dropout=0.5))
    x = torch.randn(T, B, I)
    torchvk.reset_op_counts()
    xd = _leaf(x, "tvk")
    train_out = dev(xd)[0]
    train_out.sum().backward()
    assert torch.isfinite(xd.grad.cpu()).all() and xd.grad.abs().sum().item() > 0
    assert torchvk.op_counts()["cpu"] == {}
    dev.eval()
    cpu.eval()
    eval_out = dev(x.to("tvk"))[0]
    assert not torch.allclose(train_out.detach().cpu(), eval_out.cpu())
    torch.testing.assert_close(eval_out.cpu(), cpu(x)[0].detach(), **TOL)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_sgd_steps_match_cpu(name):
    """A sequence classifier (2-layer bidirectional, batch_first) trained two SGD steps:
    the losses equal the CPU's."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = MODULES[name](num_layers=2, bidirectional=True, batch_first=True)
            self.head = torch.nn.Linear(2 * H, 3)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    cpu, dev = _pair(Net)
    x, y = torch.randn(B, T, I), torch.tensor([0, 2])
    losses = {}
    torchvk.reset_op_counts()
    for net, where in ((cpu, "cpu"), (dev, "tvk")):
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        losses[where] = []
        for _ in range(2):
            loss = F.cross_entropy(net(x.to(where)), y.to(where))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses[where].append(loss.item())
    assert torchvk.op_counts()["cpu"] == {}
    torch.testing.assert_close(torch.tensor(losses["tvk"]), torch.tensor(losses["cpu"]), **TOL)
    assert losses["cpu"][1] < losses["cpu"][0]


def test_torchvk_compile_traces_lstm():
    """torchvk.compile of an LSTM classifier with its loss: the traced graph (matmuls and gate
    math, no CPU-only mkldnn_rnn_layer) trains like eager."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(I, H, batch_first=True)
            self.head = torch.nn.Linear(H, 3)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    eager, compiled = (m.to("tvk") for m in _pair(Net))
    x, y = torch.randn(B, 2, I).to("tvk"), torch.tensor([0, 2]).to("tvk")
    closs = torchvk.compile(compiled, loss_fn=F.cross_entropy)
    torchvk.reset_op_counts()
    for _ in range(2):  # trace, then replay
        loss = closs(x, y)
        loss.backward()
        ref = F.cross_entropy(eager(x), y)
        ref.backward()
        torch.testing.assert_close(loss.detach().cpu(), ref.detach().cpu(), **TOL)
        for p, q in zip(compiled.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), **TOL)
    assert torchvk.op_counts()["cpu"] == {}


def test_fused_cells_refuse_bad_sizes():
    """The cells skip torch's meta check (it fails on absent biases), so they check sizes themselves:
    a short gate or bias tensor would be read past its end."""
    aten = torch.ops.aten
    g, c = torch.randn(2, 16).to("tvk"), torch.randn(2, 4).to("tvk")
    with pytest.raises(RuntimeError, match="hidden_gates has size"):
        aten._thnn_fused_lstm_cell(g, g[:, :12], c)
    with pytest.raises(RuntimeError, match="a bias has size"):
        aten._thnn_fused_lstm_cell(g, g, c, torch.randn(12).to("tvk"), torch.randn(12).to("tvk"))
    with pytest.raises(RuntimeError, match="both biases or neither"):
        aten._thnn_fused_lstm_cell(g, g, c, torch.randn(16).to("tvk"), None)
    with pytest.raises(RuntimeError, match="input_gates has size"):
        aten._thnn_fused_gru_cell(g[:, :12], g[:, :12], torch.randn(2, 5).to("tvk"))
    hy = aten._thnn_fused_lstm_cell(g, g, c)[0]  # and the runtime stays usable
    assert hy.shape == (2, 4) and torch.isfinite(hy.cpu()).all()


_STATS = """
import json
from tvk_kernels import get_device
from tvk_kernels.config import search_space
from tvk_kernels.kernels import rnn_cell as rnn_cell_kernels
dev = get_device(0)
stats = {}
for cell, code in rnn_cell_kernels.CELLS.items():
    for wg in search_space(rnn_cell_kernels.RnnCell.family)["params"]["WG"]["values"]:
        pipe = dev.pipelines.get(rnn_cell_kernels.RnnCell.template, {"CELL": code}, local_size=(wg, 1, 1), push_size=128,
                                 capture_stats=True)
        stats[f"{cell} WG={wg}"] = pipe.stats
print(json.dumps(stats))
"""


def test_cell_kernels_compile_for_rdna1_without_spills(tmp_path):
    """RDNA1's own compiler (Mesa's null Navi 10): no spills, no shared memory over AMD's 32 KiB."""
    stats = navi10_stats(_STATS, tmp_path)
    assert len(stats) == 4 * 4
    assert_fits_rdna1(stats)
