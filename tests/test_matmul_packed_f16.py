"""The packed-fp16 GEMM (templates/matmul_packed_f16.comp, kernels/matmul_packed_f16.py) against float64.

Every result is checked against the template's stated bound, |C - exact| <= (CHAIN + 1) 2^-11 sum_k |a_k b_k|
(fp16 partials of CHAIN products folded into fp32), not against a tolerance picked to pass. lavapipe runs
the kernel through explicit parameters (a CPU device is not routed to it); the routing is tested by
declaring this device a GPU. RDNA1: every default compiles on the null Navi 10 with 0 spills in 32 KiB and
issues packed FMAs.
"""
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import torchvk  # noqa: F401  (the tvk device)
from tvk_kernels.errors import InvalidConfigError
from tvk_kernels.kernels import matmul as matmul_kernels, matmul_packed_f16 as packed
from tvk_kernels.search_space import search_space
from tvk_kernels.tune.targets.matmul_packed_f16 import TARGET
from rdna1_check import LDS_LIMIT

BASE = {"BM": 32, "BN": 32, "BK": 16, "TM": 4, "TN": 4, "VEC": 4, "PAD": 4, "CHAIN": 16}


def run(device, rng, M, N, K, *, batch=1, a_t=False, b_t=False, c_t=False, a_bcast=False, offset=0, bias=True,
        activation=None, alpha=0.5, scale=1.0, params=BASE, split_k=None, poison=None):
    """One fp16 GEMM; returns (info, got, reference, sum |a b| per output), all float64 [batch, M, N].
    offset: elements before A's first (an unaligned A takes the scalar loads); poison: a value put at A[0, 0, 0]."""
    ab = 1 if a_bcast else batch
    a = (scale * rng.standard_normal(offset + ab * M * K)).astype(np.float16)
    if poison is not None:
        a[offset] = poison
    b = (scale * rng.standard_normal((batch, N, K) if b_t else (batch, K, N))).astype(np.float16)
    bias_v = rng.standard_normal(N).astype(np.float16) if bias else np.zeros(N, np.float16)
    sa = ((0 if a_bcast else M * K), 1, M) if a_t else ((0 if a_bcast else M * K), K, 1)
    sb = (K * N, 1, K) if b_t else (K * N, N, 1)
    sc = (M * N, 1, M) if c_t else (M * N, N, 1)
    abuf, bbuf, biasbuf = device.upload(a), device.upload(b), device.upload(bias_v)
    out = device.allocator.alloc(batch * M * N * 2)
    try:
        info = matmul_kernels.matmul(device, abuf.address + 2 * offset, bbuf.address, out.address, M, N, K,
                                     batch=batch, a_strides=sa, b_strides=sb, out_strides=sc,
                                     bias_addr=biasbuf.address if bias else 0, activation=activation,
                                     alpha=alpha, dtype="float16", params=params, split_k=split_k)
        got = device.download(out, np.float16, (batch, N, M) if c_t else (batch, M, N)).astype(np.float64)
    finally:
        device.synchronize()
        for buf in (abuf, bbuf, biasbuf, out):
            buf.free()
    got = np.swapaxes(got, 1, 2) if c_t else got
    A = a[offset:].astype(np.float64).reshape((ab, K, M) if a_t else (ab, M, K))
    A = np.broadcast_to(np.swapaxes(A, 1, 2) if a_t else A, (batch, M, K))
    B = b.astype(np.float64)
    B = np.swapaxes(B, 1, 2) if b_t else B
    with np.errstate(invalid="ignore", over="ignore"):
        pre = alpha * (A @ B) + bias_v.astype(np.float64)
    ref = torch.nn.functional.gelu(torch.from_numpy(pre)).numpy() if activation == "gelu" else pre
    magnitude = abs(alpha) * (np.abs(A) @ np.abs(B)) + np.abs(bias_v.astype(np.float64))
    return info, got, ref, magnitude


def assert_within_bound(got, ref, magnitude, chain):
    bound = packed.error_bound(chain) * magnitude + 1e-7
    err = np.abs(got - ref)
    assert (err <= bound).all(), f"worst error {err.max():.3g}, bound there {bound.flat[err.argmax()]:.3g}"


@pytest.mark.parametrize("a_t,b_t,c_t", [(False, False, False), (True, False, False), (False, True, True),
                                         (True, True, False)], ids=["nn", "tn", "nt_out_t", "tt"])
