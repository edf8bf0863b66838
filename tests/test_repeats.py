"""Repeated eager calls (torchvk/_repeat.py): a call with the key of an earlier one skips the
implementation's Python, and must still give torch's results and errors whatever the data, the
storage offsets, the aliasing of its arguments, random draws or values read back."""
import pytest
import torch

import torchvk
from torchvk import _dispatch
from torchvk._repeat import Direct, Repeat
from torchvk.aten import elementwise as aten_elementwise

aten = torch.ops.aten


def _same(got, want, tol=1e-6, strides=True):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.stride() == want.stride() or not strides
    torch.testing.assert_close(got.cpu(), want, rtol=tol, atol=tol)


def _entry(func):
    return [r for k, r in _dispatch._repeats.items() if k[0] == id(func)]


def test_a_repeated_add_skips_the_implementation_and_keeps_computing(monkeypatch):
    _dispatch._repeats.clear()
    a, b = torch.randn(7, 5), torch.randn(7, 5)
    _same(a.to("tvk") + b.to("tvk"), a + b)
    assert all(type(r) is Repeat for r in _entry(aten.add.Tensor))
    calls = []
    monkeypatch.setattr(aten_elementwise, "common_dtype", lambda *a, **k: calls.append(1))
    torchvk.reset_op_counts()
    for k in range(3):  # new data, new storages: the repeat keeps geometry, never values
        a, b = torch.randn(7, 5) * k, torch.randn(7, 5)
        _same(a.to("tvk") + b.to("tvk"), a + b)
    assert not calls  # add's implementation did not run again
    assert torchvk.op_counts()["vulkan"]["aten.add.Tensor"] == 3  # still counted


def test_aliased_arguments_repeat_only_when_aliased_again():
    _dispatch._repeats.clear()
    a, b = torch.randn(6), torch.randn(6)
    ta, tb = a.to("tvk"), b.to("tvk")
    for _ in range(2):
        _same(torch.rsub(ta, ta), torch.rsub(a, a))  # other - self: the mapping is ambiguous here
    _same(torch.rsub(ta, tb), torch.rsub(a, b))  # so this must not reuse it the wrong way round
    _same(torch.rsub(tb, ta), torch.rsub(b, a))
    _same(torch.rsub(tb, tb), torch.rsub(b, b))
    _same(ta * ta, a * a)
    _same(ta * tb, a * b)


def test_views_and_elementwise_ops_follow_the_storage_offset():
    _dispatch._repeats.clear()
    base = torch.arange(40.0)
    t = base.to("tvk")
    for start in (0, 3, 17, 30):  # same sizes and strides, other offsets: one key
        _same(t[start:start + 8].view(2, 4), base[start:start + 8].view(2, 4))
        _same(t[start:start + 8] * 2, base[start:start + 8] * 2)
        got = torch.split(t[start:start + 8], 3)
        for g, w in zip(got, torch.split(base[start:start + 8], 3)):
            _same(g, w)


def test_numbers_are_part_of_the_key_and_cpu_scalars_are_read_every_call():
    _dispatch._repeats.clear()
    x = torch.randn(5)
    t = x.to("tvk")
    for v in (2.0, 2.0, -3.5, 2.0):
        _same(t * v, x * v)
        _same(torch.add(t, t, alpha=v), torch.add(x, x, alpha=v))
        _same(t * torch.tensor(v), x * torch.tensor(v))


def test_in_place_repeats_write_the_new_target_and_keep_torchs_overlap_errors():
    _dispatch._repeats.clear()
    x, y = torch.randn(10), torch.randn(10)
    tx, ty = x.to("tvk"), y.to("tvk")
    for _ in range(3):
        tx[:4].add_(ty[:4], alpha=0.5)
        x[:4].add_(y[:4], alpha=0.5)
    _same(tx, x)
    tz, z = ty.clone(), y.clone()
    tz[2:6].add_(ty[6:10], alpha=0.5)  # another offset, another storage: the same key
    z[2:6].add_(y[6:10], alpha=0.5)
    _same(tz, z)
    with pytest.raises(RuntimeError) as cpu:
        x[:4].add_(x[2:6], alpha=0.5)
    with pytest.raises(type(cpu.value), match="single memory location"):
        tx[:4].add_(tx[2:6], alpha=0.5)  # the key of the calls above; its overlap is judged again
    _same(tx[:4].add_(ty[:4], alpha=0.5), x[:4].add_(y[:4], alpha=0.5))  # and the runtime goes on


