"""Matrix-vector products (templates/gemv.comp) through matmul(): N == 1 and M == 1 calls run the
gemv kernel, against torch CPU in float64 with test_matmul's error bounds; and through torch ops
on "tvk" (mv, addmv, a linear layer on one token, bmm with N == 1)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rdna1_check import assert_fits_rdna1, navi10_stats
from test_matmul import ACTS, check
from tvk_kernels.errors import InvalidConfigError
from tvk_kernels.kernels import gemv
from tvk_kernels.kernels import matmul as matmul_kernels

LAYOUTS = [("mk", "kn"), ("km", "kn"), ("mk", "nk"), ("km", "nk")]


def gemv_check(device, rng, M, N, K, **kw):
    info = check(device, rng, M, N, K, **kw)
    assert info["kernel"] == "gemv", info
    return info


# ------------------------------------------------------------------ kernel through matmul()
@pytest.mark.parametrize("a_layout,b_layout", LAYOUTS)
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (5, 1, 3), (130, 1, 7), (33, 1, 257), (9, 1, 2999), (12, 1, 26),
                                   (64, 1, 1000), (1, 7, 5), (1, 130, 9), (1, 45, 1001), (1, 11, 3001), (1, 12, 26),
                                   (1, 64, 1000)])
def test_layouts(device, rng, M, N, K, a_layout, b_layout):
    """Both products, each operand contiguous along K or not (K-major and M-major W), short and
    long K, odd sizes (scalar loads) and multiples of 2 and 4 (vector loads of W and x)."""
    gemv_check(device, rng, M, N, K, a_layout=a_layout, b_layout=b_layout)


@pytest.mark.parametrize("M,N,K", [(21, 1, 19), (1, 21, 19)])
def test_general_strides_and_transposed_out(device, rng, M, N, K):
    """No unit stride on A (gaps between its columns), and a transposed output."""
    gemv_check(device, rng, M, N, K, a_step=2)
    gemv_check(device, rng, M, N, K, a_layout="km", a_step=3, b_layout="nk")
    gemv_check(device, rng, M, N, K, out_layout="nm", b_layout="nk")
    gemv_check(device, rng, M - (M > 1), N - (N > 1), K + 5, a_step=2, b_layout="nk")  # 4-wide W, strided x


@pytest.mark.parametrize("M,N,K", [(17, 1, 40), (1, 17, 40)])
def test_batched_broadcast(device, rng, M, N, K):
    gemv_check(device, rng, M, N, K, batch=3)
    gemv_check(device, rng, M, N, K, batch=3, a_bcast=True, a_layout="km")
    gemv_check(device, rng, M, N, K, batch=4, b_bcast=True, b_layout="nk", alpha=-0.5)


@pytest.mark.parametrize("activation", ACTS)
def test_epilogue(device, rng, activation):
    """alpha, bias (one value for every row when N == 1, one per output when M == 1), activation."""
    gemv_check(device, rng, 23, 1, 37, bias=True, activation=activation, alpha=0.75)
    gemv_check(device, rng, 1, 23, 37, bias=True, activation=activation, alpha=0.75, a_layout="km", b_layout="nk")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit(device, rng, dtype):
    if not device.facts.features.get("storage_16bit") or (dtype == "float16"
                                                          and not device.facts.features.get("shader_float16")):
        pytest.skip(f"{device.facts.name} has no {dtype} storage")
    for a_layout, b_layout in LAYOUTS:
        for rows, K in ((29, 203), (28, 204)):  # scalar loads; vector loads
            gemv_check(device, rng, rows, 1, K, dtype=dtype, a_layout=a_layout, b_layout=b_layout, bias=True,
                       activation="gelu")
            gemv_check(device, rng, 1, rows, K, dtype=dtype, a_layout=a_layout, b_layout=b_layout, batch=2)


def test_unaligned_views_use_scalar_loads(device, rng):
    """Operands starting one element past a 16-byte boundary (a view's offset) read correctly."""
    M, K = 13, 64
    a = rng.standard_normal(M * K + 1).astype(np.float32)
    x = rng.standard_normal(K + 1).astype(np.float32)
    ab, xb = device.upload(a), device.upload(x)
    out = device.allocator.alloc(4 * M)
    info = matmul_kernels.matmul(device, ab.address + 4, xb.address + 4, out.address, M, 1, K, a_strides=(0, K, 1),
                     b_strides=(0, 1, 0))
    got = device.download(out, np.float32, (M,)).astype(np.float64)
    want = a[1:].astype(np.float64).reshape(M, K) @ x[1:].astype(np.float64)
    assert info["kernel"] == "gemv"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    for buf in (ab, xb, out):
        buf.free()


@pytest.mark.parametrize("transposed", [False, True])
def test_padded_views_vector_tails(device, rng, transposed):
    """Rows padded to a multiple of 4 (a slice of a wider matrix): 4-wide loads of W with a
    ragged end along K (K-major) or along the rows (M-major)."""
    M, K, pad = 37, 1025, 3
    if transposed:  # A = base[:K, :M].T: contiguous along M, row stride 1 and K stride M + pad
        base = rng.standard_normal((K, M + pad)).astype(np.float32)
        A, strides = base[:, :M].T, (0, 1, M + pad)
    else:
        base = rng.standard_normal((M, K + pad)).astype(np.float32)
        A, strides = base[:, :K], (0, K + pad, 1)
    x = rng.standard_normal(K).astype(np.float32)
    ab, xb = device.upload(base), device.upload(x)
    out = device.allocator.alloc(4 * M)
    info = matmul_kernels.matmul(device, ab.address, xb.address, out.address, M, 1, K, a_strides=strides, b_strides=(0, 1, 0))
    got = device.download(out, np.float32, (M,)).astype(np.float64)
    want = A.astype(np.float64) @ x.astype(np.float64)
    assert info["kernel"] == "gemv"
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    for buf in (ab, xb, out):
        buf.free()


def test_batched_results_match_single_products_bitwise(device, rng):
    """Deterministic: a batch entry's result does not depend on where it runs in the grid."""
    B, M, K = 3, 70, 300
    a = rng.standard_normal((B, M, K)).astype(np.float32)
    x = rng.standard_normal((B, K)).astype(np.float32)
    ab, xb = device.upload(a), device.upload(x)
    out = device.allocator.alloc(4 * B * M)
    info = matmul_kernels.matmul(device, ab.address, xb.address, out.address, M, 1, K, batch=B, b_strides=(K, 1, 0))
    assert info["kernel"] == "gemv"
    together = device.download(out, np.float32, (B, M))
    for b in range(B):
        matmul_kernels.matmul(device, ab.address + 4 * b * M * K, xb.address + 4 * b * K, out.address, M, 1, K,
                  b_strides=(K, 1, 0))
        assert np.array_equal(device.download(out, np.float32, (M,)), together[b]), b
    for buf in (ab, xb, out):
        buf.free()


def test_explicit_params(device, rng):
    """gemv parameters run that gemv candidate; the tiled kernel's parameters or split_k run the tiled kernel."""
    for cfg in ({"WG": 32, "VEC": 2, "KT": 8, "MT": 8, "GROUPS": 4}, {"WG": 128, "VEC": 1, "KT": 128, "MT": 16},
                {"WG": 64, "VEC": 4, "KT": 4, "MT": 64, "GROUPS": 512}):  # the last: rows per group shrink
        for a_layout in ("mk", "km"):
            info = gemv_check(device, rng, 45, 1, 76, a_layout=a_layout, params=cfg)
            assert info["params"].items() >= cfg.items() and info["source"] == "explicit"
    tiled = {"BM": 16, "BN": 16, "BK": 8, "TM": 1, "TN": 1, "VEC": 1, "UNROLL": 1, "PAD": 0, "SUBGROUP": 0}
    assert check(device, rng, 45, 1, 77, params=tiled)["kernel"] == "tiled"
    assert check(device, rng, 1, 45, 600, split_k=2)["kernel"] == "tiled"
    with pytest.raises(InvalidConfigError, match="power of two"):
        check(device, rng, 45, 1, 77, params={"WG": 64, "VEC": 4, "KT": 12, "MT": 8})
    with pytest.raises(InvalidConfigError, match="VEC"):
        check(device, rng, 45, 1, 77, params={"WG": 64, "VEC": 3, "KT": 8, "MT": 8})
    gemv_check(device, rng, 45, 1, 77)  # the device still runs


# ------------------------------------------------------------------ torch ops on "tvk"
@pytest.fixture
def gemv_calls(monkeypatch):
    """The number of gemv launches recorded while the test runs."""
    calls = []
    record = gemv.Launch.record
    monkeypatch.setattr(gemv.Launch, "record", lambda self, *a: calls.append((self.R, self.K)) or record(self, *a))
    return calls


def _close(got, want, tol=1e-4):
    torch.testing.assert_close(got.cpu().double(), want.double(), rtol=tol, atol=tol)


def test_torch_ops(gemv_calls):
    import torchvk  # noqa: F401  (the "tvk" device)

    torch.manual_seed(0)
    W, v = torch.randn(37, 301), torch.randn(301)
    Wd, vd = W.to("tvk"), v.to("tvk")
    _close(torch.mv(Wd, vd), torch.mv(W, v))
    _close(torch.mv(Wd.t().contiguous().t(), vd), torch.mv(W, v))  # W stored transposed
    bias = torch.randn(37)
    _close(torch.addmv(bias.to("tvk"), Wd, vd), torch.addmv(bias, W, v))
    lin_w, lin_b = torch.randn(23, 301), torch.randn(23)
    for _ in range(2):  # one token at a time (the second call reuses the first one's launch)
        x = torch.randn(1, 301)
        _close(F.linear(x.to("tvk"), lin_w.to("tvk"), lin_b.to("tvk")), F.linear(x, lin_w, lin_b))
    _close(x.to("tvk") @ lin_w.t().to("tvk"), x @ lin_w.t())
    a, b = torch.randn(3, 19, 44), torch.randn(3, 44, 1)
    _close(torch.bmm(a.to("tvk"), b.to("tvk")), torch.bmm(a, b))
    _close(vd @ Wd.t(), v @ W.t())
    assert len(gemv_calls) >= 8, gemv_calls


# ------------------------------------------------------------------ RDNA1
_RDNA1_STATS = """
import json
from tvk_kernels.config import default_params
from tvk_kernels.search_space import search_space
from tvk_kernels.kernels import gemv, matmul as matmul_kernels
from tvk_kernels.runtime.device import Device

dev = Device.get(0)
stats, seen = {}, []
for bucket in search_space("gemv")["buckets"]:
    params = default_params("gemv", dev.facts, bucket)
    if params in seen:
        continue
    seen.append(params)
    shared = params["WG"] * 16
    for dtype in ("float32", "float16", "bfloat16"):
        for mmajor, vec_x in ((False, params["VEC"]), (False, 1), (True, 1)):
            d = gemv.defines(params, dtype_id=matmul_kernels.DTYPES[dtype][0], mmajor=mmajor, vec_x=vec_x, act="tanh(x)")
            pipe = dev.pipelines.get("gemv.comp", d, local_size=(params["WG"], 1, 1), push_size=128,
                                     shared_bytes=shared, capture_stats=True)
            stats[f"{bucket} {params} {dtype} mmajor={mmajor} vec_x={vec_x}"] = pipe.stats
print(json.dumps(stats))
"""


def test_kernels_compile_for_rdna1_without_spills(tmp_path):
    """RDNA1's own compiler (Mesa's null Navi 10) on the rdna1 defaults of every bucket, both
    layouts and every dtype: no spills, within AMD's 32 KiB of shared memory."""
    stats = navi10_stats(_RDNA1_STATS, tmp_path)
    assert len(stats) >= 9
    assert_fits_rdna1(stats)
