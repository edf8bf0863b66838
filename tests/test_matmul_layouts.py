"""matmul for every operand layout (NN, NT, TN, TT) and batch form through the torch layer,
against torch CPU; no copy kernel for a transposed operand; layout-aware bucket keys; split-K
where the output tiles are too few to fill the GPU; the GEMM sweep benchmark at tiny sizes.

Error bound per element, scale = |A| @ |B| (+ |bias|): fp32 1e-5 * scale + 1e-6, fp16
2e-3 * scale + 1e-3 (fp32 accumulate, fp16 output rounding), as in test_matmul.py.
"""

import numpy as np
import pytest
import torch

import torchvk
from tvk_kernels.kernels import matmul as matmul_kernels, matmul_plan
from tvk_kernels.search_space import bucket_of
from tvk_kernels.tune.targets.matmul import MatmulTarget
from rdna1_check import assert_fits_rdna1, navi10_stats

TOL = {torch.float32: (1e-5, 1e-6), torch.float16: (2e-3, 1e-3)}
LAYOUTS = ["nn", "nt", "tn", "tt"]


def _operands(layout, M, N, K, lead=(), bcast_b=False, dtype=torch.float32, seed=0):
    """CPU tensors A [*lead, M, K], B [*lead, K, N] whose storage is transposed where the layout says 't'."""
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(*lead, K, M, generator=g).transpose(-1, -2) if layout[0] == "t" else torch.randn(*lead, M, K,
                                                                                                   generator=g)
    b_lead = (1,) * len(lead) if bcast_b else lead
    b = torch.randn(*b_lead, N, K, generator=g).transpose(-1, -2) if layout[1] == "t" else torch.randn(*b_lead, K, N,
                                                                                                       generator=g)
    return a.to(dtype), b.to(dtype)


def _tvk(t):
    """The same view on tvk: the storage moves, then the same strides are taken (a transposed view stays one)."""
    if t.dim() >= 2 and t.stride(-2) == 1 and t.shape[-2] > 1:
        return t.transpose(-1, -2).contiguous().to("tvk").transpose(-1, -2)
    return t.contiguous().to("tvk")


def _assert_close(got, a, b, bias=None):
    ref = (a.double() @ b.double()) + (0 if bias is None else bias.double())
    scale = a.double().abs() @ b.double().abs() + (0 if bias is None else bias.double().abs())
    rtol, atol = TOL[a.dtype]
    assert got.dtype == a.dtype and got.shape == ref.shape
    err = (got.cpu().double() - ref).abs()
    assert bool((err <= rtol * scale + atol).all()), f"max error {err.max().item():.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_mm_addmm_every_layout(layout, dtype):
    for M, N, K in ((1, 7, 33), (33, 65, 1), (7, 33, 65)):  # N == 1: test_batched_every_layout
        a, b = _operands(layout, M, N, K, dtype=dtype)
        _assert_close(_tvk(a) @ _tvk(b), a, b)
        bias = torch.randn(N).to(dtype)
        _assert_close(torch.addmm(bias.to("tvk"), _tvk(a), _tvk(b)), a, b, bias)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_batched_every_layout(layout, dtype):
    for (M, N, K), bcast in (((7, 33, 5), False), ((1, 9, 65), True), ((33, 1, 7), False)):
        a, b = _operands(layout, M, N, K, lead=(3,), bcast_b=bcast, dtype=dtype, seed=M)
        _assert_close(torch.bmm(_tvk(a), _tvk(b).expand(3, K, N)), a, b.expand(3, K, N))
        _assert_close(torch.matmul(_tvk(a), _tvk(b)), a, b)  # broadcast through matmul
        c = torch.randn(3, M, N).to(dtype)
        got = torch.baddbmm(c.to("tvk"), _tvk(a), _tvk(b).expand(3, K, N), beta=0.5, alpha=2.0)
        _assert_close(got, a, b.expand(3, K, N) * 2.0, 0.5 * c)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_matmul_4d_attention_shapes(layout):
    """q @ k^T style products of [batch, heads, seq, dim] views, as attention builds them."""
    a, b = _operands(layout, 9, 7, 5, lead=(2, 3), seed=5)
    _assert_close(torch.matmul(_tvk(a), _tvk(b)), a, b)