def test_a_gemm_with_a_separate_bias_kernel_repeats_both():
    _dispatch._repeats.clear()
    for _ in range(3):
        a, b, c = torch.randn(4, 3), torch.randn(3, 5), torch.randn(4, 5)  # a full bias: its own kernel
        _same(torch.addmm(c.to("tvk"), a.to("tvk"), b.to("tvk")), torch.addmm(c, a, b), tol=1e-5)
        bias = torch.randn(5)  # a row bias: inside the GEMM
        _same(torch.addmm(bias.to("tvk"), a.to("tvk"), b.to("tvk")), torch.addmm(bias, a, b), tol=1e-5)
        _same(a.to("tvk") @ b.to("tvk"), a @ b, tol=1e-5)


def test_random_draws_and_values_read_back_are_never_frozen():
    _dispatch._repeats.clear()
    t = torch.ones(64, device="tvk")
    draws = [torch.nn.functional.dropout(t, 0.5, training=True).cpu() for _ in range(3)]
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[1], draws[2])
    noise = [torch.rand_like(t).cpu() for _ in range(2)]
    assert not torch.equal(noise[0], noise[1])
    for n in (3, 5, 1):  # nonzero reads its count back: same key, other data
        x = torch.zeros(8)
        x[:n] = 1
        _same(torch.nonzero(x.to("tvk")), torch.nonzero(x), strides=False)  # the CPU's is column-major


def test_repeats_are_dropped_when_the_configs_reload():
    from tvk_kernels import config

    a = torch.randn(9)
    t = a.to("tvk")
    _same(t + t, a + a)
    config.reload()
    _same(t + t, a + a)  # the stale repeat is not used: the full path runs, and repeats again
    assert any(type(r) is Repeat and r.holds((t, t), {}) for r in _entry(aten.add.Tensor))


def test_ops_without_an_offer_repeat_through_their_implementation():
    _dispatch._repeats.clear()
    for _ in range(2):  # stack concatenates unsqueezed views it made itself: nothing it can offer
        a, b = torch.randn(4, 6), torch.randn(4, 6)
        _same(torch.stack([a.to("tvk"), b.to("tvk")], 1), torch.stack([a, b], 1))
    assert any(type(r) is Direct for r in _entry(aten.stack.default))
    with pytest.raises(RuntimeError, match="stack expects each tensor to be equal size"):
        torch.stack([a.to("tvk"), torch.randn(3, 6).to("tvk")], 1)  # a new key: the full path with torch's checks


def test_casts_and_clones_repeat_as_one_copy_into_a_fresh_tensor():
    """.to(dtype), .half(), .clone() and .contiguous() repeat as a fresh output and the first call's copy
    (the copy kernel for casts and strided views, a buffer copy otherwise): torch's values, dtypes and
    strides whatever the data, as in autocast's casts every step."""
    _dispatch._repeats.clear()
    for step in range(3):
        x = torch.randn(6, 5) * (step + 1)
        t = x.to("tvk")
        pairs = [(t.half(), x.half()), (t.half().float(), x.half().float()), (t.to(torch.int64), x.to(torch.int64)),
                 (t.t().to(torch.float16), x.t().to(torch.float16)), (t.clone(), x.clone()),
                 (t.t().clone(), x.t().clone()), (t.t().contiguous(), x.t().contiguous()),
                 (t[1:, ::2].contiguous(), x[1:, ::2].contiguous()), (t.to(torch.bfloat16), x.to(torch.bfloat16))]
        for got, want in pairs:
            _same(got, want, tol=0)
    casts = [type(r) for r in _entry(aten._to_copy.default)]  # and Direct: copies to and from the CPU run in full
    assert casts.count(Repeat) == 5
    assert [type(r) for r in _entry(aten.clone.default)] == [Repeat] * 4


