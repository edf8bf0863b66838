"""fp16 convolution on packed fp16 arithmetic (templates/conv2d.comp PACKED, kernels/conv.py Conv2d.packed),
what RDNA1 runs: every direction against float64 within the stated bound, overflowed partials summed again in
fp32, the routing, AMP training through it, and RDNA1's compiler on every shipped config.

lavapipe is a CPU device, which conv.py (as matmul) keeps on fp32 arithmetic; `as_gpu` (conftest.py) treats
it as a GPU without cooperative matrices."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import torchvk  # noqa: F401  (the tvk device)
from tvk_kernels.kernels import conv, conv_family
from tvk_kernels.kernels.launch import family
from tvk_kernels.tune import rdna1

from rdna1_check import LDS_LIMIT

ROOT = Path(__file__).resolve().parents[1]
U = 2.0 ** -11  # fp16's unit roundoff


@pytest.fixture
def packed_defines(monkeypatch):
    """The define sets conv.py builds GEMM kernels from, in order."""
    seen = []
    original = conv_family.gemm_defines

    def spy(*args, **kwargs):
        defines = original(*args, **kwargs)
        seen.append(defines)
        return defines

    monkeypatch.setattr(conv_family, "gemm_defines", spy)
    return seen


def test_routing(device, as_gpu, monkeypatch):
    fam = family(device, conv.Conv2d)
    tile = {"TN": 4}
    assert fam.packed(tile, "float16")
    assert not fam.packed({"TN": 1}, "float16")  # columns multiply in pairs
    assert not fam.packed(tile, "float32") and not fam.packed(tile, "bfloat16")
    monkeypatch.setenv("TVK_PACKED_F16", "0")
    assert not fam.packed(tile, "float16")
    monkeypatch.setenv("TVK_PACKED_F16", "1")
    monkeypatch.setenv("TVK_PACKED_CONV", "0")  # opt-in until measured faster (design note 47)
    assert not fam.packed(tile, "float16")


def test_a_cpu_device_keeps_fp32_arithmetic(device):
    assert device.facts.device_type == "CPU"
    assert not family(device, conv.Conv2d).packed({"TN": 4}, "float16")


def _half(rng, shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float16)


def _run(device, direction, x, w, go, stride, padding, dilation, groups, params, split_k=None, bias=None):
    """The direction's result (float64) from fp16 buffers."""
    out_shape = conv.conv2d_output_shape(x.shape, w.shape, stride, padding, dilation, groups)
    inputs = {"fwd": (x, w), "bwd_input": (go, w), "bwd_weight": (go, x)}[direction]
    result_shape = {"fwd": out_shape, "bwd_input": x.shape, "bwd_weight": w.shape}[direction]
    a, b = (device.upload(t) for t in inputs)
    out = device.allocator.alloc(2 * int(np.prod(result_shape)))
    bias_buffer = device.upload(bias) if bias is not None else None
    try:
        args = (x.shape, w.shape, stride, padding, dilation, groups, params)
        if direction == "fwd":
            conv.conv2d_forward(device, a, b, bias_buffer or 0, out, *args, split_k=split_k, dtype="float16")
        elif direction == "bwd_input":
            conv.conv2d_backward_input(device, a, b, out, *args, split_k=split_k, dtype="float16")
        else:
            conv.conv2d_backward_weight(device, a, b, out, *args, split_k=split_k, dtype="float16")
        return device.download(out, np.float16, result_shape).astype(np.float64)
    finally:
        device.synchronize()
        for buf in (a, b, out, bias_buffer):
            if buf is not None:
                buf.free()


def _reference(direction, x, w, go, stride, padding, dilation, groups):
    """(exact result, sum of |products| per output) in float64."""
    def exact(x, w, go):
        if direction == "fwd":
            return conv.reference_conv2d(x, w, None, stride, padding, dilation, groups)
        gi, gw = conv.reference_conv2d_backward(go, x, w, stride, padding, dilation, groups)
        return gi if direction == "bwd_input" else gw

    x64, w64, go64 = (t.astype(np.float64) for t in (x, w, go))
    return exact(x64, w64, go64), exact(np.abs(x64), np.abs(w64), np.abs(go64))


