"""conv2d forward / grad-input / grad-weight / grad-bias (tvk_kernels.kernels.conv) against
torch CPU autograd (torch.nn.functional.conv2d).

Error bound, every output: max |got - ref| <= 2e-5 * max(1, max |ref|), ref being torch's
float32 result (both sides are float32 sums of at most a few thousand N(0,1) products, in
different orders; observed errors are ~1e-6 of max |ref|).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from rdna1_check import assert_fits_rdna1, navi10_stats  # noqa: E402
from tvk_kernels import InvalidConfigError  # noqa: E402
from tvk_kernels.kernels import conv, conv_family  # noqa: E402
from tvk_kernels.tune.targets import conv2d as conv2d_target  # noqa: E402

REL = 2e-5


def _close(got, ref, what, rel=REL):
    ref = np.asarray(ref, dtype=np.float32)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(got - ref).max(initial=0.0))
    assert err <= rel * scale, f"{what}: max abs error {err:.3g} > {rel:g} * {scale:.3g}"


def _upload_at(device, a, offset):
    """`a` on the device at `offset` bytes into a buffer: a view that is not 16-byte aligned."""
    if not offset:
        buf = device.upload(a)
        return buf, buf.address
    pad = np.zeros(offset // 4 + a.size, np.float32)
    pad[offset // 4:] = a.ravel()
    buf = device.upload(pad)
    return buf, buf.address + offset


def check_conv(device, rng, x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1, bias=True, params=None,
               params_bwd=None, offset=0):
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ref = F.conv2d(xt, wt, bt if bias else None, stride, padding, dilation, groups)
    go = rng.standard_normal(tuple(ref.shape)).astype(np.float32)
    ref.backward(torch.tensor(go))

    out_shape = conv.conv2d_output_shape(x_shape, w_shape, stride, padding, dilation, groups)
    assert out_shape == tuple(ref.shape)
    (X, xa), (W, wa), (B, ba), (GO, goa) = (_upload_at(device, a, offset) for a in (x, w, b, go))
    O = device.allocator.alloc(4 * ref.numel())
    GI, GW, GB = device.allocator.alloc(x.nbytes), device.allocator.alloc(w.nbytes), device.allocator.alloc(b.nbytes)
    pb = params if params_bwd is None else params_bwd
    got_shape = conv.conv2d_forward(device, xa, wa, ba if bias else None, O.address, x_shape,
                                    w_shape, stride, padding, dilation, groups, params=params)
    assert got_shape == out_shape
    conv.conv2d_backward_input(device, goa, wa, GI.address, x_shape, w_shape, stride, padding,
                               dilation, groups, params=pb)
    conv.conv2d_backward_weight(device, goa, xa, GW.address, x_shape, w_shape, stride, padding,
                                dilation, groups, params=pb)
    conv.conv2d_backward_bias(device, goa, GB.address, out_shape)
    _close(device.download(O, np.float32, out_shape), ref.detach().numpy(), "forward")
    _close(device.download(GI, np.float32, x_shape), xt.grad.numpy(), "grad_input")
    _close(device.download(GW, np.float32, w_shape), wt.grad.numpy(), "grad_weight")
    ref_gb = go.astype(np.float64).sum(axis=(0, 2, 3))  # grad_bias is defined with or without a bias
    _close(device.download(GB, np.float32, (w_shape[0],)), ref_gb, "grad_bias")


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
    ((3, 12, 13, 11), (20, 12, 3, 3), 1, 1, 1, 1, True),         # wider GEMM tiles with ragged M, N, K
    ((1, 10, 9, 9), (18, 5, 3, 3), 2, 1, 1, 2, False),           # groups 2, 9 and 5 channels per group
    ((2, 3, 8, 7), (4, 3, 1, 1), 2, 0, 1, 1, True),              # 1x1 stride 2: 3 of 4 grad-input phases get 0
    ((1, 2, 13, 12), (3, 2, 5, 3), 3, (2, 1), 2, 1, True),       # stride 3 with dilation 2: uneven phases
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


def test_unaligned_views(device, rng):
    """Inputs at 4- and 12-byte offsets into their buffers (tensor views with a storage offset)."""
    check_conv(device, rng, (2, 3, 9, 8), (5, 3, 3, 3), 1, 1, 1, 1, True, offset=4)
    check_conv(device, rng, (1, 4, 7, 7), (4, 2, 3, 3), 2, 1, 1, 2, True, offset=12)


def test_split_k_grad_weight(device, rng):
    """grad_weight's split-K path (partials + reduce), incl. a ragged last slice, and the automatic plan."""
    xs, ws = (3, 4, 17, 15), (6, 4, 3, 3)
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    xt, wt = torch.tensor(x), torch.tensor(w, requires_grad=True)
    ref = F.conv2d(xt, wt, None, 1, 1)
    go = rng.standard_normal(tuple(ref.shape)).astype(np.float32)
    ref.backward(torch.tensor(go))
    X, GO, GW = device.upload(x), device.upload(go), device.allocator.alloc(w.nbytes)
    for split_k in (1, 2, 7, 64):
        conv.conv2d_backward_weight(device, GO, X, GW, xs, ws, 1, 1, split_k=split_k)
        _close(device.download(GW, np.float32, ws), wt.grad.numpy(), f"grad_weight split_k={split_k}")
    fam = conv.family(device, conv.Conv2d)
    params = fam.resolve("bwd_weight_small")
    K = 3 * 17 * 15
    splits, chunk = conv._split_plan(device, params, 6, 36, K, 1, 7)
    assert splits == 7 and chunk % params["BK"] == 0 and (splits - 1) * chunk < K <= splits * chunk
    splits, _ = conv._split_plan(device, params, 6, 36, 1 << 20, 1)  # long K, one output tile: split
    assert splits > 1


