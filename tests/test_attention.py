"""Fused scaled-dot-product attention (templates/attention.comp, torchvk/aten/attention.py) against
torch CPU: forward and the grads of q, k, v and an additive mask, in eager mode and in a
TransformerEncoderLayer training step through torchvk.compile and torch.compile(backend="tvk")."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchvk
from rdna1_check import assert_fits_rdna1, navi10_stats

FUSED = "aten._scaled_dot_product_fused_attention_overrideable.default"
FUSED_BWD = "aten._scaled_dot_product_fused_attention_overrideable_backward.default"
TOL = {torch.float32: 2e-5, torch.float16: 5e-3}


def _inputs(b, hq, hkv, lq, lk, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for h, n in ((hq, lq), (hkv, lk), (hkv, lk)))
    return q, k, v, torch.randn(b, hq, lq, d, generator=g)


def _run(q, k, v, grad, dtype, mask=None, **kw):
    """SDPA forward and backward; returns the output and the grads of q, k, v (and a float mask) in float32."""
    leaves = [x.to(dtype).requires_grad_() for x in (q, k, v)]
    m = mask
    if mask is not None and mask.dtype != torch.bool:
        m = mask.to(dtype).requires_grad_()
        leaves.append(m)
    out = F.scaled_dot_product_attention(*leaves[:3], attn_mask=m, **kw)
    out.backward(grad.to(dtype))
    return [out.detach().float()] + [x.grad.float() for x in leaves]


def _compare(q, k, v, grad, dtype=torch.float32, mask=None, **kw):
    """The tvk results (fused kernel, no CPU op) against torch CPU in float64."""
    want = _run(q.double(), k.double(), v.double(), grad.double(), torch.float64,
                None if mask is None else (mask if mask.dtype == torch.bool else mask.double()), **kw)
    torchvk.reset_op_counts()
    got = _run(*(x.to(dtype).to("tvk") for x in (q, k, v, grad)), dtype,
               None if mask is None else mask.to("tvk"), **kw)
    counts = torchvk.op_counts()
    assert counts["cpu"] == {}
    assert counts["vulkan"].get(FUSED) == 1 and counts["vulkan"].get(FUSED_BWD) == 1, counts["vulkan"]
    names = ["out", "dq", "dk", "dv", "dmask"]
    for name, a, b in zip(names, got, want):
        a = a.cpu().double()
        assert a.shape == b.shape, name
        err = (a - b).abs().max().item() if a.numel() else 0.0
        assert err <= TOL[dtype] * (1 + b.abs().max().item()), f"{name}: max error {err}"



def _dropout_route_agrees(q, k, v, grad, monkeypatch, env: str, value: str, p=0.3):
    """float16 SDPA with dropout at one seed on the route in force, then again with `env` set to `value` (another
    route, kept launches dropped): the same scores dropped, forward and backward, and the values within fp16's
    tolerance."""
    from tvk_kernels import config

    def run():
        leaves = [x.half().to("tvk").requires_grad_() for x in (q, k, v)]
        torch.manual_seed(11)
        out = F.scaled_dot_product_attention(*leaves, dropout_p=p)
        out.backward(grad.half().to("tvk"))
        return [out.detach().float().cpu()] + [x.grad.float().cpu() for x in leaves]

    first = run()
    monkeypatch.setenv(env, value)
    config.reload()
    reference = run()
    for got, want in zip(first, reference):
        assert ((got == 0) == (want == 0)).all()  # the same scores dropped
        assert (got - want).abs().max() <= 1e-2 * (1 + want.abs().max())

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_matches_cpu(dtype):
    _compare(*_inputs(2, 2, 2, 9, 20, 16), dtype)


def test_causal_and_scale():
    _compare(*_inputs(1, 2, 2, 17, 33, 16), is_causal=True, scale=0.3)


def test_bool_mask_broadcast_with_a_fully_masked_row():
    q, k, v, g = _inputs(2, 2, 2, 7, 12, 16)
    mask = torch.rand(7, 12, generator=torch.Generator().manual_seed(1)) > 0.4
    mask[3] = False  # every score of row 3 masked: output 0 and no gradient, as torch CPU
    _compare(q, k, v, g, mask=mask)


@pytest.mark.parametrize("shape", [(2, 1, 7, 12), (7, 12)])
def test_float_mask_and_its_grad(shape):
    q, k, v, g = _inputs(2, 2, 2, 7, 12, 16)
    _compare(q, k, v, g, mask=torch.randn(*shape, generator=torch.Generator().manual_seed(2)))


def test_grouped_heads():
    _compare(*_inputs(1, 4, 2, 9, 11, 16), enable_gqa=True, is_causal=True)


@pytest.mark.parametrize("lq,lk,d", [(1, 1, 16), (1, 9, 8), (17, 33, 40)])
def test_odd_sizes(lq, lk, d):
    _compare(*_inputs(1, 1, 1, lq, lk, d))


def test_head_dim_128_fp16():
    _compare(*_inputs(1, 1, 1, 5, 9, 128), torch.float16)


def test_transposed_inputs_keep_their_layout():
    """nn.MultiheadAttention passes views of [B, L, H, D]: grads come back in the inputs' layout."""
    q, k, v, g = _inputs(1, 2, 2, 6, 6, 16)
    qt, kt, vt = (x.transpose(1, 2).contiguous().to("tvk").transpose(1, 2).requires_grad_() for x in (q, k, v))
    out = F.scaled_dot_product_attention(qt, kt, vt)
    out.backward(g.to("tvk"))
    assert out.stride() == qt.stride() and qt.grad.stride() == qt.stride()
    want = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out.cpu(), want, atol=1e-5, rtol=1e-5)


