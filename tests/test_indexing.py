"""Indexing ops on tvk against torch CPU: one_hot, gather, x[idx] (aten.index.Tensor).
Out-of-range indices raise at the next sync point and the runtime stays usable after."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchvk

X = torch.arange(24, dtype=torch.float32).view(2, 3, 4)


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