# (x shape, w shape, stride, padding, dilation, groups, params, split_k): odd sizes, strides and their
# grad-input phases, dilation, groups, both FRAG layouts, a K tail, split-K
CASES = [
    ((2, 5, 9, 7), (6, 5, 3, 3), 1, 1, 1, 1, {"BM": 32, "BN": 16, "BK": 8, "TM": 2, "TN": 2, "PAD": 1, "FRAG": 0}, None),
    ((1, 8, 11, 10), (12, 4, 3, 3), 2, 1, 1, 2, {"BM": 32, "BN": 16, "BK": 16, "TM": 4, "TN": 4, "PAD": 4, "FRAG": 1},
     None),
    ((2, 3, 13, 12), (8, 3, 5, 3), (2, 1), (2, 1), 2, 1,
     {"BM": 16, "BN": 8, "BK": 32, "TM": 1, "TN": 2, "PAD": 0, "FRAG": 0}, None),
    ((2, 16, 6, 6), (10, 16, 1, 1), 1, 0, 1, 1, {"BM": 16, "BN": 16, "BK": 4, "TM": 2, "TN": 2, "PAD": 1, "FRAG": 0}, 3),
]


@pytest.mark.parametrize("direction", ["fwd", "bwd_input", "bwd_weight"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_every_direction_within_the_bound(device, rng, as_gpu, packed_defines, direction, case):
    x_shape, w_shape, stride, padding, dilation, groups, params, split_k = CASES[case]
    x, w = _half(rng, x_shape), _half(rng, w_shape)
    out_shape = conv.conv2d_output_shape(x_shape, w_shape, stride, padding, dilation, groups)
    go = _half(rng, out_shape)
    got = _run(device, direction, x, w, go, stride, padding, dilation, groups, params, split_k)
    assert any(d.get("PACKED") == 1 and d["DIR"] == conv.DIRS[direction] for d in packed_defines), packed_defines
    ref, magnitude = _reference(direction, x, w, go, stride, padding, dilation, groups)
    chain = min(params["BK"], 16)
    bound = (chain + 1) * U * magnitude + U * np.abs(ref) + 1e-6  # the template's bound, then fp16 storage
    assert np.all(np.abs(got - ref) <= bound), float(np.max(np.abs(got - ref) / bound))


def test_overflowed_partials_are_summed_again_in_fp32(device, as_gpu, packed_defines):
    """Products of 200 x 200 = 40000: two of one sign pass fp16's 65504 in a partial, while the whole sum
    is small. Each such output comes out as the fp32 kernel gives it, not inf."""
    ic = 32
    x = np.full((1, ic, 3, 3), 200, np.float16)
    signs = np.array([[1, 1, -1, -1] * (ic // 4), [1, -1] * (ic // 2), [1, 1, 1, -1, -1, -1, 1, -1] * (ic // 8),
                      [1] * (ic // 2) + [-1] * (ic // 2)], np.float16)
    w = (200 * signs).astype(np.float16).reshape(4, ic, 1, 1)
    x[0, 5] = 64  # one channel smaller: sums of +-27200; every partial is a multiple of 800, exact in fp16 or inf
    params = {"BM": 16, "BN": 4, "BK": 16, "TM": 1, "TN": 2, "PAD": 0, "FRAG": 0}
    got = _run(device, "fwd", x, w, None, 1, 0, 1, 1, params)
    assert any(d.get("PACKED") == 1 for d in packed_defines)
    want = conv.reference_conv2d(x.astype(np.float64), w.astype(np.float64))
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got, want.astype(np.float16).astype(np.float64))


@pytest.mark.parametrize("split_k", [None, 2])
@pytest.mark.parametrize("direction", ["fwd", "bwd_input", "bwd_weight"])
def test_overflow_in_every_direction_and_split(device, rng, as_gpu, packed_defines, direction, split_k):
    """Every value +-200: each product is +-40000, exact in fp16, and two of one sign overflow a partial. Every
    partial that stays finite is exact (0 or +-40000) and every sum is exact in fp32, so each output is the
    exact sum rounded once to fp16 (inf where it passes fp16's range, as the fp32 kernel gives it too)."""
    x = (200 * rng.choice([-1, 1], (2, 32, 4, 4))).astype(np.float16)  # K = 32 in every direction (1x1)
    w = (200 * rng.choice([-1, 1], (32, 32, 1, 1))).astype(np.float16)
    go = (200 * rng.choice([-1, 1], (2, 32, 4, 4))).astype(np.float16)
    bias = np.ones(32, np.float16) if direction == "fwd" else None
    params = {"BM": 16, "BN": 16, "BK": 16, "TM": 2, "TN": 2, "PAD": 1, "FRAG": 0}
    got = _run(device, direction, x, w, go, 1, 0, 1, 1, params, split_k, bias)
    assert any(d.get("PACKED") == 1 for d in packed_defines)
    want, _ = _reference(direction, x, w, go, 1, 0, 1, 1)
    want = want + (1.0 if bias is not None else 0.0) * (np.ones((1, 32, 1, 1)) if direction == "fwd" else 0)
    with np.errstate(over="ignore"):
        want = want.astype(np.float16).astype(np.float64)
    assert np.isfinite(want).sum() >= 20  # outputs whose partials overflowed but whose sum fits
    np.testing.assert_array_equal(got, want)


def test_amp_conv_training_runs_packed_and_matches_the_cpu(as_gpu, packed_defines):
    """A conv layer under fp16 autocast on tvk: forward and both gradients on the packed kernel, within fp16
    tolerance of the CPU in float32."""
    torch.manual_seed(0)
    layer = torch.nn.Conv2d(8, 16, 3, padding=1)
    x = torch.randn(4, 8, 12, 12)
    ref_layer = torch.nn.Conv2d(8, 16, 3, padding=1)
    ref_layer.load_state_dict(layer.state_dict())
    ref_layer(x).square().mean().backward()
    layer = layer.to("tvk")
    with torch.autocast("tvk", dtype=torch.float16):
        out = layer(x.to("tvk"))
    assert out.dtype == torch.float16
    out.float().square().mean().backward()
    assert {d["DIR"] for d in packed_defines if d.get("PACKED") == 1} >= {0, 2}  # x needs no gradient
    for got, want in ((layer.weight.grad, ref_layer.weight.grad), (layer.bias.grad, ref_layer.bias.grad)):
        torch.testing.assert_close(got.cpu(), want, rtol=2e-2, atol=2e-3)


_RDNA1 = r"""
import json, sys
from pathlib import Path
from tvk_kernels import get_device
from tvk_kernels.kernels import conv, conv_family
from tvk_kernels.kernels.launch import family
dev = get_device(0)
fam = family(dev, conv.Conv2d)
stats = {}
for path in sorted(Path("tuned_configs").glob("rdna1--*.json")):
    for bucket, entry in json.loads(path.read_text())["families"]["conv2d"]["buckets"].items():
        p = fam.resolve(bucket, {k: v for k, v in entry["params"].items()})
        if p["TN"] % 2:
            continue  # columns multiply in pairs: such a config keeps fp32 arithmetic
        dir_id = conv.DIRS[next(d for d in ("bwd_input", "bwd_weight", "fwd") if bucket.startswith(d))]
        for wave in (32, 64):
            d = conv_family.gemm_defines(dir_id, p, p["WG"], dtype="float16", packed=True)
            pipe = dev.pipelines.get(fam.template, d, local_size=(p["WG"], 1, 1), push_size=128, subgroup_size=wave,
                                     capture_stats=True)
            stats[f"{path.stem}.{bucket}.wave{wave}"] = pipe.stats
print(json.dumps(stats))
"""


def test_rdna1_configs_compile_on_packed_instructions_without_spills(tmp_path):
    """Each shipped RDNA1 conv2d config with an even TN, in its direction, wave32 and wave64, packed, on RDNA1's
    compiler: 0 spills, <= 32 KiB of shared memory, and the products are v_pk_fma_f16."""
    icd = rdna1.radv_icd()
    if icd is None:
        pytest.skip("Mesa RADV driver not installed")
    out = subprocess.run([sys.executable, "-c", _RDNA1], capture_output=True, text=True, cwd=ROOT,
                         env=rdna1.null_navi10_env(icd, TVK_CACHE_DIR=str(tmp_path), RADV_DEBUG="shaders,nocache"))
    assert out.returncode == 0, out.stderr[-2000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(stats) >= 20
    for name, s in stats.items():
        assert s["Spilled VGPRs"] == 0 and s["Spilled SGPRs"] == 0 and s.get("Scratch size", 0) == 0, name
        assert 0 < s.get("LDS size", 0) <= LDS_LIMIT, name
    assert (out.stdout + out.stderr).count("v_pk_fma_f16") >= 4 * len(stats)


def test_the_stand_in_ab_runs_both_routes_and_checks_the_packed_one(tmp_path):
    """benchmarks/packed_conv_ab.py --quick: every row ran packed with the flag and fp32 arithmetic without,
    and the packed result was within the bound (the timings on lavapipe say nothing of a GPU)."""
    done = subprocess.run([sys.executable, "benchmarks/packed_conv_ab.py", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "packed_conv_ab.json").read_text())
    assert len(result["rows"]) == 6  # two non-depthwise quick layers, three directions
    for row in result["rows"]:
        assert row["packed_ran"] and row["fp32_ran"] and row["within_bound"], row
        assert row["packed_s"] > 0 and row["fp32_arith_s"] > 0
    assert result["geomean_packed_over_fp32_time"] > 0
