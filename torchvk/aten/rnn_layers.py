"""nn.LSTM and nn.GRU layers on tvk: aten.lstm / aten.gru (.input and packed .data), registered
above autograd.

torch's own code for these ops runs a device other than the CPU step by step: each time step
projects its input, projects the hidden state and runs the fused cell, and the backward adds
per step the weight-gradient GEMMs and their accumulation, about 35 small kernels per layer,
direction and step (an LSTM step of the model zoo took 13.7x cuDNN's GPU time). Here each layer
and direction projects the whole sequence's input in one GEMM and runs the recurrence in one kernel
(tvk_kernels.kernels.rnn_sequence: a workgroup runs all steps of its batch rows), its backward in
one kernel and the hidden weights' gradient in one GEMM over all steps: a fixed number of kernels
whatever the sequence length. Packed sequences (aten.*.data) run the same kernels, each step over
the rows still running. Compiled mode traces the padded layers (compile/whole_ops.py) into the
same kernels (the ops of aten/rnn_sequence.py). Hidden sizes whose kernel would not fit shared
memory run step by step: per step one GEMM and one fused cell, backward one fused cell backward
and one GEMM. Projections (proj_size),
other dtypes than float32 (autocast runs the cells in 16 bits) and Dynamo's fake tvk tensors keep
torch's path.
"""
from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F

from tvk_kernels import get_device
from tvk_kernels.kernels import rnn_sequence as rnn_sequence_kernels

from ..op_registry import register_composite
from .._tensor import TVKTensor, from_cpu
from . import rnn_sequence
from ._util import dev

aten = torch.ops.aten
# torch's C++ kernel of the op (OpOverload.decompose would prefer torch._decomp's Python one, whose
# unfused cell math autocast does not run in 16 bits)
_TORCH_PATH = torch._C.DispatchKey.CompositeImplicitAutograd


