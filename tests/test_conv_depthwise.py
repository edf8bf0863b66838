"""Depthwise conv2d (groups > 1, one input channel per group): conv.py's entry functions route it to
the direct kernels of templates/conv2d_depthwise.comp (tvk_kernels/kernels/conv_depthwise.py).
Forward, grad-input and grad-weight against torch CPU in float64; through torch eager and
torchvk.compile; the RDNA1 compile check. Every test also checks that the depthwise kernels
ran (dispatch labels), so it fails if the routing is lost.

Error bound: max |got - ref| <= 2e-5 * max(1, max |ref|) (float32 sums of at most a few hundred
N(0,1) products next to float64; observed ~1e-6)."""
import copy
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
nn = torch.nn

import torchvk  # noqa: E402
from rdna1_check import assert_fits_rdna1, navi10_stats  # noqa: E402
from tvk_kernels import InvalidConfigError  # noqa: E402
from tvk_kernels.kernels import conv, conv_depthwise  # noqa: E402
from tvk_kernels.runtime.stream import Stream  # noqa: E402
from tvk_kernels.tune.targets import conv2d_depthwise as conv2d_depthwise_target  # noqa: E402
from tvk_kernels.search_space import bucket_of  # noqa: E402

REL = 2e-5


def _close(got, ref, what):
    ref = np.asarray(ref, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(got - ref).max(initial=0.0))
    assert err <= REL * scale, f"{what}: max abs error {err:.3g} > {REL:g} * {scale:.3g}"


@pytest.fixture
def labels(monkeypatch):
    """The labels of the kernels dispatched while the test runs."""
    seen = []
    dispatch = Stream.dispatch

    def spy(self, pipeline, groups, push=b"", label=None):
        seen.append(label)
        return dispatch(self, pipeline, groups, push, label)

    monkeypatch.setattr(Stream, "dispatch", spy)
    return seen


def _depthwise_ran(labels, *directions):
    for d in directions:
        assert any(lb and lb.startswith(f"conv2d_depthwise_{d}") for lb in labels), (d, labels)
    assert not any(lb and lb.startswith(("conv2d_fwd", "conv2d_bwd")) for lb in labels), labels


def _reference(x, w, b, go, geo):
    xt, wt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w))
    ref = F.conv2d(xt, wt, None if b is None else torch.tensor(b, dtype=torch.float64), *geo)
    ref.backward(torch.tensor(go, dtype=torch.float64))
    return ref.detach().numpy(), xt.grad.numpy(), wt.grad.numpy()


CASES = [
    # x shape, w shape (OC = C * multiplier, 1, KH, KW), stride, padding, dilation, bias
    ((1, 4, 9, 9), (4, 1, 3, 3), 1, 1, 1, True),             # 3x3, batch 1
    ((3, 5, 11, 7), (5, 1, 3, 3), 2, 1, 1, True),            # stride 2, batch 3, odd sizes
    ((1, 3, 13, 11), (3, 1, 5, 5), 1, 2, 1, False),          # 5x5
    ((3, 3, 12, 9), (6, 1, 5, 5), 2, 2, 1, True),            # 5x5 stride 2, multiplier 2
    ((1, 4, 11, 13), (4, 1, 3, 3), 1, 2, 2, True),           # dilation 2
    ((3, 2, 9, 7), (4, 1, 3, 3), (2, 1), (1, 0), (2, 1), False),  # multiplier 2, mixed stride/pad/dilation
    ((1, 2, 5, 5), (2, 1, 5, 5), 2, 0, 1, True),             # the kernel covers the image: 1x1 output
]


