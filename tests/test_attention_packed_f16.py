"""Fused attention on packed fp16 arithmetic (templates/attention.comp PACKED, kernels/attention.py
Attention.packed), what RDNA1 runs: forward and backward against float64 within fp16's tolerance and the
stated bound on the scores, overflowed chains summed again in fp32, masks, causal, grouped heads, dropout,
odd sizes, the routing, and RDNA1's compiler on the packed kernels.

lavapipe is a CPU device, which attention.py (as matmul and conv) keeps on fp32 arithmetic; `as_gpu`
(conftest.py) treats it as a GPU without cooperative matrices."""
import pytest
import torch

import torchvk  # noqa: F401  (the tvk device)
from tvk_kernels.kernels import attention
from tvk_kernels.kernels.launch import family

from rdna1_check import assert_fits_rdna1, navi10_stats
from test_attention import _compare, _dropout_route_agrees, _inputs

U = 2.0 ** -11  # fp16's unit roundoff
CHAIN = 4  # the template's pairs per fp16 chain


@pytest.fixture
def packed_kernels(monkeypatch):
    """The KERNEL numbers of the attention modules built on packed arithmetic, in order."""
    seen = []
    original = attention.kernel_defines

    def spy(*args, **kwargs):
        result = original(*args, **kwargs)
        if result[0].get("PACKED") == 1:
            seen.append(result[0]["KERNEL"])
        return result

    monkeypatch.setattr(attention, "kernel_defines", spy)
    return seen


def test_routing(device, as_gpu, monkeypatch):
    fam = family(device, attention.Attention)
    assert fam.packed("float16", 64, 4)
    assert fam.packed("float16", 16, 8)
    assert not fam.packed("float16", 16, 16)  # a thread's dims must come in whole pairs
    assert not fam.packed("float32", 64, 4)
    monkeypatch.setenv("TVK_PACKED_F16", "0")
    assert not fam.packed("float16", 64, 4)
    monkeypatch.setenv("TVK_PACKED_F16", "1")
    monkeypatch.setenv("TVK_PACKED_ATTENTION", "0")  # the way back to fp32 arithmetic
    assert not fam.packed("float16", 64, 4)
    monkeypatch.delenv("TVK_PACKED_ATTENTION")  # on by default since measured faster (design note 48)
    assert fam.packed("float16", 64, 4)
    monkeypatch.setenv("TVK_PACKED_ATTENTION", "0")
    assert not fam.packed("float16", 64, 4)


def test_a_cpu_device_keeps_fp32_arithmetic(device):
    assert device.facts.device_type == "CPU"
    assert not family(device, attention.Attention).packed("float16", 64, 4)


@pytest.mark.parametrize("case", [
    dict(shape=(2, 2, 2, 7, 7, 32)),
    dict(shape=(1, 4, 2, 5, 9, 24), enable_gqa=True),  # grouped heads, odd lengths, a head dim padded to 32
    dict(shape=(1, 2, 2, 17, 17, 64), is_causal=True),
    dict(shape=(1, 1, 1, 6, 10, 128)),
    dict(shape=(1, 2, 2, 8, 8, 16), scale=0.3),
])
def test_forward_and_backward_match_float64(as_gpu, packed_kernels, case):
    case = dict(case)
    q, k, v, grad = _inputs(*case.pop("shape"), seed=3)
    _compare(q, k, v, grad, torch.float16, **case)
    assert {0, 2, 3} <= set(packed_kernels), packed_kernels


def test_masks(as_gpu, packed_kernels):
    q, k, v, grad = _inputs(2, 2, 2, 6, 11, 32, seed=4)
    keep = torch.rand(2, 1, 6, 11, generator=torch.Generator().manual_seed(5)) > 0.3
    keep[..., 0] = True
    _compare(q, k, v, grad, torch.float16, mask=keep)
    additive = torch.randn(1, 2, 6, 11, generator=torch.Generator().manual_seed(6))
    _compare(q, k, v, grad, torch.float16, mask=additive)  # its gradient too
    assert {0, 2, 3} <= set(packed_kernels)