def test_cat_repeats_its_copies_into_a_fresh_output():
    _dispatch._repeats.clear()
    for step in range(3):
        a, b, c = torch.randn(3, 4) + step, torch.randn(3, 2), torch.randn(5, 3).half()
        e = torch.empty(0)
        ta, tb, tc, te = (t.to("tvk") for t in (a, b, c, e))
        _same(torch.cat([ta, tb, tc.t()], 1), torch.cat([a, b, c.t()], 1), tol=0)  # promoted to float32
        _same(torch.cat([ta.t(), tb.t()]), torch.cat([a.t(), b.t()]), tol=0)  # along dim 0: buffer copies
        _same(torch.cat([te, ta, te]), torch.cat([e, a, e]), tol=0)  # empty 1-d tensors are skipped
        _same(torch.cat([ta[:, :0], tb], 1), torch.cat([a[:, :0], b], 1), tol=0)
        _same(torch.cat([ta, ta]), torch.cat([a, a]), tol=0)  # one tensor twice: not mapped, run again
        _same(torch.cat([ta[:0], tb[:0].view(0, 4)]), torch.cat([a[:0], b[:0].view(0, 4)]), tol=0)  # nothing to copy
    kinds = [type(r) for r in _entry(aten.cat.default)]
    assert kinds.count(Repeat) == 5 and kinds.count(Direct) == 1


def test_norms_softmax_and_reductions_repeat_like_cpu_in_float32_and_half():
    _dispatch._repeats.clear()
    for dtype in (torch.float32, torch.float16, torch.float32):  # half casts around the kernel: not offered
        for _ in range(3):
            x = torch.randn(6, 10)
            w, b = torch.randn(10), torch.randn(10)
            tx, tw, tb = (t.to("tvk", dtype) for t in (x, w, b))
            cx, cw, cb = (t.to(dtype).float() for t in (x, w, b))
            tol = 1e-5 if dtype == torch.float32 else 3e-3
            got = [torch.layer_norm(tx, (10,), tw, tb), torch.softmax(tx, -1), torch.log_softmax(tx, 0),
                   tx.sum(1), tx.mean(0, keepdim=True), tx.amax(1)]
            want = [torch.layer_norm(cx, (10,), cw, cb), torch.softmax(cx, -1), torch.log_softmax(cx, 0),
                    cx.sum(1), cx.mean(0, keepdim=True), cx.amax(1)]
            for g, w_ in zip(got, want):
                assert g.dtype == dtype
                torch.testing.assert_close(g.cpu().float(), w_, rtol=tol, atol=tol)
    assert any(type(r) is Repeat for r in _entry(aten.native_layer_norm.default))


def test_batch_norm_repeats_update_each_modules_running_statistics():
    _dispatch._repeats.clear()
    torch.manual_seed(0)
    cpu = [torch.nn.BatchNorm2d(3) for _ in range(2)]  # two modules, one geometry: one key, two sets of stats
    tvk = [torch.nn.BatchNorm2d(3).to("tvk") for _ in range(2)]
    for c, t in zip(cpu, tvk):
        t.load_state_dict(c.state_dict())
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5)
        for c, t in zip(cpu, tvk):
            xc, xt = x.clone().requires_grad_(), x.to("tvk").requires_grad_()
            c(xc).square().sum().backward()
            t(xt).square().sum().backward()
            torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)
            x = x * 0.5 + 1  # the second module sees other data
    for c, t in zip(cpu, tvk):
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(t, name).cpu(), getattr(c, name), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(t.weight.grad.cpu(), c.weight.grad, rtol=1e-4, atol=1e-4)
    assert any(type(r) is Repeat for r in _entry(aten.native_batch_norm.default)) or \
        any(type(r) is Repeat for r in _entry(aten._native_batch_norm_legit_functional.default)) or \
        any(type(r) is Repeat for r in _entry(aten._native_batch_norm_legit.default))


@pytest.mark.parametrize("bias", [True, False])
def test_convolutions_repeat_their_kernels_and_keep_computing(bias):
    """A 2-D convolution and its backward repeat as replays of their kernels (not the implementation run
    again), with fresh data every step: the same results and gradients as CPU."""
    import copy

    _dispatch._repeats.clear()
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=bias)
    tconv = copy.deepcopy(conv).to("tvk")
    for step in range(3):
        x = torch.randn(2, 3, 7, 7) * (step + 1)
        tx = x.to("tvk").requires_grad_()
        x.requires_grad_()
        y, ty = conv(x), tconv(tx)
        _same(ty, y, tol=1e-4)
        y.square().sum().backward()
        ty.square().sum().backward()
        torch.testing.assert_close(tx.grad.cpu(), x.grad, rtol=1e-4, atol=1e-4)
        for p, q in zip(tconv.parameters(), conv.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-3)
    for func in (aten.convolution.default, aten.convolution_backward.default):
        assert _entry(func) and all(type(r) is Repeat for r in _entry(func)), func


