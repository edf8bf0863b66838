"""Split-K for conv2d forward and grad-input (tvk_kernels.kernels.conv): the GEMM's reduction K
cut into slices whose partial sums a second pass adds up, against torch CPU.

Error bound as tests/test_conv.py's: max |got - ref| <= 2e-5 * max(1, max |ref|).
The scratch buffer of the partial sums is first filled with NaN (the allocator hands a freed
range of the same size out again), so a slice some launch leaves unwritten shows up as NaN.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from rdna1_check import assert_fits_rdna1, navi10_stats  # noqa: E402
from tvk_kernels.kernels import conv, conv_family  # noqa: E402

REL = 2e-5
SMALL = {"BM": 16, "BN": 16, "BK": 4, "TM": 2, "TN": 2, "PAD": 0}  # small tiles: ragged M and N, several K tiles


def _close(got, ref, what):
    ref = np.asarray(ref, dtype=np.float32)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(got - ref).max(initial=np.inf if np.isnan(got).any() else 0.0))
    assert err <= REL * scale, f"{what}: max abs error {err:.3g} > {REL:g} * {scale:.3g}"


def _poison(device, nbytes):
    """Leave a freed NaN-filled range of `nbytes` in the allocator's cache for the next scratch."""
    buf = device.upload(np.full(nbytes // 4, np.nan, np.float32))
    device.stream.synchronize()
    buf.free()


def _plans(monkeypatch):
    """Record every split plan conv makes (the real planner runs)."""
    made, real = [], conv._split_plan

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(conv, "_split_plan", spy)
    return made


def _big_target(monkeypatch, target=528, min_k=16):
    """tuning/conv2d.json's split_k data as on a large GPU, whatever this device is."""
    real = conv.search_space

    def patched(family):
        space = real(family)
        if family == conv.Conv2d.family:  # a copy: search_space's result is cached
            space = dict(space, split_k=dict(space["split_k"], target_groups=target, min_k_per_split=min_k))
        return space

    monkeypatch.setattr(conv, "search_space", patched)


def _forward(device, rng, xs, ws, stride=1, padding=0, dilation=1, groups=1, split_k=None, act=None, params=None):
    """conv2d_forward with a bias against torch; returns how many kernels it dispatched."""
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, (ws[0],)))
    ref = F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), stride, padding, dilation, groups)
    if act == "relu":
        ref = F.relu(ref)
    X, W, B = device.upload(x), device.upload(w), device.upload(b)
    O = device.allocator.alloc(4 * ref.numel())
    splits = split_k or 1
    _poison(device, 4 * ref.numel() * splits)
    before = device.stream.total_dispatches
    conv.conv2d_forward(device, X, W, B, O, xs, ws, stride, padding, dilation, groups, params=params, act=act,
                        split_k=split_k)
    dispatches = device.stream.total_dispatches - before
    _close(device.download(O, np.float32, tuple(ref.shape)), ref.numpy(), f"forward split_k={split_k} act={act}")
    return dispatches


def _backward_input(device, rng, xs, ws, stride=1, padding=0, dilation=1, groups=1, split_k=None, params=None):
    """conv2d_backward_input against torch autograd; returns how many kernels it dispatched."""
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    ref = F.conv2d(xt, torch.tensor(w), None, stride, padding, dilation, groups)
    go = rng.standard_normal(tuple(ref.shape)).astype(np.float32)
    ref.backward(torch.tensor(go))
    GO, W = device.upload(go), device.upload(w)
    GI = device.allocator.alloc(x.nbytes)
    _poison(device, x.nbytes * (split_k or 1))
    before = device.stream.total_dispatches
    conv.conv2d_backward_input(device, GO, W, GI, xs, ws, stride, padding, dilation, groups, params=params,
                               split_k=split_k)
    dispatches = device.stream.total_dispatches - before
    _close(device.download(GI, np.float32, xs), xt.grad.numpy(), f"grad_input split_k={split_k}")
    return dispatches


@pytest.mark.parametrize("split_k", [2, 3])
def test_forward_split_k_with_bias(device, rng, split_k):
    """K = 5*3*3 = 45: not a multiple of BK*splits; M = 35 and N = 19 leave ragged 16-wide tiles.
    The bias is added once (by split 0), not once per split."""
    assert _forward(device, rng, (1, 5, 5, 7), (19, 5, 3, 3), 1, 0, split_k=split_k, params=SMALL) == 2
    assert _forward(device, rng, (1, 5, 5, 7), (19, 5, 3, 3), 1, 0, split_k=1, params=SMALL) == 1


