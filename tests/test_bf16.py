"""bfloat16 tensors on tvk: 16-bit storage, float32 arithmetic, checked against torch CPU's bfloat16.

CPU bfloat16 ops also compute in float32 and round once, so copies, add/mul and comparisons
match bit for bit; GPU exp/div may differ from CPU's float32 by a float32 ulp, which can move a
result by one bfloat16 ulp (rtol 2**-7 there).
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import torchvk  # noqa: F401

BF16 = torch.bfloat16
ONE_ULP = dict(rtol=2 ** -7, atol=1e-6)


def special_values():
    torch.manual_seed(0)
    regular = torch.randn(61) * 100
    # ties of the float32 -> bfloat16 rounding (round to even), overflow to inf, NaN, subnormals, -0
    odd = torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.4e38, float("nan"), float("inf"), float("-inf"), 1e-40, -0.0])
    return torch.cat([regular, odd])


def bits(t):
    """The bit patterns, one NaN pattern for every NaN (NaN payloads carry no meaning; CPU's
    vectorized casts give 0xffff, its scalar ones 0x7fc0)."""
    return torch.where(t.isnan(), torch.full_like(t, float("nan")), t).view(torch.int16)


def test_is_bf16_supported():
    from tvk_kernels.kernels import matmul_coopmat2
    from tvk_kernels.runtime import get_device

    assert torch.tvk.is_bf16_supported() is True  # 16-bit storage on every device here (lavapipe too)
    device = get_device(0)
    native = matmul_coopmat2.verified(device, "bfloat16") is not None  # bf16 cooperative matrices
    assert torch.tvk.is_bf16_supported(including_emulation=False) is native
    if not device.facts.features.get("bfloat16_cooperative_matrix"):  # lavapipe: no native bf16 arithmetic
        assert native is False


def test_creation():
    x = torch.randn(3, device="tvk").to(BF16)
    assert x.dtype == BF16 and x.device.type == "tvk"
    assert torch.equal(x.cpu(), x.cpu().float().to(BF16))
    assert torch.equal(torch.full((2, 3), 1.7, dtype=BF16, device="tvk").cpu(), torch.full((2, 3), 1.7, dtype=BF16))
    assert torch.equal(torch.zeros(4, dtype=BF16, device="tvk").cpu(), torch.zeros(4, dtype=BF16))
    assert torch.equal(torch.arange(5, device="tvk").to(BF16).cpu(), torch.arange(5).to(BF16))


def test_float32_to_bf16_rounds_as_torch():
    v = special_values()
    got = v.to("tvk").to(BF16).cpu()
    assert torch.equal(bits(got), bits(v.to(BF16)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int32, torch.bool])
def test_conversions_both_ways(dtype):
    v = special_values()
    if not dtype.is_floating_point:
        v = torch.nan_to_num(v, 0.0, 1e4, -1e4)  # int casts of NaN/inf are undefined in torch too
    src = v.to(dtype)
    assert torch.equal(bits(src.to("tvk").to(BF16).cpu()), bits(src.to(BF16)))
    b = v.to(BF16)
    if not dtype.is_floating_point:
        b = torch.nan_to_num(b, 0.0, 1e4, -1e4)
    back = b.to("tvk").to(dtype).cpu()
    ref = b.to(dtype)
    assert back.dtype == dtype
    assert torch.equal(back, ref) or (dtype.is_floating_point and torch.equal(back.isnan(), ref.isnan())
                                      and torch.equal(back.nan_to_num(), ref.nan_to_num()))


def test_copies_keep_bits_and_strides():
    b = torch.randn(6, 5).to(BF16)
    t = b.to("tvk")
    assert torch.equal(bits(t.cpu()), bits(b))
    assert torch.equal(t.t().contiguous().cpu(), b.t().contiguous())
    assert torch.equal(t[::2, 1:].cpu(), b[::2, 1:])
    out = torch.empty(5, 6, dtype=BF16, device="tvk")
    out.copy_(t.t())
    assert torch.equal(out.cpu(), b.t())
    out.copy_(b.t().float())  # CPU float32 -> tvk bfloat16
    assert torch.equal(out.cpu(), b.t())


def test_elementwise_matches_cpu():
    torch.manual_seed(1)
    a, b = torch.randn(4, 7).to(BF16), torch.randn(7).to(BF16)
    ta, tb = a.to("tvk"), b.to("tvk")
    for f in (lambda x, y: x + y, lambda x, y: x * y - 2, lambda x, y: torch.where(x > y, x, y),
              lambda x, y: F.relu(x) * 3, lambda x, y: torch.maximum(x, y), lambda x, y: (x == y) | (x < 0)):
        got, ref = f(ta, tb), f(a, b)
        assert got.dtype == ref.dtype
        assert torch.equal(got.cpu(), ref)
    for f in (lambda x, y: x / y, lambda x, y: torch.exp(x), lambda x, y: torch.sigmoid(x) + y, F.gelu):
        got, ref = f(ta, tb) if f is not F.gelu else f(ta), f(a, b) if f is not F.gelu else f(a)
        assert got.dtype == BF16
        torch.testing.assert_close(got.cpu(), ref, **ONE_ULP)
    mixed = ta + tb.float()  # promotes to float32 as on CPU
    assert mixed.dtype == torch.float32 and torch.equal(mixed.cpu(), a + b.float())


def test_reductions_and_softmax():
    torch.manual_seed(2)
    a = torch.randn(6, 9).to(BF16)
    t = a.to("tvk")
    for f in (lambda x: x.sum(), lambda x: x.sum(1), lambda x: x.mean(0), lambda x: x.amax(1), lambda x: x.max(),
              lambda x: x.max(0).values, lambda x: x.var(1), lambda x: torch.softmax(x, 1),
              lambda x: torch.log_softmax(x, 0)):
        got, ref = f(t), f(a)
        assert got.dtype == ref.dtype == BF16
        torch.testing.assert_close(got.cpu(), ref, **ONE_ULP)
    assert torch.equal(t.argmax(1).cpu(), a.argmax(1))


def test_matmul_and_linear():
    torch.manual_seed(3)
    a, w, bias = torch.randn(5, 12).to(BF16), torch.randn(7, 12).to(BF16), torch.randn(7).to(BF16)
    got = F.linear(a.to("tvk"), w.to("tvk"), bias.to("tvk"))
    assert got.dtype == BF16
    torch.testing.assert_close(got.cpu(), F.linear(a, w, bias), **ONE_ULP)
    got = a.to("tvk") @ w.to("tvk").t()
    torch.testing.assert_close(got.cpu(), a @ w.t(), **ONE_ULP)
    bat = torch.randn(2, 3, 12).to(BF16)
    torch.testing.assert_close(torch.bmm(bat.to("tvk"), w.t().expand(2, 12, 7).to("tvk")).cpu(),
                               torch.bmm(bat, w.t().expand(2, 12, 7)), **ONE_ULP)


def test_conv_and_pooling_forward_and_backward():
    torch.manual_seed(6)
    x, w = torch.randn(2, 2, 8, 8).to(BF16), torch.randn(3, 2, 3, 3).to(BF16)
    results = []
    for device in ("cpu", "tvk"):
        xx, ww = x.to(device).detach().requires_grad_(), w.to(device).detach().requires_grad_()
        h = F.conv2d(xx, ww, padding=1)
        y = F.max_pool2d(h, 2) + F.avg_pool2d(h, 2) + F.adaptive_avg_pool2d(h, 4)
        y.square().sum().backward()
        assert y.dtype == xx.grad.dtype == ww.grad.dtype == BF16
        results.append([t.detach().cpu().float() for t in (h, y, xx.grad, ww.grad)])
    for c, t in zip(*results):  # float32 arithmetic on both sides; bfloat16 rounding of intermediates
        torch.testing.assert_close(t, c, rtol=2 ** -6, atol=2 ** -6 * c.abs().max().item())


def test_dropout_and_random_fills():
    torch.manual_seed(5)
    x = torch.randn(2000).to(BF16)
    t = x.to("tvk").requires_grad_()
    y = F.dropout(t, 0.25)
    y.sum().backward()
    y = y.detach().cpu()
    keep = y != 0
    assert y.dtype == BF16 and 0.7 < keep.float().mean().item() < 0.8
    torch.testing.assert_close(y[keep], (x.float() / 0.75).to(BF16)[keep], **ONE_ULP)
    g, scale = t.grad.cpu(), torch.tensor(1 / 0.75).to(BF16)
    assert g.dtype == BF16 and bool((g[keep] == scale).all()) and bool((g[~keep & (x != 0)] == 0).all())
    r = torch.rand(1000, device="tvk", dtype=BF16).cpu()
    assert r.dtype == BF16 and 0.0 <= r.min().item() and r.max().item() <= 1.0 and 0.4 < r.float().mean().item() < 0.6


def test_mlp_train_step_matches_cpu():
    torch.manual_seed(4)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(BF16)
    x, y = torch.randn(6, 8).to(BF16), torch.tensor([0, 1, 2, 3, 1, 0])
    results = []
    for device in ("cpu", "tvk"):
        m = copy.deepcopy(net).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            opt.zero_grad()
            loss = F.cross_entropy(m(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
        assert loss.dtype == BF16 and m[0].weight.grad.dtype == BF16 and m[0].weight.dtype == BF16
        results.append((loss.float().item(), [p.detach().cpu().float() for p in m.parameters()]))
    (cpu_loss, cpu_params), (tvk_loss, tvk_params) = results
    assert abs(cpu_loss - tvk_loss) <= 2 ** -7 * abs(cpu_loss)
    for c, t in zip(cpu_params, tvk_params):  # a few bfloat16 ulps after two steps
        torch.testing.assert_close(t, c, rtol=2 ** -6, atol=2 ** -8)


def test_unsupported_dtype_error_is_clear():
    with pytest.raises(TypeError, match=r"float64.*supported.*bfloat16"):
        torch.zeros(2, device="tvk").double()
