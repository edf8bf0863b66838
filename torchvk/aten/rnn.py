"""LSTM / GRU cells: torch's `_thnn_fused_{lstm,gru}_cell` and their backwards on
tvk_kernels.kernels.rnn_cell.

torch's own RNN code (aten.lstm / gru / rnn_tanh / rnn_relu, multi-layer, bidirectional,
packed) runs above the tvk dispatch key and, on a device other than the CPU, calls these
fused cells once per time step after two matmuls (input and hidden projections), which
reach the matmul kernels. nn.RNN needs no kernel of its own (linear + tanh/relu). Packed
sequences need `_pack_padded_sequence`, whose lengths stay on the CPU.
"""
from __future__ import annotations

import torch

from tvk_kernels.kernels import rnn_cell as rnn_cell_kernels

from .. import _checks
from ..op_registry import register, register_meta
from .._tensor import new_tensor
from ._half import float32_compute
from ._util import addr, dev
from .copies import contig

aten = torch.ops.aten
for _op in (aten._thnn_fused_lstm_cell.default, aten._thnn_fused_gru_cell.default):
    _checks.skip_check(_op)  # checked by _checked below
# a meta check needs the lengths' values (zero stand-ins are refused); torch's kernel checks them
_checks.skip_check(aten._pack_padded_sequence.default)
_CEA = torch._C.DispatchKey.CompositeExplicitAutograd


def _check(op, *ts):
    for t in ts:
        if t is not None and t.dtype != torch.float32:
            raise TypeError(f"TorchVK: {op} supports float32 only, not {t.dtype}")


def _checked(op, input_gates, hidden_gates, input_bias, hidden_bias, gates, state):
    """Contiguous gates and biases after torch's size checks (rnn_cell_checkSizes): torch's meta kernel
    of the LSTM cell fails on absent biases and the CPU has no kernel to judge, so these ops skip
    the generic meta check (_checks.py) and are checked here."""
    if state.dim() != 2:
        raise RuntimeError(f"TorchVK: {op}: the state must be 2-D (batch, hidden), got size {list(state.shape)}")
    rows, hidden = state.shape
    want = [rows, gates * hidden]
    for name, t in (("input_gates", input_gates), ("hidden_gates", hidden_gates)):
        if list(t.shape) != want:
            raise RuntimeError(f"TorchVK: {op}: {name} has size {list(t.shape)}, expected {want} for a "
                               f"hidden state of size {list(state.shape)}")
    if (input_bias is None) != (hidden_bias is None):
        raise RuntimeError(f"TorchVK: {op} needs both biases or neither (got only one)")
    for t in (input_bias, hidden_bias):
        if t is not None and list(t.shape) != want[1:]:
            raise RuntimeError(f"TorchVK: {op}: a bias has size {list(t.shape)}, expected {want[1:]}")
    return (contig(input_gates), contig(hidden_gates), contig(input_bias) if input_bias is not None else None,
            contig(hidden_bias) if hidden_bias is not None else None)


def _a(t):
    return addr(t) if t is not None else None  # None: the kernel module's "absent"


