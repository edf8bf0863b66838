"""nn.LSTM / nn.GRU layers (torchvk/aten/rnn_layers.py): the whole-sequence path matches torch's
step-by-step path and the CPU, runs a fixed number of kernels per layer direction whatever the
sequence length (tvk_kernels.kernels.rnn_sequence), and hands the cases it does not cover
(projections) to torch's path. test_rnn.py covers the layer options."""
import copy
import functools

import pytest
import torch
from rdna1_check import assert_fits_rdna1, navi10_stats

import torchvk
from torchvk.aten import rnn_layers
from tvk_kernels import get_device
from tvk_kernels.kernels import rnn_sequence

I, H, B, T = 3, 5, 2, 6


def _run(mod, x, h):
    """(outputs, input/state/parameter grads, kernel dispatches) of one forward and backward."""
    stream = get_device().stream
    x = x.detach().to("tvk").requires_grad_()
    h = tuple(t.detach().to("tvk").requires_grad_() for t in h)
    mod.zero_grad()
    before = stream.total_dispatches
    out, hn = mod(x, h if len(h) == 2 else h[0])
    flat = [out, *(hn if isinstance(hn, tuple) else (hn,))]
    loss = sum((t * torch.linspace(-1, 1, t.numel(), device="tvk").view(t.shape)).sum() for t in flat)
    loss.backward()
    torch.tvk.synchronize()
    n = stream.total_dispatches - before
    grads = [x.grad, *(t.grad for t in h), *(p.grad for p in mod.parameters())]
    return [t.detach().cpu() for t in flat], [g.cpu() for g in grads], n


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_sequence_path_matches_torch_path_and_cpu_with_kernels_independent_of_length(name, monkeypatch):
    torch.manual_seed(0)
    cpu = getattr(torch.nn, name)(I, H, num_layers=2, bidirectional=True, batch_first=True)
    dev = getattr(torch.nn, name)(I, H, num_layers=2, bidirectional=True, batch_first=True)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("tvk")
    x = torch.randn(B, T, I)
    h = (torch.randn(4, B, H), torch.randn(4, B, H)) if name == "LSTM" else (torch.randn(4, B, H),)
    calls = []
    real = rnn_layers._Recurrence.forward
    monkeypatch.setattr(rnn_layers._Recurrence, "forward", staticmethod(
        lambda ctx, *a: calls.append(a[0]) or real(ctx, *a)))
    torchvk.reset_op_counts()
    outs, grads, fast = _run(dev, x, h)
    assert len(calls) == 4 and torchvk.op_counts()["cpu"] == {}  # 2 layers x 2 directions
    monkeypatch.setattr(rnn_layers, "_fast", lambda *a: False)
    ref_outs, ref_grads, slow = _run(dev, x, h)
    ref_cpu = _run_cpu(cpu, x, h)
    for got, want, cpu_want in zip(outs + grads, ref_outs + ref_grads, ref_cpu):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(got, cpu_want, atol=1e-5, rtol=1e-4)
    monkeypatch.undo()
    _, _, twice_as_long = _run(dev, torch.randn(B, 2 * T, I), h)
    assert fast == twice_as_long and fast < 0.2 * slow, (fast, twice_as_long, slow)  # torch's: ~35 a step


def _run_cpu(mod, x, h):
    x = x.clone().requires_grad_()
    h = tuple(t.clone().requires_grad_() for t in h)
    out, hn = mod(x, h if len(h) == 2 else h[0])
    flat = [out, *(hn if isinstance(hn, tuple) else (hn,))]
    sum((t * torch.linspace(-1, 1, t.numel()).view(t.shape)).sum() for t in flat).backward()
    return [t.detach() for t in flat] + [x.grad, *(t.grad for t in h), *(p.grad for p in mod.parameters())]