def test_forward_split_k_groups(device, rng):
    assert _forward(device, rng, (2, 6, 5, 5), (8, 3, 3, 3), 1, 1, groups=2, split_k=3, params=SMALL) == 2


def test_forward_act_splits_and_the_sum_applies_it(device, rng, monkeypatch):
    """relu(sum) is not the sum of relu(partials): split, the partials are plain sums (bias once)
    and the pass that adds them applies the epilogue (compiled mode's conv + activation)."""
    plans = _plans(monkeypatch)
    assert _forward(device, rng, (1, 5, 5, 7), (19, 5, 3, 3), 1, 1, split_k=3, act="relu", params=SMALL) == 2
    assert plans and plans[-1][0] == 3
    assert _forward(device, rng, (1, 5, 5, 7), (19, 5, 3, 3), 1, 1, split_k=1, act="relu", params=SMALL) == 1


@pytest.mark.parametrize("xs,ws,stride,padding,dilation", [
    ((2, 6, 5, 6), (5, 6, 3, 3), 1, 1, 1),        # stride 1: one phase
    ((1, 4, 7, 6), (6, 4, 3, 3), 2, 1, 1),        # stride 2: four phases of unequal size and K
    ((1, 3, 9, 8), (5, 3, 3, 3), 1, 2, 2),        # dilation 2
    ((2, 3, 7, 5), (9, 3, 1, 1), 2, 0, 1),        # 1x1 stride 2, odd size: three phases have no taps
    ((1, 2, 7, 5), (9, 2, 2, 1), 3, 0, 1),        # stride above the kernel: phases with pixels but no taps
])
@pytest.mark.parametrize("split_k", [2, 3])
def test_backward_input_split_k(device, rng, xs, ws, stride, padding, dilation, split_k):
    """Every stride phase writes every partial-sum slice (zeros where its K runs out or it has
    no taps); one reduce at the end."""
    phases = len(conv._bwd_input_phases(conv.geometry(xs, ws, stride, padding, dilation, 1)[0]))
    assert _backward_input(device, rng, xs, ws, stride, padding, dilation, split_k=split_k,
                           params=SMALL) == phases + 1


def test_backward_input_split_k_groups(device, rng):
    assert _backward_input(device, rng, (2, 4, 6, 5), (6, 2, 3, 3), 2, 1, 1, groups=2, split_k=3, params=SMALL) == 5


def test_transposed_conv_splits_through_grad_input(monkeypatch):
    """conv_transpose2d on tvk is grad_input's kernel: planned with a large target, it splits, and
    output_padding (out_hw) and the stride phases still give torch's result."""
    import torchvk  # noqa: F401

    _big_target(monkeypatch)
    plans = _plans(monkeypatch)
    torch.manual_seed(0)
    x, w, b = torch.randn(1, 16, 3, 4), torch.randn(16, 3, 3, 3), torch.randn(3)
    ref = F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)
    got = F.conv_transpose2d(x.to("tvk"), w.to("tvk"), b.to("tvk"), stride=2, padding=1, output_padding=1)
    torch.testing.assert_close(got.cpu(), ref, atol=1e-4, rtol=1e-4)
    assert any(splits > 1 for splits, _ in plans), plans


def test_automatic_plan_splits_small_images_with_long_k(device, rng, monkeypatch):
    """On a device with a large target (an H200's 528 workgroups), a late CNN layer (few output
    tiles, long K) splits; a layer with many tiles does not. grad_input plans from one phase."""
    _big_target(monkeypatch, target=528, min_k=128)
    params = dict(SMALL, BM=32, BN=64, BK=16)
    splits, chunk = conv._split_plan(device, params, 196, 256, 2304, 1)  # fwd 3x3 256->256 at 14x14, batch 1
    assert splits > 1 and chunk % 16 == 0 and (splits - 1) * chunk < 2304 <= splits * chunk
    assert conv._split_plan(device, params, 8 * 56 * 56, 256, 2304, 1)[0] == 1  # many tiles already
    # 392 tiles of a 528 target: grad_weight still splits; fwd and grad_input, past min_fill, do not
    # (the partials' traffic cost more than the idle quarter of the GPU, measured: tuning/conv2d.json)
    half_full = (32 * 392, 64, 1024, 1)
    assert conv._split_plan(device, params, *half_full)[0] == 2
    for direction in ("fwd", "bwd_input"):
        assert conv._split_plan(device, params, *half_full, direction=direction)[0] == 1
    assert conv._split_plan(device, params, 196, 256, 2304, 1, direction="fwd")[0] > 1

    _big_target(monkeypatch, target=528, min_k=16)
    plans = _plans(monkeypatch)
    _forward(device, rng, (1, 32, 4, 4), (8, 32, 3, 3), 1, 1, params=SMALL)
    assert plans[-1][0] > 1, plans
    # grad_input plans from one stride phase's launch: its 16 pixels x 8 channels are one 16x16
    # tile, so a target of 4 workgroups takes 4 splits (all four phases' 64 pixels would make 4 tiles: none)
    _big_target(monkeypatch, target=4, min_k=16)
    _backward_input(device, rng, (1, 8, 8, 8), (32, 8, 3, 3), 2, 1, 1, params=SMALL)
    assert plans[-1][0] == 4, plans


