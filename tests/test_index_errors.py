"""Out-of-range indices are errors, never zeros: raised at the next sync point with torch's
exception type, naming the op and the bad value; the runtime stays usable afterwards."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
import torchvk  # noqa: E402,F401

W = torch.arange(15, dtype=torch.float32).view(5, 3)


def _tvk(*xs):
    return [x.to("tvk") for x in xs]


def _raises_at_sync(exc, match, op):
    """Run op (no error yet: kernels run at the sync), then sync: exc with match."""
    out = op()
    with pytest.raises(exc, match=match):
        out.cpu()
    # the word is cleared and the runtime works: a valid op and a sync raise nothing
    torch.testing.assert_close(F.embedding(torch.tensor([4, 0], device="tvk"), W.to("tvk")).cpu(), W[[4, 0]])


@pytest.mark.parametrize("bad", [5, 7, -1])
def test_embedding_and_index_select(bad):
    idx = torch.tensor([1, bad, 0])
    w, i = _tvk(W, idx)
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(idx, W)  # torch's own error, which ours matches
    _raises_at_sync(IndexError, rf"embedding got index {bad}, .*\[0, 5\)", lambda: F.embedding(i, w))
    _raises_at_sync(IndexError, rf"index_select got index {bad}, .*\[0, 5\)", lambda: w.index_select(0, i))
    _raises_at_sync(IndexError, rf"index_select got index {bad}, .*\[0, 3\)", lambda: w.index_select(1, i))
    _raises_at_sync(IndexError, rf"embedding got index {bad}", lambda: F.embedding(i.int(), w))  # int32 indices


def test_valid_indices_match_cpu():
    idx = torch.tensor([[4, 0], [2, 2]])
    w, i = _tvk(W, idx)
    torch.testing.assert_close(F.embedding(i, w).cpu(), F.embedding(idx, W))
    torch.testing.assert_close(F.embedding(i.int(), w).cpu(), F.embedding(idx.int(), W))
    flat = torch.tensor([2, 0, 2], dtype=torch.int32)
    big = torch.tensor([[2 ** 40 + 1, 3], [5, 2 ** 53 + 7], [-9, 1]])  # int64 values float32 cannot hold
    half = torch.tensor([[1.5, -2.25, 3.0]], dtype=torch.float16)
    cases = [(W, 1, flat), (W, -2, flat), (big, 0, flat), (big, 1, flat[:2] % 2), (half, 1, flat),
             (torch.tensor(3.0), 0, torch.tensor([0])), (torch.tensor(3.0), -1, torch.tensor(0)),
             (W, 0, torch.tensor([], dtype=torch.int64)), (torch.empty(0, 3), 1, flat), (W[:, 0], 0, torch.tensor(4))]
    for x, dim, index in cases:
        got = torch.index_select(x.to("tvk"), dim, index.to("tvk")).cpu()
        ref = torch.index_select(x, dim, index)
        assert got.shape == ref.shape and got.dtype == ref.dtype and torch.equal(got, ref), (x.shape, dim, index)


def test_index_select_argument_errors():
    w = W.to("tvk")
    with pytest.raises(IndexError, match="Index is supposed to be a vector"):
        w.index_select(0, torch.zeros(1, 1, dtype=torch.int64, device="tvk"))
    with pytest.raises(RuntimeError, match="Index to scalar can have only 1 value"):
        torch.tensor(3.0, device="tvk").index_select(0, torch.tensor([0, 0], device="tvk"))
    with pytest.raises(IndexError, match="Dimension out of range"):
        w.index_select(2, torch.tensor([0], device="tvk"))


@pytest.mark.parametrize("bad", [3, -1])
def test_gather_and_scatter(bad):
    idx = torch.tensor([[0], [bad], [2], [1], [0]])
    w, i, src = _tvk(W, idx, -W[:, :1])
    with pytest.raises(RuntimeError, match=rf"index {bad} is out of bounds for dimension 1 with size 3"):
        W.gather(1, idx)  # torch's own error, which ours matches
    for run, name in [(lambda: w.gather(1, i), "gather"), (lambda: w.scatter(1, i, src), "scatter"),
                      (lambda: w.scatter(1, i, 2.5), "scatter")]:
        message = rf"index {bad} is out of bounds for dimension 1 with size 3 \({name}\)"
        with pytest.raises(RuntimeError, match=message) as err:
            run().cpu()
        assert not isinstance(err.value, IndexError)  # torch raises RuntimeError for these


def test_gather_and_scatter_valid_match_cpu():
    good = torch.tensor([[0], [2], [2], [1], [0]])
    w, g = _tvk(W, good)
    torch.testing.assert_close(w.gather(1, g).cpu(), W.gather(1, good))
    torch.testing.assert_close(w.scatter(1, g, 2.5).cpu(), W.scatter(1, good, 2.5))
    torch.testing.assert_close(w.gather(1, g[:2]).cpu(), W.gather(1, good[:2]))  # index shorter than self in dim 0
    torch.testing.assert_close(w.gather(0, g[:1].T[:, :2]).cpu(), W.gather(0, good[:1].T[:, :2]))
    s, z = torch.tensor(3.0), torch.tensor(0)
    torch.testing.assert_close(s.to("tvk").gather(0, z.to("tvk")).cpu(), s.gather(0, z))
    torch.testing.assert_close(s.to("tvk").scatter(0, z.to("tvk"), 2.5).cpu(), s.scatter(0, z, 2.5))


@pytest.mark.parametrize("bad", [4, -1])
def test_nll_loss_and_cross_entropy(bad):
    x = torch.randn(3, 4)
    t = torch.tensor([1, bad, 3])
    xd, td = _tvk(x, t)
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        F.cross_entropy(x, t)  # torch's own error, which ours matches
    _raises_at_sync(IndexError, rf"Target {bad} is out of bounds: nll_loss .*\[0, 4\)", lambda: F.cross_entropy(xd, td))
    _raises_at_sync(IndexError, rf"Target {bad} is out of bounds",
                    lambda: F.nll_loss(F.log_softmax(xd, 1), td, reduction="none"))
    x4, t4 = torch.randn(1, 4, 2, 2), torch.tensor([[[0, 1], [bad, 2]]])
    _raises_at_sync(IndexError, rf"Target {bad} is out of bounds: nll_loss2d", lambda: F.cross_entropy(*_tvk(x4, t4)))
    # ignore_index is not an error, wherever it lies
    for ignore, tt in ((bad, t), (-100, torch.tensor([1, -100, 3])), (2, torch.tensor([2, 0, 2]))):
        torch.testing.assert_close(F.cross_entropy(xd, tt.to("tvk"), ignore_index=ignore).cpu(),
                                   F.cross_entropy(x, tt, ignore_index=ignore))


def test_error_waits_for_the_sync_and_the_first_one_wins():
    w = W.to("tvk")
    F.embedding(torch.tensor([9], device="tvk"), w)  # recorded, not run: nothing raised yet
    w.gather(1, torch.tensor([[7]] * 5, device="tvk"))
    with pytest.raises(IndexError, match="embedding got index 9") as err:
        torch.tvk.synchronize()
    assert (err.value.op, err.value.value, err.value.bound) == ("embedding", 9, 5)
    torch.tvk.synchronize()  # reported once


def test_check_kernel_strides_over_long_index_arrays(device):
    """tvk_kernels level: int64 and int32 indices, more indices than one pass of the grid, ignore."""
    from tvk_kernels.kernels.index_check import MAX_GROUPS, WG, OutOfRangeError, check_indices, site

    n = MAX_GROUPS * WG + 3
    sid = site(device, "test_op", "dim", 0)
    for dtype in (np.int64, np.int32):
        idx = np.arange(n, dtype=dtype) % 7
        buf = device.upload(idx)
        check_indices(device, buf, n, 7, sid, int32=dtype == np.int32)
        device.synchronize()  # all valid
        idx[-1] = -5  # the last one: only reached by striding
        buf = device.upload(idx)
        check_indices(device, buf, n, 7, sid, int32=dtype == np.int32, ignore=-5)
        device.synchronize()  # ignored
        check_indices(device, buf, n, 7, sid, int32=dtype == np.int32)
        with pytest.raises(OutOfRangeError, match=r"index -5 is out of bounds for dimension 0 with size 7 \(test_op\)"):
            device.synchronize()


def test_compiled_loss_with_a_bad_target():
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 4).to("tvk")
    closs = torchvk.compile(model, loss_fn=F.cross_entropy)
    x = torch.randn(3, 6)
    good, bad = torch.tensor([0, 3, 1]), torch.tensor([0, 4, 1])
    ref = F.cross_entropy(torch.nn.functional.linear(x, model.weight.detach().cpu(), model.bias.detach().cpu()), good)
    for _ in range(2):  # traced and run, then recorded and replayed
        loss = closs(x.to("tvk"), good.to("tvk"))
        loss.backward()
        torch.testing.assert_close(loss.cpu(), ref)
    replays = closs.compile_stats()[0]["forward"]["replays"]
    loss = closs(x.to("tvk"), bad.to("tvk"))
    assert closs.compile_stats()[0]["forward"]["replays"] == replays + 1  # the check ran in a recorded graph
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        loss.item()
    torch.testing.assert_close(closs(x.to("tvk"), good.to("tvk")).cpu(), ref)