@pytest.mark.parametrize("xs,ws,s,p,d,bias", CASES)
def test_depthwise_matches_torch(device, rng, labels, xs, ws, s, p, d, bias):
    groups = xs[1]
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    out_shape = conv.conv2d_output_shape(xs, ws, s, p, d, groups)
    go = rng.standard_normal(out_shape).astype(np.float32)
    ref, ref_gi, ref_gw = _reference(x, w, b, go, (s, p, d, groups))
    X, W, GO = device.upload(x), device.upload(w), device.upload(go)
    B = device.upload(b) if bias else None
    O, GI, GW = (device.allocator.alloc(4 * int(np.prod(shape))) for shape in (out_shape, xs, ws))
    assert conv.conv2d_forward(device, X, W, B, O, xs, ws, s, p, d, groups) == out_shape
    conv.conv2d_backward_input(device, GO, W, GI, xs, ws, s, p, d, groups)
    conv.conv2d_backward_weight(device, GO, X, GW, xs, ws, s, p, d, groups)
    _close(device.download(O, np.float32, out_shape), ref, "forward")
    _close(device.download(GI, np.float32, xs), ref_gi, "grad_input")
    _close(device.download(GW, np.float32, ws), ref_gw, "grad_weight")
    _depthwise_ran(labels, "fwd", "bwd_input", "bwd_weight")


def test_grad_weight_slices_and_tap_passes_are_deterministic(device, rng, labels):
    """grad-weight split into position slices (partials + conv2d_reduce), and a 5x5 kernel in
    passes of fewer taps: the same result, and bit-identical when run again."""
    xs, ws, geo = (3, 3, 11, 9), (6, 1, 5, 5), (1, 2, 1, 3)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    out_shape = conv.conv2d_output_shape(xs, ws, *geo)
    go = rng.standard_normal(out_shape).astype(np.float32)
    _, _, ref_gw = _reference(x, w, None, go, geo)
    X, GO, GW = device.upload(x), device.upload(go), device.allocator.alloc(w.nbytes)
    for params in (None, {"WG": 32, "ITEMS": 1, "TAPS": 4}, {"WG": 64, "ITEMS": 2, "TAPS": 1}):
        for split_k in (1, 2, 5, None):
            runs = []
            for _ in range(2):
                conv.conv2d_backward_weight(device, GO, X, GW, xs, ws, *geo, params=params, split_k=split_k)
                runs.append(device.download(GW, np.float32, ws))
            _close(runs[0], ref_gw, f"grad_weight {params} split_k={split_k}")
            assert np.array_equal(runs[0], runs[1]), (params, split_k)
    assert "conv2d_depthwise_split_sum" in labels
    _depthwise_ran(labels, "bwd_weight")
    g, _ = conv.geometry(xs, ws, *geo)
    splits, chunk = conv_depthwise.split_plan(device, g, 9, 5)
    positions = 3 * out_shape[2] * out_shape[3]
    assert splits == 5 and (splits - 1) * chunk < positions <= splits * chunk


def test_empty_batch_gives_zero_grad_weight(device, labels):
    xs, ws = (0, 3, 5, 5), (3, 1, 3, 3)
    empty = device.allocator.alloc(4)
    GW = device.upload(np.ones(ws, np.float32))
    conv.conv2d_backward_weight(device, empty, empty, GW, xs, ws, 1, 1, 1, 3)
    assert np.array_equal(device.download(GW, np.float32, ws), np.zeros(ws, np.float32))
    _depthwise_ran(labels, "bwd_weight")


@pytest.mark.parametrize("act", ["relu", "hardswish"])
def test_activation_epilogue(device, rng, labels, act):
    """act= (compiled mode's act(convolution) fusion) in the depthwise forward: one kernel."""
    xs, ws, geo = (2, 4, 9, 8), (8, 1, 3, 3), (2, 1, 1, 4)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, (8,)))
    ref = getattr(F, act)(F.conv2d(*(torch.tensor(a, dtype=torch.float64) for a in (x, w, b)), *geo))
    X, W, B = device.upload(x), device.upload(w), device.upload(b)
    O = device.allocator.alloc(4 * ref.numel())
    conv.conv2d_forward(device, X, W, B, O, xs, ws, *geo, act=act)
    _close(device.download(O, np.float32, tuple(ref.shape)), ref.numpy(), f"{act}(conv2d)")
    assert labels == [f"conv2d_depthwise_fwd_{act}"]