def test_projection_and_inference_without_grad(monkeypatch):
    """proj_size keeps torch's path (and matches the CPU); a no-grad forward takes the sequence path."""
    torch.manual_seed(1)
    cpu = torch.nn.LSTM(I, H, proj_size=2)
    dev = torch.nn.LSTM(I, H, proj_size=2)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("tvk")
    calls = []
    real = rnn_layers._Recurrence.forward
    monkeypatch.setattr(rnn_layers._Recurrence, "forward", staticmethod(
        lambda ctx, *a: calls.append(a[0]) or real(ctx, *a)))
    x = torch.randn(T, B, I)
    torch.testing.assert_close(dev(x.to("tvk"))[0].detach().cpu(), cpu(x)[0].detach(), atol=1e-5, rtol=1e-4)
    assert calls == []
    gru_cpu = torch.nn.GRU(I, H)
    gru = torch.nn.GRU(I, H)
    gru.load_state_dict(gru_cpu.state_dict())
    with torch.no_grad():
        got = gru.to("tvk")(x.to("tvk"))[0].cpu()
    torch.testing.assert_close(got, gru_cpu(x)[0].detach(), atol=1e-5, rtol=1e-4)
    assert calls == ["gru"]


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_torchvk_compile_traces_the_sequence_path(name, monkeypatch):
    """torchvk.compile of a 2-layer bidirectional classifier traces the same layers (GRU's cells
    through the meta kernels of aten/rnn.py) and trains like eager."""
    import torch.nn.functional as F

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, name)(I, H, num_layers=2, bidirectional=True, batch_first=True)
            self.head = torch.nn.Linear(2 * H, 3)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    torch.manual_seed(2)
    eager = Net()
    compiled = Net()
    compiled.load_state_dict(eager.state_dict())
    eager, compiled = eager.to("tvk"), compiled.to("tvk")
    calls = []
    real = rnn_layers._Recurrence.forward
    monkeypatch.setattr(rnn_layers._Recurrence, "forward", staticmethod(
        lambda ctx, *a: calls.append(a[0]) or real(ctx, *a)))
    x, y = torch.randn(B, T, I).to("tvk"), torch.tensor([0, 2]).to("tvk")
    step = torchvk.compile(compiled, loss_fn=F.cross_entropy)
    torchvk.reset_op_counts()
    traced = 0
    for _ in range(2):  # trace, then replay
        before = len(calls)
        loss = step(x, y)
        loss.backward()
        traced += len(calls) - before
        ref = F.cross_entropy(eager(x), y)
        ref.backward()
        torch.testing.assert_close(loss.detach().cpu(), ref.detach().cpu(), atol=1e-5, rtol=1e-4)
        for p, q in zip(compiled.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), atol=1e-5, rtol=1e-4)
    assert traced >= 4 and set(calls) == {name.lower()}  # the 4 layer-directions were traced
    assert torchvk.op_counts()["cpu"] == {}


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_compiled_step_runs_the_whole_sequence_kernels(name):
    """The traced graph holds the layers' tvk::rnn_sequence ops: a compiled training step launches
    as many kernels for 2T steps as for T, and trains like eager at both lengths."""
    import torch.nn.functional as F

    stream = get_device().stream
    torch.manual_seed(3)
    eager = getattr(torch.nn, name)(I, H, batch_first=True).to("tvk")
    compiled = getattr(torch.nn, name)(I, H, batch_first=True).to("tvk")
    compiled.load_state_dict(eager.state_dict())
    step = torchvk.compile(compiled, loss_fn=lambda out, y: F.mse_loss(out[0], y))
    counts = []
    for steps in (T, 2 * T):
        x, y = torch.randn(B, steps, I).to("tvk"), torch.randn(B, steps, H).to("tvk")
        for _ in range(2):  # trace, then replay (counted)
            compiled.zero_grad()
            eager.zero_grad()
            before = stream.total_dispatches
            loss = step(x, y)
            loss.backward()
            torch.tvk.synchronize()
            n = stream.total_dispatches - before
            ref = F.mse_loss(eager(x)[0], y)
            ref.backward()
            torch.testing.assert_close(loss.detach().cpu(), ref.detach().cpu(), atol=1e-5, rtol=1e-4)
            for p, q in zip(compiled.parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), atol=1e-5, rtol=1e-4)
        counts.append(n)
    assert counts[0] == counts[1], counts


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_packed_sequences_take_the_sequence_path(name, monkeypatch):
    """Unsorted lengths, 2 layers, both directions, initial states: each step runs the rows still
    running, and outputs, final states (each sequence's own last step) and grads match the CPU."""
    torch.manual_seed(3)
    cpu = getattr(torch.nn, name)(I, H, num_layers=2, bidirectional=True)
    dev = getattr(torch.nn, name)(I, H, num_layers=2, bidirectional=True)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("tvk")
    x, lengths = torch.randn(T, 4, I), torch.tensor([3, 6, 1, 4])
    h = (torch.randn(4, 4, H), torch.randn(4, 4, H)) if name == "LSTM" else (torch.randn(4, 4, H),)
    calls = []
    real = rnn_layers._Recurrence.forward
    monkeypatch.setattr(rnn_layers._Recurrence, "forward", staticmethod(
        lambda ctx, *a: calls.append(a[0]) or real(ctx, *a)))
    torchvk.reset_op_counts()
    got = _run_packed(dev, "tvk", x, lengths, h)
    assert len(calls) == 4 and torchvk.op_counts()["cpu"] == {}
    for g, want in zip(got, _run_packed(cpu, "cpu", x, lengths, h)):
        torch.testing.assert_close(g, want, atol=1e-5, rtol=1e-4)


