"""Indexing ops on tvk against torch CPU: one_hot, gather, x[idx] (aten.index.Tensor).
Out-of-range indices raise at the next sync point and the runtime stays usable after."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchvk


def _raises_at_sync(match, op):
    out = op()  # no error yet: the check runs on the device
    with pytest.raises(RuntimeError, match=match):
        out.cpu()
    ok = torch.tensor([1, 0], device="tvk")  # the runtime still works
    assert torch.equal(F.one_hot(ok, 2).cpu(), F.one_hot(ok.cpu(), 2))


# ------------------------------------------------------------------ one_hot
@pytest.mark.parametrize("classes, n", [([0, 2, 1], 3), ([[0, 2], [1, 1]], 4), ([3, 0], -1), ([], 5)])
def test_one_hot_matches_cpu(classes, n):
    x = torch.tensor(classes, dtype=torch.int64)
    got = F.one_hot(x.to("tvk"), n)
    ref = F.one_hot(x, n)
    assert got.dtype == ref.dtype and got.shape == ref.shape and torch.equal(got.cpu(), ref)


@pytest.mark.parametrize("bad", [3, 7, -1])
def test_one_hot_bad_class_raises(bad):
    x = torch.tensor([0, bad, 1])
    with pytest.raises(RuntimeError, match="Class values must be"):
        F.one_hot(x, 3)  # torch's own error, which ours matches
    _raises_at_sync(rf"Class values must be non-negative and smaller than num_classes: one_hot got {bad}",
                    lambda: F.one_hot(x.to("tvk"), 3))


def test_one_hot_argument_errors():
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(torch.tensor([0, 1], dtype=torch.int32, device="tvk"), 2)
    with pytest.raises(RuntimeError, match="empty tensor"):
        F.one_hot(torch.tensor([], dtype=torch.int64, device="tvk"))


class _OneHotModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, y):
        return self.lin(F.one_hot(y, 3).float())


def test_one_hot_compiles():
    torch.manual_seed(0)
    model = _OneHotModel().to("tvk")
    y = torch.tensor([2, 0, 1, 1])
    ref = model(y.to("tvk")).cpu()
    for compiled in (torch.compile(model, backend="tvk"), torchvk.compile(model)):
        torch.testing.assert_close(compiled(y.to("tvk")).cpu(), ref)
        _raises_at_sync("Class values must be", lambda: compiled(torch.tensor([0, 3], device="tvk")))


# ------------------------------------------------------------------ gather and its backward (scatter_add)
@pytest.mark.parametrize("dim, index_shape", [(0, (2, 3, 4)), (1, (2, 5, 2)), (-1, (1, 2, 7)), (2, (2, 3, 4))])
def test_gather_matches_cpu_with_backward(dim, index_shape):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 4)
    index = torch.randint(0, x.shape[dim], index_shape)  # repeats: the backward sums them
    xt = x.to("tvk").requires_grad_()
    got = xt.gather(dim, index.to("tvk"))
    xc = x.clone().requires_grad_()
    ref = xc.gather(dim, index)
    assert got.shape == ref.shape and torch.equal(got.cpu(), ref)
    g = torch.randn(ref.shape)
    ref.backward(g)
    got.backward(g.to("tvk"))
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def test_gather_dtypes_and_scalars():
    a = torch.tensor([[2 ** 40 + 1, -3, 5], [7, 2 ** 53 + 7, 0]])  # int64 values float32 cannot hold
    i = torch.tensor([[2, 1, 1, 0]])
    assert torch.equal(a.to("tvk").gather(1, i.to("tvk")).cpu(), a.gather(1, i))
    assert torch.equal(a.to("tvk").gather(1, i.int().to("tvk")).cpu(), a.gather(1, i.int()))  # int32 index
    h = a.to(torch.float16)
    assert torch.equal(h.to("tvk").gather(1, i.to("tvk")).cpu(), h.gather(1, i))
    s, z = torch.tensor(3.0), torch.tensor([0, 0])
    assert torch.equal(s.to("tvk").gather(0, z.to("tvk")).cpu(), s.gather(0, z))


@pytest.mark.parametrize("bad", [3, -1])
def test_gather_out_of_range_raises_at_sync(bad):
    x, i = torch.randn(2, 3), torch.tensor([[0, bad]])
    with pytest.raises(RuntimeError, match="out of bounds"):
        x.gather(1, i)  # torch's own error, which ours matches: negative indices do not wrap
    _raises_at_sync(rf"index {bad} is out of bounds for dimension 1 with size 3",
                    lambda: x.to("tvk").gather(1, i.to("tvk")))


def test_scatter_add_matches_cpu():
    x, src = torch.randn(3, 4), torch.randn(3, 5)
    i = torch.tensor([[0, 0, 3], [1, 1, 1], [2, 0, 2]])
    got = x.to("tvk").scatter_add(1, i.to("tvk"), src.to("tvk"))
    torch.testing.assert_close(got.cpu(), x.scatter_add(1, i, src))


# ------------------------------------------------------------------ x[idx] and its backward (index_put)
I1 = torch.tensor([[0, -1], [2, 1]])
I2 = torch.tensor([3, -4])
_INDEXINGS = {
    "x[i]": lambda x, a, b: x[a],
    "x[:, j]": lambda x, a, b: x[:, b],
    "x[i, j]": lambda x, a, b: x[a, b],
    "x[:, i, j]": lambda x, a, b: x[:, a, b],
    "x[i, :, j]": lambda x, a, b: x[a, :, b],
    "x[..., j]": lambda x, a, b: x[..., b],
    "x[i, 1:3, j]": lambda x, a, b: x[a, 1:3, b],
}


@pytest.mark.parametrize("name", list(_INDEXINGS))
def test_index_matches_cpu_with_backward(name):
    f = _INDEXINGS[name]
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5)
    xc = x.clone().requires_grad_()
    ref = f(xc, I1, I2)
    xt = x.to("tvk").requires_grad_()
    got = f(xt, I1.to("tvk"), I2.to("tvk"))
    assert got.shape == ref.shape and torch.equal(got.detach().cpu(), ref.detach())
    g = torch.randn(ref.shape)
    ref.backward(g)
    got.backward(g.to("tvk"))  # repeated rows (i broadcast against j) are summed
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)


def test_index_empty():
    x, none = torch.randn(3, 0), torch.tensor([], dtype=torch.int64)
    for ref, got in [(x[torch.tensor([1, 2])], x.to("tvk")[torch.tensor([1, 2], device="tvk")]),
                     (x.T[none], x.T.to("tvk")[none.to("tvk")]), (x[none], x.to("tvk")[none.to("tvk")])]:
        assert got.shape == ref.shape
    v = torch.randn(0, 2)
    got = torch.ones(3, 2, device="tvk").index_put_((none.to("tvk"),), v.to("tvk"), accumulate=True)
    assert torch.equal(got.cpu(), torch.ones(3, 2))


def test_index_int_dtypes_and_cpu_indices():
    a = torch.arange(12).view(3, 4)
    j = torch.tensor([3, 0, -2], dtype=torch.int32)
    assert torch.equal(a.to("tvk")[:, j.to("tvk")].cpu(), a[:, j])
    assert torch.equal(a.to("tvk")[torch.tensor([1, 1])].cpu(), a[torch.tensor([1, 1])])  # CPU index, as torch allows


def test_index_put_matches_cpu():
    x, i = torch.randn(3, 4), torch.tensor([2, 0, 2, -1])
    v = torch.randn(4, 4)
    for accumulate in (False, True):
        vals = v if accumulate else v[[0, 1, 0, 0]]  # duplicates (-1 is row 2 too) without accumulate: equal values
        got = x.to("tvk").index_put_((i.to("tvk"),), vals.to("tvk"), accumulate=accumulate)
        torch.testing.assert_close(got.cpu(), x.clone().index_put_((i,), vals, accumulate=accumulate))
    xt = x.to("tvk")
    xt[:, torch.tensor([1, -1], device="tvk")] = 2.5
    ref = x.clone()
    ref[:, torch.tensor([1, -1])] = 2.5
    assert torch.equal(xt.cpu(), ref)


@pytest.mark.parametrize("bad, reported", [(3, 3), (-4, -1)])  # a negative index is reported wrapped
def test_index_out_of_range_raises_at_sync(bad, reported):
    a, i = torch.arange(12).view(3, 4), torch.tensor([0, bad])
    with pytest.raises(IndexError, match="out of bounds"):
        a[i]
    out = a.to("tvk")[i.to("tvk")]
    with pytest.raises(IndexError, match=rf"index {reported} is out of bounds for dimension 0 with size 3"):
        out.cpu()
    _raises_at_sync("out of bounds", lambda: a.to("tvk")[:, torch.tensor([4], device="tvk")])


def test_bool_mask_index_matches_cpu():  # a sync op: nonzero reads the count (more in test_shape_ops.py)
    mask = torch.tensor([True, False, True])
    assert torch.equal(torch.arange(3, device="tvk")[mask.to("tvk")].cpu(), torch.arange(3)[mask])