def test_explicit_params_are_checked(device):
    buf = device.allocator.alloc(4 * 2 * 2 * 5 * 5)
    xs, ws = (1, 2, 5, 5), (2, 1, 3, 3)
    with pytest.raises(InvalidConfigError, match=r"conv2d_depthwise: unknown parameters \['BM'"):
        conv.conv2d_forward(device, buf, buf, None, buf, xs, ws, 1, 1, 1, 2, params={"BM": 64, "WG": 64})
    with pytest.raises(InvalidConfigError, match="WG=48 must be a power of two"):
        conv.conv2d_backward_weight(device, buf, buf, buf, xs, ws, 1, 1, 1, 2, params={"WG": 48})
    with pytest.raises(InvalidConfigError, match="TAPS"):
        conv.conv2d_backward_input(device, buf, buf, buf, xs, ws, 1, 1, 1, 2, params={"WG": 32, "TAPS": 64})
    conv.conv2d_forward(device, buf, buf, None, buf, xs, ws, 1, 1, 1, 2)  # the runtime stays usable
    device.synchronize()


def _model():
    return nn.Sequential(nn.Conv2d(3, 6, 3, stride=2, padding=1, groups=3), nn.ReLU(),
                         nn.Conv2d(6, 6, 5, padding=2, groups=6, bias=False), nn.ReLU(),
                         nn.Conv2d(6, 6, 3, padding=2, dilation=2, groups=6))


