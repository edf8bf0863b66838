"""fp16 convolution on cooperative matrices (conv2d.comp's COOPMAT form, kernels/conv_coopmat.py), float16's
route on GPUs that have them. lavapipe has none: TVK_COOPMAT_CONV=emulate runs the template with its matrix
products on scalar code (the tables, staging, stride phases, split-K slices and epilogues as the GPU runs them),
at emulated subgroup sizes 32 (NVIDIA's) and 64 (AMD's wave64), against float64 within fp16's tolerance. The
real products are checked on the device where the route is taken (conv.check_coopmat, and
test_real_route_matches_float64 there)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torchvk  # noqa: F401  (the tvk device)
from tvk_kernels import config, get_device
from tvk_kernels.errors import InvalidConfigError
from tvk_kernels.kernels import conv, conv_coopmat
from tvk_kernels.kernels.conv_family import Conv2d
from tvk_kernels.kernels.launch import family


def _emulate(monkeypatch, request, subgroup: int) -> list:
    """float16 convs routed to the emulation; returns the (DIR, COOPMAT) of every GEMM pipeline asked for."""
    monkeypatch.setenv("TVK_COOPMAT_CONV", f"emulate:{subgroup}")
    seen = []
    for cls in (Conv2d, conv_coopmat.Conv2dCoopmat):
        original = cls.gemm_pipeline

        def spy(self, dir_id, params, *args, _original=original, **kwargs):
            seen.append((dir_id, type(self) is conv_coopmat.Conv2dCoopmat))
            return _original(self, dir_id, params, *args, **kwargs)

        monkeypatch.setattr(cls, "gemm_pipeline", spy)
    config.reload()  # kept launch plans made on the other route go
    request.addfinalizer(config.reload)
    return seen


@pytest.fixture
def emulated(request, monkeypatch):
    return _emulate(monkeypatch, request, 32)


@pytest.fixture
def emulated64(request, monkeypatch):
    return _emulate(monkeypatch, request, 64)


def _run(device, x, w, bias, geo, act=None, split_k=None, explicit=None):
    """(out, grad_in, grad_w) of a float16 conv through the kernels, as float64 arrays."""
    n, oc = x.shape[0], w.shape[0]
    oh, ow = conv.conv2d_output_shape(x.shape, w.shape, geo["stride"], geo["padding"], geo["dilation"],
                                      geo["groups"])[2:]
    grad = np.random.default_rng(1).standard_normal((n, oc, oh, ow)).astype(np.float16)
    bufs = {k: device.upload(a) for k, a in (("x", x), ("w", w), ("grad", grad))}
    bufs["bias"] = device.upload(bias) if bias is not None else 0
    sizes = {"out": n * oc * oh * ow, "grad_in": x.size, "grad_w": w.size}
    bufs.update({k: device.allocator.alloc(2 * v) for k, v in sizes.items()})
    conv.conv2d_forward(device, bufs["x"], bufs["w"], bufs["bias"], bufs["out"], x.shape, w.shape, **geo, act=act,
                        split_k=split_k, params=explicit, dtype="float16")
    conv.conv2d_backward_input(device, bufs["grad"], bufs["w"], bufs["grad_in"], x.shape, w.shape, **geo,
                               split_k=split_k, params=explicit, dtype="float16")
    conv.conv2d_backward_weight(device, bufs["grad"], bufs["x"], bufs["grad_w"], x.shape, w.shape, **geo,
                                split_k=split_k, params=explicit, dtype="float16")
    got = [device.download(bufs[k], np.float16, shape).astype(np.float64)
           for k, shape in (("out", (n, oc, oh, ow)), ("grad_in", x.shape), ("grad_w", w.shape))]
    for buf in bufs.values():
        if buf:
            buf.free()
    return got, grad


def _compare(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, bias=True, act=None, split_k=None,
             explicit=None, seed=0):
    device = get_device(0)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float16)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float16)
    b = rng.standard_normal(w_shape[0]).astype(np.float16) if bias else None
    geo = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    (out, grad_in, grad_w), grad = _run(device, x, w, b, geo, act, split_k, explicit)
    want_out = conv.reference_conv2d(x, w, b, **geo)
    if act == "relu":
        want_out = np.maximum(want_out, 0)
    want_in, want_w = conv.reference_conv2d_backward(grad, x, w, **geo)
    for name, got, want in (("out", out, want_out), ("grad_in", grad_in, want_in), ("grad_w", grad_w, want_w)):
        # fp32 sums of exact fp16 products, the output rounded once to fp16: within a few fp16 ulps of the largest
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-6)
        assert err < 4e-3, (name, err)


CASES = [
    dict(x_shape=(2, 16, 9, 11), w_shape=(24, 16, 3, 3), padding=1),  # ragged tiles on every side
    # a stem: K = 147, four stride phases; its grad-input has 3 columns: conv2d's narrow kernel (min_size)
    dict(x_shape=(2, 3, 20, 18), w_shape=(16, 3, 7, 7), stride=2, padding=3),
    dict(x_shape=(1, 40, 6, 7), w_shape=(36, 40, 1, 1)),  # a 1x1: K = channels
    dict(x_shape=(2, 36, 10, 10), w_shape=(40, 18, 3, 3), padding=2, dilation=2, groups=2),
    dict(x_shape=(1, 16, 11, 9), w_shape=(48, 16, 3, 3), stride=2, padding=1, split_k=3),  # split-K partials
]


def _routes(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, **_) -> set:
    """(DIR, on cooperative matrices) of each direction: the route where both GEMM sides reach min_size."""
    from tvk_kernels.kernels.conv_family import DIRS, gemm_dims
    from tvk_kernels.kernels.conv_geometry import geometry

    g, _ = geometry(x_shape, w_shape, stride, padding, dilation, groups)
    return {(dir_id, min(gemm_dims(d, g)[:2]) >= 16) for d, dir_id in DIRS.items()}


@pytest.mark.parametrize("case", CASES)
def test_three_directions_match_float64(emulated, case):
    _compare(**case)
    assert set(emulated) == _routes(**case), emulated
    assert sum(coop for _, coop in _routes(**case)) >= 2


def test_forward_epilogue(emulated):
    _compare((2, 8, 7, 7), (32, 8, 3, 3), padding=1, act="relu")
    assert (0, True) in emulated


def test_wave64(emulated64):
    """AMD's wave64: four invocations an element row of a 16 x 16 matrix fewer, the same results."""
    _compare((2, 32, 9, 11), (48, 16, 3, 3), stride=2, padding=1, groups=2, split_k=2)
    assert set(emulated64) == {(0, True), (1, True), (2, True)}


