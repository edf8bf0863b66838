"""torch.autocast("tvk") with CUDA's op policy, and torch.amp.GradScaler("tvk") against CPU's GradScaler."""
import copy

import pytest
import torch
import torch.nn.functional as F

import torchvk  # noqa: F401

F32 = torch.float32
HALVES = [torch.float16, torch.bfloat16]


def test_autocast_is_available_with_a_default_dtype():
    assert torch.amp.autocast_mode.is_autocast_available("tvk")
    assert torch.get_autocast_dtype("tvk") == torch.float16  # CUDA's default
    assert torch.tvk.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3)
        self.fc = torch.nn.Linear(2 * 2 * 2, 5)
        self.norm = torch.nn.LayerNorm(5)

    def forward(self, x, y):
        h = F.relu(self.conv(x))
        pooled = F.max_pool2d(h, 2)
        logits = self.fc(pooled.flatten(1))
        return {"conv": h, "pool": pooled, "linear": logits, "mm": logits @ logits.t(), "softmax": torch.softmax(logits, 1),
                "log_softmax": F.log_softmax(logits, 1), "layer_norm": self.norm(logits), "exp": logits.exp(),
                "sum": logits.sum(), "cat": torch.cat([logits, y]), "loss": F.cross_entropy(logits, y.argmax(1)),
                "mse": F.mse_loss(logits, y)}


# the result dtypes CUDA autocast gives (None: the autocast dtype)
CUDA_RULES = {"conv": None, "pool": None, "linear": None, "mm": None, "softmax": F32, "log_softmax": F32, "layer_norm": F32,
              "exp": F32, "sum": F32, "cat": F32, "loss": F32, "mse": F32}


@pytest.mark.parametrize("dtype", HALVES)
def test_forward_dtypes_follow_cuda_policy(dtype):
    torch.manual_seed(0)
    net, x, y = Net(), torch.randn(3, 1, 6, 6), torch.randn(3, 5)
    tnet = copy.deepcopy(net).to("tvk")
    with torch.autocast("tvk", dtype=dtype):
        got = tnet(x.to("tvk"), y.to("tvk"))
    for name, rule in CUDA_RULES.items():
        assert got[name].dtype == (dtype if rule is None else rule), name
    # values: CPU float32 on the same casts (conv and linear on 16-bit inputs, the rest in float32)
    conv = F.relu(F.conv2d(x.to(dtype), net.conv.weight.to(dtype), net.conv.bias.to(dtype)))
    logits = F.linear(F.max_pool2d(conv, 2).flatten(1), net.fc.weight.to(dtype), net.fc.bias.to(dtype))
    torch.testing.assert_close(got["linear"].cpu(), logits, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got["softmax"].cpu(), torch.softmax(logits.float(), 1), rtol=1e-3, atol=1e-5)
    # outside the region: float32 again
    assert tnet(x.to("tvk"), y.to("tvk"))["linear"].dtype == F32


def test_autocast_disabled_and_cpu_tensors_untouched():
    a = torch.randn(2, 3, device="tvk")
    with torch.autocast("tvk", dtype=torch.bfloat16, enabled=False):
        assert (a @ a.t()).dtype == F32
    with torch.autocast("tvk", dtype=torch.bfloat16):
        assert (a.cpu() @ a.cpu().t()).dtype == F32  # CPU tensors follow CPU autocast, which is off here
        assert (a @ a.t()).dtype == torch.bfloat16
        assert (a @ a.t()).float().sum().dtype == F32