def test_linear_backward_layouts():
    """linear's forward reads W transposed (NT), its weight grad reads grad transposed (TN)."""
    x = torch.randn(2, 7, 33)
    w = torch.randn(5, 33, requires_grad=True)
    bias = torch.randn(5, requires_grad=True)
    xt = x.to("tvk").requires_grad_()
    wt, bt = w.detach().to("tvk").requires_grad_(), bias.detach().to("tvk").requires_grad_()
    xc = x.clone().requires_grad_()
    go = torch.randn(2, 7, 5)
    torch.nn.functional.linear(xt, wt, bt).backward(go.to("tvk"))
    torch.nn.functional.linear(xc, w, bias).backward(go)
    for got, want in ((xt.grad, xc.grad), (wt.grad, w.grad), (bt.grad, bias.grad)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)


def _ops_and_dispatches(fn):
    from tvk_kernels import get_device

    stream = get_device(0).stream
    torchvk.reset_op_counts()
    before = stream.total_dispatches
    fn()
    return torchvk.op_counts()["vulkan"], stream.total_dispatches - before


@pytest.mark.parametrize("case", ["mm_tn", "mm_nt", "addmm_tt", "bmm_tn", "matmul_4d_nt"])
def test_transposed_operand_runs_no_copy(case):
    """A transposed operand is read through its strides: one GEMM dispatch, no copy op."""
    a2, b2 = torch.randn(9, 5).to("tvk"), torch.randn(7, 9).to("tvk")
    a3, b3 = torch.randn(2, 9, 5).to("tvk"), torch.randn(2, 9, 7).to("tvk")
    q, k = torch.randn(2, 3, 6, 4).to("tvk"), torch.randn(2, 3, 6, 4).to("tvk")
    bias = torch.randn(7).to("tvk")
    fn = {"mm_tn": lambda: a2.t() @ a2, "mm_nt": lambda: b2 @ b2.t(),
          "addmm_tt": lambda: torch.addmm(bias, a2.t(), b2.t()), "bmm_tn": lambda: torch.bmm(a3.transpose(1, 2), b3), "matmul_4d_nt": lambda: q @ k.transpose(-2, -1)}[case]
    ops, dispatches = _ops_and_dispatches(fn)
    assert dispatches == 1, (ops, dispatches)
    assert not any(n.split(".")[1] in ("clone", "copy_", "contiguous", "_to_copy") for n in ops), ops


def test_bucket_key_holds_layout_and_batch(device):
    fam = matmul_kernels.family(device, matmul_kernels.Matmul)
    size = fam.bucket({"M": 512, "N": 2048, "K": 2048, "batch": 1})
    assert size == fam.bucket({"M": 512, "N": 2048, "K": 2048, "batch": 1, "layout": "nn"}) == "large"
    for layout in ("nt", "tn", "tt"):
        assert fam.bucket({"M": 512, "N": 2048, "K": 2048, "batch": 1, "layout": layout}) == f"{size}.{layout}"
    assert fam.bucket({"M": 64, "N": 64, "K": 32, "batch": 256, "layout": "nt"}) == "batched.nt"
    assert fam.bucket({"M": 16, "N": 16, "K": 4096, "batch": 1}) == "skinny"