def _run_packed(mod, device, x, lengths, h):
    """Outputs, final states and all grads of a packed sequence of padded x (T, B, I) with these lengths."""
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    xs = x.to(device).requires_grad_()
    hs = tuple(t.to(device).requires_grad_() for t in h)
    mod.zero_grad()
    out, hn = mod(pack_padded_sequence(xs, lengths, enforce_sorted=False), hs if len(hs) == 2 else hs[0])
    flat = [pad_packed_sequence(out)[0], *(hn if isinstance(hn, tuple) else (hn,))]
    sum((t * torch.linspace(-1, 1, t.numel(), device=device).view(t.shape)).sum() for t in flat).backward()
    return [t.detach().cpu() for t in flat] + [xs.grad.cpu(), *(t.grad.cpu() for t in hs),
                                               *(p.grad.cpu() for p in mod.parameters())]


def _matches_cpu(make, x, h=None):
    """Outputs, input and parameter grads of `make()` on tvk against the CPU."""
    torch.manual_seed(4)
    cpu = make()
    dev = make()
    dev.load_state_dict(cpu.state_dict())
    results = []
    for mod, device in ((cpu, "cpu"), (dev.to("tvk"), "tvk")):
        xs = x.detach().clone().to(device).requires_grad_()
        state = None if h is None else tuple(t.to(device) for t in h) if isinstance(h, tuple) else h.to(device)
        out, hn = mod(xs) if state is None else mod(xs, state)
        (1.3 * out.sum() + sum(t.sum() for t in (hn if isinstance(hn, tuple) else (hn,)))).backward()
        results.append([out.detach().cpu(), xs.grad.cpu(), *(p.grad.cpu() for p in mod.parameters())])
    for want, got in zip(*results):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("make, x, h", [
    (lambda: torch.nn.LSTM(I, H, num_layers=3, bias=False), torch.randn(T, B, I), None),
    (lambda: torch.nn.GRU(I, 1), torch.randn(1, 1, I), None),  # one step, one row, hidden size 1
    (lambda: torch.nn.GRU(I, H, batch_first=True, bidirectional=True), torch.randn(T, 3, I).transpose(0, 1), None),
    (lambda: torch.nn.LSTM(I, H), torch.randn(T, B, I), (torch.zeros(1, 1, H).expand(1, B, H), torch.randn(1, B, H))),
    (lambda: torch.nn.LSTM(I, H), torch.randn(T, I), None),  # unbatched
], ids=["no-bias-3-layers", "one-step", "strided-input", "expanded-h0", "unbatched"])
def test_layer_options_match_cpu(make, x, h):
    _matches_cpu(make, x, h)


def test_frozen_weights_and_a_clear_error_for_double_backward():
    lstm = torch.nn.LSTM(I, H).to("tvk")
    for p in lstm.parameters():
        p.requires_grad_(False)
    x = torch.randn(T, B, I, device="tvk", requires_grad=True)
    lstm(x)[0].sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad.cpu()).all()
    for p in lstm.parameters():
        p.requires_grad_(True)
    with pytest.raises(RuntimeError, match="cannot be differentiated again"):  # not a silently partial result
        torch.autograd.grad(lstm(x)[0].sum(), x, create_graph=True)
    assert torch.isfinite(torch.autograd.grad(lstm(x)[0].sum(), x)[0].cpu()).all()  # still usable


