"""nll_loss and fused cross_entropy forward/backward vs torch.nn.functional."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tvk_kernels.kernels import loss as loss_kernels  # noqa: E402

SHAPES = [(1, 1), (1, 10), (7, 10), (5, 1000), (33, 3)]


def _inputs(rng, N, C, weighted, ignore_index=-100):
    x = (rng.standard_normal((N, C)) * 3).astype(np.float32)
    t = rng.integers(0, C, N).astype(np.int64)
    if N > 2:
        t[1] = ignore_index
    w = (rng.random(C) + 0.5).astype(np.float32) if weighted else None
    return x, t, w


def _run_ce(device, x, t, w, reduction, ignore_index, smoothing, go, params=None):
    N, C = x.shape
    xb, tb = device.upload(x), device.upload(t)
    wb = device.upload(w) if w is not None else None
    n_out = N if reduction == "none" else 1
    ob = device.allocator.alloc(4 * n_out)
    saved = loss_kernels.cross_entropy_forward(device, xb, tb, ob, N, C, weight=wb, reduction=reduction, ignore_index=ignore_index,
                                    label_smoothing=smoothing, params=params)
    gob, gib = device.upload(go.reshape(-1)), device.allocator.alloc(4 * N * C)
    loss_kernels.cross_entropy_backward(device, gob, xb, tb, saved, gib, N, C, weight=wb, reduction=reduction,
                             ignore_index=ignore_index, label_smoothing=smoothing, params=params)
    return device.download(ob, np.float32, (n_out,)), device.download(gib, np.float32, (N, C))


def _ref_ce(x, t, w, reduction, ignore_index, smoothing, go):
    xt = torch.tensor(x, requires_grad=True)
    out = F.cross_entropy(xt, torch.tensor(t), weight=None if w is None else torch.tensor(w), reduction=reduction,
                          ignore_index=ignore_index, label_smoothing=smoothing)
    out.backward(torch.tensor(go).reshape(out.shape))
    return out.detach().numpy().reshape(-1), xt.grad.numpy()


@pytest.mark.parametrize("N,C", SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(device, rng, N, C, reduction, weighted, smoothing):
    x, t, w = _inputs(rng, N, C, weighted)
    go = rng.standard_normal(N if reduction == "none" else 1).astype(np.float32)
    out, gin = _run_ce(device, x, t, w, reduction, -100, smoothing, go)
    ref_out, ref_gin = _ref_ce(x, t, w, reduction, -100, smoothing, go)
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gin, ref_gin, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("N,C", SHAPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(device, rng, N, C, reduction, weighted):
    x, t, w = _inputs(rng, N, C, weighted)
    logp = torch.log_softmax(torch.tensor(x), 1).numpy()
    go = rng.standard_normal(N if reduction == "none" else 1).astype(np.float32)
    lt = torch.tensor(logp, requires_grad=True)
    ref = F.nll_loss(lt, torch.tensor(t), weight=None if w is None else torch.tensor(w), reduction=reduction)
    ref.backward(torch.tensor(go).reshape(ref.shape))

    lb, tb = device.upload(logp), device.upload(t)
    wb = device.upload(w) if w is not None else None
    n_out = N if reduction == "none" else 1
    ob, tw = device.allocator.alloc(4 * n_out), device.allocator.alloc(4)
    loss_kernels.nll_loss_forward(device, lb, tb, ob, tw, N, C, weight=wb, reduction=reduction)
    gob, gib = device.upload(go), device.allocator.alloc(4 * N * C)
    loss_kernels.nll_loss_backward(device, gob, tb, tw, gib, N, C, weight=wb, reduction=reduction)
    np.testing.assert_allclose(device.download(ob, np.float32, (n_out,)), ref.detach().numpy().reshape(-1),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(device.download(gib, np.float32, (N, C)), lt.grad.numpy(), rtol=1e-5, atol=1e-6)
    if reduction != "none":
        valid = t != -100
        want_tw = (w[t[valid]] if w is not None else np.ones(valid.sum())).sum()
        np.testing.assert_allclose(device.download(tw, np.float32, (1,))[0], want_tw, rtol=1e-5)


def test_custom_ignore_index_is_a_class(device, rng):
    x, t, w = _inputs(rng, 20, 6, True, ignore_index=2)
    t[5:8] = 2
    for red in ["mean", "none"]:
        go = rng.standard_normal(20 if red == "none" else 1).astype(np.float32)
        out, gin = _run_ce(device, x, t, w, red, 2, 0.05, go)
        ref_out, ref_gin = _ref_ce(x, t, w, red, 2, 0.05, go)
        np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(gin, ref_gin, rtol=1e-5, atol=1e-6)


def test_all_ignored_mean_is_nan(device, rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    t = np.full(4, -100, np.int64)
    out, gin = _run_ce(device, x, t, None, "mean", -100, 0.0, np.ones(1, np.float32))
    ref_out, ref_gin = _ref_ce(x, t, None, "mean", -100, 0.0, np.ones(1, np.float32))
    assert math.isnan(out[0]) and math.isnan(ref_out[0])
    np.testing.assert_array_equal(gin, np.zeros_like(gin))
    np.testing.assert_array_equal(ref_gin, np.zeros_like(ref_gin))


@pytest.mark.parametrize("params", [
    {"WG": 32, "CE_WG": 32, "TPR": 1, "RED_WG": 32},
    {"WG": 64, "CE_WG": 64, "TPR": 64, "RED_WG": 128},
    {"WG": 128, "CE_WG": 128, "TPR": 16, "RED_WG": 64},
])
def test_cross_entropy_explicit_params(device, rng, params):
    x, t, w = _inputs(rng, 45, 77, True)
    x[3, 5] = 80.0  # a large logit: the online max must rescale the running sum
    go = rng.standard_normal(1).astype(np.float32)
    out, gin = _run_ce(device, x, t, w, "mean", -100, 0.2, go, params=params)
    ref_out, ref_gin = _ref_ce(x, t, w, "mean", -100, 0.2, go)
    np.testing.assert_allclose(out, ref_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gin, ref_gin, rtol=1e-5, atol=1e-6)


def test_cross_entropy_deterministic(device, rng):
    x, t, w = _inputs(rng, 300, 10, False)
    go = np.ones(1, np.float32)
    a = _run_ce(device, x, t, w, "sum", -100, 0.0, go)
    b = _run_ce(device, x, t, w, "sum", -100, 0.0, go)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_bad_reduction(device):
    buf = device.allocator.alloc(64)
    with pytest.raises(ValueError):
        loss_kernels.cross_entropy_forward(device, buf, buf, buf, 1, 1, reduction="avg")


def test_invalid_params(device):
    from tvk_kernels import InvalidConfigError

    buf = device.allocator.alloc(64)
    with pytest.raises(InvalidConfigError):
        loss_kernels.cross_entropy_forward(device, buf, buf, buf, 1, 4, params={"WG": 64, "CE_WG": 64, "TPR": 3, "RED_WG": 64})
    with pytest.raises(InvalidConfigError):
        loss_kernels.nll_loss_forward(device, buf, buf, buf, buf, 1, 4, params={"WG": 64, "CE_WG": 64, "TPR": 4, "RED_WG": 96})
