"""The `tvk` device: registration, transfers, views, printing, serialization, errors, memory."""
import io
import logging

import pytest
import torch

import torchvk
from tvk_kernels.errors import FreedBufferError, OutOfMemoryError


def test_registration_and_module_functions():
    assert torch.device("tvk").type == "tvk"
    assert torch.tvk.is_available() and torchvk.is_available()
    assert torch.tvk.device_count() >= 1
    assert torch.tvk.current_device() == 0
    torch.tvk.synchronize()
    torchvk.synchronize()
    torch.tvk.manual_seed(3)
    assert isinstance(torch.tvk.get_device_name(), str)
    assert torch.accelerator.current_accelerator().type == "tvk"
    t = torch.ones(2, device="tvk")
    assert t.device == torch.device("tvk", 0) and t.is_tvk
    assert torch.tvk.memory_allocated() == torchvk.memory_allocated() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.int32, torch.float16])
@pytest.mark.parametrize("shape", [(), (1,), (7,), (127,), (3, 5, 7)])
def test_round_trip(dtype, shape):
    x = (torch.randn(shape) * 10).to(dtype)
    t = x.to("tvk")
    assert t.dtype == dtype and t.shape == x.shape
    assert torch.equal(t.cpu(), x)
    if x.numel() == 1:
        assert t.item() == x.item()
    assert t.tolist() == x.tolist()


def test_factories():
    torch.manual_seed(0)
    assert torch.equal(torch.zeros(3, 2, device="tvk").cpu(), torch.zeros(3, 2))
    assert torch.equal(torch.ones(5, dtype=torch.int64, device="tvk").cpu(), torch.ones(5, dtype=torch.int64))
    assert torch.equal(torch.full((2, 3), 2.5, device="tvk").cpu(), torch.full((2, 3), 2.5))
    assert torch.equal(torch.arange(7, device="tvk").cpu(), torch.arange(7))
    assert torch.equal(torch.tensor([[1, 2], [3, 4]], device="tvk").cpu(), torch.tensor([[1, 2], [3, 4]]))
    assert torch.equal(torch.eye(3, device="tvk").cpu(), torch.eye(3))
    e = torch.empty_strided((2, 3), (1, 2), device="tvk")
    assert e.stride() == (1, 2)
    r = torch.randn(4000, device="tvk").cpu()
    assert abs(r.mean().item()) < 0.1 and abs(r.std().item() - 1) < 0.1
    u = torch.rand(4000, device="tvk").cpu()
    assert 0 <= u.min().item() and u.max().item() < 1
    torch.manual_seed(5)
    a = torch.randn(10, device="tvk").cpu()
    torch.manual_seed(5)
    assert torch.equal(a, torch.randn(10, device="tvk").cpu())
    z = torch.ones(3, device="tvk")
    for f, ref in ((torch.zeros_like, torch.zeros(3)), (torch.ones_like, torch.ones(3)),
                   (lambda t: torch.full_like(t, 7.0), torch.full((3,), 7.0)),
                   (lambda t: t.new_zeros(3), torch.zeros(3))):
        assert torch.equal(f(z).cpu(), ref)
    ri = torch.randint(0, 5, (200,), device="tvk").cpu()
    assert ri.min() >= 0 and ri.max() <= 4 and ri.dtype == torch.int64


def test_views_share_storage():
    x = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    t = x.to("tvk")
    views = [t.view(6, 4), t.reshape(24), t.t(), t.transpose(0, 1), t.permute(1, 0), t[1:3], t[:, ::2], t[2],
             t.select(1, 3), t.narrow(1, 1, 3), t.unsqueeze(0), t.unsqueeze(2).squeeze(2), t.expand(2, 4, 6),
             t.as_strided((2, 2), (1, 6), 1), t.detach(), t.alias() if hasattr(t, "alias") else t.view_as(t),
             *t.unbind(0), *t.split(2), *t.chunk(3, dim=1)]
    for v in views:
        assert v._tvk is t._tvk, v.shape
    t[1:3, ::2].fill_(-1.0)
    x[1:3, ::2] = -1.0
    assert torch.equal(t.cpu(), x)
    # non-contiguous inputs give torch's values
    assert torch.equal(t.t().cpu(), x.t())
    assert torch.equal(t.t().contiguous().cpu(), x.t().contiguous())
    assert torch.equal((t.t() * 2 + t[:, 0]).cpu(), x.t() * 2 + x[:, 0])