def test_explicit_parameters(emulated):
    """A config naming FM runs this kernel (the tuner, A/Bs); one without runs conv2d's; a bad tile is refused
    with the rule it breaks, and the runtime stays usable."""
    _compare((1, 16, 8, 8), (32, 16, 3, 3), padding=1,
             explicit={"BM": 64, "BN": 32, "BK": 32, "FM": 2, "FN": 1, "PAD": 16})
    assert emulated and all(coop for _, coop in emulated)
    emulated.clear()
    _compare((1, 16, 8, 8), (32, 16, 3, 3), padding=1,
             explicit={"BM": 32, "BN": 32, "BK": 16, "TM": 4, "TN": 4, "PAD": 1})
    assert emulated and not any(coop for _, coop in emulated)
    with pytest.raises(InvalidConfigError, match=r"BM % \(16 \* FM\)"):
        _compare((1, 16, 8, 8), (32, 16, 3, 3), explicit={"BM": 48, "BN": 32, "BK": 16, "FM": 2, "FN": 1, "PAD": 8})
    with pytest.raises(InvalidConfigError, match="unknown parameter 'TM'"):
        _compare((1, 16, 8, 8), (32, 16, 3, 3), explicit={"BM": 32, "BN": 32, "BK": 16, "FM": 1, "FN": 1,
                                                            "PAD": 8, "TM": 2})
    _compare((1, 16, 8, 8), (32, 16, 3, 3), padding=1)


def test_only_float16_routes(emulated):
    device = get_device(0)
    for dtype in ("float32", "bfloat16"):
        assert type(conv_coopmat.gemm_family(device, dtype, None, conv.check_coopmat, 64, 64)) is Conv2d
    coop = conv_coopmat.Conv2dCoopmat
    assert type(conv_coopmat.gemm_family(device, "float16", None, conv.check_coopmat, 64, 64)) is coop
    # a side under min_size: conv2d's narrow kernels; explicit parameters naming FM still run the matrices
    assert type(conv_coopmat.gemm_family(device, "float16", None, conv.check_coopmat, 4096, 3)) is Conv2d
    explicit = {"BM": 32, "BN": 16, "BK": 16, "FM": 1, "FN": 1, "PAD": 8}
    assert type(conv_coopmat.gemm_family(device, "float16", explicit, conv.check_coopmat, 4096, 3)) is coop