EXPLICIT = [
    {"BM": 16, "BN": 16, "BK": 4, "TM": 2, "TN": 2, "PAD": 0},
    {"BM": 32, "BN": 8, "BK": 8, "TM": 4, "TN": 1, "PAD": 4},
    {"BM": 64, "BN": 32, "BK": 16, "TM": 4, "TN": 4, "PAD": 1},
    {"BM": 32, "BN": 64, "BK": 8, "TM": 1, "TN": 8, "PAD": 1},
]


def test_explicit_candidates(device, rng):
    """Each explicit parameter set (from the valid candidate list) computes the same correct conv."""
    listed = conv.candidates(device)
    for params in EXPLICIT:
        assert {**params, "FRAG": 0} in listed, params  # a config without FRAG (tuned before it) runs FRAG 0
        check_conv(device, rng, (2, 5, 9, 7), (7, 5, 3, 3), 2, 1, 1, 1, True, params=params)


FRAG = [  # FRAG 1: runs of 4 rows and columns, one vec4 shared load each
    {"BM": 32, "BN": 32, "BK": 8, "TM": 4, "TN": 4, "PAD": 4, "FRAG": 1},
    {"BM": 64, "BN": 32, "BK": 8, "TM": 8, "TN": 4, "PAD": 0, "FRAG": 1},  # two runs of rows, 4*BMT apart
    {"BM": 32, "BN": 64, "BK": 16, "TM": 4, "TN": 8, "PAD": 4, "FRAG": 1},  # two runs of columns
]
FRAG_CASES = [
    # x shape, w shape, stride, padding, dilation, groups: ragged M, N and K against every tile above
    ((2, 5, 9, 7), (7, 5, 3, 3), 1, 1, 1, 1),
    ((2, 13, 7, 5), (37, 13, 1, 1), 1, 0, 1, 1),                 # 1x1, N = 37: a second, ragged N tile
    ((3, 4, 13, 11), (9, 4, 3, 3), 2, 1, 1, 1),                  # stride 2: four grad-input phases
    ((1, 3, 13, 11), (6, 3, 3, 3), 1, 2, 2, 1),                  # dilation 2
    ((2, 6, 9, 9), (10, 3, 3, 3), (2, 1), (1, 0), (1, 2), 2),    # groups 2, mixed stride/pad/dilation
    ((1, 3, 23, 21), (8, 3, 7, 7), 2, 3, 1, 1),                  # 7x7/2 stem: K = 147
]


@pytest.mark.parametrize("params", FRAG, ids=lambda p: f"TM{p['TM']}TN{p['TN']}PAD{p['PAD']}")
def test_frag_layout(device, rng, params):
    """FRAG 1 (each invocation's rows and columns in runs of 4) computes every direction's conv."""
    from tvk_kernels.runtime.compiler import split_defines

    assert params in conv.candidates(device)
    compiled, spec = split_defines(conv.Conv2d.template, conv_family.gemm_defines(0, params, 64))
    assert compiled == {"DIR": 0} and spec[10] == 1  # the module FRAG 0 uses; FRAG is constant 10
    for xs, ws, s, p, d, g in FRAG_CASES:
        check_conv(device, rng, xs, ws, s, p, d, g, True, params=params)