@register(aten._thnn_fused_lstm_cell.default)
@float32_compute  # fp16/bf16 (autocast runs the cells in fp16, as on CUDA): 16-bit storage, fp32 math
def fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    _check("aten._thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias)
    ig, hg, bi, bh = _checked("aten._thnn_fused_lstm_cell", input_gates, hidden_gates, input_bias, hidden_bias, 4,
                              cx)
    cx = contig(cx)
    rows, hidden = cx.shape
    d = dev(cx)
    hy, cy = new_tensor(cx.shape, torch.float32, d), new_tensor(cx.shape, torch.float32, d)
    ws = new_tensor(ig.shape, torch.float32, d)
    rnn_cell_kernels.lstm_forward(d, addr(ig), addr(hg), addr(cx), _a(bi), _a(bh), addr(hy), addr(cy), addr(ws), rows, hidden)
    return hy, cy, ws


@register(aten._thnn_fused_lstm_cell_backward_impl.default)
@float32_compute  # fp16/bf16 (autocast runs the cells in fp16, as on CUDA): 16-bit storage, fp32 math
def fused_lstm_cell_backward(grad_hy, grad_cy, cx, cy, workspace, has_bias):
    _check("aten._thnn_fused_lstm_cell_backward_impl", grad_hy, grad_cy, cx, cy, workspace)
    ghy = contig(grad_hy) if grad_hy is not None else None
    gcy = contig(grad_cy) if grad_cy is not None else None
    cx, cy, ws = contig(cx), contig(cy), contig(workspace)
    rows, hidden = cx.shape
    d = dev(cx)
    grad_gates = new_tensor(ws.shape, torch.float32, d)
    grad_cx = new_tensor(cx.shape, torch.float32, d)
    rnn_cell_kernels.lstm_backward(d, _a(ghy), _a(gcy), addr(cx), addr(cy), addr(ws), addr(grad_gates), addr(grad_cx), rows,
                     hidden)
    grad_bias = aten.sum.dim_IntList(grad_gates, [0]) if has_bias else None
    return grad_gates, grad_cx, grad_bias


@register(aten._thnn_fused_gru_cell.default)
@float32_compute  # fp16/bf16 (autocast runs the cells in fp16, as on CUDA): 16-bit storage, fp32 math
def fused_gru_cell(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    _check("aten._thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias, hidden_bias)
    ig, hg, bi, bh = _checked("aten._thnn_fused_gru_cell", input_gates, hidden_gates, input_bias, hidden_bias, 3, hx)
    hx = contig(hx)
    rows, hidden = hx.shape
    d = dev(hx)
    hy = new_tensor(hx.shape, torch.float32, d)
    ws = new_tensor((rows, 5 * hidden), torch.float32, d)
    rnn_cell_kernels.gru_forward(d, addr(ig), addr(hg), addr(hx), _a(bi), _a(bh), addr(hy), addr(ws), rows, hidden)
    return hy, ws


@register(aten._thnn_fused_gru_cell_backward.default)
@float32_compute  # fp16/bf16 (autocast runs the cells in fp16, as on CUDA): 16-bit storage, fp32 math
def fused_gru_cell_backward(grad_hy, workspace, has_bias):
    _check("aten._thnn_fused_gru_cell_backward", grad_hy, workspace)
    ghy, ws = contig(grad_hy), contig(workspace)
    rows, hidden = ghy.shape
    d = dev(ghy)
    gig = new_tensor((rows, 3 * hidden), torch.float32, d)
    ghg = new_tensor((rows, 3 * hidden), torch.float32, d)
    ghx = new_tensor(ghy.shape, torch.float32, d)
    rnn_cell_kernels.gru_backward(d, addr(ghy), addr(ws), addr(gig), addr(ghg), addr(ghx), rows, hidden)
    if not has_bias:
        return gig, ghg, ghx, None, None
    return gig, ghg, ghx, aten.sum.dim_IntList(gig, [0]), aten.sum.dim_IntList(ghg, [0])


@register(aten._pack_padded_sequence.default, cross_device=True)
def pack_padded_sequence(input, lengths, batch_first):
    """torch's own kernel (narrow + cat, which run on tvk); the lengths stay on the CPU, as torch wants."""
    if lengths.device.type != "cpu":
        raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got 1D {lengths.device} "
                           f"{str(lengths.dtype).replace('torch.', '')} tensor")
    return aten._pack_padded_sequence.default._op_dk(_CEA, input, lengths, batch_first)


# ---------------------------------------------------------------- shapes for compiled mode's tracing
# torch has meta kernels for the LSTM cell, not the GRU cell: tracing a GRU layer on fake tensors
# (aten/rnn_layers.py through compile/whole_ops.py) needs its output shapes
def _gru_cell_meta(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    rows, hidden = hx.shape
    return hx.new_empty((rows, hidden)), hx.new_empty((rows, 5 * hidden))


def _gru_cell_backward_meta(grad_hy, workspace, has_bias):
    rows, hidden = grad_hy.shape
    gates = grad_hy.new_empty((rows, 3 * hidden))
    biases = (grad_hy.new_empty((3 * hidden,)), grad_hy.new_empty((3 * hidden,))) if has_bias else (None, None)
    return gates, grad_hy.new_empty((rows, 3 * hidden)), grad_hy.new_empty((rows, hidden)), *biases


register_meta(aten._thnn_fused_gru_cell.default, _gru_cell_meta)  # a later torch may have its own
register_meta(aten._thnn_fused_gru_cell_backward.default, _gru_cell_backward_meta)