def test_copies_between_devices_and_dtypes():
    x = torch.randn(5, 7)
    t = x.to("tvk")
    dst = torch.empty(7, 5, device="tvk")
    dst.copy_(t.t())
    assert torch.equal(dst.cpu(), x.t())
    dst2 = torch.zeros(7, 5, device="tvk").t()   # non-contiguous destination from CPU
    dst2.copy_(x)
    assert torch.equal(dst2.cpu(), x)
    cpu = torch.empty(5, 7)
    cpu.copy_(t)
    assert torch.equal(cpu, x)
    assert torch.equal(t.long().cpu(), x.long())
    assert torch.equal(t.half().cpu(), x.half())
    assert torch.equal((t > 0).cpu(), x > 0)
    assert torch.equal(t.to(torch.int32).to(torch.float32).cpu(), x.to(torch.int32).float())


def test_printing():
    t = torch.tensor([[1.0, 2.0], [3.0, 4.5]], device="tvk")
    s = repr(t)
    assert s.startswith("tensor([[1.0000, 2.0000],") and "device='tvk:0'" in s
    assert "dtype=torch.int64" not in repr(torch.tensor([1, 2], device="tvk"))
    assert "requires_grad=True" in repr(torch.ones(2, device="tvk", requires_grad=True))
    assert "grad_fn=<MulBackward0>" in repr(torch.ones(2, device="tvk", requires_grad=True) * 2)
    assert "Parameter containing" in repr(torch.nn.Linear(2, 2).to("tvk").weight)
    assert str(torch.zeros(0, device="tvk")).startswith("tensor([]")


def test_state_dict_save_load_via_cpu(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("tvk")
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, map_location="cpu", weights_only=True)
    assert all(v.device.type == "cpu" for v in sd.values())
    assert torch.equal(sd["0.weight"], model[0].weight.detach().cpu())
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).to("tvk")
    other.load_state_dict(sd)
    assert torch.equal(other[0].weight.cpu(), model[0].weight.cpu())
    assert isinstance(other[0].weight, torch.nn.Parameter) and other[0].weight.device.type == "tvk"
    path = tmp_path / "t.pt"
    torch.save(torch.arange(5, device="tvk"), path)
    loaded = torch.load(path)  # back on tvk, as a CUDA tensor comes back on CUDA
    assert loaded.device.type == "tvk" and torch.equal(loaded.cpu(), torch.arange(5))


def test_strict_mode_names_op():
    torchvk.set_cpu_fallback(False)
    t = torch.randn(3, 4, device="tvk")
    with pytest.raises(NotImplementedError) as e:
        torch.igamma(t, t)  # an op without a Vulkan kernel (regularized lower incomplete gamma)
    msg = str(e.value)
    assert "aten.igamma" in msg and "float32[3, 4]" in msg and "TVK_CPU_FALLBACK=1" in msg