@pytest.mark.parametrize("M,N,K", [(77, 70, 93), (5, 33, 17), (64, 64, 64)])
def test_every_layout_at_odd_sizes_within_the_bound(device, rng, M, N, K, a_t, b_t, c_t):
    info, got, ref, mag = run(device, rng, M, N, K, a_t=a_t, b_t=b_t, c_t=c_t)
    assert info["kernel"] == "packed_f16" and info["source"] == "explicit", info
    assert_within_bound(got, ref, mag, BASE["CHAIN"])


@pytest.mark.parametrize("change", [{}, {"CHAIN": 8}, {"BM": 64, "TM": 8, "PAD": 0}, {"VEC": 2, "BK": 32},
                                    {"VEC": 1, "TN": 8, "BN": 64}])
def test_configs_epilogue_batch_and_unaligned_operand(device, rng, change):
    """Tiles, chains and load widths; a broadcast A at an odd address (scalar loads), gelu, bias, alpha."""
    params = dict(BASE, **change)
    info, got, ref, mag = run(device, rng, 45, 83, 130, batch=3, a_bcast=True, offset=1, activation="gelu",
                              params=params)
    assert info["kernel"] == "packed_f16" and info["params"] == params, info
    assert_within_bound(got, ref, mag, params["CHAIN"])


def test_split_k_partials(device, rng):
    info, got, ref, mag = run(device, rng, 50, 60, 700, batch=2, a_t=True, c_t=True, split_k=3)
    assert info["kernel"] == "packed_f16" and info["splits"] == 3, info
    assert_within_bound(got, ref, mag, BASE["CHAIN"])


@pytest.mark.parametrize("split_k", [None, 2])
def test_products_past_fp16_range_are_summed_in_fp32(device, rng, split_k):
    """Inputs ~300: products reach 1e5, past fp16's 65504, so fp16 partials overflow. The kernel recomputes those
    outputs in fp32: every output is finite and within the bound, as from the fp32-accumulating kernels."""
    info, got, ref, mag = run(device, rng, 40, 36, 300, scale=300.0, alpha=1 / 3000, split_k=split_k)
    assert np.isfinite(ref).all() and np.abs(ref).max() < 60000
    assert np.isfinite(got).all(), f"{(~np.isfinite(got)).sum()} outputs overflowed"
    assert_within_bound(got, ref, mag, BASE["CHAIN"])


@pytest.mark.parametrize("poison", [np.inf, np.nan])
def test_inf_and_nan_inputs_reach_the_outputs_they_touch(device, rng, poison):
    """A[0, 0] non-finite: row 0 of C is what fp32 gives (inf or nan: inf * 0 is nan), every other row finite."""
    info, got, ref, mag = run(device, rng, 20, 24, 40, bias=False, poison=poison)
    assert np.array_equal(np.isnan(got), np.isnan(ref)) and np.array_equal(np.isinf(got), np.isinf(ref))
    assert not np.isfinite(got[0, 0]).any() and np.isfinite(got[0, 1:]).all()
    assert_within_bound(got[0, 1:], ref[0, 1:], mag[0, 1:], BASE["CHAIN"])


def test_config_rules(device):
    fam = packed.family(device, packed.PackedMatmul)
    for bad, match in (({"TM": 2}, "TM"), ({"CHAIN": 32}, "CHAIN"), ({"VEC": 3}, "VEC"), ({"PAD": 2}, "PAD"),
                       ({"UNROLL": 4}, "unknown parameter")):
        with pytest.raises(InvalidConfigError, match=match):
            fam.validate(dict(BASE, **bad))
    with pytest.raises(InvalidConfigError, match="float16"):
        matmul_kernels.plan(device, 256, 256, 256, 8, 8, 8, dtype="float32", params=BASE)


def test_a_cpu_device_keeps_the_tiled_kernel(device, rng):
    """lavapipe computes fp16 through fp32: fp16 GEMMs there stay on the fp32-accumulating kernel; a GPU is routed."""
    cpu = device.facts.device_type == "CPU"
    assert packed.family(device, packed.PackedMatmul).routed() is not cpu
    if cpu:
        assert packed.verified(device) is None
        info, *_ = run(device, rng, 40, 40, 40, params=None)
        assert info["kernel"] == "tiled", info