def test_binary_cross_entropy_is_refused_as_on_cuda():
    p = torch.rand(4, device="tvk")
    with torch.autocast("tvk"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        F.binary_cross_entropy(p, p)


@pytest.mark.parametrize("grad_dtype", [F32, torch.float16, torch.bfloat16])
def test_unscale_op_matches_cpu(grad_dtype):
    grads = [torch.tensor([1.0, -2.0, 4.0]), torch.tensor([[8.0, 0.5, 3.0], [1.0, 2.0, -6.0]]),
             torch.tensor([1.0, float("inf")]), torch.tensor([float("nan")])]
    for picked in ([0, 1], [0, 2], [3, 1]):
        results = []
        for device in ("cpu", "tvk"):
            gs = [grads[i].to(grad_dtype).to(device, copy=True) for i in picked]
            gs = [g.t().contiguous().t() if g.dim() == 2 else g for g in gs]  # column-major: strided
            assert not all(g.is_contiguous() for g in gs) or 1 not in picked
            found = torch.zeros((), device=device)
            torch._amp_foreach_non_finite_check_and_unscale_(gs, found, torch.full((), 0.25, device=device))
            results.append((found.item(), [g.cpu() for g in gs]))
        assert results[0][0] == results[1][0]
        for c, t in zip(results[0][1], results[1][1]):
            torch.testing.assert_close(t, c, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("bad", [None, 0, 3, 5], ids=["finite", "inf_first", "nan_middle", "inf_strided"])
def test_unscale_of_many_grads_is_one_dispatch(bad):
    """A model's float32 gradients are unscaled and checked by one kernel (templates/optim.comp, its unscale op),
    strided and 16-bit ones by their own: the same grads and found_inf as CPU, wherever the non-finite value is."""
    import torchvk.profiler

    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(n, generator=gen) for n in (7, 300, 1, 4097, 64)] + [torch.randn(5, 6, generator=gen).t()]
    grads.append(torch.randn(9, generator=gen).half())
    if bad is not None:
        grads[bad][(grads[bad].shape[0] // 2,) * grads[bad].dim()] = float("inf") if bad != 3 else float("nan")
    results = []
    for device in ("cpu", "tvk"):
        gs = [g.to(device, copy=True) for g in grads]
        gs[5] = grads[5].t().to(device, copy=True).t()  # strided: column-major, as built
        found = torch.zeros((), device=device)
        with torchvk.profiler.profile() as prof:
            torch._amp_foreach_non_finite_check_and_unscale_(gs, found, torch.full((), 0.125, device=device))
            results.append((found.item(), [g.cpu() for g in gs]))
    assert results[0][0] == results[1][0] == (0.0 if bad is None else 1.0)
    for c, t in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(t, c, equal_nan=True, rtol=0, atol=0)
    labels = [k.name for k in prof.kernels]
    assert labels.count("amp.unscale") == 3, labels  # the five contiguous float32 grads, the strided one, the fp16 one


@pytest.mark.parametrize("found_inf,tracker,scale", [(1.0, 1, 1024.0), (0.0, 0, 1024.0), (0.0, 2, 1024.0),
                                                     (0.0, 2, 3e38)])
def test_update_scale_op_matches_cpu(found_inf, tracker, scale):
    results = []
    for device in ("cpu", "tvk"):
        s = torch.full((), scale, device=device)
        t = torch.full((), tracker, dtype=torch.int32, device=device)
        torch._amp_update_scale_(s, t, torch.full((), found_inf, device=device), 2.0, 0.5, 3)
        results.append((s.item(), t.item()))
    assert results[1] == results[0]


@pytest.mark.parametrize("dtype", HALVES)
def test_grad_scaler_loop_skips_the_inf_step_like_cpu(dtype):
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x, y = torch.randn(4, 6), torch.tensor([0, 1, 2, 1])
    runs = {}
    for device in ("cpu", "tvk"):
        m = copy.deepcopy(net).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 8, growth_interval=2)
        history = []
        for step in range(3):
            opt.zero_grad()
            with torch.autocast(device, dtype=dtype):
                loss = F.cross_entropy(m(x.to(device)), y.to(device))
            scaler.scale(loss).backward()
            if step == 1:
                m[0].weight.grad[0, 0] = float("inf")
            before = m[2].weight.detach().cpu().clone()
            scaler.step(opt)
            scaler.update()
            history.append((scaler.get_scale(), torch.equal(before, m[2].weight.detach().cpu())))
        runs[device] = history, [p.detach().cpu() for p in m.parameters()]
    # CPU autocast keeps its own policy (it leaves some ops in 16 bits that CUDA's runs in float32),
    # so the weights agree to the autocast dtype's precision; the scaler's decisions exactly
    assert runs["tvk"][0] == runs["cpu"][0]
    assert [skipped for _, skipped in runs["tvk"][0]] == [False, True, False]
    assert [s for s, _ in runs["tvk"][0]] == [256.0, 128.0, 128.0]
    for c, t in zip(runs["cpu"][1], runs["tvk"][1]):
        torch.testing.assert_close(t, c, rtol=2e-2, atol=2e-3)


def test_lstm_runs_its_cells_in_fp16_under_autocast_as_on_cuda():
    torch.manual_seed(0)
    ref = torch.nn.LSTM(4, 8, num_layers=2, batch_first=True)
    model = copy.deepcopy(ref).to("tvk")
    x = torch.randn(2, 5, 4)
    with torch.autocast("tvk", dtype=torch.float16):
        y, _ = model(x.to("tvk"))
    assert y.dtype == torch.float16
    torch.testing.assert_close(y.float().cpu(), ref(x)[0], rtol=2e-3, atol=2e-3)
    y.float().sum().backward()
    assert model.weight_hh_l0.grad.dtype == torch.float32 and torch.isfinite(model.weight_hh_l0.grad.cpu()).all()
    assert torchvk.op_counts()["cpu"] == {}


class _CastCount(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the casts (aten._to_copy) of one tensor."""

    def __init__(self, of):
        super().__init__()
        self.of, self.count = of, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and args and args[0] is self.of:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_a_weight_used_three_times_is_cast_once_per_region_as_on_cuda():
    """CUDA's autocast casts a float32 leaf weight once per autocast region (its cast cache): a layer applied
    three times casts its weight once, the region's end drops the cast, the gradient sums all three uses;
    cache_enabled=False casts at every use; a weight changed in place inside the region is cast again."""
    torch.manual_seed(0)
    ref = torch.nn.Linear(8, 8)
    layer = copy.deepcopy(ref).to("tvk")
    x = torch.randn(4, 8)

    def three(m, xx):
        return m(m(m(xx)))

    for cache, casts in ((True, 1), (False, 3)):
        with _CastCount(layer.weight) as counted, torch.autocast("tvk", dtype=torch.float16, cache_enabled=cache):
            y = three(layer, x.to("tvk"))
        assert counted.count == casts
    assert torchvk.autocast._weight_casts() == {}  # the region's end dropped the casts
    y.float().sum().backward()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        three(ref, x).sum().backward()
    torch.testing.assert_close(layer.weight.grad.cpu(), ref.weight.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(y.float().cpu(), three(ref, x), rtol=5e-3, atol=5e-3)
    with _CastCount(layer.weight) as counted, torch.autocast("tvk", dtype=torch.float16):
        before = layer(x.to("tvk"))
        with torch.no_grad():
            layer.weight.mul_(2)  # a new version: the kept cast is stale
        after = layer(x.to("tvk"))
    assert counted.count == 2
    bias = layer.bias.detach().cpu()
    torch.testing.assert_close(after.float().cpu() - bias, 2 * (before.float().cpu() - bias), rtol=5e-3, atol=5e-3)
