"""float16 and bfloat16 convolutions, norms and pooling on the kernels' 16-bit storage (templates/common/storage.glsl).

autocast's convs, batch norms and pools read and write their 16-bit tensors in place, with float32 arithmetic: each
output is the float32 result of the rounded inputs, rounded once. So every check here compares against float64
on the same rounded inputs, within one rounding of the output dtype (plus float32's own error), not within a
tolerance picked to pass; the norms' weight and bias gradients and statistics are float32 and held to float32's
precision. Split-K partials stay float32 until they are summed (a partial stored in 16 bits would be read back
as garbage by the float32 sum). RDNA1: the 16-bit variants of the shipped RDNA1 configs compile on the null
Navi 10 with 0 spills in 32 KiB.
"""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import torchvk  # noqa: F401  (the tvk device)
import torchvk.profiler
from rdna1_check import LDS_LIMIT, assert_fits_rdna1, navi10_stats
from tvk_kernels.kernels import conv, conv_family, norm, pool
from tvk_kernels.kernels.launch import family

F = torch.nn.functional
HALF = [torch.float16, torch.bfloat16]
# one rounding to the dtype (half an ulp, relative) with room for float32's error
EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
ROOT = Path(__file__).resolve().parents[1]

CASES = {
    # name: (x shape, w shape, conv kwargs, bias)
    "3x3": ((2, 5, 9, 7), (7, 5, 3, 3), dict(padding=1), True),
    "stride2_dilation2": ((2, 4, 13, 11), (6, 4, 3, 3), dict(stride=2, padding=2, dilation=2), True),
    "groups2": ((2, 6, 9, 9), (10, 3, 3, 3), dict(stride=(2, 1), padding=(1, 0), groups=2), False),
    "depthwise": ((2, 6, 10, 9), (6, 1, 3, 3), dict(padding=1, groups=6), True),
    "depthwise_mult2_stride2": ((2, 4, 11, 11), (8, 1, 5, 5), dict(stride=2, padding=2, groups=4), False),
    "1x1": ((3, 13, 5, 6), (37, 13, 1, 1), dict(), True),
    "stem7x7": ((1, 3, 23, 21), (8, 3, 7, 7), dict(stride=2, padding=3), False),
}


def _close(got: torch.Tensor, ref: torch.Tensor, dtype, what: str):
    """got (dtype) within one rounding of ref (float64), measured against ref's largest magnitude."""
    assert got.dtype == dtype, (what, got.dtype)
    err = (got.cpu().double() - ref).abs().max().item()
    bound = EPS[dtype] * max(ref.abs().max().item(), 1e-30)
    assert err <= bound, f"{what}: max error {err:.3g} > {bound:.3g}"


def _conv_and_grads(conv_fn, x, w, b, kwargs, grad_out):
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    b = b.detach().requires_grad_() if b is not None else None
    y = conv_fn(x, w, b, **kwargs)
    y.backward(grad_out)
    return y, x.grad, w.grad, (b.grad if b is not None else None)


