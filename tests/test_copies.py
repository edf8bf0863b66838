"""resize_ and moving tensors to tvk, against torch CPU."""
import pytest
import torch

import torchvk  # noqa: F401


def test_resize_grows_the_storage_for_every_view():
    results = {}
    for device in ("cpu", "tvk"):
        x = torch.arange(6.0, device=device)
        view = x[2:]
        x.resize_(3, 4)
        x[1:].fill_(7.0)  # the elements past the old end are uninitialised: write them first
        results[device] = (x.shape, x.stride(), x.storage_offset(), x.cpu(), view.cpu())
    cpu, tvk = results["cpu"], results["tvk"]
    assert tvk[:3] == cpu[:3]
    torch.testing.assert_close(tvk[3], cpu[3])
    torch.testing.assert_close(tvk[4], cpu[4])  # the old view sees the grown storage, as on CPU


def test_resize_keeps_or_sets_strides_as_cpu_does():
    for device in ("cpu", "tvk"):
        t = torch.ones(2, 3, device=device).t()
        t.resize_(3, 2)  # same shape: strides kept
        kept = t.stride()
        t.resize_(2, 3)  # new shape: contiguous
        c = torch.zeros(2, 3, 4, 5, device=device)
        c.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
        shrunk = torch.arange(10.0, device=device)[4:]
        shrunk.resize_(2)  # the offset stays
        if device == "cpu":
            expected = (kept, t.stride(), c.stride(), shrunk.storage_offset(), shrunk.tolist())
    assert (kept, t.stride(), c.stride(), shrunk.storage_offset(), shrunk.tolist()) == expected


def test_out_argument_of_another_shape_is_resized():
    a = torch.randn(3, 4)
    out = torch.empty(0, device="tvk")
    torch.exp(a.to("tvk"), out=out)
    torch.testing.assert_close(out.cpu(), a.exp())


@pytest.mark.parametrize("layout", ["sparse_csr", "sparse_coo"])
def test_a_sparse_tensor_cannot_move_to_tvk(layout):
    x = torch.eye(3)
    x = x.to_sparse_csr() if layout == "sparse_csr" else x.to_sparse()
    with pytest.raises(TypeError, match=f"only strided .* not torch.{layout} .*to_dense"):
        x.to("tvk")


def test_functional_copy_broadcasts_and_casts_like_the_cpu():
    """aten.copy (the functional copy_ in compiled graphs): self's geometry, src broadcast and cast."""
    self_ = torch.randn(4, 6).t()  # a transposed destination keeps its layout
    for src in (torch.randn(4), torch.randn(6, 4).to(torch.float16), torch.tensor(2.5)):
        want = torch.ops.aten.copy.default(self_, src)
        got = torch.ops.aten.copy.default(self_.to("tvk"), src.to("tvk"))
        assert got.shape == want.shape and got.stride() == want.stride() and got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)