def test_views_of_one_projection_are_read_and_written_in_place():
    """GPT-2's layout: q, k, v sliced from one [B, L, 3 H D] projection and split into heads, the
    grad in [B, L, H, D]: the fused ops read them through their strides (one kernel forward, three
    backward: no copy to contiguous) and write o, dq, dk, dv in the inputs' layout."""
    b, length, heads, d = 2, 11, 3, 16
    gen = torch.Generator().manual_seed(3)
    qkv, grad = torch.randn(b, length, 3 * heads * d, generator=gen), torch.randn(b, length, heads, d, generator=gen)
    split = [x.view(b, length, heads, d).transpose(1, 2) for x in qkv.to("tvk").split(heads * d, dim=2)]
    g = grad.to("tvk").transpose(1, 2)
    stream = torchvk._storage.get_device().stream
    before = stream.total_dispatches
    out, lse, *rest = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(*split, is_causal=True)
    assert stream.total_dispatches - before == 1
    assert out.stride() == (length * heads * d, d, heads * d, 1)  # [B, L, H, D] underneath, as the query
    before = stream.total_dispatches
    dq, dk, dv, _ = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward(
        g, *split, None, [True, True, True, False], out, lse, *rest[:4], 0.0, True, *rest[4:6])
    assert stream.total_dispatches - before == 3
    assert all(t.stride() == out.stride() for t in (dq, dk, dv))  # dense, in the inputs' dim order
    leaves = [x.view(b, length, heads, d).transpose(1, 2).double().requires_grad_() for x in qkv.split(heads * d, dim=2)]
    want = F.scaled_dot_product_attention(*leaves, is_causal=True)
    want.backward(grad.double().transpose(1, 2))
    for got, ref in zip((out, dq, dk, dv), [want] + [x.grad for x in leaves]):
        torch.testing.assert_close(got.cpu().double(), ref, atol=2e-5, rtol=2e-5)


def test_repeated_calls_on_new_tensors_replay_kept_launches_and_stay_right():
    from tvk_kernels.kernels import attention as attention_kernels, kept_calls
    for fn in (attention_kernels.attention_forward, attention_kernels.attention_backward):
        fn.kept.clear()
    for seed in range(4):  # new tensors (new addresses) every step, one geometry: learned, then replayed
        _compare(*_inputs(2, 2, 1, 9, 13, 16, seed=seed), is_causal=True, enable_gqa=True)
    for fn in (attention_kernels.attention_forward, attention_kernels.attention_backward):
        assert any(type(v) is kept_calls._Kept for v in fn.kept.values()), fn.__name__