def test_kernel_runs_the_bucket_the_tuner_keys_its_shape_by(device):
    """The tuner groups its suites by bucket_of; the kernel reports (and looks up) the same key."""
    fam = matmul_kernels.family(device, matmul_kernels.Matmul)
    for s in MatmulTarget.suites["tiny"]:
        a_t, b_t = (c == "t" for c in s.get("layout", "nn"))
        M, N, K, batch = s["M"], s["N"], s["K"], s["batch"]
        sa = (M * K, 1, M) if a_t else (M * K, K, 1)
        sb = (K * N, 1, K) if b_t else (K * N, N, 1)
        ab, bb, out = (device.allocator.alloc(4 * batch * n) for n in (M * K, K * N, M * N))
        try:
            info = matmul_kernels.matmul(device, ab.address, bb.address, out.address, M, N, K, batch=batch, a_strides=sa,
                             b_strides=sb)
        finally:
            device.synchronize()
            for buf in (ab, bb, out):
                buf.free()
        assert info["bucket"] == bucket_of("matmul", s) == fam.bucket(s), (s, info)
        # the config of the bucket or, by tile fit, of a smaller size bucket of the same layout
        assert info["config_bucket"].partition(".")[2] == info["bucket"].partition(".")[2], info
        assert info["params"] == fam.params(info["config_bucket"])[0]


def test_cooperative_matrix_splits_k_where_its_tiles_are_few(device, monkeypatch):
    """The cooperative-matrix kernel splits K by the tiled kernel's rule (matmul.json split_k, the
    device's target counted in invocations): 1655x126x5263 has 13 of its 128x128 tiles where an
    H200 wants 132; 4096^3 has 1024 and does not split; a short K cannot split. The kernel object is
    built by hand (lavapipe has none): the plan is arithmetic on its tile and the device's target,
    here an H200's; its launches are checked on a device that has one (test_matmul::test_coopmat)."""
    from tvk_kernels.kernels import matmul_coopmat as coopmat

    coop = object.__new__(coopmat.CoopMatmul)
    coop.device = device
    coop.shape = {"M": 16, "N": 16, "K": 16}
    coop.subgroup = 32  # 256 invocations, 128x128 tiles
    tile = coop.geometry({"SG_M": 2, "SG_N": 4, "FM": 4, "FN": 2, "BK": 32, "PAD": 8, "STAGES": 2})
    assert (tile["WG"], tile["BM"], tile["BN"]) == (256, 128, 128)
    monkeypatch.setattr(matmul_plan, "target_groups", lambda fam, wg: 264 * 256 / wg)
    fam = matmul_kernels.family(device, matmul_kernels.Matmul)
    assert matmul_plan.split_count(fam, tile, 1655, 126, 5263, 1, None) == 20  # ceil(264 / 13), at most K / 256
    assert matmul_plan.split_count(fam, tile, 112, 983, 1383, 1, None) == 5  # 8 tiles; K / 256 = 5
    assert matmul_plan.split_count(fam, tile, 1655, 126, 300, 1, None) == 1  # K too short to split
    assert matmul_plan.split_count(fam, tile, 4096, 4096, 4096, 1, None) == 1  # 1024 tiles


def test_tile_fit_takes_a_smaller_tile_when_the_bucket_tile_is_mostly_padding(device, rng, monkeypatch):
    """A 'large' GEMM with one short side: the large tile would compute mostly padding, so a smaller
    size bucket's config runs (tuning/matmul.json tile_fit); results still match."""
    fam = matmul_kernels.family(device, matmul_kernels.Matmul)
    wide = {"BM": 64, "BN": 64, "BK": 16, "TM": 4, "TN": 4, "VEC": 4, "UNROLL": 4, "PAD": 1, "PREFETCH": 0,
            "FRAG": 0, "STAGES": 1, "SUBGROUP": 0}
    narrow = {"BM": 16, "BN": 32, "BK": 16, "TM": 2, "TN": 2, "VEC": 4, "UNROLL": 4, "PAD": 1, "PREFETCH": 0,
              "FRAG": 0, "STAGES": 1, "SUBGROUP": 0}
    configs = {"large": wide, "medium": wide, "small": narrow}
    monkeypatch.setattr(fam, "params", lambda bucket="*": (configs[bucket.split(".")[0]], "default"))
    fam._resolved.clear()
    fam.forget_plans()
    M, N, K, batch = 9, 70, 40, 3  # 9 useful rows of 64: 14% useful; the 16-row tile: 56%, the best
    a = rng.standard_normal((batch, M, K), dtype=np.float32)
    b = rng.standard_normal((batch, N, K), dtype=np.float32)  # read transposed: the .nt configs
    A, B = device.upload(a), device.upload(b)
    out = device.allocator.alloc(4 * batch * M * N)
    try:
        shape = {"M": M, "N": N, "K": K, "batch": batch, "layout": "nt"}
        monkeypatch.setattr(fam, "bucket", lambda s: "large.nt")
        info = matmul_kernels.matmul(device, A.address, B.address, out.address, M, N, K, batch=batch, a_strides=(M * K, K, 1),
                         b_strides=(N * K, 1, K))
        got = device.download(out, np.float32, (batch, M, N))
    finally:
        device.synchronize()
        for buf in (A, B, out):
            buf.free()
        fam._resolved.clear()
        fam.forget_plans()
    assert info["bucket"] == "large.nt" and info["config_bucket"] == "small.nt", (shape, info)
    assert (info["params"]["BM"], info["params"]["BN"]) == (16, 32), info
    np.testing.assert_allclose(got, a @ b.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)


