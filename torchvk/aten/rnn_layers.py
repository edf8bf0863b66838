"""nn.LSTM and nn.GRU layers on tvk: aten.lstm.input and aten.gru.input, registered above autograd.

torch's own code for these ops runs a device other than the CPU step by step: each time step
projects its input, projects the hidden state and runs the fused cell, and the backward adds
per step the weight-gradient GEMMs and their accumulation, about a dozen small kernels a step
(an LSTM step of the model zoo took 13.7x cuDNN's GPU time). Here each layer and direction
projects the whole sequence's input in one GEMM, runs the recurrence with one GEMM and one
fused cell (which adds both biases) a step, and its backward with one fused cell backward and
one GEMM a step, then the hidden weights' gradient in one GEMM over all steps. Compiled mode
traces the same layers (compile/whole_ops.py). Packed sequences (aten.*.data), projections
(proj_size), other dtypes than float32 (autocast runs the cells in 16 bits) and Dynamo's fake
tvk tensors keep torch's path.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .._tensor import TVKTensor

aten = torch.ops.aten
# torch's C++ kernel of the op (OpOverload.decompose would prefer torch._decomp's Python one, whose
# unfused cell math autocast does not run in 16 bits)
_TORCH_PATH = torch._C.DispatchKey.CompositeImplicitAutograd


class _Recurrence(torch.autograd.Function):
    """One direction of one layer over the whole sequence, from its projected input.

    forward(kind, proj (T, B, G*H): the input projection without bias, w_hh (G*H, H), b_ih and b_hh
    (both or neither: the fused cell adds them), h0 (B, H), c0 (B, H; LSTM) or None, reverse)
    -> (outputs (T, B, H), h_T, c_T or None)."""

    @staticmethod
    def forward(ctx, kind, proj, w_hh, b_ih, b_hh, h0, c0, reverse):
        steps = range(proj.shape[0] - 1, -1, -1) if reverse else range(proj.shape[0])
        h, c, outs, cells, spaces = h0, c0, [None] * proj.shape[0], [c0], []
        w_t = w_hh.t()
        for t in steps:
            hg = torch.mm(h, w_t)
            if kind == "lstm":
                h, c, ws = aten._thnn_fused_lstm_cell(proj[t], hg, c, b_ih, b_hh)
                cells.append(c)
            else:
                h, ws = aten._thnn_fused_gru_cell(proj[t], hg, h, b_ih, b_hh)
            outs[t] = h
            spaces.append(ws)
        out = torch.stack(outs)
        ctx.kind, ctx.reverse, ctx.has_bias = kind, reverse, b_hh is not None
        ctx.cells, ctx.spaces = cells, spaces  # intermediates of this forward, in step order
        ctx.save_for_backward(w_hh, h0, out)
        return out, h, c

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_h, d_c):
        w_hh, h0, out = ctx.saved_tensors
        T = out.shape[0]
        steps = list(range(T - 1, -1, -1) if ctx.reverse else range(T))
        grads, hidden_grads = [None] * T, [None] * T  # of the projected input and of the hidden projection
        g = d_out[steps[-1]] + d_h  # the last step's output feeds the loss and h_T
        for i in range(T - 1, -1, -1):  # the steps backwards
            t = steps[i]
            if ctx.kind == "lstm":
                gates, d_c, _ = aten._thnn_fused_lstm_cell_backward_impl(g, d_c, ctx.cells[i], ctx.cells[i + 1],
                                                                         ctx.spaces[i], False)
                grads[t] = hidden_grads[t] = gates
                carry = None
            else:
                grads[t], hidden_grads[t], carry, _, _ = aten._thnn_fused_gru_cell_backward(g, ctx.spaces[i], False)
            if i:
                prev = d_out[steps[i - 1]] if carry is None else d_out[steps[i - 1]] + carry
                g = torch.addmm(prev, hidden_grads[t], w_hh)
        d_h0 = torch.mm(hidden_grads[steps[0]], w_hh)
        if carry is not None:
            d_h0 = d_h0 + carry
        ctx.cells = ctx.spaces = None
        d_proj, d_hidden = torch.stack(grads), torch.stack(hidden_grads)
        # the hidden state each step read: h0, then the outputs in step order
        before = torch.cat([out[1:], h0.unsqueeze(0)]) if ctx.reverse else torch.cat([h0.unsqueeze(0), out[:-1]])
        d_w = d_hidden.flatten(0, 1).t().mm(before.flatten(0, 1))
        d_bi = d_proj.sum((0, 1)) if ctx.has_bias else None
        d_bh = (d_hidden.sum((0, 1)) if ctx.kind == "gru" else d_bi.clone()) if ctx.has_bias else None  # own tensors
        return None, d_proj, d_w, d_bi, d_bh, d_h0, d_c if ctx.kind == "lstm" else None, None


def _fast(kind, input, hx, params, has_biases, num_layers, bidirectional, traced=False) -> bool:
    """Whether this call takes the layer path; else torch's own. traced: compiled mode's tracing
    (compile/whole_ops.py), whose inputs are fake tensors, not TVKTensors; torch's meta kernel of
    the fused cells needs both biases, so a traced layer without them keeps torch's path."""
    per = (4 if has_biases else 2) * num_layers * (2 if bidirectional else 1)
    tensors = [input, *hx, *params]
    return ((has_biases if traced else type(input) is TVKTensor) and input.dim() == 3 and input.numel() > 0 and len(params) == per
            and all(t.dtype == torch.float32 for t in tensors) and not torch.is_autocast_enabled(input.device.type))


def _layers(kind, input, states, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """(output, [final states per layer and direction, each a tuple]) over layers and directions."""
    x = input.transpose(0, 1) if batch_first else input
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
            proj = F.linear(x, w_ih)
            c0 = states[1][i] if kind == "lstm" else None
            out, h, c = _Recurrence.apply(kind, proj, w_hh, b_ih, b_hh, states[0][i], c0, d == 1)
            outs.append(out)
            finals.append((h, c))
        x = torch.cat(outs, 2) if dirs == 2 else outs[0]
    return (x.transpose(0, 1) if batch_first else x), finals


def lstm(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, traced=False):
    if not _fast("lstm", input, hx, params, has_biases, num_layers, bidirectional, traced):
        return aten.lstm.input._op_dk(_TORCH_PATH, input, hx, params, has_biases, num_layers, dropout, train,
                                      bidirectional, batch_first)
    out, finals = _layers("lstm", input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return out, torch.stack([h for h, _ in finals]), torch.stack([c for _, c in finals])


def gru(input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first, traced=False):
    if not _fast("gru", input, [hx], params, has_biases, num_layers, bidirectional, traced):
        return aten.gru.input._op_dk(_TORCH_PATH, input, hx, params, has_biases, num_layers, dropout, train,
                                     bidirectional, batch_first)
    out, finals = _layers("gru", input, [hx], params, has_biases, num_layers, dropout, train, bidirectional,
                          batch_first)
    return out, torch.stack([h for h, _ in finals])


_lib = torch.library.Library("aten", "IMPL")
_lib.impl("lstm.input", lstm, "AutogradPrivateUse1")
_lib.impl("gru.input", gru, "AutogradPrivateUse1")


def traced_lstm(*args):
    return lstm(*args, traced=True)


def traced_gru(*args):
    return gru(*args, traced=True)