def test_a_query_whose_head_dim_is_not_innermost_gets_its_layout_back():
    q, k, v, g = _inputs(2, 2, 2, 5, 7, 16)
    qt = q.permute(3, 0, 1, 2).contiguous().to("tvk").permute(1, 2, 3, 0).requires_grad_()  # d outermost
    out = F.scaled_dot_product_attention(qt, k.to("tvk"), v.to("tvk"))
    out.backward(g.to("tvk"))
    assert out.stride() == qt.stride() and qt.grad.stride() == qt.stride()
    want = F.scaled_dot_product_attention(q.requires_grad_(), k, v)
    want.backward(g)
    torch.testing.assert_close(out.cpu(), want, atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(qt.grad.cpu(), q.grad, atol=2e-5, rtol=2e-5)


def test_dropout_mask_is_the_same_in_forward_and_backward():
    """The kept scores are those of a native dropout drawn at the same RNG state (so the forward's
    mask is known), and the grads match torch CPU on that mask: the backward regenerated it."""
    b, h, lq, lk, d, p = 1, 2, 6, 10, 16, 0.3
    q, k, v, g = _inputs(b, h, h, lq, lk, d)
    torch.manual_seed(123)
    state = torch.tvk.get_rng_state()
    torchvk.reset_op_counts()
    got = _run(*(x.to("tvk") for x in (q, k, v, g)), torch.float32, dropout_p=p)
    assert torchvk.op_counts()["vulkan"].get(FUSED_BWD) == 1
    torch.tvk.set_rng_state(state)
    _, keep = torch.ops.aten.native_dropout(torch.ones(b, h, lq, lk, device="tvk"), p, True)
    keep = keep.cpu()
    assert 0 < keep.float().mean() < 1
    leaves = [x.double().requires_grad_() for x in (q, k, v)]
    probs = torch.softmax(leaves[0] @ leaves[1].transpose(-1, -2) / d ** 0.5, -1)
    out = (probs * keep / (1 - p)) @ leaves[2]
    out.backward(g.double())
    for a, w in zip(got, [out.detach()] + [x.grad for x in leaves]):
        torch.testing.assert_close(a.cpu().double(), w, atol=2e-5, rtol=2e-5)
    # a new call draws a new mask
    again = F.scaled_dot_product_attention(*(x.to("tvk") for x in (q, k, v)), dropout_p=p)
    assert not torch.equal(again.cpu(), got[0].cpu())


@pytest.mark.parametrize("case", ["float mask", "causal grouped heads"])
def test_tuned_tile_sizes(device, config_dir, case):
    """A tuned config whose tiles differ from the template's defaults (BR, BC are specialization
    constants, set when the pipeline is built): every kernel at several tiles per side, all grads."""
    import json

    from tvk_kernels import config
    from tvk_kernels.kernels.attention import Attention

    tuned = {"BR": 8, "BC": 32, "TPR": 8, "BBR": 8, "BBC": 16, "BTPR": 8}
    config_dir.mkdir()
    (config_dir / "tuned.json").write_text(json.dumps({
        "schema": 1, "source": "measured", "device": {**config.device_key(device.facts), "match": "device"},
        "families": {"attention": {"template_checksum": Attention(device).checksum,
                                   "buckets": {"*": {"params": tuned}}}}}))
    config.reload()
    params, source = Attention(device).params("d64")
    assert params == tuned and source != "default", source
    if case == "float mask":
        q, k, v, g = _inputs(1, 2, 2, 37, 45, 40)
        _compare(q, k, v, g, mask=torch.randn(37, 45, generator=torch.Generator().manual_seed(3)))
    else:
        _compare(*_inputs(1, 4, 2, 37, 45, 24), enable_gqa=True, is_causal=True)


class _Causal(nn.Module):
    def __init__(self, layer, mask):
        super().__init__()
        self.layer, self.mask = layer, mask

    def forward(self, x):
        return self.layer(x, src_mask=self.mask, is_causal=True)


def _mse(out, y):
    return ((out - y) ** 2).mean()


@pytest.mark.parametrize("mode", ["eager", "torchvk.compile", "torch.compile"])
def test_transformer_encoder_layer_trains(mode):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    x, y = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    mask = nn.Transformer.generate_square_subsequent_mask(5)
    ref = _Causal(layer, mask)
    want = _mse(ref(x), y)
    want.backward()
    model = _Causal(copy.deepcopy(layer).to("tvk"), mask.to("tvk"))
    model.zero_grad()
    xt, yt = x.to("tvk"), y.to("tvk")
    torchvk.reset_op_counts()
    if mode == "eager":
        loss = _mse(model(xt), yt)
    elif mode == "torchvk.compile":
        loss = torchvk.compile(model, loss_fn=_mse)(xt, yt)
    else:
        loss = _mse(torch.compile(model, backend="tvk")(xt), yt)
    loss.backward()
    counts = torchvk.op_counts()
    assert counts["cpu"] == {}
    assert FUSED in counts["vulkan"] and FUSED_BWD in counts["vulkan"]
    torch.testing.assert_close(loss.cpu(), want.detach(), atol=1e-5, rtol=1e-5)
    for (name, p), (_, p_ref) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad.cpu(), p_ref.grad, atol=1e-5, rtol=1e-4, msg=name)