def test_gpus_without_cooperative_matrices_route_fp16_here_after_a_check(device, rng, as_gpu):
    runner = packed.verified(device)
    assert runner is not None and 0 < runner.verified_error <= packed.error_bound(16)
    info, got, ref, mag = run(device, rng, 256, 256, 256, params=None)  # batch * M * N * K = 2^24: over_tiled
    assert info["kernel"] == "packed_f16" and info["source"] in ("default", "tuned"), info
    assert_within_bound(got, ref, mag, info["params"]["CHAIN"])
    # smaller products (latency-bound: measured faster on the tiled kernel), skinny and matrix-vector ones
    for other in ((96, 80, 72), (8, 8, 2048), (80, 1, 64)):
        info, *_ = run(device, rng, *other, params=None)
        assert info["kernel"] in ("tiled", "gemv"), info


def test_tvk_packed_f16_0_keeps_fp32_accumulation(device, rng, as_gpu, monkeypatch):
    monkeypatch.setenv("TVK_PACKED_F16", "0")
    assert packed.verified(device) is None
    info, got, ref, mag = run(device, rng, 256, 256, 256, params=None)
    assert info["kernel"] == "tiled", info
    gpu = dataclasses.replace(device.facts, device_type="discrete GPU")
    assert matmul_kernels.fp16_kernels(gpu) == ["tiled (fp32 arithmetic)"]
    monkeypatch.setenv("TVK_PACKED_F16", "sometimes")
    with pytest.raises(ValueError, match="TVK_PACKED_F16"):
        packed.verified(device)


def test_linear_trains_through_the_packed_kernel(as_gpu, monkeypatch):
    """fp16 nn.Linear forward and backward on tvk (three GEMMs on the packed kernel) against float64."""
    monkeypatch.setattr(packed.PackedMatmul, "preferred", lambda self, M, N, K, batch: True)  # small products too
    torch.manual_seed(0)
    x = torch.randn(37, 48).half()
    layer = torch.nn.Linear(48, 29).half()
    ref_layer = torch.nn.Linear(48, 29).double()
    ref_layer.load_state_dict(layer.state_dict())
    tvk_layer = torch.nn.Linear(48, 29).half().to("tvk")
    tvk_layer.load_state_dict(layer.state_dict())
    xt, xr = x.to("tvk").requires_grad_(), x.double().requires_grad_()
    out, ref = tvk_layer(xt), ref_layer(xr)
    grad = torch.randn(37, 29)
    out.backward(grad.half().to("tvk"))
    ref.backward(grad.half().double())
    bound = packed.error_bound(16)
    w, g = layer.weight.double(), grad.half().double()
    checks = ((out, ref, x.double().abs() @ w.abs().t() + layer.bias.double().abs()),
              (xt.grad, xr.grad, g.abs() @ w.abs()), (tvk_layer.weight.grad, ref_layer.weight.grad,
                                                       g.abs().t() @ x.double().abs()))
    for got, want, magnitude in checks:
        err = (got.cpu().double() - want).abs()
        assert bool((err <= bound * magnitude + 1e-3).all()), err.max()
    assert [plan.label for plan in as_gpu._plans.values()].count("matmul_packed_f16") == 3  # the three GEMMs ran here


def test_tuner_target_checks_candidates(device):
    case = TARGET.prepare(device, {"M": 72, "N": 40, "K": 48, "batch": 1, "layout": "tn"})
    try:
        ok, worst = case.check(dict(BASE))
        assert ok and worst > 0
        ok, _ = case.check(dict(BASE, CHAIN=8, BM=64, TM=8))
        assert ok
    finally:
        case.free()


_RDNA1 = r"""
import json
from tvk_kernels import get_device
from tvk_kernels.config import default_params, search_space
from tvk_kernels.kernels import matmul_packed_f16 as packed
dev = get_device(0)
fam = packed.family(dev, packed.PackedMatmul)
stats = {}
for bucket in search_space(fam.family)["buckets"]:
    p = fam.resolve(bucket, default_params(fam.family, dev.facts, bucket))
    for a_k, b_n in ((1, 1), (0, 0)):
        for wave in (32, 64):
            d = packed.defines(p, mode=1 if bucket == "large" else 0, a_kmajor=a_k, b_nmajor=b_n)  # large: split-K
            pipe = dev.pipelines.get(fam.template, d, local_size=(p["WG"], 1, 1), push_size=128, subgroup_size=wave,
                                     capture_stats=True)
            stats[f"{bucket}.{a_k}{b_n}.wave{wave}"] = pipe.stats
print(json.dumps(stats))
"""