def test_more_than_64_splits_sum_with_the_tree_reduce(device, rng, monkeypatch):
    """Over 64 partial slices, conv2d_reduce sums each output with a workgroup tree (PER_THREAD 0),
    its second module: it must give the same sum (and be in the shipped kernels)."""
    xs, ws = (1, 2, 48, 48), (3, 2, 1, 1)  # grad_weight's K = 48*48 = 2304: 72 slices of 32
    x, go = rng.standard_normal(xs).astype(np.float32), rng.standard_normal((1, 3, 48, 48)).astype(np.float32)
    wt = torch.zeros(ws, requires_grad=True)
    F.conv2d(torch.tensor(x), wt).backward(torch.tensor(go))
    X, GO, GW = device.upload(x), device.upload(go), device.allocator.alloc(4 * 6)
    plans = _plans(monkeypatch)
    conv.conv2d_backward_weight(device, GO, X, GW, xs, ws, params=dict(SMALL, BK=32), split_k=72)
    assert plans[-1][0] == 72, plans
    _close(device.download(GW, np.float32, ws), wt.grad.numpy(), "grad_weight with 72 splits")


def test_split_k_errors(device, rng):
    xs, ws = (1, 2, 4, 4), (3, 2, 3, 3)
    buf = device.allocator.alloc(4 * 64)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="split_k"):
            conv.conv2d_forward(device, buf, buf, None, buf, xs, ws, split_k=bad)
        with pytest.raises(ValueError, match="split_k"):
            conv.conv2d_backward_input(device, buf, buf, buf, xs, ws, split_k=bad)
    _forward(device, rng, xs, ws, split_k=2)  # the runtime stays usable


_STATS = """
import json
from tvk_kernels import get_device
from tvk_kernels.config import default_params
from tvk_kernels.kernels import activations, conv, conv_family
from tvk_kernels.search_space import search_space, with_derived
dev = get_device(0)
space = search_space("conv2d")
stats = {}
for bucket in space["buckets"]:
    direction = next(d for d in conv.DIRS if bucket.startswith(d))
    if direction == "bwd_weight":
        continue
    prm = with_derived(space, default_params("conv2d", dev.facts, bucket))
    for act in (None, "relu") if direction == "fwd" else (None,):
        defines = conv_family.gemm_defines(conv.DIRS[direction], prm, prm["WG"], act)
        pipe = dev.pipelines.get("conv2d.comp", defines, local_size=(prm["WG"], 1, 1), push_size=128,
                                 capture_stats=True)
        stats[f"{bucket} act={act}"] = {**pipe.stats, "params": prm}
wg = conv.family(dev, conv.Conv2d).reduce_wg()
for per_thread in (1, 0):  # the split-K sum with the forward's epilogue
    defines = {"PER_THREAD": per_thread, **activations.act_define(conv.ACTIVATIONS["gelu"])}
    pipe = dev.pipelines.get(conv_family.REDUCE_TEMPLATE, defines, local_size=(wg, 1, 1),
                             push_size=conv_family.REDUCE_PUSH.size, capture_stats=True, shared_bytes=0 if per_thread else 4 * wg)
    stats[f"reduce per_thread={per_thread} act=gelu"] = {**pipe.stats, "params": {}}
print(json.dumps(stats))
"""


def test_split_kernels_compile_for_rdna1_without_spills(tmp_path):
    """The forward (with and without an epilogue) and grad-input kernels at every bucket's default
    config, by RDNA1's own compiler (Mesa's null Navi 10): no spills, within 32 KiB of shared memory."""
    stats = navi10_stats(_STATS, tmp_path)
    assert len(stats) == 17, sorted(stats)
    assert_fits_rdna1(stats)
