"""Custom ops (torch.library.custom_op, implemented once for every device in torch ops) run on tvk as on
CUDA: eagerly through their own Python, whose ops are ours, and inside compiled graphs (torch.compile and
torchvk.compile), where their Python may read tensor values on the host, so such a graph is never
replayed from a recording. Transformers' mixture-of-experts layers use one under compilation
(`transformers::grouped_mm_fallback`); the zoo's hf_mixtral trains in every mode against the CPU."""
import pytest
import torch

import torchvk


@torch.library.custom_op("tvk_tests::segment_scale", mutates_args=())
def segment_scale(x: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """Row segment i (ending at ends[i], read on the host) multiplied by i + 1: data-dependent Python."""
    out = torch.zeros_like(x)
    start = 0
    for i, end in enumerate(ends.tolist()):
        out[start:end] = x[start:end] * (i + 1)
        start = end
    return out


@segment_scale.register_fake
def _(x, ends):
    return torch.empty_like(x)


def _segment_scale_backward(ctx, grad):
    return segment_scale(grad, ctx.ends), None


def _save_ends(ctx, inputs, output):
    ctx.ends = inputs[1]


segment_scale.register_autograd(_segment_scale_backward, setup_context=_save_ends)


@torch.library.custom_op("tvk_tests::cpu_only", mutates_args=(), device_types="cpu")
def cpu_only(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@cpu_only.register_fake
def _(x):
    return torch.empty_like(x)


def _model(x, w, ends):
    return (segment_scale(x @ w, ends).tanh() * 2).sum(dim=1)


def _forward_backward(fn, x, w, ends, device):
    w = w.detach().to(device).requires_grad_()
    out = fn(x.to(device), w, ends.to(device))
    out.square().sum().backward()
    return out.detach().cpu(), w.grad.cpu()


def test_a_custom_op_runs_eagerly_on_tvk_through_its_own_python():
    torch.manual_seed(0)
    x, w = torch.randn(7, 5), torch.randn(5, 3)
    ends = torch.tensor([2, 2, 6, 7])
    torchvk.reset_op_counts()
    out, grad = _forward_backward(_model, x, w, ends, "tvk")
    assert torchvk.op_counts()["cpu"] == {}
    want_out, want_grad = _forward_backward(_model, x, w, ends, "cpu")
    torch.testing.assert_close(out, want_out)
    torch.testing.assert_close(grad, want_grad)


def test_a_custom_op_without_an_implementation_for_every_device_still_says_so():
    with pytest.raises(NotImplementedError, match="tvk_tests.cpu_only"):
        cpu_only(torch.ones(3).to("tvk"))


@pytest.mark.parametrize("compiler", ["torch.compile", "torchvk.compile"])
def test_a_compiled_graph_runs_a_custom_op_that_reads_values_anew_each_call(compiler):
    """The same compiled graph called with other segment ends (same shapes) gives their result, not a
    replay of the first call's: the op's Python reads the ends on every call."""
    torch.manual_seed(1)
    x, w = torch.randn(7, 5), torch.randn(5, 3)
    if compiler == "torch.compile":
        torch._dynamo.reset()
        compiled = torch.compile(_model, backend="tvk")
    else:
        class Model(torch.nn.Module):
            def forward(self, x, w, ends):
                return _model(x, w, ends)

        compiled = torchvk.compile(Model())
    try:
        for ends in ([2, 2, 6, 7], [1, 5, 7, 7], [7, 7, 7, 7], [0, 3, 4, 7]):
            ends = torch.tensor(ends)
            torchvk.reset_op_counts()
            out, grad = _forward_backward(compiled, x, w, ends, "tvk")
            assert torchvk.op_counts()["cpu"] == {}
            want_out, want_grad = _forward_backward(_model, x, w, ends, "cpu")
            # fused kernels round differently (tanh and its gradient in one); a replayed stale call would be off by O(1)
            torch.testing.assert_close(out, want_out, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(grad, want_grad, rtol=1e-3, atol=1e-4)
    finally:
        torch._dynamo.reset()


def test_our_own_ops_outside_aten_still_replay():
    """TorchVK's own ops (tvk::rnn_sequence_forward: a whole LSTM layer) are kernels of the op table, not custom
    ops run through their Python: a compiled graph holding them is still recorded and replayed."""
    model = torch.nn.LSTM(4, 8, batch_first=True).to("tvk")
    compiled = torchvk.compile(model)
    x = torch.randn(2, 5, 4).to("tvk")
    for _ in range(3):
        compiled(x)[0].sum().backward()
    stats = compiled.compile_stats()[0]
    assert stats["forward"]["replays"] >= 1 and stats["backward"]["replays"] >= 1, stats
