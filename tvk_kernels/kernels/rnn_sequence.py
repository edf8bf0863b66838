"""The whole recurrence of one LSTM / GRU layer direction, one dispatch forward and one backward
(templates/rnn_sequence.comp).

Each workgroup owns a few batch rows (ROWS) and runs every time step for them: per step the
hidden projection h_prev @ W_hh^T, the biases and the cell (torch's gate orders: LSTM i f g o,
GRU r z n). A step is latency-bound, so a small H has several invocations share each unit's dot
products (KS = WG / H rounded up to a power of two): on the H200 the zoo's LSTM (B 32, T 64,
H 128) ran fastest with WG 512-1024 and one row a workgroup. The input projection comes
precomputed (one GEMM over the whole sequence); the backward gives the grads of the gate
pre-activations of every step, from which one GEMM makes W_hh's.

Rows: a sequence's rows are "packed": step t's sizes[t] rows (non-increasing, the sequences still
running) start at packed row starts[t]; an unpacked (T, B) sequence is the case sizes[t] = B.
Per packed row the forward saves `saved_width(kind, hidden)` floats for the backward: LSTM the
activated gates i f g o, h_prev, c_prev, c; GRU r z n h_prev hn (as rnn_cell's workspace).

Buffers are byte addresses (ints, or anything with `.address`), all contiguous float32.
Search space and defaults: tuning/rnn_sequence.json (WG, ROWS).
"""
from __future__ import annotations

import struct

from ..errors import DeviceLimitError
from .launch import Family, address, family, grid_1d, positive, pow2ceil, powers_of_two

KINDS = {"lstm": 0, "gru": 1}
GATES = {"lstm": 4, "gru": 3}
SAVED = {"lstm": 7, "gru": 5}  # floats per row and hidden unit, see the module doc
H_PREV_SLOT = {"lstm": 4, "gru": 3}  # where h_prev is among them (the backward's W_hh GEMM reads it)
_SHARED_LIMIT = 32768  # AMD's Windows driver: 32 KiB of shared memory
_PUSH = struct.Struct("<11Q4I")  # 11 buffer slots (meaning per direction: the template), T, B, H, flags
_BIAS, _REVERSE, _PACKED = 1, 2, 4


def saved_width(kind: str, hidden: int) -> int:
    return SAVED[kind] * hidden


class RnnSequence(Family):
    family = "rnn_sequence"
    template = "rnn_sequence.comp"

    def check_config(self, params: dict) -> dict:
        return powers_of_two(self.family, positive(self.family, params, "ROWS"), "WG")  # WG / KS units a pass


def _capacity(hidden: int) -> int:
    """The shared memory per row and gate, in floats (HC): few variants."""
    return pow2ceil(max(hidden, 32))


def _shared_bytes(kind: str, backward: bool, rows: int, capacity: int, wg: int = 0, split: int = 1) -> int:
    """h_prev and h (forward) or the gate grads (backward) of each row, and with split > 1 the
    partial dot products of wg invocations."""
    state = rows * capacity * (GATES[kind] if backward else 2)
    parts = rows * wg * (1 if backward else GATES[kind]) if split > 1 else 0
    return 4 * (state + parts)


def _shared_limit(device) -> int:
    return min(_SHARED_LIMIT, device.facts.max_shared_memory)


