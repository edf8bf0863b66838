"""The gate math of one LSTM / GRU time step, forward and backward (templates/rnn_cell.comp).

The gate pre-activations come from matmuls run before (torch's RNN code makes them); these
kernels add the biases, apply the gate nonlinearities and update the cell / hidden state in
one pass, and keep the activated gates in a workspace for the backward. Shapes and orders
are torch's `_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell`: gates (B, 4H) as i f g o,
(B, 3H) as r z n; the LSTM workspace is (B, 4H), the GRU one (B, 5H).

Buffers are byte addresses (ints, or anything with `.address`), all contiguous float32.
Search space and defaults: tuning/rnn_cell.json (WG only).
"""
from __future__ import annotations

import struct

from .launch import Family, address, family, grid_1d, positive

CELLS = {"lstm_fwd": 0, "lstm_bwd": 1, "gru_fwd": 2, "gru_bwd": 3}
_PUSH = struct.Struct("<8Q3I")  # 8 buffer slots (meaning per cell: the template), rows, hidden, flags


class RnnCell(Family):
    family = "rnn_cell"
    template = "rnn_cell.comp"

    def check_config(self, params: dict) -> dict:
        return positive(self.family, params, "WG")


def _launch(device, cell: str, slots, rows: int, hidden: int, flags: int, params: dict | None):
    """Absent optional buffers come as a present buffer at least as large, with their flag bit
    off: lavapipe read the address-0 slot of an absent grad_cy even behind the flag (a crash)."""
    n = rows * hidden
    if n == 0:
        return
    fam = family(device, RnnCell)
    wg = fam.resolve({"n": n}, params)["WG"]
    pipe = fam.variant({"CELL": CELLS[cell]}, wg, _PUSH.size)
    addrs = [address(s) for s in slots] + [0] * (8 - len(slots))
    groups = grid_1d(-(-n // wg), device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, groups, _PUSH.pack(*addrs, rows, hidden, flags), f"rnn_{cell}")


def lstm_forward(device, input_gates, hidden_gates, cx, input_bias, hidden_bias, hy, cy, workspace, rows: int,
                 hidden: int, params=None):
    """hy, cy (rows, hidden) and workspace (rows, 4*hidden) of one LSTM step; the biases are
    both given or both None."""
    has_bias = input_bias is not None
    if not has_bias:  # an absent buffer points at a present one no smaller (see _launch)
        input_bias = hidden_bias = input_gates
    _launch(device, "lstm_fwd", (input_gates, hidden_gates, cx, input_bias, hidden_bias, hy, cy, workspace),
            rows, hidden, int(has_bias), params)


def lstm_backward(device, grad_hy, grad_cy, cx, cy, workspace, grad_gates, grad_cx, rows: int, hidden: int,
                  params=None):
    """grad_gates (rows, 4*hidden) of the pre-activations and grad_cx; grad_hy / grad_cy may be None (zero)."""
    flags = (1 if grad_hy is not None else 0) | (2 if grad_cy is not None else 0)
    grad_hy, grad_cy = (cy if grad_hy is None else grad_hy), (cy if grad_cy is None else grad_cy)  # see _launch
    _launch(device, "lstm_bwd", (grad_hy, grad_cy, cx, cy, workspace, grad_gates, grad_cx), rows, hidden, flags,
            params)


def gru_forward(device, input_gates, hidden_gates, hx, input_bias, hidden_bias, hy, workspace, rows: int,
                hidden: int, params=None):
    """hy (rows, hidden) and workspace (rows, 5*hidden) of one GRU step; biases both given or both None."""
    has_bias = input_bias is not None
    if not has_bias:  # see _launch
        input_bias = hidden_bias = input_gates
    _launch(device, "gru_fwd", (input_gates, hidden_gates, hx, input_bias, hidden_bias, hy, workspace), rows, hidden,
            int(has_bias), params)


def gru_backward(device, grad_hy, workspace, grad_input_gates, grad_hidden_gates, grad_hx, rows: int, hidden: int,
                 params=None):
    """Grads of the input and hidden gate pre-activations (rows, 3*hidden) and of hx."""
    _launch(device, "gru_bwd", (grad_hy, workspace, grad_input_gates, grad_hidden_gates, grad_hx), rows, hidden, 0,
            params)