class _Recurrence(torch.autograd.Function):
    """One direction of one layer over the whole sequence, from its projected input.

    forward(kind, proj, sizes, w_hh, b_ih, b_hh, h0, c0, reverse) -> (outputs, h_n, c_n or None).
    proj: the input projection without bias, (T, B, G*H), or a packed sequence's (sum(sizes), G*H)
    whose step t has the next sizes[t] rows (non-increasing: the sequences still running).
    sizes: the rows of every step (B each, unpacked). b_ih, b_hh: both or neither (the fused
    cell adds them). h0, c0 (LSTM; else None): (B, H). The outputs have proj's layout with H
    columns; h_n, c_n hold each sequence's state after its own last step.
    The whole-sequence kernels run it (_whole_forward / _whole_backward), eager or traced; layers
    too large for them, the steps below."""

    @staticmethod
    def forward(ctx, kind, proj, sizes, w_hh, b_ih, b_hh, h0, c0, reverse):
        T, H = len(sizes), h0.shape[1]
        starts = [0, *itertools.accumulate(sizes)][:T]
        # compiled mode traces fake tensors (on the CPU, or Dynamo's fake tvk ones): the default device decides
        ctx.whole = rnn_sequence_kernels.supports(dev(proj) if type(proj) is TVKTensor else get_device(), kind, H, T)
        if ctx.whole:
            return _whole_forward(ctx, kind, proj, sizes, starts, w_hh, b_ih, b_hh, h0, c0, reverse)
        rows = proj.view(-1, proj.shape[-1])
        w_t = w_hh.t()
        outs, read_h, read_c, new_c, spaces = ([None] * T for _ in range(5))
        finished = []  # forward in time: (h, c) of the rows whose sequence ended, latest first at the end
        h, c, n_prev = (None, None, 0) if reverse else (h0, c0, sizes[0])
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            n = sizes[t]
            if reverse and n > n_prev:  # backwards in time, sequences join with their initial state
                h = h0[:n] if h is None else torch.cat([h, h0[n_prev:n]])
                if kind == "lstm":
                    c = c0[:n] if c is None else torch.cat([c, c0[n_prev:n]])
            elif not reverse and n < n_prev:  # forwards, the last rows' sequences have ended
                finished.append((h[n:], c[n:] if kind == "lstm" else None))
                h, c = h[:n], (c[:n] if kind == "lstm" else None)
            read_h[t], read_c[t] = h, c
            hg = torch.mm(h, w_t)
            x = rows[starts[t]:starts[t] + n]
            if kind == "lstm":
                h, c, spaces[t] = aten._thnn_fused_lstm_cell(x, hg, c, b_ih, b_hh)
                new_c[t] = c
            else:
                h, spaces[t] = aten._thnn_fused_gru_cell(x, hg, h, b_ih, b_hh)
            outs[t] = h
            n_prev = n
        out = torch.cat(outs).view(*proj.shape[:-1], H)
        h_n, c_n = h, c
        if finished:
            h_n = torch.cat([h] + [f[0] for f in reversed(finished)])
            if kind == "lstm":
                c_n = torch.cat([c] + [f[1] for f in reversed(finished)])
        ctx.kind, ctx.sizes, ctx.starts, ctx.reverse, ctx.has_bias = kind, sizes, starts, reverse, b_hh is not None
        ctx.steps = (read_h, read_c, new_c, spaces)  # this forward's intermediates, by time step
        ctx.save_for_backward(w_hh)
        return out, h_n, c_n

    @staticmethod
    def backward(ctx, d_out, d_hn, d_cn):
        if torch.is_grad_enabled():  # create_graph: this backward's kernels have no derivative of their own
            raise RuntimeError("TorchVK: the backward of an nn.LSTM / nn.GRU layer on tvk cannot be differentiated "
                               "again (create_graph=True, higher-order gradients); compute those on the CPU")
        if ctx.whole:
            return _whole_backward(ctx, d_out, d_hn, d_cn)
        (w_hh,) = ctx.saved_tensors
        read_h, read_c, new_c, spaces = ctx.steps
        sizes, starts, lstm = ctx.sizes, ctx.starts, ctx.kind == "lstm"
        T, H = len(sizes), d_hn.shape[1]
        d_rows = d_out.reshape(-1, H)
        grads, hidden_grads = [None] * T, [None] * T  # of the projected input and of the hidden projection
        d_h0, d_c0 = [], []  # backwards in time: pieces of the initial state's grad, last rows first
        dh = dc = g = None  # dh: the grad of the state the step processed before read (its rows)
        back = list(range(T) if ctx.reverse else range(T - 1, -1, -1))  # the forward's steps, last first
        n_prev = 0
        for i, t in enumerate(back):
            n = sizes[t]
            d_step = d_rows[starts[t]:starts[t] + n]
            if g is not None:  # given by the step before (same rows, no sequence starts or ends)
                gc = dc
            elif dh is None:  # the forward's last step: its state is final for all its rows
                g, gc = d_step + d_hn[:n], (d_cn[:n] if lstm else None)
            elif n > n_prev:  # forwards in time: rows whose sequence ended here get h_n's grad
                g = d_step + torch.cat([dh, d_hn[n_prev:n]])
                gc = torch.cat([dc, d_cn[n_prev:n]]) if lstm else None
            else:  # backwards in time: rows that joined at the step after this one read h0
                if n < n_prev:
                    d_h0.append(dh[n:])
                    d_c0.append(dc[n:] if lstm else None)
                g, gc = d_step + dh[:n], (dc[:n] if lstm else None)
            if lstm:
                gates, dc, _ = aten._thnn_fused_lstm_cell_backward_impl(g, gc, read_c[t], new_c[t], spaces[t], False)
                grads[t] = hidden_grads[t] = gates
                carry = None
            else:
                grads[t], hidden_grads[t], carry, _, _ = aten._thnn_fused_gru_cell_backward(g, spaces[t], False)
            nxt = back[i + 1] if i + 1 < T else None
            if lstm and nxt is not None and sizes[nxt] == n:  # the next step's grad in one kernel
                dh, g = None, torch.addmm(d_rows[starts[nxt]:starts[nxt] + n], hidden_grads[t], w_hh)
            else:
                dh, g = (torch.mm(hidden_grads[t], w_hh) if carry is None
                         else torch.addmm(carry, hidden_grads[t], w_hh)), None
            n_prev = n
        ctx.steps = None
        if d_h0:  # the rows of the last step processed, then the pieces, the first rows first
            dh = torch.cat([dh] + d_h0[::-1])
            dc = torch.cat([dc] + d_c0[::-1]) if lstm else None
        d_proj, d_hidden = torch.cat(grads), torch.cat(hidden_grads)
        d_w = d_hidden.t().mm(torch.cat(read_h))
        d_bi = d_proj.sum(0) if ctx.has_bias else None
        d_bh = (d_hidden.sum(0) if not lstm else d_bi.clone()) if ctx.has_bias else None  # own tensors
        return (None, d_proj.view(*d_out.shape[:-1], d_proj.shape[-1]), None, d_w, d_bi, d_bh, dh,
                dc if lstm else None, None)