def loop_iterations(kind: str, backward: bool, hidden: int, steps: int, wg: int) -> int:
    """The loop iterations one invocation of the kernel runs over `steps` steps (a bound, from the
    template's loops: per step, H / (WG / KS) passes over the units, each a dot product of H
    (forward) or G * H (backward) in strides of UNROLL * KS, its remainder and the KS partials)."""
    ks = max(wg // _capacity(hidden), 1)
    passes = -(-hidden // (wg // ks))
    length, unroll = (GATES[kind] * hidden, 16) if backward else (hidden, 4)
    return steps * (2 + passes * (3 + -(-length // (unroll * ks)) + unroll + ks))


def supports(device, kind: str, hidden: int, steps: int) -> bool:
    """Whether one row of this layer fits the kernels' shared memory (LSTM: H <= 2048 at 32 KiB)
    and `steps` steps fit the device's loop budget (llvmpipe: an LSTM of H 128 for some 850 steps);
    else the caller runs the per-step kernels."""
    if _shared_bytes(kind, True, 1, _capacity(hidden)) > _shared_limit(device):
        return False
    return _within_budget(device, kind, hidden, steps, family(device, RnnSequence).resolve({"H": hidden})["WG"])


def _within_budget(device, kind: str, hidden: int, steps: int, wg: int) -> bool:
    budget = device.facts.max_loop_iterations
    return not budget or max(loop_iterations(kind, b, hidden, steps, wg) for b in (False, True)) <= budget


def plan(device, kind: str, backward: bool, hidden: int, batch: int, prm: dict) -> tuple[dict, int, int]:
    """(defines, local size, shared bytes) of a launch with parameters `prm`: WG / KS invocations
    a pass over the units (no more than the shared capacity), KS of them per unit; ROWS no more
    than the batch has, halved until the shared memory fits."""
    capacity, wg = _capacity(hidden), prm["WG"]
    split = max(wg // capacity, 1)
    rows = min(prm["ROWS"], pow2ceil(batch))
    while rows > 1 and _shared_bytes(kind, backward, rows, capacity, wg, split) > _shared_limit(device):
        rows //= 2
    defines = {"KIND": KINDS[kind], "DIRECTION": int(backward), "ROWS": rows, "HC": capacity, "KS": split}
    return defines, wg, _shared_bytes(kind, backward, rows, capacity, wg, split)


def _launch(device, kind: str, backward: bool, slots, steps: int, batch: int, hidden: int, flags: int,
            params: dict | None):
    if steps == 0 or batch == 0 or hidden == 0:
        return
    if _shared_bytes(kind, True, 1, _capacity(hidden)) > _shared_limit(device):
        raise ValueError(f"rnn_sequence: a {kind} layer of hidden size {hidden} needs more shared memory than this "
                         f"device or 32 KiB allow; run the per-step kernels (tvk_kernels.kernels.rnn_cell)")
    fam = family(device, RnnSequence)
    prm = fam.resolve({"H": hidden}, params)
    if not _within_budget(device, kind, hidden, steps, prm["WG"]):
        raise DeviceLimitError(f"rnn_sequence: {steps} steps of a {kind} layer of hidden size {hidden} run past "
                               f"{device.facts.name}'s loop budget ({device.facts.max_loop_iterations} iterations); "
                               "run the per-step kernels (tvk_kernels.kernels.rnn_cell)")
    defines, wg, shared = plan(device, kind, backward, hidden, batch, prm)
    pipe = fam.variant(defines, wg, _PUSH.size, shared_bytes=shared)
    addrs = [address(s) for s in slots]
    groups = grid_1d(-(-batch // defines["ROWS"]), device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, groups, _PUSH.pack(*addrs, steps, batch, hidden, flags),
                           f"rnn_sequence_{kind}_{'bwd' if backward else 'fwd'}")


def _flags(sizes, reverse: bool) -> int:
    return (_REVERSE if reverse else 0) | (_PACKED if sizes is not None else 0)


def _present(slots) -> list:
    """Absent buffers (None) as the first one: the template reads them only behind their flag bit,
    but lavapipe read an address-0 slot even there (kernels/rnn_cell.py)."""
    return [slots[0] if s is None else s for s in slots]


def forward(device, kind: str, proj, w_hh_t, input_bias, hidden_bias, h0, c0, out, saved, h_n, c_n, sizes,
            steps: int, batch: int, hidden: int, reverse: bool, params=None):
    """One layer direction over all steps. proj (rows, G*H) without biases; w_hh_t (H, G*H), W_hh
    transposed; biases both given or both None; h0 (B, H) and, LSTM, c0; out (rows, H); saved
    (rows, saved_width); h_n, c_n (B, H): each row's state after its own last step. sizes: None
    (every step has all B rows) or an int32 buffer of sizes[T] then starts[T]."""
    flags = _flags(sizes, reverse) | (_BIAS if input_bias is not None else 0)
    slots = (proj, w_hh_t, input_bias, hidden_bias, h0, c0, out, saved, h_n, c_n, sizes)
    _launch(device, kind, False, _present(slots), steps, batch, hidden, flags, params)


def backward(device, kind: str, grad_out, w_hh, saved, grad_hn, grad_cn, grad_input_gates, grad_hidden_gates,
             grad_h0, grad_c0, sizes, steps: int, batch: int, hidden: int, reverse: bool, params=None):
    """The grads of every step's gate pre-activations, input side grad_input_gates (rows, G*H) and
    (GRU) hidden side grad_hidden_gates (LSTM's are the same: None), and of h0 / c0 (B, H), from
    grad_out (rows, H), grad_hn / grad_cn (B, H) and the forward's saved. w_hh (G*H, H)."""
    slots = (grad_out, w_hh, saved, grad_hn, grad_cn, grad_input_gates, grad_hidden_gates, grad_h0, grad_c0, None,
             sizes)
    _launch(device, kind, True, _present(slots), steps, batch, hidden, _flags(sizes, reverse), params)
