"""F.ctc_loss on tvk (torchvk/aten/ctc.py): losses and log-prob gradients against the CPU."""
import pytest
import torch
import torch.nn.functional as F

import torchvk

T, N, C = 12, 3, 5


def _case(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(T, N, C, generator=g)
    targets = torch.tensor([[1, 2, 2, 3], [4, 4, 1, 0], [2, 3, 1, 4]])  # repeats need a blank between
    return logits, targets, [12, 9, 7], [4, 2, 3]


def _check(fn, logits, rtol=1e-4, atol=1e-5):
    cpu = logits.clone().requires_grad_()
    dev = logits.to("tvk").requires_grad_()
    torchvk.reset_op_counts()
    want, got = fn(cpu), fn(dev)
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=rtol, atol=atol)
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(dev.grad.cpu(), cpu.grad, rtol=rtol, atol=atol)
    assert torchvk.op_counts()["cpu"] == {}


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("blank", [0, 4])
def test_padded_targets(reduction, blank):
    logits, targets, tl, sl = _case(0)
    if blank == 4:
        targets = targets.clamp(max=3)
    _check(lambda x: F.ctc_loss(x.log_softmax(2), targets.to(x.device), tl, sl, blank=blank, reduction=reduction),
           logits)


def test_concatenated_targets_and_tensor_lengths():
    logits, targets, tl, sl = _case(1)
    flat = torch.cat([targets[n, :sl[n]] for n in range(N)])
    _check(lambda x: F.ctc_loss(x.log_softmax(2), flat.to(x.device), torch.tensor(tl), torch.tensor(sl),
                                reduction="none"), logits)


def test_impossible_alignment_and_zero_infinity():
    logits, _, _, _ = _case(2)
    targets = torch.tensor([[1, 1, 1, 1], [2, 3, 0, 0], [1, 2, 3, 4]])
    tl, sl = [5, 12, 0], [4, 2, 0]  # 4 repeated labels need 7 frames; an empty input with an empty target
    for zero in (False, True):
        fn = lambda x: F.ctc_loss(x.log_softmax(2), targets.to(x.device), tl, sl, reduction="none",  # noqa: E731
                                  zero_infinity=zero)
        if zero:
            _check(fn, logits)
        else:  # the infinite loss itself (its gradient is not a number either way)
            torch.testing.assert_close(fn(logits.to("tvk")).cpu(), fn(logits))


def test_unbatched():
    logits, targets, _, _ = _case(3)
    _check(lambda x: F.ctc_loss(x[:, 0].log_softmax(1), targets[0].to(x.device), torch.tensor(10), torch.tensor(4)),
           logits)


def test_gradient_for_log_probs_that_are_not_normalized():
    """torch's gradient with respect to log_probs includes exp(log_probs) on each sequence's frames
    (equal for the logits behind a log_softmax); so does ours, for any log_probs."""
    logits, targets, tl, sl = _case(4)
    _check(lambda x: F.ctc_loss(x * 0.5 - 1.0, targets.to(x.device), tl, sl, reduction="sum"), logits)