def test_route_off_without_matrices(monkeypatch):
    """Without emulation, a device lacking the matrices (lavapipe) keeps conv2d's kernels for float16, even
    with the route asked for."""
    device = get_device(0)
    monkeypatch.setenv("TVK_COOPMAT_CONV", "1")
    if "VK_KHR_cooperative_matrix" in device.facts.extensions:
        pytest.skip("the device has cooperative matrices: test_real_route_matches_float64 covers it")
    assert type(conv_coopmat.gemm_family(device, "float16", None, conv.check_coopmat, 64, 64)) is Conv2d
    monkeypatch.setenv("TVK_COOPMAT_CONV", "emulate:48")
    with pytest.raises(ValueError, match="16, 32 or 64"):
        conv_coopmat.emulation()


def test_wrong_results_turn_the_route_off(emulated, monkeypatch):
    """A check that fails (a driver's wrong products) leaves float16 on conv2d's kernels, with a warning."""
    device = get_device(0)
    fam = family(device, conv_coopmat.Conv2dCoopmat)
    monkeypatch.setattr(fam, "_checked", {})
    monkeypatch.setattr(conv_coopmat.Conv2dCoopmat, "emulate_as", lambda self, e: None)
    monkeypatch.setattr(fam, "emulate", None)  # as the real device would run it
    monkeypatch.setattr(conv_coopmat, "has_16x16x16", lambda dev: True)
    monkeypatch.setattr(conv_coopmat, "emulation", lambda: None)
    monkeypatch.setenv("TVK_COOPMAT_CONV", "1")
    monkeypatch.setitem(device.facts.__dict__, "extensions", (*device.facts.extensions, "VK_KHR_cooperative_matrix"))
    monkeypatch.setattr(fam, "subgroup", 32)
    assert type(conv_coopmat.gemm_family(device, "float16", None, lambda dev: False, 64, 64)) is Conv2d
    assert fam._checked[(None, 32)] is False


def test_autograd_through_torch(emulated):
    """F.conv2d in float16 on tvk, forward and backward, against float64 on the CPU."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 16, 10, 9, generator=gen).half()
    w = (torch.randn(16, 16, 3, 3, generator=gen) / 12).half()
    b = torch.randn(16, generator=gen).half()
    xt, wt, bt = (t.to("tvk").requires_grad_() for t in (x, w, b))
    out = F.conv2d(xt, wt, bt, stride=2, padding=1)
    grad = torch.randn(out.shape, generator=gen).half()
    out.backward(grad.to("tvk"))
    x64, w64, b64 = (t.double().requires_grad_() for t in (x, w, b))
    ref = F.conv2d(x64, w64, b64, stride=2, padding=1)
    ref.backward(grad.double())
    for got, want in ((out, ref), (xt.grad, x64.grad), (wt.grad, w64.grad), (bt.grad, b64.grad)):
        got = got.detach().cpu().double()
        assert (got - want.detach()).abs().max() / want.abs().max() < 4e-3
    assert set(emulated) == {(0, True), (1, True), (2, True)}


def test_real_route_matches_float64(monkeypatch):
    """The device's own matrices (the H200's), where it has them: the route on, the same cases."""
    device = get_device(0)
    if not conv_coopmat.has_16x16x16(device):
        pytest.skip("this device has no 16x16x16 fp16 cooperative matrices (lavapipe: the emulated tests above)")
    monkeypatch.setenv("TVK_COOPMAT_CONV", "1")
    config.reload()
    fam = conv_coopmat.gemm_family(device, "float16", None, conv.check_coopmat, 64, 64)
    assert type(fam) is conv_coopmat.Conv2dCoopmat, "the first-use check failed on this device"
    for case in CASES:
        _compare(**case)


def test_a_dry_run_leaves_the_decision_to_a_real_run(emulated, monkeypatch):
    """A compiled program's first run is dry (its kernels discarded): the first-use check would read garbage and
    turn the route off for good, so a dry run takes conv2d's kernels without deciding, and the next real call
    runs the check."""
    device = get_device(0)
    fam = family(device, conv_coopmat.Conv2dCoopmat)
    monkeypatch.setattr(fam, "_checked", {})
    calls = []

    def check(dev):
        calls.append(dev.stream.dry)
        return True

    with device.stream.dry_run():
        assert type(conv_coopmat.gemm_family(device, "float16", None, check, 64, 64)) is Conv2d
    assert calls == [] and fam._checked == {}
    assert type(conv_coopmat.gemm_family(device, "float16", None, check, 64, 64)) is conv_coopmat.Conv2dCoopmat
    assert calls == [False]