def check(conv_fn, x_shape, w_shape, kwargs, bias, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(x_shape, generator=gen).to(dtype)
    w = (torch.randn(w_shape, generator=gen) / np.sqrt(np.prod(w_shape[1:]))).to(dtype)
    b = torch.randn(w_shape[0] if conv_fn is not F.conv_transpose2d else w_shape[1] * kwargs.get("groups", 1),
                    generator=gen).to(dtype) if bias else None
    y64 = conv_fn(x.double(), w.double(), b.double() if bias else None, **kwargs)
    grad_out = torch.randn(y64.shape, generator=gen).to(dtype)
    ref = _conv_and_grads(conv_fn, x.double(), w.double(), b.double() if bias else None, kwargs, grad_out.double())
    got = _conv_and_grads(conv_fn, x.to("tvk"), w.to("tvk"), b.to("tvk") if bias else None, kwargs,
                          grad_out.to("tvk"))
    for name, g, r in zip(("output", "grad_input", "grad_weight", "grad_bias"), got, ref):
        if r is not None:
            _close(g, r, dtype, name)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("case", CASES)
def test_conv2d_forward_and_backward_within_one_rounding(dtype, case):
    x_shape, w_shape, kwargs, bias = CASES[case]
    check(F.conv2d, x_shape, w_shape, kwargs, bias, dtype)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_conv1d_and_transposed_conv(dtype):
    check(F.conv1d, (2, 4, 17), (6, 4, 5), dict(stride=2, padding=2), True, dtype)
    check(F.conv_transpose2d, (2, 6, 5, 7), (6, 4, 3, 3), dict(stride=2, padding=1, output_padding=1), True, dtype)
    check(F.conv_transpose2d, (1, 4, 6, 6), (4, 3, 3, 3), dict(padding=1, groups=2), False, dtype)


def test_half_convs_run_without_cast_copies():
    """A float16 conv's forward and backward are conv kernels on the 16-bit tensors: no cast copies around
    them (before this storage every conv cast its inputs to float32 and its outputs back: 9 copies a layer)."""
    x = torch.randn(2, 4, 8, 8, dtype=torch.float16).to("tvk").requires_grad_()
    w = torch.randn(6, 4, 3, 3, dtype=torch.float16).to("tvk").requires_grad_()
    dw = torch.randn(4, 1, 3, 3, dtype=torch.float16).to("tvk").requires_grad_()
    for _ in range(2):  # the second time: pipelines built, gradients accumulated as they will be
        with torchvk.profiler.profile() as prof:
            y = F.conv2d(F.conv2d(x, dw, padding=1, groups=4), w, padding=1)
            y.backward(torch.ones_like(y))
            torch.tvk.synchronize()
    names = [k.name for k in prof.kernels]
    assert "copy" not in names, names
    assert {n for n in names if n.startswith("conv2d")} >= {"conv2d_fwd", "conv2d_bwd_input", "conv2d_bwd_weight",
                                                             "conv2d_depthwise_fwd", "conv2d_depthwise_bwd_weight"}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("direction", list(conv.DIRS))
def test_split_k_partials_are_float32_and_rounded_once(device, dtype, direction):
    """Forced split-K in every direction, and the depthwise grad-weight's slices: float32 partials, one
    float32 sum, one rounding (the result equals the unsplit one within float32's summation order)."""
    torch_dtype = getattr(torch, dtype)
    rng = np.random.default_rng(1)
    for xs, ws, groups in (((2, 8, 12, 10), (16, 8, 3, 3), 1), ((2, 6, 12, 10), (6, 1, 3, 3), 6)):
        if groups > 1 and direction != "bwd_weight":
            continue  # the depthwise forward and grad-input do not split
        x = torch.from_numpy(rng.standard_normal(xs)).to(torch_dtype)
        w = torch.from_numpy(rng.standard_normal(ws)).to(torch_dtype)
        y64 = F.conv2d(x.double(), w.double(), padding=1, groups=groups)
        go = torch.from_numpy(rng.standard_normal(tuple(y64.shape))).to(torch_dtype)
        ref = {"fwd": y64,
               "bwd_input": torch.ops.aten.convolution_backward(go.double(), x.double(), w.double(), None, [1, 1],
                                                                [1, 1], [1, 1], False, [0, 0], groups,
                                                                [True, False, False])[0],
               "bwd_weight": torch.ops.aten.convolution_backward(go.double(), x.double(), w.double(), None, [1, 1],
                                                                 [1, 1], [1, 1], False, [0, 0], groups,
                                                                 [False, True, False])[1]}[direction]
        bufs = {k: device.upload(v.view(torch.int16).numpy()) for k, v in (("x", x), ("w", w), ("go", go))}
        out = device.allocator.alloc(2 * ref.numel())
        try:
            geo = dict(padding=1, groups=groups, split_k=4, dtype=dtype)
            if direction == "fwd":
                conv.conv2d_forward(device, bufs["x"], bufs["w"], None, out, xs, ws, **geo)
            elif direction == "bwd_input":
                conv.conv2d_backward_input(device, bufs["go"], bufs["w"], out, xs, ws, **geo)
            else:
                conv.conv2d_backward_weight(device, bufs["go"], bufs["x"], out, xs, ws, **geo)
            got = torch.from_numpy(device.download(out, np.int16, tuple(ref.shape)).copy()).view(torch_dtype)
        finally:
            device.synchronize()
            for buf in (*bufs.values(), out):
                buf.free()
        _close(got, ref, torch_dtype, f"{direction} groups={groups}")


# one workgroup per channel, or (few channels, many elements) the split kernels: forced, whatever a device's defaults
BN_PER_CHANNEL = {"TARGET_GROUPS": 1}
BN_SPLIT = {"TARGET_GROUPS": 16, "SPLIT_ROWS": 64, "WG": 64, "ITEMS": 2}


def _words(t: torch.Tensor) -> np.ndarray:
    """A 16-bit tensor's raw words, as the device stores them."""
    return t.contiguous().view(torch.int16).numpy()


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("params", [BN_PER_CHANNEL, BN_SPLIT], ids=["per_channel", "split"])
def test_batch_norm_on_16bit_activations(device, dtype, training, params):
    """The kernels' batch norm with 16-bit x, y, grad_out and grad_in and float32 weight, bias, statistics and
    their gradients (autocast's mix), one workgroup per channel and split: y and grad_in within one rounding,
    the float32 outputs within float32's error, running statistics updated as float32."""
    shape, c = (6, 3, 11, 13), 3
    prm = family(device, norm.Norm).resolve({"n": int(np.prod(shape))}, params)
    assert (norm._bn_chunks(prm, c, int(np.prod(shape)) // c) is not None) == (params is BN_SPLIT)
    gen = torch.Generator().manual_seed(2)
    x = (torch.randn(shape, generator=gen) * 2 + 1).to(dtype)
    g = torch.randn(shape, generator=gen).to(dtype)
    w, b = torch.randn(c, generator=gen), torch.randn(c, generator=gen)
    rm, rv = torch.randn(c, generator=gen), torch.rand(c, generator=gen) + 0.5
    x64, w64, b64 = (t.double().requires_grad_() for t in (x, w, b))
    rm64, rv64 = rm.double(), rv.double()
    y64 = F.batch_norm(x64, rm64, rv64, w64, b64, training, 0.1, 1e-5)
    y64.backward(g.double())
    name = str(dtype).split(".")[1]
    xb, gb = device.upload(_words(x)), device.upload(_words(g))
    wb, bb, rmb, rvb = (device.upload(t.numpy()) for t in (w, b, rm, rv))
    alloc = device.allocator.alloc
    yb, gib, mb, ib, gwb, gbb = alloc(2 * x.numel()), alloc(2 * x.numel()), *(alloc(4 * c) for _ in range(4))
    try:
        norm.batch_norm(device, xb.address, yb.address, shape, wb.address, bb.address, rmb.address, rvb.address,
                        training, 0.1, 1e-5, mb.address if training else 0, ib.address if training else 0,
                        params=params, dtype=name)
        stats = (mb.address, ib.address) if training else (0, 0)
        norm.batch_norm_backward(device, gb.address, xb.address, shape, *stats, wb.address, gib.address,
                                 gwb.address, gbb.address, training, rmb.address, rvb.address, 1e-5, params=params,
                                 dtype=name)
        got = {k: torch.from_numpy(device.download(buf, np.int16, shape).copy()).view(dtype)
               for k, buf in (("y", yb), ("grad_input", gib))}
        got_w, got_b = (torch.from_numpy(device.download(buf, np.float32, (c,)).copy()) for buf in (gwb, gbb))
        got_rm = torch.from_numpy(device.download(rmb, np.float32, (c,)).copy())
    finally:
        device.synchronize()
        for buf in (xb, gb, wb, bb, rmb, rvb, yb, gib, mb, ib, gwb, gbb):
            buf.free()
    _close(got["y"], y64.detach(), dtype, "y")
    _close(got["grad_input"], x64.grad, dtype, "grad_input")
    torch.testing.assert_close(got_w.double(), w64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_b.double(), b64.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got_rm.double(), rm64, rtol=1e-5, atol=1e-6)  # F.batch_norm updated rm64 in place


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_layer_norm_on_16bit_activations(dtype):
    """A .half() model's layer norm (autocast runs layer norm in float32): x, y and grad_in 16-bit in place,
    weight and bias gradients float32 sums rounded to the parameters' dtype once."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 5, 40, generator=gen).to(dtype)
    w, b = torch.randn(40, generator=gen).to(dtype), torch.randn(40, generator=gen).to(dtype)
    go = torch.randn(3, 5, 40, generator=gen).to(dtype)
    ref = _conv_and_grads(lambda x, w, b: F.layer_norm(x, (40,), w, b), x.double(), w.double(), b.double(), {},
                          go.double())
    got = _conv_and_grads(lambda x, w, b: F.layer_norm(x, (40,), w, b), x.to("tvk"), w.to("tvk"), b.to("tvk"), {},
                          go.to("tvk"))
    for name, g, r in zip(("output", "grad_input", "grad_weight", "grad_bias"), got, ref):
        _close(g, r, dtype, name)


POOLS = {
    "max3x3s2": lambda x: F.max_pool2d(x, 3, 2, 1),
    "max2x2_ceil": lambda x: F.max_pool2d(x, 2, ceil_mode=True),
    "avg3x3s2_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    "adaptive_avg": lambda x: F.adaptive_avg_pool2d(x, (3, 2)),
}


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("pool", POOLS)
def test_pooling_on_16bit_planes(dtype, pool):
    """Pooling forward and backward on 16-bit planes: max exact (a copy of an element, gradients summed in
    float32 and rounded once), averages within one rounding; no cast copies."""
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, 11, 9, generator=gen).to(dtype)
    fn = POOLS[pool]
    go = torch.randn(fn(x.double()).shape, generator=gen).to(dtype)
    ref = _conv_and_grads(lambda x, w, b: fn(x), x.double(), torch.zeros(1), None, {}, go.double())
    with torchvk.profiler.profile() as prof:
        got = _conv_and_grads(lambda x, w, b: fn(x), x.to("tvk"), torch.zeros(1).to("tvk"), None, {}, go.to("tvk"))
        torch.tvk.synchronize()
    _close(got[0], ref[0], dtype, "output")
    _close(got[1], ref[1], dtype, "grad_input")
    assert "copy" not in [k.name for k in prof.kernels]


@pytest.mark.parametrize("dtype,lacks_16bit,message", [("float64", False, "storage dtype 'float64' is not one of"),
                                                       ("float16", True, "has no 16-bit storage for float16")],
                         ids=["unknown_dtype", "device_without_16bit_storage"])
def test_kernels_refuse_storage_they_cannot_hold(device, monkeypatch, dtype, lacks_16bit, message):
    """An unknown dtype, or 16-bit storage on a device without it (it holds no float16 tensors either): each family
    raises a clear TypeError before recording anything, not a kernel that reads the wrong width."""
    if lacks_16bit:
        monkeypatch.setitem(device.facts.features, "storage_16bit", False)
    buf = device.allocator.alloc(4096)
    calls = {"conv2d": lambda: conv.conv2d_forward(device, buf, buf, None, buf, (1, 2, 5, 5), (2, 2, 3, 3), dtype=dtype),
             "norm": lambda: norm.batch_norm(device, buf.address, buf.address, (2, 2, 3), dtype=dtype),
             "pool": lambda: pool.max_pool2d(device, buf, buf, None, (1, 1, 4, 4), 2, dtype=dtype)}
    try:
        for family_name, call in calls.items():
            with pytest.raises(TypeError, match=f"{family_name}: .*{message}"):
                call()
    finally:
        buf.free()


def test_mixed_dtypes_keep_their_float32_path():
    """An fp16 input with an fp32 weight (no autocast) is not a 16-bit kernel call: it computes as before."""
    x = torch.randn(1, 2, 6, 6)
    w = torch.randn(3, 2, 3, 3)
    got = F.conv2d(x.half().to("tvk"), w.to("tvk"))
    assert got.dtype == torch.float16
    torch.testing.assert_close(got.cpu().float(), F.conv2d(x.half().float(), w), rtol=2e-3, atol=2e-3)


def test_amp_cnn_training_follows_float32():
    """A conv/batch-norm/pool CNN trained under fp16 autocast with a GradScaler: its convs run in fp16 on tvk,
    and its losses follow the float32 CPU training's to fp16 precision."""
    def train(device, amp):
        torch.manual_seed(0)
        net = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), torch.nn.Conv2d(8, 16, 1), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Conv2d(16, 16, 3, stride=2, padding=1), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten(), torch.nn.Linear(16, 5)).to(device)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        scaler = torch.amp.GradScaler(device, enabled=amp)
        gen = torch.Generator().manual_seed(1)
        x, y = torch.randn(8, 3, 16, 16, generator=gen).to(device), torch.randint(0, 5, (8,), generator=gen).to(device)
        losses, conv_dtypes = [], set()
        hook = net[0].register_forward_hook(lambda m, i, o: conv_dtypes.add(o.dtype))
        for _ in range(4):
            opt.zero_grad()
            with torch.autocast(device, dtype=torch.float16, enabled=amp):
                loss = F.cross_entropy(net(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            losses.append(loss.item())
        hook.remove()
        return losses, conv_dtypes

    torchvk.reset_op_counts()
    amp_losses, dtypes = train("tvk", True)
    assert dtypes == {torch.float16} and sum(torchvk.op_counts()["cpu"].values()) == 0
    fp32_losses, _ = train("cpu", False)
    np.testing.assert_allclose(amp_losses, fp32_losses, rtol=1e-2, atol=2e-3)


_RDNA1 = """
import json
from tvk_kernels import get_device
from tvk_kernels.kernels import conv, conv_depthwise, conv_family
from tvk_kernels.search_space import search_space, with_derived
dev = get_device(0)
stats = {}
for name, params in %r:
    direction = name.split("_")[0] if not name.startswith("bwd") else "_".join(name.split("_")[:2])
    prm = with_derived(search_space("conv2d"), params)
    for dtype in ("float16", "bfloat16"):
        for partials in (False, True):
            defines = conv_family.gemm_defines(conv.DIRS[direction], prm, prm["WG"], None, dtype, partials)
            pipe = dev.pipelines.get("conv2d.comp", defines, local_size=(prm["WG"], 1, 1), push_size=128,
                                     capture_stats=True)
            stats[f"{name} {params} {dtype} partials={partials}"] = pipe.stats
space = search_space("conv2d_depthwise")
for key in ("rdna1", "amd", "generic"):
    if key in space["defaults"]:
        prm = with_derived(space, space["defaults"][key])
        break
for dir_id in (0, 1, 2):
    for dtype in ("float16", "bfloat16"):
        pipe = dev.pipelines.get("conv2d_depthwise.comp", conv_depthwise.defines(dir_id, prm, None, dtype, dir_id == 2),
                                 local_size=(prm["WG"], 1, 1), push_size=128, capture_stats=True)
        stats[f"depthwise {dir_id} {dtype}"] = pipe.stats
print(json.dumps(stats))
"""


def test_16bit_variants_of_the_rdna1_configs_compile_without_spills(tmp_path):
    """Every shipped RDNA1 conv2d config and the depthwise default, in float16 and bfloat16, with and without
    float32 partials, by RDNA1's own compiler: no spills, and within the shared memory of the driver the config
    was tuned for (32 KiB: AMD's Windows driver; RADV's file has 64 KiB configs, as its float32 kernels)."""
    items, limits = [], {}
    for path in sorted((ROOT / "tuned_configs").glob("rdna1--*.json")):
        data = json.loads(path.read_text())
        for name, entry in data["families"]["conv2d"]["buckets"].items():
            items.append((name, entry["params"]))
            limits[f"{name} {entry['params']}"] = min(limits.get(f"{name} {entry['params']}", 1 << 30),
                                                      data["device"]["max_shared_memory"])
    stats = navi10_stats(_RDNA1 % (items,), tmp_path)
    assert len(stats) == 4 * len(set(limits)) + 6, sorted(stats)
    assert_fits_rdna1({k: dict(v, **{"LDS size": 0}) for k, v in stats.items()})  # spills, registers
    for key, s in stats.items():
        limit = next((lim for config, lim in limits.items() if key.startswith(config + " ")), LDS_LIMIT)
        assert s.get("LDS size", 0) <= limit, (key, s.get("LDS size"), limit)
