"""conv2d forward / grad-input / grad-weight / grad-bias (tvk_kernels.kernels.conv) against
torch CPU autograd (torch.nn.functional.conv2d).

Error bound: max |got - ref| <= 1e-5 * K_eff^0.5 ... kept simple: max |got - ref| <= 2e-5 *
max(1, max |ref|) for every output, where ref is torch's float32 result (both sides are float32
sums of <= a few thousand terms of N(0,1) products; observed errors are ~1e-6 relative).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tvk_kernels import InvalidConfigError  # noqa: E402
from tvk_kernels.kernels import conv  # noqa: E402

REL = 2e-5


def _close(got, ref, what, rel=REL):
    ref = np.asarray(ref, dtype=np.float32)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(got - ref).max(initial=0.0))
    assert err <= rel * scale, f"{what}: max abs error {err:.3g} > {rel:g} * {scale:.3g}"


def check_conv(device, rng, x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, bias=True, params=None,
               params_bwd=None):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ref = F.conv2d(xt, wt, bt if bias else None, stride, padding, dilation, groups)
    go = rng.standard_normal(tuple(ref.shape)).astype(np.float32)
    ref.backward(torch.tensor(go))

    out_shape = conv.conv2d_output_shape(x_shape, w_shape, stride, padding, dilation, groups)
    assert out_shape == tuple(ref.shape)
    X, W, B, GO = device.upload(x), device.upload(w), device.upload(b), device.upload(go)
    O = device.allocator.alloc(4 * ref.numel())
    GI, GW, GB = device.allocator.alloc(x.nbytes), device.allocator.alloc(w.nbytes), device.allocator.alloc(b.nbytes)
    pb = params if params_bwd is None else params_bwd
    got_shape = conv.conv2d_forward(device, X.address, W.address, B.address if bias else None, O.address, x_shape,
                                    w_shape, stride, padding, dilation, groups, params=params)
    assert got_shape == out_shape
    conv.conv2d_backward_input(device, GO.address, W.address, GI.address, x_shape, w_shape, stride, padding,
                               dilation, groups, params=pb)
    conv.conv2d_backward_weight(device, GO.address, X.address, GW.address, x_shape, w_shape, stride, padding,
                                dilation, groups, params=pb)
    conv.conv2d_backward_bias(device, GO.address, GB.address, out_shape)
    _close(device.download(O, np.float32, out_shape), ref.detach().numpy(), "forward")
    _close(device.download(GI, np.float32, x_shape), xt.grad.numpy(), "grad_input")
    _close(device.download(GW, np.float32, w_shape), wt.grad.numpy(), "grad_weight")
    _close(device.download(GB, np.float32, (w_shape[0],)), bt.grad.numpy(), "grad_bias")


CASES = [
    # x shape, w shape, stride, padding, dilation, groups, bias
    ((1, 1, 1, 1), (1, 1, 1, 1), 1, 0, 1, 1, True),              # the smallest conv
    ((1, 3, 7, 7), (5, 3, 1, 1), 1, 0, 1, 1, True),              # 1x1
    ((3, 5, 7, 13), (7, 5, 3, 3), 1, 0, 1, 1, False),            # 3x3 valid, batch 3, odd channels
    ((1, 3, 13, 7), (6, 3, 5, 5), 1, 2, 1, 1, True),             # 5x5, padding 2
    ((3, 4, 13, 13), (5, 4, 3, 3), 2, 1, 1, 1, True),            # stride 2, padding 1
    ((1, 3, 13, 11), (4, 3, 3, 3), 1, 2, 2, 1, True),            # dilation 2
    ((2, 4, 7, 13), (6, 2, 3, 3), (2, 1), (1, 0), (1, 2), 2, True),  # groups 2, mixed stride/pad/dilation
    ((2, 6, 13, 13), (6, 1, 3, 3), 1, 1, 1, 6, True),            # depthwise
    ((3, 4, 13, 7), (8, 1, 5, 5), 2, 2, 1, 4, False),            # depthwise x2 multiplier, stride 2
    ((1, 2, 7, 7), (3, 2, 3, 5), (2, 3), (1, 2), 1, 1, True),    # rectangular kernel, uneven stride
    ((2, 3, 5, 5), (4, 3, 5, 5), 2, 0, 1, 1, True),              # kernel covers the image: 1x1 output
]


@pytest.mark.parametrize("xs,ws,s,p,d,g,bias", CASES)
def test_conv2d(device, rng, xs, ws, s, p, d, g, bias):
    check_conv(device, rng, xs, ws, s, p, d, g, bias)


@pytest.mark.parametrize("xs,ws", [
    ((2, 1, 28, 28), (8, 1, 3, 3)),     # MNIST CNN conv1
    ((2, 8, 14, 14), (16, 8, 3, 3)),    # MNIST CNN conv2 (after a 2x2 pool)
    ((2, 3, 32, 32), (16, 3, 3, 3)),    # CIFAR-like conv1
])
def test_cnn_layers(device, rng, xs, ws):
    check_conv(device, rng, xs, ws, 1, 1, 1, 1, True)


def test_split_k_grad_weight(device, rng):
    """grad_weight's split-K path (partials + reduce) for several slice sizes, incl. a ragged last slice."""
    for min_k in (256, 1024):
        check_conv(device, rng, (3, 4, 17, 15), (6, 4, 3, 3), 1, 1, 1, 1, True,
                   params_bwd={"SPLIT_MIN_K": min_k, "SPLIT_GROUPS": 256})
    fam = conv.family(device, conv.Conv2d)
    params, _ = fam.resolve("bwd_weight_small", {"SPLIT_MIN_K": 256, "SPLIT_GROUPS": 256})
    splits, chunk = conv._split_plan(params, 6, 36, 3 * 17 * 15, 1)
    assert splits > 1 and chunk % params["BK"] == 0 and (splits - 1) * chunk < 3 * 17 * 15


