"""Upsampling (nearest, nearest-exact, bilinear) and reflect / replicate padding
(tvk_kernels.kernels.resample) against torch CPU autograd, eager and through torchvk.compile.

Nearest picks and padding copy values: forward results must equal the CPU's bit for bit.
Bilinear and every backward (a gather of float32 sums in another order) are bounded by
max |got - ref| <= 1e-5 * max(1, max |ref|).
"""

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torchvk  # noqa: E402,F401
from rdna1_check import assert_fits_rdna1, navi10_stats

TVK = "tvk"
REL = 1e-5


def _close(got, ref):
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = max(1.0, ref.abs().max().item()) if ref.numel() else 1.0
    err = (got - ref).abs().max().item() if ref.numel() else 0.0
    assert err <= REL * scale, f"max abs error {err:.3g} > {REL:g} * {scale:.3g}"


def _against_cpu(fn, x, exact_forward):
    """fn on CPU and on tvk, forward and backward (a random upstream gradient)."""
    x = x.detach().requires_grad_()
    ref = fn(x)
    grad = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1))
    ref.backward(grad)
    xt = x.detach().to(TVK).requires_grad_()
    got = fn(xt)
    got.backward(grad.to(TVK))
    if exact_forward:
        assert torch.equal(got.detach().cpu(), ref.detach())
    else:
        _close(got.detach().cpu(), ref.detach())
    _close(xt.grad.cpu(), x.grad)


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


SIZES = [  # input shape, F.interpolate size or scale_factor
    ((2, 3, 7, 13), {"scale_factor": 2}),
    ((2, 3, 7, 13), {"scale_factor": 0.5}),
    ((1, 2, 13, 7), {"scale_factor": 1.7}),
    ((1, 2, 7, 13), {"scale_factor": (3, 0.3)}),
    ((1, 3, 7, 13), {"size": (5, 17)}),
    ((2, 1, 1, 1), {"size": (7, 3)}),
    ((1, 2, 13, 13), {"size": (1, 13)}),
]


@pytest.mark.parametrize("shape,how", SIZES)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_matches_cpu(shape, how, mode):
    _against_cpu(lambda t: F.interpolate(t, mode=mode, **how), _x(*shape), exact_forward=True)


@pytest.mark.parametrize("shape,how", SIZES)
@pytest.mark.parametrize("align_corners", [False, True])
def test_bilinear_matches_cpu(shape, how, align_corners):
    _against_cpu(lambda t: F.interpolate(t, mode="bilinear", align_corners=align_corners, **how), _x(*shape),
                 exact_forward=False)


@pytest.mark.parametrize("how", [{"size": 11}, {"scale_factor": 2.5}, {"scale_factor": 0.5}, {"size": 1}])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear", "linear-aligned"])
def test_one_dimensional_matches_cpu(how, mode):
    kw = {"mode": "linear", "align_corners": mode == "linear-aligned"} if mode.startswith("linear") else {"mode": mode}
    _against_cpu(lambda t: F.interpolate(t, **kw, **how), _x(2, 3, 7), exact_forward=not mode.startswith("linear"))


def test_nearest_picks_the_cpu_pixels_at_awkward_scales():
    # float32 rounding of o * scale decides the pixel: the index ramp shows any difference
    ramp = torch.arange(29.0).reshape(1, 1, 1, 29).expand(1, 1, 2, 29).contiguous()
    for s in (1.1, 1.3, 1.7, 2.3, 0.7, 0.37, 3.01, 2.9999):
        for mode in ("nearest", "nearest-exact"):
            want = F.interpolate(ramp, scale_factor=(1, s), mode=mode)
            got = F.interpolate(ramp.to(TVK), scale_factor=(1, s), mode=mode).cpu()
            assert torch.equal(got, want), (s, mode)
    for size in (17, 41, 58, 87):
        want = F.interpolate(ramp, size=(2, size))
        assert torch.equal(F.interpolate(ramp.to(TVK), size=(2, size)).cpu(), want), size