def test_fallback_mode_counts_cpu_ops(caplog):
    x = torch.rand(3, 4) + 0.5
    t = x.to("tvk")
    torchvk.reset_op_counts()
    torchvk.set_cpu_fallback(True)
    try:
        with caplog.at_level(logging.WARNING, logger="torchvk"):
            r1 = torch.igamma(t, t)  # an op without a Vulkan kernel
            r2 = torch.igamma(t[1:], t[1:])
        t2 = t.clone()
        t2.igamma_(t)   # in-place op written back to the tvk tensor
    finally:
        torchvk.set_cpu_fallback(False)
    assert r1.device.type == "tvk"
    assert torch.allclose(r1.cpu(), torch.igamma(x, x)) and torch.allclose(r2.cpu(), torch.igamma(x[1:], x[1:]))
    assert torch.allclose(t2.cpu(), torch.igamma(x, x))
    counts = torchvk.op_counts()
    assert counts["cpu"]["aten.igamma.default"] == 2
    assert sum("aten.igamma.default" in r.message for r in caplog.records) == 1  # logged once


def test_op_counts():
    torchvk.reset_op_counts()
    a = torch.ones(3, device="tvk")
    (a + a).sum()
    c = torchvk.op_counts()
    assert c["vulkan"]["aten.add.Tensor"] == 1 and c["vulkan"]["aten.sum.default"] == 1 and c["cpu"] == {}
    torchvk.reset_op_counts()
    assert torchvk.op_counts() == {"vulkan": {}, "cpu": {}}


def test_out_of_memory_is_torch_oom_and_recoverable():
    torch.tvk.synchronize()
    torchvk.empty_cache()
    before = torchvk.memory_reserved()
    torchvk.set_memory_limit(before + (8 << 20))
    try:
        with pytest.raises(torch.OutOfMemoryError) as e:
            torch.empty(64 << 20, dtype=torch.uint8 if False else torch.float32, device="tvk")
        assert isinstance(e.value, OutOfMemoryError) and "out of memory" in str(e.value)
        small = torch.ones(1000, device="tvk") * 2   # still usable under the cap
        assert small.sum().item() == 2000
    finally:
        torchvk.set_memory_limit(None)
    big = torch.ones(1 << 20, device="tvk")
    assert big.sum().item() == float(1 << 20)


def test_memory_stats():
    torchvk.reset_peak_memory_stats()
    base = torchvk.memory_allocated()
    t = torch.empty(1 << 18, device="tvk")
    assert torchvk.memory_allocated() >= base + (1 << 20)
    assert torchvk.max_memory_allocated() >= torchvk.memory_allocated()
    assert torchvk.memory_reserved() >= torchvk.memory_allocated()
    del t
    assert torchvk.memory_allocated() == base
    torchvk.empty_cache()
    assert torch.tvk.max_memory_allocated() >= base + (1 << 20)


def test_mixing_devices_errors():
    a = torch.ones(3, device="tvk")
    with pytest.raises(RuntimeError, match="tvk:0 and cpu"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="tvk:0 and cpu"):
        torch.mm(torch.ones(2, 3, device="tvk"), torch.ones(3, 2))
    # 0-dim CPU tensors are scalars, as in torch
    assert torch.equal((a * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))


def test_unsupported_dtype_is_type_error():
    with pytest.raises(TypeError, match="float64"):
        torch.ones(3, dtype=torch.float64).to("tvk")
    with pytest.raises(TypeError, match="float64.*aten"):
        torch.zeros(2, device="tvk", dtype=torch.float64)


def test_freed_buffer_raises():
    t = torch.ones(4, device="tvk")
    v = t[1:]
    t._tvk.free()
    with pytest.raises(FreedBufferError):
        v.cpu()
    with pytest.raises(FreedBufferError):
        v + 1


def test_module_to_and_deferred_execution():
    m = torch.nn.Linear(3, 2).to("tvk")
    assert m.weight.device.type == "tvk" and isinstance(m.weight, torch.nn.Parameter)
    dev = torch.tvk.get_device_properties
    stream = torchvk._storage.get_device().stream
    torch.tvk.synchronize()
    submits = stream.submits
    y = m(torch.ones(4, 3, device="tvk"))
    z = (y * 2).relu()
    assert stream.submits == submits or stream.blocking  # recorded, not submitted
    z.cpu()
    assert stream.submits > submits
    assert dev() is not None