# ------------------------------------------------------------------ RDNA1
_RDNA1_STATS = """
import json
from tvk_kernels.config import default_params
from tvk_kernels.kernels import attention as attention_kernels
from tvk_kernels.runtime.device import Device

dev = Device.get(0)
stats, seen = {}, []
for bucket, head in (("d128", 128), ("d64", 64)):
    params = default_params("attention", dev.facts, bucket)
    if params in seen:  # compiled already, at a larger head dim
        continue
    seen.append(params)
    for kernel in (0, 2, 3):  # 1 (the backward's row sums) has no shared memory and 8 VGPRs
        for dtype, features in (("float32", ("float", True, True)), ("float16", (None, False, False))):
            defines, wg, shared = attention_kernels.kernel_defines(kernel, params, head, dtype, *features)
            pipe = dev.pipelines.get("attention.comp", defines, local_size=(wg, 1, 1), push_size=128,
                                     shared_bytes=shared, capture_stats=True)
            stats[f"{bucket} kernel {kernel} {dtype} {features}"] = pipe.stats
print(json.dumps(stats))
"""


def test_kernels_compile_for_rdna1_without_spills(tmp_path):
    """RDNA1's own compiler (Mesa's null Navi 10) on the rdna1 defaults, every kernel at the largest
    head dim of each bucket, with and without mask, causal and dropout: no spills, within AMD's
    32 KiB of shared memory."""
    stats = navi10_stats(_RDNA1_STATS, tmp_path)
    assert len(stats) >= 3 * 2
    assert_fits_rdna1(stats)


class _DropoutAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(1, 2, 6, 16))

    def forward(self, kv):
        return F.scaled_dot_product_attention(self.q, kv, kv, dropout_p=0.4)