def test_scores_within_the_stated_bound(as_gpu, packed_kernels):
    """One key per query row's softmax: o = v of the best key; the logsumexp is the score itself, so the
    forward's lse (kept for the backward) shows each score's error against sum_d |q_d k_d|."""
    g = torch.Generator().manual_seed(7)
    b, h, lq, d = 1, 2, 9, 64
    q = torch.randn(b, h, lq, d, generator=g).half()
    k = torch.randn(b, h, 1, d, generator=g).half()  # one key: lse = its score exactly
    v = torch.randn(b, h, 1, d, generator=g).half()
    out, lse = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
        q.to("tvk"), k.to("tvk"), v.to("tvk"), scale=1.0)[:2]
    exact = (q.double() @ k.double().transpose(-1, -2))[..., 0]
    magnitude = (q.double().abs() @ k.double().abs().transpose(-1, -2))[..., 0]
    error = (lse.cpu().double() - exact).abs()
    assert (error <= (CHAIN + 1) * U * magnitude + 1e-6).all(), (error / magnitude).max()
    assert torch.equal(out.cpu(), v.expand(b, h, lq, d))
    assert 0 in packed_kernels


def test_overflowed_chains_are_summed_again_in_fp32(as_gpu, packed_kernels):
    """q k products of 255 * 255: four pairs of them overflow an fp16 partial; the fp32 kernel's result stands."""
    g = torch.Generator().manual_seed(8)
    signs = lambda *shape: torch.randint(0, 2, shape, generator=g).float() * 2 - 1  # noqa: E731
    q, k = 255 * signs(1, 2, 5, 32), 255 * signs(1, 2, 7, 32)
    v, grad = torch.randn(1, 2, 7, 32, generator=g), torch.randn(1, 2, 5, 32, generator=g)
    _compare(q, k, v, grad, torch.float16, scale=1e-4)  # scores up to ~208: a softmax of several keys
    assert {0, 2, 3} <= set(packed_kernels)


def test_dropout_masks_agree_between_forward_and_backward(as_gpu, packed_kernels, monkeypatch):
    """The same seed draws the same mask on the packed route as on fp32 arithmetic."""
    _dropout_route_agrees(*_inputs(1, 2, 2, 8, 8, 32, seed=9), monkeypatch, "TVK_PACKED_ATTENTION", "0")
    assert {0, 2, 3} <= set(packed_kernels)


_RDNA1 = """
import json
from tvk_kernels.config import default_params
from tvk_kernels.kernels import attention
from tvk_kernels.runtime.device import Device

dev = Device.get(0)
stats = {}
for bucket, head in (("d128", 128), ("d64", 64), ("d32", 32)):
    params = default_params("attention", dev.facts, bucket)
    for kernel in (0, 2, 3):
        if head % (2 * attention.threads_per_row(kernel, params)):
            continue  # a thread's dims in whole pairs, else fp32 arithmetic
        for wave in (32, 64):
            for features in (("float", True, True), (None, False, False)):
                defines, wg, shared = attention.kernel_defines(kernel, params, head, "float16", *features, packed=True)
                pipe = dev.pipelines.get("attention.comp", defines, local_size=(wg, 1, 1), push_size=128,
                                         shared_bytes=shared, subgroup_size=wave, capture_stats=True)
                stats[f"{bucket} kernel {kernel} wave{wave} {features}"] = pipe.stats
print(json.dumps(stats))
"""


def test_rdna1_compiles_the_packed_kernels_without_spills(tmp_path):
    """RDNA1's own compiler (Mesa's null Navi 10) on the rdna1 defaults' packed kernels, forward, dQ and dK/dV,
    wave32 and wave64, with and without mask, causal and dropout: 0 spills, within 32 KiB of shared memory."""
    stats = navi10_stats(_RDNA1, tmp_path)
    assert len(stats) >= 3 * 2 * 2
    assert_fits_rdna1(stats)


def test_the_stand_in_ab_runs_both_routes_and_checks_the_packed_one(tmp_path):
    """benchmarks/packed_attention_ab.py --quick: every shape ran packed with the flag and fp32 arithmetic without,
    the packed output within fp16's tolerance (the timings on lavapipe say nothing of a GPU)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "benchmarks/packed_attention_ab.py", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=root)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "packed_attention_ab.json").read_text())
    assert len(result["rows"]) == 2
    for row in result["rows"]:
        assert row["packed_ran"] and row["fp32_ran"] and row["within_tolerance"], row
        assert row["forward_packed_s"] > 0 and row["backward_fp32_arith_s"] > 0
    assert result["geomean_packed_over_fp32_time"]["forward"] > 0