def test_frag_needs_multiples_of_4(device):
    """FRAG 1 with TM, TN or PAD not a multiple of 4: refused (InvalidConfigError), never a candidate."""
    x = device.upload(np.zeros((1, 2, 5, 5), np.float32))
    out = device.allocator.alloc(4 * 2 * 9)
    for bad in ({"TM": 2}, {"TN": 2}, {"PAD": 1}):
        params = {**FRAG[0], **bad}
        with pytest.raises(InvalidConfigError, match="FRAG == 0 or"):
            conv.conv2d_forward(device, x, x, None, out, (1, 2, 5, 5), (2, 2, 3, 3), params=params)
        assert params not in conv.candidates(device)


_FRAG_STATS = """
import json
from tvk_kernels import get_device
from tvk_kernels.kernels import conv, conv_family
from tvk_kernels.search_space import search_space, with_derived
dev = get_device(0)
stats = {}
for params in %r:
    prm = with_derived(search_space("conv2d"), params)
    for direction, dir_id in conv.DIRS.items():
        pipe = dev.pipelines.get("conv2d.comp", conv_family.gemm_defines(dir_id, prm, prm["WG"]),
                                 local_size=(prm["WG"], 1, 1), push_size=128, capture_stats=True)
        stats[f"{params} {direction}"] = pipe.stats
print(json.dumps(stats))
"""


def test_frag_compiles_for_rdna1_without_spills(tmp_path):
    """The FRAG 1 configs above in every direction, by RDNA1's own compiler (Mesa's null Navi 10):
    no spills, within 32 KiB of shared memory (benchmarks/rdna1_frag.py: the shipped configs)."""
    stats = navi10_stats(_FRAG_STATS % (FRAG,), tmp_path)
    assert len(stats) == 3 * len(FRAG), sorted(stats)
    assert_fits_rdna1(stats)


