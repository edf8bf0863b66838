"""A fresh elementwise result is laid out like torch lays it out (aten/_layout.py, TensorIterator's
rule): `(x.t() + 1).t().view(-1)` works on tvk as on the CPU and CUDA, and a compiled graph's views
of results find the strides its fake tensors had."""
import pytest
import torch

import torchvk  # noqa: F401

torch.manual_seed(0)
_BASE = torch.randn(4, 6, 5)
_OTHER = torch.randn(6, 4, 5)

CASES = {
    "transposed": (lambda: (_BASE[0].t(),), lambda a: a + 1),
    "permuted 3-d": (lambda: (_BASE.permute(2, 0, 1),), torch.exp),
    "permuted with a contiguous one": (lambda: (_BASE.permute(1, 0, 2), _OTHER), torch.mul),
    "contiguous first, permuted second": (lambda: (_OTHER, _BASE.permute(1, 0, 2)), torch.sub),
    "broadcast row": (lambda: (_BASE.permute(2, 1, 0), torch.randn(1, 6, 1)), torch.add),
    "expanded": (lambda: (torch.randn(5, 1).expand(5, 4).t(),), torch.relu),
    "sliced with gaps": (lambda: (_BASE[:, ::2].transpose(0, 2),), torch.sigmoid),
    "scalar operand": (lambda: (_BASE.transpose(0, 1), torch.tensor(2.0)), torch.mul),
    "size-1 dims": (lambda: (torch.randn(5, 1, 4).permute(2, 1, 0),), torch.neg),
    "equal strides tie": (lambda: (torch.randn(3, 1, 1).expand(3, 4, 2).permute(2, 0, 1),), torch.abs),
    "masked_fill (torch: a contiguous clone, filled)": (lambda: (_BASE.permute(2, 0, 1), _BASE.permute(2, 0, 1) > 0),
                                                        lambda a, m: a.masked_fill(m, 0.5)),
    "where": (lambda: (_BASE[0].t() > 0, _BASE[0].t(), torch.zeros(5, 6)), torch.where),
}


@pytest.mark.parametrize("name", list(CASES))
def test_result_layout_matches_torch(name):
    make, op = CASES[name]
    args = make()
    want = op(*args)
    got = op(*(a.to("tvk") if a.dim() else a for a in args))
    assert got.shape == want.shape
    dims = [i for i, n in enumerate(want.shape) if n != 1]  # a size-1 dim's stride is free
    assert [got.stride(i) for i in dims] == [want.stride(i) for i in dims], (got.stride(), want.stride())
    torch.testing.assert_close(got.cpu(), want)


def test_view_of_a_transposed_result_back():
    x = torch.randn(3, 4)
    got = torch.relu(x.to("tvk").t() * 2).t().view(-1)
    torch.testing.assert_close(got.cpu(), torch.relu(x.t() * 2).t().view(-1))


def test_compiled_graph_views_a_fused_result_of_a_transposed_input():
    """A fused elementwise chain on a transposed input, transposed back and viewed: the traced view
    assumes torch's layout of the chain's result, which the fused kernel now allocates."""
    import torch.nn.functional as F

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(24, 3))

        def forward(self, x):
            y = torch.sigmoid(x.transpose(1, 2) * 2 + 1)
            return y.transpose(1, 2).view(x.shape[0], -1) @ self.w

    torch.manual_seed(1)
    cpu = Net()
    dev = Net().to("tvk")
    dev.load_state_dict(cpu.state_dict())
    x, t = torch.randn(2, 4, 6), torch.randn(2, 3)
    step = torchvk.compile(dev, loss_fn=F.mse_loss)
    for _ in range(2):  # trace, then replay
        dev.zero_grad()
        cpu.zero_grad()
        loss = step(x.to("tvk"), t.to("tvk"))
        loss.backward()
        ref = F.mse_loss(cpu(x), t)
        ref.backward()
        torch.testing.assert_close(loss.detach().cpu(), ref.detach(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(dev.w.grad.cpu(), cpu.w.grad, atol=1e-5, rtol=1e-5)