def _whole_forward(ctx, kind, proj, sizes, starts, w_hh, b_ih, b_hh, h0, c0, reverse):
    """_Recurrence.forward in one kernel (the op tvk::rnn_sequence_forward, aten/rnn_sequence.py);
    what the backward's kernel needs of every step stays in one saved tensor."""
    packed = proj.dim() == 2  # else every step has all B rows
    steps = from_cpu(torch.tensor([*sizes, *starts], dtype=torch.int32), dev(proj)) if packed else None
    out, saved, h_n, c_n = rnn_sequence.forward(kind, proj, w_hh, b_ih, b_hh, h0, c0,
                                                steps, reverse)
    ctx.kind, ctx.sizes, ctx.reverse, ctx.has_bias = kind, sizes, reverse, b_hh is not None
    ctx.save_for_backward(w_hh, saved, steps)  # autograd frees them after the backward (unless retain_graph)
    return out.view(*proj.shape[:-1], out.shape[-1]), h_n, (c_n if kind == "lstm" else None)


def _whole_backward(ctx, d_out, d_hn, d_cn):
    """_Recurrence.backward: the gate grads of all steps and the initial state's in one kernel
    (tvk::rnn_sequence_backward), then W_hh's grad in one GEMM over all steps."""
    w_hh, saved, steps = ctx.saved_tensors
    kind, lstm, H = ctx.kind, ctx.kind == "lstm", d_hn.shape[1]
    d_proj, d_hidden, dh, dc = rnn_sequence.backward(kind, d_out, w_hh, saved, d_hn,
                                                     d_cn if lstm else None, steps, ctx.reverse)
    d_hidden = d_proj if lstm else d_hidden  # LSTM: the same grads
    read_h = saved.view(saved.shape[0], -1, H)[:, rnn_sequence_kernels.H_PREV_SLOT[kind]]  # every step's h_prev
    d_w = d_hidden.t().mm(read_h)
    d_bi = d_proj.sum(0) if ctx.has_bias else None
    d_bh = (d_hidden.sum(0) if not lstm else d_bi.clone()) if ctx.has_bias else None  # own tensors
    return (None, d_proj.view(*d_out.shape[:-1], d_proj.shape[-1]), None, d_w, d_bi, d_bh, dh,
            dc if lstm else None, None)


def _fast(input, rank, hx, params, has_biases, num_layers, bidirectional, traced) -> bool:
    """Whether this call takes the layer path; else torch's own. rank: the input's (3, or 2 for a
    packed sequence's data). traced: compiled mode's tracing (compile/whole_ops.py), whose inputs
    are fake tensors, not TVKTensors; torch's meta kernel of the fused cells needs both biases, so
    a traced layer without them keeps torch's path."""
    per = (4 if has_biases else 2) * num_layers * (2 if bidirectional else 1)
    tensors = [input, *hx, *params]
    return ((has_biases if traced else type(input) is TVKTensor) and input.dim() == rank and input.numel() > 0
            and len(params) == per and all(t.dtype == torch.float32 for t in tensors)
            and not torch.is_autocast_enabled(input.device.type))


