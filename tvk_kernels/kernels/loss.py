"""nll_loss and cross_entropy (fused log_softmax + nll) forward and backward (templates/loss.comp).

Inputs are contiguous float32 [N, C] (log-probabilities for nll, logits for cross-entropy),
int64 targets [N], optional float32 class weights [C]. Buffers are DeviceBuffers or device
addresses (ints). Semantics follow torch.nn.functional: reduction "mean" divides by the sum
of the target weights of non-ignored rows (NaN when every row is ignored), "sum", "none"
(ignored rows give 0). Targets outside [0, C) are treated as ignored (torch raises instead).
All reductions are a fixed-order tree in one workgroup, so results are deterministic.
"""
from __future__ import annotations

import struct

from ..errors import InvalidConfigError
from .launch import Family, address, family, grid_1d, positive, pow2ceil, powers_of_two

_PUSH = struct.Struct("<QQQQQQQIIifI")
MODE_NLL_ROWS, MODE_CE_ROWS, MODE_REDUCE, MODE_NLL_BWD, MODE_CE_BWD = range(5)
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _reduction(reduction: str) -> int:
    try:
        return REDUCTIONS[reduction]
    except KeyError:
        raise ValueError(f"reduction must be one of {sorted(REDUCTIONS)}, not {reduction!r}") from None


class Loss(Family):
    family = "loss"
    template = "loss.comp"

    def check_config(self, params: dict) -> dict:
        """Tree reductions: over RED_WG, and over each row's TPR lanes of a CE_WG workgroup."""
        positive(self.family, params, "WG", "CE_WG")
        powers_of_two(self.family, params, "TPR", "RED_WG")
        if params["CE_WG"] % params["TPR"]:
            raise InvalidConfigError(f"loss: TPR={params['TPR']} must divide CE_WG={params['CE_WG']}; "
                                     f"pass a smaller TPR")
        return params

    def mode_variant(self, mode: int, wg: int, tpr: int = 1):
        """The template for one MODE, with its shared memory (the row and reduce trees)."""
        shared = 16 * wg if mode == MODE_CE_ROWS and tpr > 1 else (8 * wg if mode == MODE_REDUCE else 0)
        # WG and TPR are specialization constants; SHARED_ROWS, a define, leaves out the lane tree at TPR 1
        return self.variant({"MODE": mode, "WG": wg, "TPR": tpr, "SHARED_ROWS": int(tpr > 1)}, wg, _PUSH.size,
                            shared_bytes=shared)


def _push(x=0, target=0, weight=0, a=0, b=0, lse=0, aux=0, N=0, C=0, ignore_index=-100, smoothing=0.0, reduction=0):
    return _PUSH.pack(x, target, weight, a, b, lse, aux, N, C, ignore_index, smoothing, reduction)


def _setup(device, C, params):
    fam = family(device, Loss)
    return fam, fam.resolve({"C": C}, params)


def _reduce(device, fam, params, rows_loss, rows_w, out, total_weight, N, red):
    wg = params["RED_WG"]
    pipe = fam.mode_variant(MODE_REDUCE, wg)
    device.stream.dispatch(pipe, (1, 1, 1), _push(a=rows_loss, b=rows_w, lse=out, aux=total_weight, N=N, reduction=red),
                           "loss_reduce")


def _scratch(device, N):
    buf = device.allocator.alloc(8 * max(N, 1))
    device.stream.keep_alive(buf)
    return buf.address, buf.address + 4 * N


