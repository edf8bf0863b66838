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
from .launch import Family, family, grid_1d

_PUSH = struct.Struct("<QQQQQQQIIifI")
MODE_NLL_ROWS, MODE_CE_ROWS, MODE_REDUCE, MODE_NLL_BWD, MODE_CE_BWD = range(5)
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}
SMALL_C = 128


def _addr(x) -> int:
    if x is None:
        return 0
    return x if isinstance(x, int) else x.address


def _reduction(reduction: str) -> int:
    try:
        return REDUCTIONS[reduction]
    except KeyError:
        raise ValueError(f"reduction must be one of {sorted(REDUCTIONS)}, not {reduction!r}") from None


class Loss(Family):
    def __init__(self, device):
        super().__init__(device, "loss", "loss.comp")

    def bucket(self, C: int) -> str:
        return "small_c" if C < SMALL_C else "large_c"

    def variant(self, mode: int, wg: int, tpr: int = 1, explicit: bool = False):
        def build():
            if mode == MODE_CE_ROWS and (tpr < 1 or wg % tpr or tpr & (tpr - 1)):
                raise InvalidConfigError(f"TPR={tpr} must be a power of two dividing WG={wg}")
            if mode == MODE_REDUCE and wg & (wg - 1):
                raise InvalidConfigError(f"RED_WG={wg} must be a power of two (tree reduction)")
            shared = 16 * wg if mode == MODE_CE_ROWS and tpr > 1 else (8 * wg if mode == MODE_REDUCE else 0)
            self.device.pipelines.check_limits((wg, 1, 1), shared_bytes=shared, push_size=_PUSH.size)
            defines = {"MODE": mode, "WG": wg, "TPR": tpr}
            return self.device.pipelines.get(self.template, defines, local_size=(wg, 1, 1), push_size=_PUSH.size)

        return build() if explicit else self.pipeline((mode, wg, tpr), build)


def _push(x=0, target=0, weight=0, a=0, b=0, lse=0, aux=0, N=0, C=0, ignore_index=-100, smoothing=0.0, reduction=0):
    return _PUSH.pack(x, target, weight, a, b, lse, aux, N, C, ignore_index, smoothing, reduction)


def _setup(device, C, params):
    fam = family(device, Loss)
    explicit = params is not None
    if params is None:
        params, _ = fam.params(fam.bucket(C))
    return fam, params, explicit


def _reduce(device, fam, params, explicit, rows_loss, rows_w, out, total_weight, N, red):
    wg = params["RED_WG"]
    pipe = fam.variant(MODE_REDUCE, wg, explicit=explicit)
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
    fam, params, explicit = _setup(device, C, params)
    if red == 0:
        rows_loss, rows_w = _addr(out), 0
    else:
        rows_loss, rows_w = _scratch(device, N)
    if N > 0:
        wg = params["WG"]
        pipe = fam.variant(MODE_NLL_ROWS, wg, explicit=explicit)
        device.stream.dispatch(pipe, grid_1d((N + wg - 1) // wg, device.facts.max_workgroup_count[0]),
                               _push(x=_addr(logp), target=_addr(target), weight=_addr(weight), a=rows_loss, b=rows_w,
                                     N=N, C=C, ignore_index=ignore_index, reduction=red), "nll_fwd")
    if red != 0:
        _reduce(device, fam, params, explicit, rows_loss, rows_w, _addr(out), _addr(total_weight), N, red)


def nll_loss_backward(device, grad_out, target, total_weight, grad_input, N: int, C: int, *, weight=None,
                      reduction: str = "mean", ignore_index: int = -100, params: dict | None = None):
    """grad_input [N, C] of nll_loss; grad_out is [1] (mean/sum) or [N] (none); total_weight is the
    forward's."""
    red = _reduction(reduction)
    fam, params, explicit = _setup(device, C, params)
    _elementwise_bwd(device, fam, params, explicit, MODE_NLL_BWD, 0, target, weight, grad_out, grad_input, 0,
                     total_weight, N, C, ignore_index, 0.0, red, "nll_bwd")


def _elementwise_bwd(device, fam, params, explicit, mode, x, target, weight, grad_out, grad_input, lse, aux, N, C,
                     ignore_index, smoothing, red, label):
    if N * C == 0:
        return
    wg = params["WG"]
    pipe = fam.variant(mode, wg, explicit=explicit)
    groups = grid_1d((N * C + wg - 1) // wg, device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, groups, _push(x=_addr(x), target=_addr(target), weight=_addr(weight), a=_addr(grad_out),
                                               b=_addr(grad_input), lse=_addr(lse), aux=_addr(aux), N=N, C=C,
                                               ignore_index=ignore_index, smoothing=smoothing, reduction=red), label)