def test_one_spirv_module_per_direction_serves_every_tile_shape():
    """The tile parameters are specialization constants: every parameter set of a direction
    compiles to one SPIR-V module (compiled once, shipped once); the pipeline sets the tile."""
    from tvk_kernels.runtime.compiler import split_defines

    for dir_id in conv.DIRS.values():
        modules, tiles = set(), set()
        for params in EXPLICIT:
            wg = (params["BM"] // params["TM"]) * (params["BN"] // params["TN"])
            compiled, spec = split_defines(conv.Conv2d.template, conv_family.gemm_defines(dir_id, params, wg))
            modules.add(tuple(sorted(compiled.items())))
            tiles.add(tuple(sorted(spec.items())))
        assert modules == {(("DIR", dir_id),)}, modules
        assert len(tiles) == len(EXPLICIT), tiles


def test_candidates_respect_constraints(device):
    f = device.facts
    cands = conv.candidates(device)
    assert len(cands) > 50
    for c in cands:
        wg = (c["BM"] // c["TM"]) * (c["BN"] // c["TN"])
        assert 16 <= wg <= f.max_workgroup_invocations
        shared = 4 * (c["BK"] * (c["BM"] + c["PAD"]) + c["BK"] * (c["BN"] + c["PAD"])
                      + 3 * c["BM"] + 3 * c["BN"] + 4 * c["BK"])
        assert shared <= f.max_shared_memory


def test_invalid_config(device, rng):
    x = device.upload(np.zeros((1, 2, 5, 5), np.float32))
    w = device.upload(np.zeros((2, 2, 3, 3), np.float32))
    out = device.allocator.alloc(4 * 2 * 9)
    big = 1
    while 4 * (32 * (128 + big) * 2) <= device.facts.max_shared_memory:
        big *= 2
    bad = [
        {"BM": 64, "BN": 64, "BK": 16, "TM": 3, "TN": 4},                       # BM % TM
        {"BM": 128, "BN": 128, "BK": 32, "TM": 8, "TN": 8, "PAD": big},          # shared memory
        {"BM": 128, "BN": 128, "BK": 8, "TM": 1, "TN": 1, "PAD": 0},             # 16384 invocations
        {"BM": 16, "BN": 4, "BK": 8, "TM": 4, "TN": 4, "PAD": 0},                # BN % TN, WG < 16
        {"BM": 32, "BN": 32, "BK": 0, "TM": 4, "TN": 4, "PAD": 0},               # not positive
    ]
    for params in bad:
        with pytest.raises(InvalidConfigError):
            conv.conv2d_forward(device, x.address, w.address, None, out.address, (1, 2, 5, 5), (2, 2, 3, 3),
                                params=params)
    with pytest.raises(InvalidConfigError):
        conv.conv2d_backward_input(device, out.address, w.address, x.address, (1, 2, 5, 5), (2, 2, 3, 3),
                                   params=bad[0])


def test_numpy_reference_and_tune_target(device, rng):
    """The tuner's numpy reference matches torch, and its target checks and runs a candidate."""
    xs, ws = (2, 4, 9, 8), (6, 2, 3, 3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, (6,)))
    xt, wt = torch.tensor(x, dtype=torch.float64, requires_grad=True), torch.tensor(w, dtype=torch.float64,
                                                                                      requires_grad=True)
    ref = F.conv2d(xt, wt, torch.tensor(b, dtype=torch.float64), 2, 1, (2, 1), 2)
    go = rng.standard_normal(tuple(ref.shape))
    ref.backward(torch.tensor(go))
    np.testing.assert_allclose(conv.reference_conv2d(x, w, b, 2, 1, (2, 1), 2), ref.detach().numpy(), atol=1e-9)
    gi, gw = conv.reference_conv2d_backward(go, x, w, 2, 1, (2, 1), 2)
    np.testing.assert_allclose(gi, xt.grad.numpy(), atol=1e-9)
    np.testing.assert_allclose(gw, wt.grad.numpy(), atol=1e-9)

    target = conv2d_target.TARGET
    for direction in conv.DIRS:
        shape = conv_family.tune_shape(direction, xs, ws, 2, 1, 1, 2)
        case = target.prepare(device, shape, n_inputs=2)
        try:
            ok, err = case.check(EXPLICIT[0])
            assert ok, (direction, err)
            case.run(EXPLICIT[0], 1)
            work = target.work(shape, EXPLICIT[0])
            assert work["flops"] > 0 and work["invocations"] == 64
        finally:
            case.free()
    defines, local, _ = target.static_defines(EXPLICIT[2])
    assert local == (128, 1, 1) and defines["DIR"] == 0


def test_output_shape_errors():
    assert conv.conv2d_output_shape((2, 4, 7, 9), (6, 2, 3, 3), 2, 1, 1, 2) == (2, 6, 4, 5)
    with pytest.raises(ValueError):
        conv.conv2d_output_shape((1, 3, 7, 7), (4, 2, 3, 3))  # weight expects 2 input channels
    with pytest.raises(ValueError):
        conv.conv2d_output_shape((1, 4, 7, 7), (6, 2, 3, 3), groups=3)  # groups must divide channels
    with pytest.raises(ValueError):
        conv.conv2d_output_shape((1, 1, 2, 2), (1, 1, 3, 3))  # kernel larger than the image


@pytest.mark.parametrize("bias", [True, False])
def test_relu_epilogue_matches_relu_of_conv(device, rng, bias):
    """act="relu" (compiled mode's conv+relu fusion) equals torch's relu(conv2d), in one kernel."""
    x = rng.standard_normal((2, 4, 9, 11)).astype(np.float32)
    w = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    ref = F.relu(F.conv2d(torch.tensor(x), torch.tensor(w), torch.tensor(b) if bias else None, 2, 1, 1, 2))
    X, W, B = device.upload(x), device.upload(w), device.upload(b)
    O = device.allocator.alloc(4 * ref.numel())
    before = device.stream.total_dispatches
    conv.conv2d_forward(device, X, W, B if bias else None, O, x.shape, w.shape, 2, 1, 1, 2, act="relu")
    assert device.stream.total_dispatches - before == 1
    got = device.download(O, np.float32, tuple(ref.shape))
    assert (got >= 0).all()
    _close(got, ref.numpy(), "relu(conv2d)")
    with pytest.raises(ValueError, match="activation 'swish'"):  # not in the activation table
        conv.conv2d_forward(device, X, W, None, O, x.shape, w.shape, 2, 1, 1, 2, act="swish")