def _kernel_params(monkeypatch, params):
    """Run the whole-sequence kernels with these explicit parameters; returns the list their
    launches append their kind to."""
    launched = []
    for name in ("forward", "backward"):
        real = getattr(rnn_sequence, name)
        monkeypatch.setattr(rnn_sequence, name, functools.partial(
            lambda real, device, kind, *a, **k: launched.append(kind) or real(device, kind, *a, **k), real,
            params=params))
    return launched


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
@pytest.mark.parametrize("hidden, batch, steps, layers, options, params", [
    (7, 1, 1, 1, {}, None),  # one row, one step, H below a subgroup
    # a half-empty workgroup, 2 invocations a unit (KS)
    (33, 3, 4, 2, {"bidirectional": True, "batch_first": True}, {"WG": 128, "ROWS": 2}),
    (70, 2, 3, 1, {"bias": False}, {"WG": 32, "ROWS": 1}),  # 3 units an invocation, no biases
    (9, 5, 3, 1, {"bidirectional": True}, {"WG": 256, "ROWS": 4}),  # 8 invocations a unit, most idle
], ids=["H7-B1-T1", "H33-bidir-batch-first", "H70-units-no-bias", "H9-rows4-KS8"])
def test_whole_sequence_kernels_match_cpu(name, hidden, batch, steps, layers, options, params, monkeypatch):
    """Outputs, h_n / c_n and the grads of input, h0, c0, every weight and bias (the loss weighs
    outputs and final states, so d_hn / d_cn flow too) against the CPU."""
    launched = _kernel_params(monkeypatch, params)
    torch.manual_seed(5)
    cpu = getattr(torch.nn, name)(I, hidden, num_layers=layers, **options)
    dev = getattr(torch.nn, name)(I, hidden, num_layers=layers, **options)
    dev.load_state_dict(cpu.state_dict())
    dev = dev.to("tvk")
    first = options.get("batch_first", False)
    x = torch.randn(batch, steps, I) if first else torch.randn(steps, batch, I)
    n = layers * (2 if options.get("bidirectional") else 1)
    h = tuple(torch.randn(n, batch, hidden) for _ in range(2 if name == "LSTM" else 1))
    outs, grads, _ = _run(dev, x, h)
    for got, want in zip(outs + grads, _run_cpu(cpu, x, h)):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert launched == [name.lower()] * (2 * n)  # a forward and a backward kernel per layer direction


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_whole_sequence_kernels_of_packed_sequences_match_cpu(name, monkeypatch):
    """Unequal lengths, both directions, H not a power of two, two rows a workgroup (one group
    with a finished and a running sequence): per row only its own steps, h_n after its last."""
    launched = _kernel_params(monkeypatch, {"WG": 32, "ROWS": 2})
    torch.manual_seed(6)
    cpu = getattr(torch.nn, name)(I, 33, bidirectional=True)
    dev = getattr(torch.nn, name)(I, 33, bidirectional=True)
    dev.load_state_dict(cpu.state_dict())
    x, lengths = torch.randn(5, 3, I), torch.tensor([2, 5, 1])
    h = tuple(torch.randn(2, 3, 33) for _ in range(2 if name == "LSTM" else 1))
    got = _run_packed(dev.to("tvk"), "tvk", x, lengths, h)
    for g, want in zip(got, _run_packed(cpu, "cpu", x, lengths, h)):
        torch.testing.assert_close(g, want, atol=1e-5, rtol=1e-4)
    assert launched == [name.lower()] * 4