def test_nn_conv2d_through_torch(labels):
    """nn.Conv2d(groups=C) layers on tvk: forward and every gradient equal torch CPU's."""
    torch.manual_seed(0)
    cpu = _model()
    model = copy.deepcopy(cpu).to("tvk")
    x = torch.randn(3, 3, 11, 9)
    xc, xt = x.clone().requires_grad_(), x.to("tvk").requires_grad_()
    ref, got = cpu(xc), model(xt)
    grad = torch.randn(ref.shape)
    ref.backward(grad)
    got.backward(grad.to("tvk"))
    torch.testing.assert_close(got.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(cpu.named_parameters(), model.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5, msg=name)
    _depthwise_ran(labels, "fwd", "bwd_input", "bwd_weight")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_compute_in_float32(labels, dtype):
    """float16/bfloat16 depthwise convs (16-bit storage, float32 arithmetic): forward and gradients
    equal torch's float64 result on the same 16-bit values, rounded to the dtype."""
    torch.manual_seed(3)
    x, w, b = (t.to(dtype) for t in (torch.randn(2, 4, 7, 9), torch.randn(8, 1, 3, 3), torch.randn(8)))
    geo = dict(stride=2, padding=1, groups=4)
    xc, wc = (t.double().requires_grad_() for t in (x, w))
    ref = F.conv2d(xc, wc, b.double(), **geo)
    grad = torch.randn(ref.shape).to(dtype)
    ref.backward(grad.double())
    xt, wt = (t.to("tvk").requires_grad_() for t in (x, w))
    got = F.conv2d(xt, wt, b.to("tvk"), **geo)
    got.backward(grad.to("tvk"))
    assert got.dtype == xt.grad.dtype == wt.grad.dtype == dtype
    for name, a, r in (("out", got, ref), ("grad_x", xt.grad, xc.grad), ("grad_w", wt.grad, wc.grad)):
        torch.testing.assert_close(a.cpu(), r.to(dtype), msg=name)  # the dtype's own tolerance
    _depthwise_ran(labels, "fwd", "bwd_input", "bwd_weight")


def test_conv1d_depthwise(labels):
    """A 1-D depthwise conv (a sequence model's causal conv: padding k-1) runs as 2-D with height 1."""
    torch.manual_seed(4)
    _matches_cpu(F.conv1d, torch.randn(2, 6, 13), torch.randn(6, 1, 4), torch.randn(6), padding=3, groups=6)
    _depthwise_ran(labels, "fwd", "bwd_input", "bwd_weight")


def _matches_cpu(conv, x, w, b, **kw):
    """conv(x, w, b, **kw) and its gradients on tvk equal torch CPU's."""
    xc, wc, bc = (t.clone().requires_grad_() for t in (x, w, b))
    xt, wt, bt = (t.to("tvk").requires_grad_() for t in (x, w, b))
    ref, got = conv(xc, wc, bc, **kw), conv(xt, wt, bt, **kw)
    grad = torch.randn(ref.shape)
    ref.backward(grad)
    got.backward(grad.to("tvk"))
    torch.testing.assert_close(got.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    for name, a, c in (("x", xt, xc), ("w", wt, wc), ("b", bt, bc)):
        torch.testing.assert_close(a.grad.cpu(), c.grad, rtol=1e-5, atol=1e-5, msg=name)


def test_depthwise_transposed_conv(labels):
    """conv_transpose2d(groups=C) is the depthwise conv run backwards, with a cut output (output_padding)."""
    torch.manual_seed(1)
    _matches_cpu(F.conv_transpose2d, torch.randn(2, 4, 5, 6), torch.randn(4, 1, 3, 3), torch.randn(4),
                 stride=2, padding=1, output_padding=1, groups=4)
    _depthwise_ran(labels, "fwd", "bwd_input", "bwd_weight")


def test_torchvk_compile_training_step(labels):
    """torchvk.compile (fused conv+ReLU epilogues) gives eager's loss and gradients."""
    torch.manual_seed(2)
    eager = _model().to("tvk")
    model = copy.deepcopy(eager)
    compiled = torchvk.compile(model)
    x = torch.randn(2, 3, 9, 9).to("tvk")
    for m in (eager, compiled):
        m(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), rtol=1e-5, atol=1e-6, msg=name)
    _depthwise_ran(labels, "fwd", "bwd_input", "bwd_weight")
    assert "conv2d_depthwise_fwd_relu" in labels  # the compiled mode's act(convolution) epilogue


def test_tune_target(device):
    """The tuner's depthwise target checks and runs a candidate of every direction."""
    target = conv2d_depthwise_target.TARGET
    params = {"WG": 32, "ITEMS": 2, "TAPS": 4}
    for shape in target.suites["tiny"]:
        assert bucket_of(conv_depthwise.DepthwiseConv.family, shape).startswith(shape["dir"])
        case = target.prepare(device, shape, n_inputs=1)
        try:
            ok, err = case.check(params)
            assert ok, (shape["dir"], err)
            case.run(params, 0)
            assert target.work(shape, params)["flops"] > 0
        finally:
            case.free()
    assert [d["DIR"] for d in target.kernel_defines(params)] == [0, 1, 2]


_STATS = """
import json
from tvk_kernels import get_device
from tvk_kernels.kernels import conv_depthwise as conv_depthwise_kernels
from tvk_kernels.kernels.launch import family
from tvk_kernels.search_space import search_space
dev = get_device(0)
fam = family(dev, conv_depthwise_kernels.DepthwiseConv)
stats = {}
for bucket in search_space(fam.family)["buckets"]:
    dir_id = conv_depthwise_kernels.DIRS[next(d for d in conv_depthwise_kernels.DIRS if bucket.startswith(d))]
    prm = fam.resolve(bucket)
    pipe = dev.pipelines.get(conv_depthwise_kernels.DepthwiseConv.template, conv_depthwise_kernels.defines(dir_id, prm), local_size=(prm["WG"], 1, 1),
                             push_size=128, capture_stats=True)
    stats[bucket] = {**pipe.stats, "params": prm}
print(json.dumps(stats))
"""


def test_kernels_compile_for_rdna1_without_spills(tmp_path):
    """RDNA1's own compiler (Mesa's null Navi 10): the default config of every bucket, no spills,
    within AMD's 32 KiB of shared memory."""
    stats = navi10_stats(_STATS, tmp_path)
    assert set(stats) == {"fwd", "bwd_input", "bwd_weight_small_kernel", "bwd_weight"}
    assert_fits_rdna1(stats)
    print(json.dumps({k: {n: s.get(n) for n in ("VGPRs", "SGPRs", "LDS size", "Spilled VGPRs")}
                      for k, s in stats.items()}))