def test_kernel_reports_layout_bucket_and_batched_config(device):
    a = torch.randn(40, 20)
    info = matmul_kernels.matmul(device, 0x1000, 0x2000, 0x3000, 0, 0, 0)  # empty product: no launch
    assert info["kernel"] == "none"
    A, B = device.upload(a.numpy()), device.upload(a.numpy())
    out = device.allocator.alloc(4 * 20 * 20)
    try:
        info = matmul_kernels.matmul(device, A.address, B.address, out.address, 20, 20, 40, a_strides=(0, 1, 20),
                         b_strides=(0, 20, 1))
        assert info["bucket"].endswith(".tn"), info
        got = device.download(out, np.float32, (20, 20))
        np.testing.assert_allclose(got, (a.T @ a).numpy(), rtol=1e-4, atol=1e-4)
    finally:
        for buf in (A, B, out):
            buf.free()
    fam = matmul_kernels.family(device, matmul_kernels.Matmul)
    params, _ = fam.params("batched.nt")
    assert (params["BM"], params["BN"]) == (32, 32)  # the small attention tile, not the large default


def test_split_k_when_tiles_do_not_fill_the_gpu(device, rng):
    """Few output tiles and a long K: split K (before, only the 'skinny' bucket split)."""
    M, N, K = 16, 24, 768
    a = rng.standard_normal((K, M), dtype=np.float32)  # A read transposed
    b = rng.standard_normal((K, N), dtype=np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    A, B, BIAS = device.upload(a), device.upload(b), device.upload(bias)
    out = device.allocator.alloc(4 * M * N)
    try:
        info = matmul_kernels.matmul(device, A.address, B.address, out.address, M, N, K, a_strides=(0, 1, M),
                         b_strides=(0, N, 1), bias_addr=BIAS.address, activation="relu")
        assert not info["bucket"].startswith("skinny") and info["splits"] > 1, info
        got = device.download(out, np.float32, (M, N)).astype(np.float64)
    finally:
        for buf in (A, B, BIAS, out):
            buf.free()
    ref = np.maximum(a.T.astype(np.float64) @ b + bias, 0)
    scale = np.abs(a.T.astype(np.float64)) @ np.abs(b) + np.abs(bias)
    assert np.all(np.abs(got - ref) <= 1e-5 * scale + 1e-6)


def test_tuner_target_runs_layouts(device):
    from tvk_kernels.config import default_params

    for shape in MatmulTarget.suites["tiny"][-2:]:
        assert shape.get("layout", "nn") != "nn" or shape["batch"] > 1
        case = MatmulTarget().prepare(device, shape, n_inputs=1)
        try:
            ok, err = case.check(default_params("matmul", device.facts, bucket_of("matmul", shape).split(".")[0]))
            assert ok, err
        finally:
            case.free()


def test_gemm_sweep_sample_and_quick_run(device):
    from torchvk.experiments import gemm_sweep

    sample = gemm_sweep.sample()
    assert sample == gemm_sweep.sample() and len(sample) == gemm_sweep.COUNT  # seeded: the same GEMMs every run
    assert {g["layout"] for g in sample} == set(LAYOUTS) and any(g["batch"] > 1 for g in sample)
    assert any(g["batch"] == 1 for g in sample) and any(g["bcast_b"] for g in sample)
    tuned = {(s["M"], s["N"], s["K"], s["batch"]) for suite in MatmulTarget.suites.values() for s in suite}
    for g in sample:
        assert 1 <= min(g["M"], g["N"], g["K"]) and max(g["M"], g["N"], g["K"]) <= gemm_sweep.MAX_DIM
        assert 2 * g["batch"] * g["M"] * g["N"] * g["K"] <= gemm_sweep.FLOP_CAP
        assert (g["M"], g["N"], g["K"], g["batch"]) not in tuned
    gemms = [{"M": 5, "N": 3, "K": 7, "batch": 1, "layout": "tt", "bcast_b": False},
             {"M": 4, "N": 6, "K": 3, "batch": 3, "layout": "nt", "bcast_b": True}]
    section, md = gemm_sweep.run(device, quick=True, gemms=gemms)
    assert len(section["rows"]) == 2 * len(section["summary"])
    for r in section["rows"]:
        assert r["tvk_s"] > 0 and r["rel_err"] < 1e-2 and r["cuda_s"] is None
    assert "GEMM sweep" in md and "5x3x7 TT" in md


_RDNA1 = r"""
import json
from tvk_kernels import get_device
from tvk_kernels.config import default_params, search_space
from tvk_kernels.kernels import matmul as matmul_kernels
dev = get_device(0)
fam = matmul_kernels.family(dev, matmul_kernels.Matmul)
stats, seen = {}, set()
for bucket in search_space("matmul")["buckets"]:
    p = fam.resolve(bucket, default_params("matmul", dev.facts, bucket))  # the static default, checked
    if tuple(p.items()) in seen:
        continue
    seen.add(tuple(p.items()))
    for a_k, b_n in ((1, 1), (0, 0)):  # NN and TT: every load path of A and of B
        d = matmul_kernels.defines(p, a_kmajor=a_k, b_nmajor=b_n)
        pipe = dev.pipelines.get(fam.template, d, local_size=(p["WG"], 1, 1), push_size=128,  # as tvk-tune
                                 subgroup_size=p["SUBGROUP"] or None, capture_stats=True)
        stats[f"{bucket}.{matmul_kernels.layout_name(a_k, b_n)}"] = pipe.stats
# the largest default tile with PREFETCH 1, and with runs of 4 rows and columns (FRAG 1, at PAD 0: FRAG needs
# a multiple of 4)
for name, change in (("prefetch", {"PREFETCH": 1}), ("frag", {"FRAG": 1, "PAD": 0})):
    p = fam.resolve("large", dict(default_params("matmul", dev.facts, "large"), **change))
    for a_k, b_n in ((1, 1), (0, 0)):
        pipe = dev.pipelines.get(fam.template, matmul_kernels.defines(p, a_kmajor=a_k, b_nmajor=b_n),
                                 local_size=(p["WG"], 1, 1), push_size=128, subgroup_size=p["SUBGROUP"] or None,
                                 capture_stats=True)
        stats[f"large.{name}.{matmul_kernels.layout_name(a_k, b_n)}"] = pipe.stats
print(json.dumps(stats))
"""


def test_static_defaults_compile_for_rdna1_without_spills(tmp_path):
    """Every bucket's static default, NN and TT, on RDNA1's compiler (Mesa's null Navi 10), and the
    largest with PREFETCH 1 and with FRAG 1."""
    stats = navi10_stats(_RDNA1, tmp_path)
    assert "batched.tt" in stats and "large.prefetch.tt" in stats and "large.frag.tt" in stats and len(stats) >= 2 * 3
    assert_fits_rdna1(stats)