def _layers(kind, x, sizes, states, params, has_biases, num_layers, dropout, train, bidirectional):
    """(output, [final (h, c) per layer and direction]) of a time-major (T, B, I) input or a packed
    sequence's (sum(sizes), I) data, over layers and directions."""
    dirs = 2 if bidirectional else 1
    per = 4 if has_biases else 2
    finals = []
    for layer in range(num_layers):
        if layer and dropout and train:
            x = F.dropout(x, dropout, True)
        outs = []
        for d in range(dirs):
            i = layer * dirs + d
            w_ih, w_hh, *biases = params[i * per:(i + 1) * per]
            b_ih, b_hh = biases if biases else (None, None)
            c0 = states[1][i] if kind == "lstm" else None
            out, h, c = _Recurrence.apply(kind, F.linear(x, w_ih), sizes, w_hh, b_ih, b_hh, states[0][i], c0, d == 1)
            outs.append(out)
            finals.append((h, c))
        x = torch.cat(outs, -1) if dirs == 2 else outs[0]
    return x, finals


def _sequence(kind, input, states, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    x = input.transpose(0, 1) if batch_first else input
    out, finals = _layers(kind, x, (x.shape[1],) * x.shape[0], states, params, has_biases, num_layers, dropout,
                          train, bidirectional)
    return (out.transpose(0, 1) if batch_first else out), finals


def _packed(kind, data, batch_sizes, states, params, has_biases, num_layers, dropout, train, bidirectional):
    sizes = tuple(int(n) for n in batch_sizes.tolist())  # on the CPU, as torch keeps them
    return _layers(kind, data, sizes, states, params, has_biases, num_layers, dropout, train, bidirectional)


def _states(kind, finals):
    h = torch.stack([h for h, _ in finals])
    return (h, torch.stack([c for _, c in finals])) if kind == "lstm" else (h,)


def lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, traced=False):
    if not _fast(input, 3, hx, params, has_biases, num_layers, bidirectional, traced):
        return aten.lstm.input._op_dk(_TORCH_PATH, input, hx, params, has_biases, num_layers, dropout, train,
                                      bidirectional, batch_first)
    out, finals = _sequence("lstm", input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                            batch_first)
    return (out, *_states("lstm", finals))


def gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, traced=False):
    if not _fast(input, 3, [hx], params, has_biases, num_layers, bidirectional, traced):
        return aten.gru.input._op_dk(_TORCH_PATH, input, hx, params, has_biases, num_layers, dropout, train,
                                     bidirectional, batch_first)
    out, finals = _sequence("gru", input, [hx], params, has_biases, num_layers, dropout, train, bidirectional,
                            batch_first)
    return (out, *_states("gru", finals))


def lstm_packed(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    if not _fast(data, 2, hx, params, has_biases, num_layers, bidirectional, False):
        return aten.lstm.data._op_dk(_TORCH_PATH, data, batch_sizes, hx, params, has_biases, num_layers, dropout,
                                     train, bidirectional)
    out, finals = _packed("lstm", data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional)
    return (out, *_states("lstm", finals))


def gru_packed(data, batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional):
    if not _fast(data, 2, [hx], params, has_biases, num_layers, bidirectional, False):
        return aten.gru.data._op_dk(_TORCH_PATH, data, batch_sizes, hx, params, has_biases, num_layers, dropout,
                                    train, bidirectional)
    out, finals = _packed("gru", data, batch_sizes, [hx], params, has_biases, num_layers, dropout, train,
                          bidirectional)
    return (out, *_states("gru", finals))


def traced_lstm(*args):
    return lstm(*args, traced=True)


def traced_gru(*args):
    return gru(*args, traced=True)


register_composite(aten.lstm.input, traced=traced_lstm)(lstm)  # whole sequences in compiled mode
register_composite(aten.gru.input, traced=traced_gru)(gru)
register_composite(aten.lstm.data)(lstm_packed)
register_composite(aten.gru.data)(gru_packed)
