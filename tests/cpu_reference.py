"""A check the op tests share: a function of tvk tensors against the same function on the CPU."""
import torch

import torchvk


def grads_match(fn, *cpu_inputs, rtol=1e-5, atol=1e-5):
    """fn's output and the grads of its floating-point inputs (for a random cotangent) on tvk equal
    the CPU's, with no op falling back to the CPU."""
    cpu = [x.clone().requires_grad_(x.is_floating_point()) for x in cpu_inputs]
    tvk = [x.to("tvk").requires_grad_(x.is_floating_point()) for x in cpu_inputs]
    torchvk.reset_op_counts()
    want, got = fn(*cpu), fn(*tvk)
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=rtol, atol=atol)
    cot = torch.randn(want.shape, generator=torch.Generator().manual_seed(3))
    want.backward(cot)
    got.backward(cot.to("tvk"))
    for c, t in zip(cpu, tvk):
        if c.grad is not None:
            torch.testing.assert_close(t.grad.cpu(), c.grad, rtol=rtol, atol=atol)
    assert torchvk.op_counts()["cpu"] == {}