def nll_loss_forward(device, logp, target, out, total_weight, N: int, C: int, *, weight=None,
                     reduction: str = "mean", ignore_index: int = -100, params: dict | None = None):
    """out = nll_loss(logp, target): [1] float for mean/sum, [N] for none.
    total_weight ([1] float, torch's second output) receives the sum of target weights (mean/sum)."""
    red = _reduction(reduction)
    fam, params = _setup(device, C, params)
    if red == 0:
        rows_loss, rows_w = address(out), 0
    else:
        rows_loss, rows_w = _scratch(device, N)
    if N > 0:
        wg = params["WG"]
        pipe = fam.mode_variant(MODE_NLL_ROWS, wg)
        device.stream.dispatch(pipe, grid_1d((N + wg - 1) // wg, device.facts.max_workgroup_count[0]),
                               _push(x=address(logp), target=address(target), weight=address(weight), a=rows_loss,
                                     b=rows_w, N=N, C=C, ignore_index=ignore_index, reduction=red), "nll_fwd")
    if red != 0:
        _reduce(device, fam, params, rows_loss, rows_w, address(out), address(total_weight), N, red)


def nll_loss_backward(device, grad_out, target, total_weight, grad_input, N: int, C: int, *, weight=None,
                      reduction: str = "mean", ignore_index: int = -100, params: dict | None = None):
    """grad_input [N, C] of nll_loss; grad_out is [1] (mean/sum) or [N] (none); total_weight is the
    forward's."""
    red = _reduction(reduction)
    fam, params = _setup(device, C, params)
    _elementwise_bwd(device, fam, params, MODE_NLL_BWD, 0, target, weight, grad_out, grad_input, 0,
                     total_weight, N, C, ignore_index, 0.0, red, "nll_bwd")


def _elementwise_bwd(device, fam, params, mode, x, target, weight, grad_out, grad_input, lse, aux, N, C,
                     ignore_index, smoothing, red, label):
    if N * C == 0:
        return
    wg = params["WG"]
    pipe = fam.mode_variant(mode, wg)
    groups = grid_1d((N * C + wg - 1) // wg, device.facts.max_workgroup_count[0])
    push = _push(x=address(x), target=address(target), weight=address(weight), a=address(grad_out),
                 b=address(grad_input), lse=address(lse), aux=address(aux), N=N, C=C, ignore_index=ignore_index,
                 smoothing=smoothing, reduction=red)
    device.stream.dispatch(pipe, groups, push, label)


def cross_entropy_forward(device, logits, target, out, N: int, C: int, *, weight=None, reduction: str = "mean",
                          ignore_index: int = -100, label_smoothing: float = 0.0, saved=None,
                          params: dict | None = None):
    """out = cross_entropy(logits, target) ([1] for mean/sum, [N] for none), fused log_softmax + nll.

    Returns `saved`, a [N + 2] float buffer for the backward: the rows' logsumexp, then the total
    target weight and the class-weight sum (pass your own buffer to reuse it)."""
    red = _reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    fam, params = _setup(device, C, params)
    if saved is None:
        saved = device.allocator.alloc(4 * (N + 2))
    lse = address(saved)
    aux = lse + 4 * N
    if red == 0:
        rows_loss, rows_w = address(out), 0
    else:
        rows_loss, rows_w = _scratch(device, N)
    if N > 0:
        wg, tpr = params["CE_WG"], min(params["TPR"], pow2ceil(C))  # no idle lanes when a row is shorter than TPR
        pipe = fam.mode_variant(MODE_CE_ROWS, wg, tpr)
        rows_per_group = wg // tpr
        groups = grid_1d((N + rows_per_group - 1) // rows_per_group, device.facts.max_workgroup_count[0])
        device.stream.dispatch(pipe, groups, _push(x=address(logits), target=address(target), weight=address(weight),
                                                   a=rows_loss, b=rows_w, lse=lse, aux=aux, N=N, C=C,
                                                   ignore_index=ignore_index, smoothing=label_smoothing,
                                                   reduction=red), "cross_entropy_fwd")
    if red != 0:
        _reduce(device, fam, params, rows_loss, rows_w, address(out), aux, N, red)
    return saved


def cross_entropy_backward(device, grad_out, logits, target, saved, grad_input, N: int, C: int, *, weight=None,
                           reduction: str = "mean", ignore_index: int = -100, label_smoothing: float = 0.0,
                           params: dict | None = None):
    """grad_input [N, C] = d cross_entropy / d logits (softmax - onehot, weighted, smoothed, scaled);
    `saved` is what cross_entropy_forward returned."""
    red = _reduction(reduction)
    fam, params = _setup(device, C, params)
    lse = address(saved)
    _elementwise_bwd(device, fam, params, MODE_CE_BWD, logits, target, weight, grad_out, grad_input, lse,
                     lse + 4 * N, N, C, ignore_index, label_smoothing, red, "cross_entropy_bwd")


def cross_entropy_backward_from_log_probs(device, grad_out, log_probs, target, total_weight, grad_input, N: int,
                                          C: int, *, weight=None, reduction: str = "mean", ignore_index: int = -100,
                                          params: dict | None = None):
    """grad_input [N, C] = d cross_entropy / d logits from the log-probabilities log_softmax gave:
    what nll_loss_backward followed by log_softmax's backward compute, as one kernel (the
    cross-entropy backward with every row's logsumexp 0: log-probabilities are normalized).
    total_weight is nll_loss_forward's."""
    red = _reduction(reduction)
    fam, params = _setup(device, C, params)
    zeros = device.allocator.alloc(4 * max(N, 1))
    device.stream.fill(zeros, 0)
    device.stream.keep_alive(zeros)
    _elementwise_bwd(device, fam, params, MODE_CE_BWD, log_probs, target, weight, grad_out, grad_input,
                     zeros.address, total_weight, N, C, ignore_index, 0.0, red, "cross_entropy_bwd")