def test_defaults_compile_for_rdna1_without_spills_on_packed_instructions(tmp_path):
    """Every bucket's default, NN and TT, wave32 and wave64, on RDNA1's compiler: 0 spills, <= 32 KiB of shared
    memory, and the products are v_pk_fma_f16 (RADV_DEBUG=shaders prints the machine code)."""
    from tvk_kernels.tune import rdna1

    icd = rdna1.radv_icd()
    if icd is None:
        pytest.skip("Mesa RADV driver not installed")
    out = subprocess.run([sys.executable, "-c", _RDNA1], capture_output=True, text=True,
                         env=rdna1.null_navi10_env(icd, TVK_CACHE_DIR=str(tmp_path), RADV_DEBUG="shaders,nocache"))
    assert out.returncode == 0, out.stderr[-2000:]
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(stats) == 4 * len(search_space("matmul_packed_f16")["buckets"])
    for name, s in stats.items():
        assert s["Spilled VGPRs"] == 0 and s["Spilled SGPRs"] == 0 and s.get("Scratch size", 0) == 0, name
        assert 0 < s.get("LDS size", 0) <= LDS_LIMIT, name
    assert (out.stdout + out.stderr).count("v_pk_fma_f16") >= 100 * len(stats)


def _amp_training(steps=3):
    """A small transformer encoder trained under fp16 autocast with a GradScaler at its default scale (2^16, so
    the scaled gradients' products pass fp16's range): (losses, the scaler's scales, final weights)."""
    torch.manual_seed(3)
    layer = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0, batch_first=True).to("tvk")
    head = torch.nn.Linear(64, 10).to("tvk")
    params = [*layer.parameters(), *head.parameters()]
    opt = torch.optim.SGD(params, lr=0.05)
    scaler = torch.amp.GradScaler("tvk")
    x, y = torch.randn(4, 16, 64).to("tvk"), torch.randint(0, 10, (4,)).to("tvk")
    losses, scales = [], []
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("tvk", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(head(layer(x).mean(1)), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
        scales.append(scaler.get_scale())
    return losses, scales, [p.detach().cpu().double() for p in params]


def test_amp_training_on_the_packed_kernel_follows_the_fp32_accumulating_one(as_gpu, monkeypatch):
    """The same AMP training with every fp16 GEMM on the packed kernel and on the tiled one (fp32 accumulation):
    the scaler makes the same decisions (no step skipped for an fp16 partial's overflow), losses and weights agree
    to fp16 precision, and the packed kernel ran."""
    monkeypatch.setattr(packed.PackedMatmul, "preferred", lambda self, M, N, K, batch: True)  # small products too
    on_packed = _amp_training()
    ran_packed = [plan.label for plan in as_gpu._plans.values()].count("matmul_packed_f16")
    monkeypatch.setattr(packed.PackedMatmul, "preferred", lambda self, M, N, K, batch: False)
    as_gpu.forget_plans()
    on_tiled = _amp_training()
    assert ran_packed >= 6 and "matmul_packed_f16" not in [plan.label for plan in as_gpu._plans.values()]
    assert on_packed[1] == on_tiled[1] and on_packed[1][-1] == 2.0 ** 16  # no step skipped in either
    np.testing.assert_allclose(on_packed[0], on_tiled[0], rtol=1e-2)
    for got, want in zip(on_packed[2], on_tiled[2]):
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-3)


def test_tvk_info_names_the_fp16_gemm_kernels_of_a_device(device, monkeypatch):
    from tvk_kernels.info import describe

    assert matmul_kernels.fp16_kernels(device.facts) == ["tiled (fp32 arithmetic)"]  # a CPU device
    gpu = dataclasses.replace(device.facts, device_type="discrete GPU")
    assert matmul_kernels.fp16_kernels(gpu)[0].startswith("packed fp16 where batch * M * N * K")
    tensor_cores = dataclasses.replace(gpu, features={**gpu.features, "cooperative_matrix": True})
    assert matmul_kernels.fp16_kernels(tensor_cores)[:2] == ["cooperative matrices", matmul_kernels.fp16_kernels(gpu)[0]]
    assert "fp16 GEMMs       : cooperative matrices; then packed fp16" in describe(tensor_cores)
    monkeypatch.setenv("TVK_COOPMAT", "0")
    assert matmul_kernels.fp16_kernels(tensor_cores) == matmul_kernels.fp16_kernels(gpu)