@pytest.mark.parametrize("mask, causal, gqa", [(None, False, False), (None, True, True), ("bool", False, True),
                                               ("float", False, False)])
def test_fused_attention_and_its_backward_repeat_their_kernels(mask, causal, gqa):
    """SDPA forward and backward repeat as their kernel calls on fresh tensors (no dropout): CPU's outputs and
    gradients every step, with the mask's new data read each time."""
    F = torch.nn.functional
    _dispatch._repeats.clear()
    for step in range(3):
        torch.manual_seed(step)
        q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2 if gqa else 4, 6, 8), torch.randn(2, 2 if gqa else 4, 6, 8)
        m = None if mask is None else (torch.rand(5, 6) > 0.3) | torch.eye(5, 6, dtype=torch.bool) if mask == "bool" \
            else torch.randn(2, 1, 5, 6)
        cpu = [t.clone().requires_grad_() for t in (q, k, v)]
        tvk = [t.to("tvk").requires_grad_() for t in (q, k, v)]
        want = F.scaled_dot_product_attention(*cpu, attn_mask=m, is_causal=causal, enable_gqa=gqa)
        got = F.scaled_dot_product_attention(*tvk, attn_mask=None if m is None else m.to("tvk"), is_causal=causal,
                                             enable_gqa=gqa)
        _same(got, want, tol=1e-4)
        grad = torch.randn_like(want)
        want.backward(grad)
        got.backward(grad.to("tvk"))
        for t, c in zip(tvk, cpu):
            torch.testing.assert_close(t.grad.cpu(), c.grad, rtol=1e-4, atol=1e-4)
    for func in (aten._scaled_dot_product_fused_attention_overrideable.default,
                 aten._scaled_dot_product_fused_attention_overrideable_backward.default):
        assert _entry(func) and all(type(r) is Repeat for r in _entry(func)), func


def test_fused_attention_with_dropout_repeats_with_a_new_mask_each_call():
    """With dropout the repeat draws its own mask as the first call drew: new masks call after call, the same
    outputs and gradients as the full path under the same seed (the backward regenerates the forward's mask)."""
    F = torch.nn.functional

    def step(seed, q, k, v):
        torch.manual_seed(seed)
        tq, tk, tv = (t.to("tvk").requires_grad_() for t in (q, k, v))
        out = F.scaled_dot_product_attention(tq, tk, tv, dropout_p=0.5)
        out.backward(torch.ones_like(out))
        return [out.cpu()] + [t.grad.cpu() for t in (tq, tk, tv)]

    q, k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    _dispatch._repeats.clear()
    full = step(3, q, k, v)  # the first call of each key takes the full path
    assert all(type(r) is Repeat for r in _entry(aten._scaled_dot_product_fused_attention_overrideable.default) +
               _entry(aten._scaled_dot_product_fused_attention_overrideable_backward.default))
    for got, want in zip(step(3, q, k, v), full):  # repeated, same seed: the same draws
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    outs = [step(seed, q, k, v)[0] for seed in (4, 5)]
    assert not torch.equal(outs[0], full[0]) and not torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_slice_and_select_backward_repeat_as_a_fill_and_a_copy(dtype):
    """The gradient of a slice or select (a rotary embedding's halves) repeats as zeros and one copy into the
    view: CPU's gradients with fresh data every step."""
    _dispatch._repeats.clear()
    views = [lambda t: t[..., :4] * 2, lambda t: t[:, 1:5:2] * 3, lambda t: t.select(1, 2) * 5, lambda t: t[:, :, 1::3]]
    for step in range(3):
        x = torch.randn(4, 6, 8) * (step + 1)
        for view in views:
            cx, tx = x.to(dtype).clone().requires_grad_(), x.to("tvk", dtype).requires_grad_()
            view(cx).sum().backward()
            view(tx).sum().backward()
            _same(tx.grad, cx.grad, tol=0)
    for func in (aten.slice_backward.default, aten.select_backward.default):
        assert _entry(func) and all(type(r) is Repeat for r in _entry(func)), func


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_pools_and_their_backward_repeat_their_kernels(dtype):
    """Max, average and adaptive average pooling, forward and backward, repeat as their kernel calls into
    fresh outputs: CPU's results and gradients with fresh data every step, 3-d inputs included."""
    F = torch.nn.functional
    _dispatch._repeats.clear()
    pools = [lambda t: F.max_pool2d(t, 3, 2, 1), lambda t: F.avg_pool2d(t, 2, ceil_mode=True),
             lambda t: F.adaptive_avg_pool2d(t, (2, 3)), lambda t: F.max_pool2d(t, 2)]
    for step in range(3):
        for shape in ((2, 3, 7, 9), (3, 7, 9)):
            x = torch.randn(shape) * (step + 1)
            for pool in pools:
                cx, tx = x.to(dtype).clone().requires_grad_(), x.to("tvk", dtype).requires_grad_()
                want, got = pool(cx.float()), pool(tx)
                _same(got.float(), want, tol=1e-5 if dtype == torch.float32 else 3e-3)
                grad = torch.randn(want.shape)
                want.backward(grad)
                got.backward(grad.to("tvk", dtype))
                torch.testing.assert_close(tx.grad.cpu().float(), cx.grad.float(), rtol=3e-3, atol=3e-3)
    for func in (aten.max_pool2d_with_indices.default, aten.max_pool2d_with_indices_backward.default,
                 aten.avg_pool2d.default, aten.avg_pool2d_backward.default, aten._adaptive_avg_pool2d.default,
                 aten._adaptive_avg_pool2d_backward.default):
        assert any(type(r) is Repeat for r in _entry(func)), func