def test_hidden_sizes_beyond_shared_memory_keep_the_per_step_kernels(monkeypatch):
    """An LSTM's backward keeps 4 gates of a row in 32 KiB of shared memory: H <= 2048 (GRU's 3
    gates: the same power-of-two capacity). Larger layers run step by step, still correct."""
    device = get_device()
    if device.facts.max_shared_memory < 32768:
        pytest.skip("a device with less than 32 KiB of shared memory")
    assert rnn_sequence.supports(device, "lstm", 2048, 1) and not rnn_sequence.supports(device, "lstm", 2049, 1)
    assert rnn_sequence.supports(device, "gru", 2048, 1) and not rnn_sequence.supports(device, "gru", 2049, 1)
    with pytest.raises(ValueError, match="per-step kernels"):
        rnn_sequence.forward(device, "lstm", *[1] * 11, 1, 1, 4096, False)
    monkeypatch.setattr(rnn_sequence, "supports", lambda *a: False)  # as for a large H, at a test's size
    launched = _kernel_params(monkeypatch, None)
    _matches_cpu(lambda: torch.nn.LSTM(I, H, bidirectional=True), torch.randn(T, B, I))
    assert launched == []


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_long_sequences_match_cpu(name):
    """1000 steps of H 128, forward and backward: past llvmpipe's loop budget for the whole-sequence
    kernel (its loops end, silently, after 65535 iterations an invocation: the layer then runs
    step by step there); one kernel a direction on a device without one."""
    torch.manual_seed(0)
    cpu = getattr(torch.nn, name)(4, 128)
    x = torch.randn(1000, 1, 4)
    dev = copy.deepcopy(cpu).to("tvk")
    xt = x.to("tvk").requires_grad_()
    x.requires_grad_()
    cpu(x)[0].square().sum().backward()
    dev(xt)[0].square().sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(dev.weight_hh_l0.grad.cpu(), cpu.weight_hh_l0.grad, atol=1e-3, rtol=1e-3)
    budget = get_device().facts.max_loop_iterations
    wg = rnn_sequence.family(get_device(), rnn_sequence.RnnSequence).resolve({"H": 128})["WG"]
    fits = not budget or rnn_sequence.loop_iterations(name.lower(), True, 128, 1000, wg) <= budget
    assert rnn_sequence.supports(get_device(), name.lower(), 128, 1000) == fits


def test_explicit_kernel_params_are_checked():
    """WG / KS invocations take a unit a pass: a WG that is not a power of two would leave
    invocations without one; a clear error, nothing launched, the runtime still usable."""
    from tvk_kernels import InvalidConfigError

    device = get_device()
    buf = device.allocator.alloc(256)
    for params, word in (({"WG": 48, "ROWS": 1}, "WG=48 must be a power of two"), ({"WG": 64, "ROWS": 0}, "ROWS=0")):
        with pytest.raises(InvalidConfigError, match=word):
            rnn_sequence.forward(device, "lstm", *[buf] * 11, 1, 1, 4, False, params=params)
    device.synchronize()
    buf.free()
    _matches_cpu(lambda: torch.nn.GRU(I, H), torch.randn(T, B, I))


_RDNA1 = """
import json
from tvk_kernels import get_device
from tvk_kernels.config import default_params
from tvk_kernels.kernels import rnn_sequence as rnn_sequence_kernels
from tvk_kernels.search_space import search_space, with_derived
dev = get_device(0)
space = search_space("rnn_sequence")
stats = {}
for bucket, hidden in (("small", 128), ("large", 2048)):
    prm = with_derived(space, default_params("rnn_sequence", dev.facts, bucket))
    for top in (prm, {**prm, "ROWS": 8}):  # the default and the largest rows of the search space
        for kind in rnn_sequence_kernels.KINDS:
            for backward in (False, True):
                defines, wg, shared = rnn_sequence_kernels.plan(dev, kind, backward, hidden, 64, top)
                pipe = dev.pipelines.get(rnn_sequence_kernels.RnnSequence.template, defines, local_size=(wg, 1, 1),
                                         push_size=rnn_sequence_kernels._PUSH.size, shared_bytes=shared, capture_stats=True)
                stats[f"{kind} backward={backward} H={hidden} {defines}"] = {**pipe.stats, "params": top}
print(json.dumps(stats))
"""


def test_whole_sequence_kernels_compile_for_rdna1_without_spills(tmp_path):
    """Both kinds and directions at each bucket's default and at 8 rows a workgroup, by RDNA1's
    own compiler (Mesa's null Navi 10): no spills, within 32 KiB of shared memory."""
    stats = navi10_stats(_RDNA1, tmp_path)
    assert len(stats) >= 12, sorted(stats)
    assert_fits_rdna1(stats)


@pytest.mark.parametrize("name", ["LSTM", "GRU"])
def test_retain_graph_runs_the_backward_twice(name):
    """The forward's saved steps stay for a second backward with retain_graph=True; without it
    torch's own error, not a crash."""
    mod = getattr(torch.nn, name)(I, H).to("tvk")
    x = torch.randn(T, B, I, device="tvk", requires_grad=True)
    loss = mod(x)[0].sum()
    first = torch.autograd.grad(loss, x, retain_graph=True)[0].cpu()
    torch.testing.assert_close(torch.autograd.grad(loss, x)[0].cpu(), first, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        torch.autograd.grad(loss, x)
