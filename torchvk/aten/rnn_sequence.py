"""tvk::rnn_sequence_forward / tvk::rnn_sequence_backward: the whole-sequence LSTM / GRU kernels
(tvk_kernels.kernels.rnn_sequence) as ops, so that eager mode and compiled mode's traced graphs
run the same two kernels per layer direction (aten/rnn_layers.py calls them from its autograd
Function; torchvk.compile and torch.compile trace them as graph nodes through their fake kernels).

forward(kind, proj, w_hh, b_ih, b_hh, h0, c0, steps, reverse) -> (out, saved, h_n, c_n)
    proj (..., G*H), rows = its leading dims (any layout: the kernels' copies make operands
    contiguous, so a traced graph assumes nothing of its strides): the input projection without biases, T steps of B rows, or a packed
    sequence's rows with `steps` an int32 tensor of sizes[T] then starts[T] (None: unpacked,
    T = rows / B). out (rows, H); saved (rows, S*H): what the backward reads; h_n, c_n (B, H):
    each row's state after its own last step (GRU: c_n is empty).
backward(kind, d_out, w_hh, saved, d_hn, d_cn, steps, reverse) -> (d_proj, d_hidden, d_h0, d_c0)
    d_out (..., H), rows = its leading dims, any layout;
    the grads of every step's gate pre-activations, input side (rows, G*H) and, GRU, hidden side
    (LSTM: the same grads; d_hidden is empty), and of h0 / c0 (GRU: d_c0 is empty).
"""
from __future__ import annotations

import torch

from tvk_kernels.kernels import rnn_sequence as rnn_sequence_kernels

from ..op_registry import register
from .._tensor import new_tensor
from ._util import addr, dev
from .copies import contig

_lib = torch.library.Library("tvk", "DEF")
_lib.define("rnn_sequence_forward(str kind, Tensor proj, Tensor w_hh, Tensor? b_ih, Tensor? b_hh, Tensor h0, "
            "Tensor? c0, Tensor? steps, bool reverse) -> (Tensor, Tensor, Tensor, Tensor)")
_lib.define("rnn_sequence_backward(str kind, Tensor d_out, Tensor w_hh, Tensor saved, Tensor d_hn, Tensor? d_cn, "
            "Tensor? steps, bool reverse) -> (Tensor, Tensor, Tensor, Tensor)")
forward = torch.ops.tvk.rnn_sequence_forward.default
backward = torch.ops.tvk.rnn_sequence_backward.default


def _steps(rows: int, batch: int, steps) -> int:
    return steps.shape[0] // 2 if steps is not None else rows // max(batch, 1)


@torch.library.register_fake("tvk::rnn_sequence_forward")
def _forward_fake(kind, proj, w_hh, b_ih, b_hh, h0, c0, steps, reverse):
    N, (B, H) = proj.numel() // proj.shape[-1], h0.shape
    return (proj.new_empty((N, H)), proj.new_empty((N, rnn_sequence_kernels.saved_width(kind, H))), h0.new_empty((B, H)),
            h0.new_empty((B, H) if kind == "lstm" else (0,)))


@torch.library.register_fake("tvk::rnn_sequence_backward")
def _backward_fake(kind, d_out, w_hh, saved, d_hn, d_cn, steps, reverse):
    N, GH = d_out.numel() // d_out.shape[-1], w_hh.shape[0]
    lstm = kind == "lstm"
    return (d_out.new_empty((N, GH)), d_out.new_empty((0,) if lstm else (N, GH)), d_hn.new_empty(d_hn.shape),
            d_hn.new_empty(d_hn.shape if lstm else (0,)))


def _contiguous(*tensors):
    """Contiguous versions (None stays None), all alive until the caller's kernel is recorded: a
    temporary copy dropped earlier would give its memory to the next one."""
    return [None if t is None else contig(t) for t in tensors]


def _a(t):
    return addr(t) if t is not None else None  # None: the kernel module's "absent"


@register(forward)
def rnn_sequence_forward(kind, proj, w_hh, b_ih, b_hh, h0, c0, steps, reverse):
    d, lstm = dev(proj), kind == "lstm"
    rows, w_t, b_ih, b_hh, h0, c0, steps = _contiguous(proj, w_hh.t(), b_ih, b_hh, h0, c0, steps)
    N, (B, H) = rows.numel() // rows.shape[-1], h0.shape
    out, saved = new_tensor((N, H), torch.float32, d), new_tensor((N, rnn_sequence_kernels.saved_width(kind, H)), torch.float32, d)
    h_n = new_tensor((B, H), torch.float32, d)
    c_n = new_tensor((B, H) if lstm else (0,), torch.float32, d)
    rnn_sequence_kernels.forward(d, kind, addr(rows), addr(w_t), _a(b_ih), _a(b_hh), _a(h0), _a(c0), addr(out),
               addr(saved), addr(h_n), addr(c_n) if lstm else None, _a(steps), _steps(N, B, steps), B, H, reverse)
    return out, saved, h_n, c_n


@register(backward)
def rnn_sequence_backward(kind, d_out, w_hh, saved, d_hn, d_cn, steps, reverse):
    d, lstm = dev(saved), kind == "lstm"
    d_out, w_hh, saved, d_hn, d_cn, steps = _contiguous(d_out, w_hh, saved, d_hn, d_cn if lstm else None, steps)
    (B, H), N, GH = d_hn.shape, saved.shape[0], w_hh.shape[0]
    d_proj = new_tensor((N, GH), torch.float32, d)
    d_hidden = new_tensor((0,) if lstm else (N, GH), torch.float32, d)
    dh = new_tensor((B, H), torch.float32, d)
    dc = new_tensor((B, H) if lstm else (0,), torch.float32, d)
    rnn_sequence_kernels.backward(d, kind, _a(d_out), _a(w_hh), _a(saved), _a(d_hn), _a(d_cn), addr(d_proj),
                None if lstm else addr(d_hidden), addr(dh), addr(dc) if lstm else None, _a(steps),
                _steps(N, B, steps), B, H, reverse)
    return d_proj, d_hidden, dh, dc