def test_work_a_dry_run_discards_still_counts_against_an_offer():
    """A compiled program's first run is a dry run (commands discarded). scatter's implementation clones its
    input (an offer) and then scatters into the clone: a key first seen in a dry run must not repeat as the
    clone alone, so later eager calls give torch's result."""
    _dispatch._repeats.clear()
    stream = torchvk._storage.get_device().stream
    x, index = torch.randn(2, 3, 4, 4), torch.randint(0, 3, (2, 1, 4, 4))
    with stream.dry_run():
        torch.scatter(x.to("tvk"), 1, index.to("tvk"), -1.0)
    for step in range(2):
        x = torch.randn(2, 3, 4, 4) + step
        _same(torch.scatter(x.to("tvk"), 1, index.to("tvk"), -1.0), torch.scatter(x, 1, index, -1.0), tol=0)


def test_a_composite_op_inside_an_implementation_repeats_its_decomposition_uncounted(monkeypatch):
    """nll_loss (unreduced: it offers no repeat of its own) reshapes its target inside its implementation, where
    torch hands the composite reshape to the dispatcher: later calls run its decomposition directly, without the
    dispatcher's lookups and checks, and count the same ops as the first call (the decomposition's pieces, not
    the composite)."""
    import torch.nn.functional as F

    _dispatch._repeats.clear()
    counts = []
    for step in range(3):
        x, t = torch.randn(8, 10), torch.randint(0, 10, (8,))
        torchvk.reset_op_counts()
        _same(F.nll_loss(x.to("tvk"), t.to("tvk"), reduction="none"), F.nll_loss(x, t, reduction="none"), tol=1e-5)
        counts.append(torchvk.op_counts()["vulkan"])
    assert counts[0] == counts[1] == counts[2] and "aten.reshape.default" not in counts[0]
    slow, full_path = [], _dispatch._dispatch
    monkeypatch.setattr(_dispatch, "_dispatch", lambda f, a, k, key=None: slow.append(str(f)) or full_path(f, a, k, key))
    x, t = torch.randn(8, 10), torch.randint(0, 10, (8,))
    tx, tt = x.to("tvk"), t.to("tvk")
    slow.clear()
    _same(F.nll_loss(tx, tt, reduction="none"), F.nll_loss(x, t, reduction="none"), tol=1e-5)
    assert slow == []  # every call, the reshape included, was a repeat