def test_dropout_in_compiled_replays_draws_as_eager():
    """Each replay of the compiled graph draws a fresh mask, the one eager mode draws at the same
    RNG state, and its backward regenerates that mask (grads equal eager's)."""
    torch.manual_seed(0)
    eager = _DropoutAttention().to("tvk")
    inner = copy.deepcopy(eager)
    compiled = torchvk.compile(inner)
    kv = torch.randn(1, 2, 9, 16).to("tvk")
    outs = []
    for step in range(3):
        results = []
        for model, params in ((eager, eager), (compiled, inner)):
            params.zero_grad()
            torch.manual_seed(100 + step)
            out = model(kv)
            out.square().sum().backward()
            results.append((out.cpu(), params.q.grad.cpu()))
        (e_out, e_grad), (c_out, c_grad) = results
        torch.testing.assert_close(c_out, e_out, atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(c_grad, e_grad, atol=1e-6, rtol=1e-5)
        outs.append(c_out)
    assert not torch.equal(outs[1], outs[2])
    assert compiled.compile_stats()[0]["forward"]["replays"] >= 1


def test_inputs_the_kernel_does_not_take_use_the_math_path_or_a_clear_error():
    """3-d inputs, a value head dim unlike the query's and head dims over 128 run torch's math
    decomposition; the fused op itself, called directly, says what it takes."""
    q, k, v = torch.randn(2, 5, 16), torch.randn(2, 7, 16), torch.randn(2, 7, 24)
    got = F.scaled_dot_product_attention(q.to("tvk"), k.to("tvk"), v.to("tvk"))
    torch.testing.assert_close(got.cpu(), F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)
    wide = torch.randn(1, 1, 3, 136).to("tvk")  # head dim over 128
    with pytest.raises(NotImplementedError, match="the same head dim \\(at most 128\\)"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(wide, wide, wide)
    torch.testing.assert_close(F.scaled_dot_product_attention(wide, wide, wide).cpu(),
                               F.scaled_dot_product_attention(*(wide.cpu(),) * 3), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("compiler", ["torch.compile", "torchvk.compile"])
def test_compiled_graphs_trace_the_math_path_with_masks_as_sdpa_reads_them(compiler):
    """Where the fused kernel does not apply (Falcon's 4 query heads over 1 key head without enable_gqa,
    a head dim over 128), a compiled graph traces torch's math op, which takes an additive mask: a
    boolean one must become 0 / -inf first, as SDPA makes it (added as 0 / 1 it gave Falcon wrong
    logits), and the traced path must not call itself (it recursed without end)."""
    torch.manual_seed(3)

    class Attend(nn.Module):
        def forward(self, q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    cases = [(torch.randn(2, 4, 6, 8), torch.randn(2, 1, 6, 8), torch.randn(2, 1, 6, 8)),
             (torch.randn(1, 2, 5, 136), torch.randn(1, 2, 5, 136), torch.randn(1, 2, 5, 136))]
    for q, k, v in cases:
        mask = torch.rand(q.shape[0], 1, q.shape[2], k.shape[2]) > 0.4
        mask[..., 0] = True
        for m in (mask, torch.where(mask, 0.0, -1e4)):
            torch._dynamo.reset()
            compiled = torch.compile(Attend(), backend="tvk") if compiler == "torch.compile" else torchvk.compile(Attend())
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            want = F.scaled_dot_product_attention(*leaves, attn_mask=m)
            want.square().sum().backward()
            on_tvk = [t.detach().to("tvk").requires_grad_() for t in (q, k, v)]
            got = compiled(*on_tvk, m.to("tvk"))
            got.square().sum().backward()
            torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=1e-5, rtol=1e-4)
            for mine, theirs in zip(on_tvk, leaves):
                torch.testing.assert_close(mine.grad.cpu(), theirs.grad, atol=1e-4, rtol=1e-4)
    torch._dynamo.reset()


def test_head_dim_bucket_comes_from_tuning_json(device, monkeypatch):
    """The kernels look a head dim up in tuning/attention.json's buckets, the ones the tuner groups
    shapes by: moving the d64 boundary there moves what runs (no threshold of the runtime's own)."""
    from tvk_kernels.kernels import attention as attention_kernels, launch
    from tvk_kernels.search_space import search_space

    chosen = []
    bucket = attention_kernels.Attention.bucket
    monkeypatch.setattr(attention_kernels.Attention, "bucket", lambda self, shape: chosen.append(bucket(self, shape)) or chosen[-1])
    monkeypatch.setitem(search_space("attention"), "buckets", {"d64": "head <= 32", "d128": "True"})
    launch._bucket.cache_clear()
    bufs = [device.allocator.alloc(4 * 2 * 48) for _ in range(5)]
    try:
        for d in (40, 24):
            attention_kernels.attention_forward(device, *bufs, (1, 1, 1, 2, 2, d), scale=1.0)
        device.synchronize()
    finally:
        monkeypatch.undo()
        launch._bucket.cache_clear()
        for buf in bufs:
            buf.free()
    assert chosen == ["d128", "d64"]
