"""The eager fast path (torchvk/aten/elementwise.py `_launches`, design note 23): a repeated op
reuses what its first call worked out from the operand geometry; any change of shape, strides,
dtype, scalar type or device is a miss that takes the full path. Results always equal CPU's."""
import pytest
import torch

import torchvk  # noqa: F401
from torchvk import _dispatch
from torchvk.aten import elementwise as aten_elementwise


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want, rtol=1e-6, atol=1e-6)


def test_a_repeated_op_is_a_hit_with_fresh_values():
    aten_elementwise._launches.clear()
    a, b = torch.randn(5, 3), torch.randn(5, 3)
    ta, tb = a.to("tvk"), b.to("tvk")
    _same(ta + tb, a + b)
    entries = len(aten_elementwise._launches)
    for k in range(3):  # new data each time: the entry keeps geometry, never values
        a, b = torch.randn(5, 3) * k, torch.randn(5, 3)
        ta, tb = a.to("tvk"), b.to("tvk")
        _same(ta + tb, a + b)
        _same(torch.add(ta, tb, alpha=k + 0.5), torch.add(a, b, alpha=k + 0.5))
    assert len(aten_elementwise._launches) == entries  # alpha is a value, not part of the signature: all hits


@pytest.mark.parametrize("change", ["shape", "broadcast", "strides", "offset", "dtype", "scalar type",
                                    "cpu scalar", "bool"])
def test_each_change_of_geometry_or_type_is_a_miss_with_the_right_result(change):
    # another test in this process may have launched the changed geometry already, or kept its call as a repeat
    # (which skips the fast path's table: tests/test_custom_ops.py multiplies a [4, 3] slice by 3)
    aten_elementwise._launches.clear()
    _dispatch._repeats.clear()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) - 5
    t = base.to("tvk")
    _same(t * 3, base * 3)  # fills the entry for a contiguous float32 [3, 4] times an int
    before = len(aten_elementwise._launches)
    if change == "shape":
        x = torch.randn(4, 3)
        got, want = x.to("tvk") * 3, x * 3
    elif change == "broadcast":
        got, want = t * t[0], base * base[0]
    elif change == "strides":
        got, want = t.t() * 3, base.t() * 3
    elif change == "offset":
        got, want = t[1:] * 3, base[1:] * 3
    elif change == "dtype":
        x = torch.arange(12).reshape(3, 4)
        got, want = x.to("tvk") * 3, x * 3  # int64 stays int64
    elif change == "scalar type":
        got, want = t * 2.5, base * 2.5
        x = torch.arange(12).reshape(3, 4)
        _same(x.to("tvk") * 2.5, x * 2.5)  # int64 times a float is float32
    elif change == "cpu scalar":
        for v in (2.0, -7.0):  # a 0-dim CPU tensor is pushed as a number: its value each call
            _same(t * torch.tensor(v), base * torch.tensor(v))
        got, want = t * torch.tensor(4.0), base * torch.tensor(4.0)
    else:
        got, want = (t > 0) * True, (base > 0) * True
    _same(got, want)
    assert len(aten_elementwise._launches) > before


def test_errors_stay_torchs_after_hits():
    t = torch.randn(3, 4).to("tvk")
    for _ in range(2):
        t + t
    with pytest.raises(RuntimeError, match="must match the size"):
        t + torch.randn(5, 4).to("tvk")
    with pytest.raises(RuntimeError, match="same device"):
        t + torch.randn(3, 4)
    _same(t + t, t.cpu() + t.cpu())  # and the runtime goes on


def test_a_view_keeps_its_storage_through_hits():
    t = torch.randn(6).to("tvk")
    t + t
    view = t[1:]
    view + view
    del t
    _same(view + view, view.cpu() * 2)  # the view keeps the storage alive: still correct


def test_views_reuse_their_geometry_per_signature_and_keep_torchs_errors():
    base = torch.arange(24.0).reshape(4, 6)
    t = base.to("tvk")
    for _ in range(2):  # the second round hits
        _same(t.view(6, 4), base.view(6, 4))
        _same(t.view([3, 8]), base.view([3, 8]))
        _same(t[1:].transpose(0, 1), base[1:].transpose(0, 1))
        for got, want in zip(t.split([2, 4], dim=1), base.split([2, 4], dim=1)):
            _same(got, want)
        _same(t.t()[2], base.t()[2])
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        t.t().view(24)
    with pytest.raises(RuntimeError, match="invalid for input of size 24"):
        t.view(5, 5)


def test_zero_grad_to_none_records_no_kernel_and_the_next_step_matches_cpu():
    from torchvk._storage import get_device

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    cpu_model = torch.nn.Linear(4, 3)
    cpu_model.load_state_dict(model.state_dict())
    model = model.to("tvk")
    opt, cpu_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(cpu_model.parameters(), lr=0.1)
    x = torch.randn(5, 4)
    for step in range(2):
        model(x.to("tvk")).square().sum().backward()
        cpu_model(x).square().sum().backward()
        opt.step()
        cpu_opt.step()
        stream = get_device().stream
        before = stream.total_dispatches
        torchvk.reset_op_counts()
        opt.zero_grad(set_to_none=True)
        cpu_opt.zero_grad(set_to_none=True)
        assert stream.total_dispatches == before and not torchvk.op_counts()["vulkan"]  # nothing ran on the GPU
        assert all(p.grad is None for p in model.parameters())
    for p, q in zip(model.parameters(), cpu_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