def cross_entropy_forward(device, logits, target, out, N: int, C: int, *, weight=None, reduction: str = "mean",
                          ignore_index: int = -100, label_smoothing: float = 0.0, saved=None,
                          params: dict | None = None):
    """out = cross_entropy(logits, target) ([1] for mean/sum, [N] for none), fused log_softmax + nll.

    Returns `saved`, a [N + 2] float buffer for the backward: the rows' logsumexp, then the total
    target weight and the class-weight sum (pass your own buffer to reuse it)."""
    red = _reduction(reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    fam, params, explicit = _setup(device, C, params)
    if saved is None:
        saved = device.allocator.alloc(4 * (N + 2))
    lse = _addr(saved)
    aux = lse + 4 * N
    if red == 0:
        rows_loss, rows_w = _addr(out), 0
    else:
        rows_loss, rows_w = _scratch(device, N)
    if N > 0:
        wg, tpr = params["CE_WG"], min(params["TPR"], params["CE_WG"])
        if not explicit:  # no idle lanes when a row is shorter than TPR
            tpr = min(tpr, 1 << max(C - 1, 0).bit_length())
        pipe = fam.variant(MODE_CE_ROWS, wg, tpr, explicit=explicit)
        rows_per_group = wg // tpr
        groups = grid_1d((N + rows_per_group - 1) // rows_per_group, device.facts.max_workgroup_count[0])
        device.stream.dispatch(pipe, groups, _push(x=_addr(logits), target=_addr(target), weight=_addr(weight),
                                                   a=rows_loss, b=rows_w, lse=lse, aux=aux, N=N, C=C,
                                                   ignore_index=ignore_index, smoothing=label_smoothing,
                                                   reduction=red), "cross_entropy_fwd")
    if red != 0:
        _reduce(device, fam, params, explicit, rows_loss, rows_w, _addr(out), aux, N, red)
    return saved


def cross_entropy_backward(device, grad_out, logits, target, saved, grad_input, N: int, C: int, *, weight=None,
                           reduction: str = "mean", ignore_index: int = -100, label_smoothing: float = 0.0,
                           params: dict | None = None):
    """grad_input [N, C] = d cross_entropy / d logits (softmax - onehot, weighted, smoothed, scaled);
    `saved` is what cross_entropy_forward returned."""
    red = _reduction(reduction)
    fam, params, explicit = _setup(device, C, params)
    lse = _addr(saved)
    _elementwise_bwd(device, fam, params, explicit, MODE_CE_BWD, logits, target, weight, grad_out, grad_input, lse,
                     lse + 4 * N, N, C, ignore_index, label_smoothing, red, "cross_entropy_bwd")


def cross_entropy_backward_from_log_probs(device, grad_out, log_probs, target, total_weight, grad_input, N: int,
                                          C: int, *, weight=None, reduction: str = "mean", ignore_index: int = -100,
                                          params: dict | None = None):
    """grad_input [N, C] = d cross_entropy / d logits from the log-probabilities log_softmax gave:
    what nll_loss_backward followed by log_softmax's backward compute, as one kernel (the
    cross-entropy backward with every row's logsumexp 0: log-probabilities are normalized).
    total_weight is nll_loss_forward's."""
    red = _reduction(reduction)
    fam, params, explicit = _setup(device, C, params)
    zeros = device.allocator.alloc(4 * max(N, 1))
    device.stream.fill(zeros, 0)
    device.stream.keep_alive(zeros)
    _elementwise_bwd(device, fam, params, explicit, MODE_CE_BWD, log_probs, target, weight, grad_out, grad_input,
                     zeros.address, total_weight, N, C, ignore_index, 0.0, red, "cross_entropy_bwd")
