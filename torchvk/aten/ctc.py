"""F.ctc_loss on tvk: the forward (alpha) recursion over time as tvk ops, differentiated by autograd.

Each target is extended with blanks (l' = blank, l1, blank, l2, ..., blank); alpha[t, s] is the
log-probability of the alignments of the first t+1 frames that end at l'[s]:
    alpha[t, s] = logsumexp(alpha[t-1, s], alpha[t-1, s-1], alpha[t-1, s-2] where allowed) + lp[t, l'[s]]
(s-2 is allowed where l'[s] is not blank and differs from l'[s-2]). A sequence stops at its own
input length; its loss is -logsumexp(alpha[T-1, end], alpha[T-1, end-1]). The log-sum-exp keeps
exact -inf for impossible states with zero gradient there (an impossible alignment gives an
infinite loss, as torch's; zero_infinity zeroes it and its gradient). torch's gradient with
respect to log_probs adds exp(log_probs) on every frame within a sequence's input length (the same
gradient for the logits when log_probs = log_softmax(logits), as CTC is used); a zero-valued term
adds it here, so the gradients equal torch's for any input. One step is some twenty
elementwise kernels, so a long input is slow but exact; registered above autograd (eager mode).
"""
from __future__ import annotations

import torch

from ..op_registry import register_composite

_NONE, _MEAN, _SUM = 0, 1, 2
_NEG_INF = float("-inf")


def _lse3(a, b, c):
    """log(exp a + exp b + exp c), elementwise; -inf (with zero gradient) where all three are -inf."""
    m = torch.maximum(torch.maximum(a, b), c)
    finite = m > _NEG_INF
    m0 = torch.where(finite, m, torch.zeros_like(m))
    s = (a - m0).exp() + (b - m0).exp() + (c - m0).exp()
    s = torch.where(finite, s, torch.ones_like(s))  # log(0)'s gradient would poison the masked branch
    return torch.where(finite, m0 + s.log(), torch.full_like(m, _NEG_INF))


def _shift(x, k):
    """x moved k places right along the last dim, -inf entering."""
    return torch.cat([torch.full_like(x[:, :k], _NEG_INF), x[:, :-k]], 1)


def _lengths(v, what):
    if isinstance(v, torch.Tensor):
        lengths = v.reshape(-1).tolist()
    else:
        lengths = list(v) if isinstance(v, (list, tuple)) else [v]
    if any(n < 0 for n in lengths):
        raise RuntimeError(f"ctc_loss: {what} must be non-negative")
    return [int(n) for n in lengths]


def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=_MEAN, zero_infinity=False):
    unbatched = log_probs.dim() == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    if targets.dim() == 1 and unbatched:
        targets = targets.unsqueeze(0)
    T, N, C = lp.shape
    t_len, s_len = _lengths(input_lengths, "input_lengths"), _lengths(target_lengths, "target_lengths")
    if len(t_len) != N or len(s_len) != N:
        raise RuntimeError(f"ctc_loss: expected {N} input and target lengths, got {len(t_len)} and {len(s_len)}")
    if max(t_len, default=0) > T:
        raise RuntimeError(f"ctc_loss: an input length ({max(t_len)}) exceeds the sequence length ({T})")
    if not 0 <= blank < C:
        raise RuntimeError(f"ctc_loss: blank must be in [0, {C}), got {blank}")
    S = max(max(s_len, default=0), 1)
    dev = lp.device
    if targets.dim() == 2:  # padded (N, S_max)
        padded = targets[:, :S].to(torch.int64)
        if padded.shape[1] < S:
            raise RuntimeError("ctc_loss: targets are shorter than a target length")
    else:  # concatenated: row n is targets[start_n : start_n + s_len[n]] (positions from the host lengths)
        starts = [sum(s_len[:n]) for n in range(N)]
        pos = torch.tensor([[min(st + k, max(targets.numel() - 1, 0)) for k in range(S)] for st in starts])
        padded = targets.to(torch.int64)[pos.to(dev)]
    L = 2 * S + 1
    ext = torch.full((N, L), blank, dtype=torch.int64, device=dev)
    ext[:, 1::2] = padded
    s_idx = torch.arange(L, device=dev)
    ends = torch.tensor([2 * n for n in s_len]).to(dev)
    valid = s_idx.unsqueeze(0) <= ends.unsqueeze(1)  # states of each target's own length
    skip = torch.zeros((N, L), dtype=torch.bool, device=dev)
    skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
    emit = lp.gather(2, ext.unsqueeze(0).expand(T, N, L))  # (T, N, L): log p of each state's label
    neg = torch.full((N, L), _NEG_INF, dtype=lp.dtype, device=dev)
    start = (s_idx <= 1).unsqueeze(0) & valid
    alpha = torch.where(start, emit[0], neg)
    running = torch.tensor(t_len).to(dev).unsqueeze(1)  # frames of each sequence
    for t in range(1, max(t_len, default=0)):
        step = _lse3(alpha, _shift(alpha, 1), torch.where(skip, _shift(alpha, 2), neg)) + emit[t]
        alpha = torch.where((running > t) & valid, step, torch.where(running > t, neg, alpha))
    last = alpha.gather(1, ends.unsqueeze(1)).squeeze(1)
    before = alpha.gather(1, (ends - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    before = torch.where(ends > 0, before, torch.full_like(before, _NEG_INF))
    loss = -_lse3(last, before, torch.full_like(last, _NEG_INF))
    frames = (torch.arange(T, device=dev).unsqueeze(1) < running.squeeze(1).unsqueeze(0)).to(lp.dtype)  # (T, N)
    mass = (lp.exp() * frames.unsqueeze(2)).sum((0, 2))
    loss = loss + (mass - mass.detach())  # + 0, with gradient exp(log_probs): torch's
    loss = torch.where(running.squeeze(1) > 0, loss, torch.where(ends > 0, torch.full_like(loss, float("inf")),
                                                                   torch.zeros_like(loss)))
    if zero_infinity:
        loss = torch.where(torch.isinf(loss), torch.zeros_like(loss), loss)
    if reduction == _MEAN:
        return (loss / torch.tensor(s_len).to(dev).clamp(min=1).to(loss.dtype)).mean()
    if reduction == _SUM:
        return loss.sum()
    return loss.squeeze(0) if unbatched else loss


# lengths as lists or as tensors: _lengths reads both
register_composite(torch.ops.aten.ctc_loss.IntList, torch.ops.aten.ctc_loss.Tensor)(ctc_loss)