EXPLICIT = [
    {"BM": 16, "BN": 16, "BK": 4, "TM": 2, "TN": 2, "PAD": 0, "WG": 64},
    {"BM": 32, "BN": 8, "BK": 8, "TM": 4, "TN": 1, "PAD": 4, "WG": 64},
    {"BM": 64, "BN": 32, "BK": 16, "TM": 4, "TN": 4, "PAD": 1, "WG": 128},
    {"BM": 32, "BN": 64, "BK": 8, "TM": 1, "TN": 8, "PAD": 1, "WG": 256},
]


def test_explicit_candidates(device, rng):
    """Each explicit parameter set (from the valid candidate list) computes the same correct conv."""
    cands = conv.candidates(device, "fwd")
    keys = ("BM", "BN", "BK", "TM", "TN", "PAD", "WG")
    listed = {tuple(c[k] for k in keys) for c in cands}
    for params in EXPLICIT:
        assert tuple(params[k] for k in keys) in listed, params
        check_conv(device, rng, (2, 5, 9, 7), (7, 5, 3, 3), 2, 1, 1, 1, True, params=params)


def test_candidates_respect_constraints(device):
    f = device.facts
    cands = conv.candidates(device)
    assert len(cands) > 50
    for c in cands:
        assert c["WG"] == (c["BM"] // c["TM"]) * (c["BN"] // c["TN"])
        assert c["WG"] <= f.max_workgroup_invocations
        shared = 4 * (c["BK"] * (c["BM"] + c["PAD"]) + c["BK"] * (c["BN"] + c["PAD"])
                      + 3 * c["BM"] + 3 * c["BN"] + 4 * c["BK"])
        assert shared <= f.max_shared_memory
    # host split-K parameters vary only where they matter
    assert len({c["SPLIT_MIN_K"] for c in conv.candidates(device, "fwd")}) == 1


def test_invalid_config(device, rng):
    x = device.upload(np.zeros((1, 2, 5, 5), np.float32))
    w = device.upload(np.zeros((2, 2, 3, 3), np.float32))
    out = device.allocator.alloc(4 * 2 * 9)
    bad = [
        {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "WG": 128},            # WG != (BM/TM)*(BN/TN)
        {"BM": 64, "BN": 64, "BK": 16, "TM": 3, "TN": 4, "WG": 64},            # BM % TM
        {"BM": 128, "BN": 128, "BK": 32, "TM": 8, "TN": 8, "WG": 256,
         "PAD": 4 + device.facts.max_shared_memory // 256},                    # shared memory
        {"BM": 32, "BN": 32, "BK": 8, "TM": 1, "TN": 1,
         "WG": 1024 if device.facts.max_workgroup_invocations < 1024 else 2048},  # invocations / WG mismatch
    ]
    for params in bad:
        with pytest.raises(InvalidConfigError):
            conv.conv2d_forward(device, x.address, w.address, None, out.address, (1, 2, 5, 5), (2, 2, 3, 3),
                                params=params)


def test_output_shape_errors():
    assert conv.conv2d_output_shape((2, 4, 7, 9), (6, 2, 3, 3), 2, 1, 1, 2) == (2, 6, 4, 5)
    with pytest.raises(ValueError):
        conv.conv2d_output_shape((1, 3, 7, 7), (4, 2, 3, 3))  # weight expects 2 input channels
    with pytest.raises(ValueError):
        conv.conv2d_output_shape((1, 4, 7, 7), (6, 2, 3, 3), groups=3)  # groups must divide channels
    with pytest.raises(ValueError):
        conv.conv2d_output_shape((1, 1, 2, 2), (1, 1, 3, 3))  # kernel larger than the image