def test_non_contiguous_input():
    x = _x(2, 7, 5, 3).permute(0, 3, 1, 2)  # channels-last strides
    _against_cpu(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), x, exact_forward=False)
    _against_cpu(lambda t: F.pad(t, (2, 1, 1, 3), mode="reflect"), x, exact_forward=True)


PADS = [
    ((2, 3, 7, 5), (1, 2, 3, 0)),
    ((1, 2, 7, 5), (4, 4, 6, 6)),      # the widest reflection: pad = size - 1
    ((2, 1, 7, 5), (-1, 2, 3, -2)),    # negative pads crop
    ((3, 7, 5), (1, 1, 2, 2)),         # (C, H, W)
    ((2, 3, 7), (3, 1)),               # 1-d
    ((3, 13), (0, 12)),                # 1-d, (C, W)
]


@pytest.mark.parametrize("shape,pad", PADS)
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_padding_matches_cpu(shape, pad, mode):
    _against_cpu(lambda t: F.pad(t, pad, mode=mode), _x(*shape), exact_forward=True)


def test_wrong_dtype_is_a_clear_error():
    x = torch.arange(12, dtype=torch.int32).reshape(1, 1, 3, 4).to(TVK)
    with pytest.raises(TypeError, match="reflection_pad2d.*int32"):
        F.pad(x, (1, 1, 1, 1), mode="reflect")
    with pytest.raises(TypeError, match="upsample_nearest2d.*int32"):
        F.interpolate(x, scale_factor=2)
    # the device stays usable
    y = F.interpolate(x.float(), scale_factor=2)
    assert torch.equal(y.cpu(), F.interpolate(x.cpu().float(), scale_factor=2))


class _TinyUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.up = nn.Conv2d(4, 2, 3, padding=1, padding_mode="reflect")

    def forward(self, x):
        h = F.relu(self.down(x))
        h = F.interpolate(h, scale_factor=2, mode="bilinear") + F.interpolate(h, scale_factor=2)
        return self.up(F.pad(h, (1, 0, 0, 1), mode="replicate"))[..., :-1, 1:]


def test_compiled_conv_upsample_model_matches_cpu():
    torch.manual_seed(0)
    model = _TinyUNet()
    x = _x(2, 2, 6, 6)
    ref = model(x)
    ref.square().sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    model.to(TVK)
    compiled = torchvk.compile(model)  # a graph break would raise GraphBreakError
    torchvk.reset_op_counts()
    for _ in range(2):  # the second call replays
        model.zero_grad(set_to_none=True)
        out = compiled(x.to(TVK))
        out.square().sum().backward()
    _close(out.detach().cpu(), ref.detach())
    for p, g in zip(model.parameters(), ref_grads):
        _close(p.grad.cpu(), g)
    assert torchvk.op_counts()["cpu"] == {}


_STATS = """
import json
from tvk_kernels import get_device
from tvk_kernels.kernels import resample as resample_kernels
dev = get_device(0)
stats = {}
for mode in resample_kernels.NAMES:
    for backward in (0, 1):
        for align in ((0, 1) if mode == resample_kernels.BILINEAR else (0,)):
            pipe = dev.pipelines.get(resample_kernels.Resample.template, resample_kernels.defines(mode, backward, align), local_size=(resample_kernels.WG, 1, 1),
                                     push_size=128, capture_stats=True)
            stats[f"{resample_kernels.NAMES[mode]} backward={backward} align={align}"] = pipe.stats
print(json.dumps(stats))
"""


def test_kernels_compile_for_rdna1_without_spills(tmp_path):
    """RDNA1's own compiler (Mesa's null Navi 10): no spills, within AMD's 32 KiB of shared memory."""
    stats = navi10_stats(_STATS, tmp_path)
    assert len(stats) == 2 * 6
    assert_fits_rdna1(stats)
