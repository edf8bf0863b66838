"""sort / topk (kernels/sort.py), cumsum / cumprod / logcumsumexp (kernels/scan.py), and the
flip / scatter their backward uses (kernels/dim_index.py), against torch CPU.

sort is stable: values (bit for bit, -0.0 and NaN included) and indices equal CPU's
stable=True sort. topk: values exact, indices exact where values are distinct (torch's CPU
topk orders ties its own way). Float scans: |got - ref| <= 1e-5 * cumsum(|x|) + 1e-6 against a
float64 reference (CPU accumulates float32 scans in double); integer scans exact.
"""
import numpy as np
import pytest
import torch

import torchvk  # noqa: F401  (registers the tvk device)

TVK = "tvk"


def keys_with_ties_and_nan(rows, n, seed=0):
    """float32 keys with many ties, NaN, +-inf and both zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-4, 5, (rows, n), generator=g).float() / 2
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0, 0.0])
    pick = torch.randint(0, 40, (rows, n), generator=g)
    return torch.where(pick < 5, special[pick.clamp(max=4)], x)


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


# ------------------------------------------------------------------ sort
@pytest.mark.parametrize("n", [1, 7, 127, 1000, 5000])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_equals_cpu_stable_sort(n, descending):
    x = keys_with_ties_and_nan(3, n, seed=n)
    want_v, want_i = torch.sort(x, dim=-1, descending=descending, stable=True)
    for got_v, got_i in (torch.sort(x.to(TVK), dim=-1, descending=descending, stable=True),
                         torch.sort(x.to(TVK), dim=-1, descending=descending)):  # the default is stable too
        assert same_bits(got_v.cpu(), want_v)
        assert torch.equal(got_i.cpu(), want_i)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.float16])
def test_sort_other_dtypes(dtype):
    g = torch.Generator().manual_seed(1)
    if dtype == torch.int64:
        x = torch.randint(-2**62, 2**62, (4, 300), generator=g)
        x[0, :5] = torch.tensor([2**63 - 1, -2**63, 0, -1, 2**63 - 1])
        x[1] = x[1] % 7  # ties
    elif dtype == torch.float16:
        x = keys_with_ties_and_nan(4, 300).half()
    else:
        x = torch.randint(0, 2 if dtype == torch.bool else 9, (4, 300), generator=g).to(dtype)
    for desc in (False, True):
        want_v, want_i = torch.sort(x, descending=desc, stable=True)
        got_v, got_i = torch.sort(x.to(TVK), descending=desc, stable=True)
        assert got_v.dtype == dtype
        # equal values, NaN where CPU has NaN: float16 sorts through float32, and a GPU's
        # conversion back may pick another NaN bit pattern (0x7FFF on the H200, 0x7E00 on the CPU)
        torch.testing.assert_close(got_v.cpu(), want_v, rtol=0, atol=0, equal_nan=True)
        assert torch.equal(got_i.cpu(), want_i)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_along_other_dims_and_views(dim):
    x = keys_with_ties_and_nan(6, 40, seed=3).reshape(6, 8, 5)
    for src in (x, x.transpose(0, 2)):
        want_v, want_i = torch.sort(src, dim=dim, stable=True, descending=True)
        got_v, got_i = torch.sort(src.to(TVK), dim=dim, stable=True, descending=True)
        assert same_bits(got_v.cpu(), want_v) and torch.equal(got_i.cpu(), want_i)
    assert torch.equal(torch.argsort(x.to(TVK), dim=dim, stable=True).cpu(), torch.argsort(x, dim=dim, stable=True))
    s = torch.tensor(2.5)
    assert torch.equal(torch.sort(s.to(TVK))[0].cpu(), s) and torch.sort(s.to(TVK))[1].item() == 0


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_sort_kernel_multi_pass_merges(device, dtype):
    """Tiny shared blocks (ELEMS 16) force many global merge stages on short rows."""
    from tvk_kernels.kernels.sort import sort

    g = torch.Generator().manual_seed(7)
    x = keys_with_ties_and_nan(3, 300) if dtype == "float32" else torch.randint(-9, 9, (3, 300), generator=g)
    buf = device.upload(x.numpy())
    for desc, k in ((False, 300), (True, 300), (True, 5)):
        vals, idx = device.allocator.alloc(8 * 3 * k), device.allocator.alloc(8 * 3 * k)
        sort(device, buf.address, vals.address, idx.address, 3, 300, dtype, desc, k, params={"ELEMS": 16, "WG": 8})
        want_v, want_i = torch.sort(x, descending=desc, stable=True)
        got_i = torch.from_numpy(device.download(idx, np.int64, (3, k)))
        got_v = torch.from_numpy(device.download(vals, x.numpy().dtype, (3, k)))
        assert torch.equal(got_i, want_i[:, :k])
        assert torch.equal(got_v.view(torch.uint8), want_v[:, :k].contiguous().view(torch.uint8))


# ------------------------------------------------------------------ topk
@pytest.mark.parametrize("n,k", [(1, 1), (7, 1), (7, 7), (1000, 1), (1000, 17), (1000, 1000), (5000, 3)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_distinct_values(n, k, largest):
    x = torch.randn(3, n, generator=torch.Generator().manual_seed(n + k))
    want_v, want_i = torch.topk(x, k, dim=1, largest=largest)
    got_v, got_i = torch.topk(x.to(TVK), k, dim=1, largest=largest)
    assert torch.equal(got_v.cpu(), want_v) and torch.equal(got_i.cpu(), want_i)


def test_topk_ties_nan_and_dims():
    x = keys_with_ties_and_nan(5, 60, seed=5).reshape(5, 6, 10)
    for dim, k, largest in ((0, 2, True), (1, 6, False), (2, 4, True), (-1, 1, False)):
        want_v, _ = torch.topk(x, k, dim=dim, largest=largest)
        got_v, got_i = torch.topk(x.to(TVK), k, dim=dim, largest=largest)
        # ties (-0.0 and 0.0 too) may pick other indices than the CPU: check the values they select
        torch.testing.assert_close(got_v.cpu(), want_v, rtol=0, atol=0, equal_nan=True)
        assert same_bits(torch.gather(x, dim, got_i.cpu()), got_v.cpu())
        assert got_i.cpu().sort(dim).values.diff(dim=dim).ne(0).all()  # no index twice
    with pytest.raises(RuntimeError, match="out of range"):
        torch.topk(x.to(TVK), 11, dim=2)


# ------------------------------------------------------------------ scans
def assert_scan_close(got, x, dim, op):
    ref = x.double()
    want = {"sum": torch.cumsum, "prod": torch.cumprod, "logsumexp": torch.logcumsumexp}[op](ref, dim)
    bound = 1e-5 * torch.cumsum(ref.abs(), dim) + 1e-6 if op == "sum" else 1e-5 * want.abs() + 1e-6
    err = (got.cpu().double() - want).abs()
    assert torch.equal(got.cpu().isnan(), want.isnan())
    ok = (err <= bound) | (got.cpu().double() == want)
    assert ok.all(), f"max error {err[~ok].max()}"


@pytest.mark.parametrize("n", [1, 7, 127, 1000, 5000, 100000])
def test_cumsum_cumprod_logcumsumexp_rows(n):
    g = torch.Generator().manual_seed(n)
    rows = 3 if n < 100000 else 1
    x = torch.randn(rows, n, generator=g)
    xt = x.to(TVK)
    assert_scan_close(torch.cumsum(xt, 1), x, 1, "sum")
    if n <= 5000:
        p = 1 + 0.01 * x  # products that neither vanish nor overflow
        assert_scan_close(torch.cumprod(p.to(TVK), 1), p, 1, "prod")
        lx = x.clone()
        lx[:, ::3] = float("-inf")
        assert_scan_close(torch.logcumsumexp(lx.to(TVK), 1), lx, 1, "logsumexp")


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_scans_along_dims_and_views(dim):
    x = torch.randn(40, 9, 5, generator=torch.Generator().manual_seed(dim))
    for src in (x, x.transpose(0, 2)):
        assert_scan_close(torch.cumsum(src.to(TVK), dim), src, dim, "sum")
        assert_scan_close(torch.cumprod((1 + 0.1 * src).to(TVK), dim), 1 + 0.1 * src, dim, "prod")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_scans_are_exact_int64(dtype):
    g = torch.Generator().manual_seed(2)
    x = torch.randint(-3 if dtype in (torch.int64, torch.int32) else 0, 4, (3, 2000), generator=g).to(dtype)
    for op in (torch.cumsum, torch.cumprod):
        for dim in (0, 1):
            got, want = op(x.to(TVK), dim), op(x, dim)
            assert got.dtype == want.dtype == torch.int64 and torch.equal(got.cpu(), want)
    big = torch.tensor([2**62, 2**62, 2**62, 5])  # int64 wraps around like the CPU
    assert torch.equal(torch.cumsum(big.to(TVK), 0).cpu(), torch.cumsum(big, 0))
    assert torch.equal(torch.cumsum(x.to(TVK), 1, dtype=torch.float32).cpu(), torch.cumsum(x, 1, dtype=torch.float32))


@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_scan_kernel_split_rows(device, dtype):
    """Long rows split into spans (tiny SPLIT_MIN): span totals scanned recursively, then carried."""
    from tvk_kernels.kernels.scan import scan

    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3000, generator=g) if dtype == "float32" else torch.randint(-5, 6, (2, 3000), generator=g)
    buf = device.upload(x.numpy())
    out = device.allocator.alloc(x.numel() * x.element_size())
    for prm in ({"WG": 32, "ITEMS": 2, "TARGET_GROUPS": 8, "SPLIT_MIN": 64},
                {"WG": 32, "ITEMS": 1, "TARGET_GROUPS": 512, "SPLIT_MIN": 16}):
        scan(device, "sum", buf.address, out.address, 2, 3000, 1, dtype=dtype, params=prm)
        got = torch.from_numpy(device.download(out, x.numpy().dtype, (2, 3000)))
        if dtype == "int64":
            assert torch.equal(got, torch.cumsum(x, 1))
        else:
            assert_scan_close(got, x, 1, "sum")


def test_scan_errors():
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):  # torch's type and words
        torch.logcumsumexp(torch.arange(4).to(TVK), 0)
    with pytest.raises(IndexError, match="out of range"):
        torch.cumsum(torch.ones(3, 4).to(TVK), 2)


# ------------------------------------------------------------------ backward
def _grads(fn, x, seed=0):
    a = x.clone().requires_grad_()
    b = x.to(TVK).requires_grad_()
    ya, yb = fn(a), fn(b)
    w = torch.randn(ya.shape, generator=torch.Generator().manual_seed(seed))
    (ya * w).sum().backward()
    (yb * w.to(TVK)).sum().backward()
    return a.grad, b.grad.cpu()


@pytest.mark.parametrize("name,fn", [
    ("sort", lambda t: torch.sort(t, dim=1, descending=True)[0]),
    ("sort_dim0", lambda t: torch.sort(t, dim=0, stable=True)[0]),
    ("topk", lambda t: torch.topk(t, 3, dim=1)[0]),
    ("topk_dim0", lambda t: torch.topk(t, 2, dim=0, largest=False)[0]),
    ("cumsum", lambda t: torch.cumsum(t, 1)),
    ("cumsum_dim0", lambda t: torch.cumsum(t, 0)),
    ("cumprod", lambda t: torch.cumprod(t, 1)),
    ("logcumsumexp", lambda t: torch.logcumsumexp(t, 1)),
])
def test_backward_matches_autograd_on_cpu(name, fn):
    x = torch.randn(5, 37, generator=torch.Generator().manual_seed(11))
    if name == "cumprod":
        x[1, 4] = 0.0  # the zero branch of cumprod's backward
    want, got = _grads(fn, x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()


def test_logcumsumexp_of_large_values_backward():
    """Rows of 10000s (OpInfo's sample): the backward formula amplifies any ulp the forward loses."""
    x = torch.randn(5, 5, 5, generator=torch.Generator().manual_seed(12))
    x[0] = 10000
    for dim in (0, 1):
        want, got = _grads(lambda t: torch.logcumsumexp(t, dim), x)
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5), (got - want).abs().max()


# ------------------------------------------------------------------ flip, scatter
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_flip(dtype):
    x = (torch.randn(4, 5, 6) * 100).to(dtype)
    for dims in ([0], [2], [0, 2], [-1, 1, 0], []):
        assert torch.equal(torch.flip(x.to(TVK), dims).cpu(), torch.flip(x, dims))
    assert torch.equal(torch.flip(x.to(TVK).transpose(0, 2), [1]).cpu(), torch.flip(x.transpose(0, 2), [1]))


def distinct_index(shape, dim, size, g):
    """Random indices in [0, size) along dim, no two equal on a line (torch picks any of duplicates)."""
    full = list(shape)
    full[dim] = size
    return torch.rand(full, generator=g).argsort(dim).narrow(dim, 0, shape[dim])


def test_scatter_with_a_full_index():
    g = torch.Generator().manual_seed(9)
    self_ = torch.randn(4, 10, 6, generator=g)
    src = torch.randn(5, 8, 7, generator=g)
    for dim, shape in ((1, (4, 7, 6)), (2, (3, 4, 5)), (0, (2, 8, 6)), (-1, (4, 8, 6))):
        index = distinct_index(shape, dim, self_.shape[dim], g)
        for idx in (index, index.transpose(0, 1).contiguous().transpose(0, 1), index.int()):
            want = torch.scatter(self_, dim, idx, src)
            assert torch.equal(torch.scatter(self_.to(TVK), dim, idx.to(TVK), src.to(TVK)).cpu(), want)
    mask = torch.rand(4, 10, generator=g) > 0.5
    index = distinct_index((4, 10), 1, 10, g)
    got = torch.scatter(mask.to(TVK), 1, index.to(TVK), ~mask.to(TVK))
    assert torch.equal(got.cpu(), mask.scatter(1, index, ~mask))


def test_scatter_reports_an_out_of_range_index_and_stays_usable():
    g = torch.Generator().manual_seed(10)
    self_, src = torch.randn(4, 10), torch.randn(4, 10)
    index = distinct_index((4, 7), 1, 10, g)
    bad = index.clone()
    bad[2, 3] = 10
    with pytest.raises(RuntimeError, match="index 10 is out of bounds for dimension 1 with size 10"):
        torch.scatter(self_.to(TVK), 1, bad.to(TVK), src.to(TVK)).cpu()
    assert torch.equal(torch.scatter(self_.to(TVK), 1, index.to(TVK), src.to(TVK)).cpu(), self_.scatter(1, index, src))


# ------------------------------------------------------------------ RDNA1
def test_sort_and_scan_compile_for_rdna1_without_spills(tmp_path):
    """RDNA1's own compiler (Mesa's null Navi 10): no spills, within AMD's 32 KiB of shared memory."""
    import json
    import subprocess
    import sys

    from tvk_kernels.tune import rdna1

    if rdna1.radv_icd() is None:
        pytest.skip("Mesa RADV driver not installed")
    out = subprocess.run([sys.executable, "-m", "tvk_kernels.tune.cli", "--target", "rdna1", "--ops", "sort,scan",
                          "--trials", "2", "--out", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    data = json.loads((tmp_path / "rdna1--amd-proprietary.json").read_text())
    for family in ("sort", "scan"):
        for entry in data["families"][family]["buckets"].values():
            stats = entry["provenance"]["compiler_stats"]
            assert stats["Spilled VGPRs"] == 0 and stats["Spilled SGPRs"] == 0
            assert 0 < stats["LDS size"] <= 32768 and stats["VGPRs"] > 0


def test_out_and_inplace_variants():
    x = torch.randn(5, 6, generator=torch.Generator().manual_seed(3))
    xt = x.to(TVK)
    v, i = torch.empty(5, 6).to(TVK), torch.empty(5, 6, dtype=torch.int64).to(TVK)
    for kwargs in ({"dim": 0}, {"dim": 1, "stable": True, "descending": True}):
        torch.sort(xt, **kwargs, out=(v, i))
        want = torch.sort(x, **kwargs, stable=True) if "stable" not in kwargs else torch.sort(x, **kwargs)
        assert torch.equal(v.cpu(), want[0]) and torch.equal(i.cpu(), want[1])
    tv, ti = torch.empty(5, 2).to(TVK), torch.empty(5, 2, dtype=torch.int64).to(TVK)
    torch.topk(xt, 2, out=(tv, ti))
    assert torch.equal(tv.cpu(), torch.topk(x, 2)[0]) and torch.equal(ti.cpu(), torch.topk(x, 2)[1])
    o = torch.empty(5, 6).to(TVK)
    torch.cumsum(xt, 0, out=o)
    assert torch.allclose(o.cpu(), x.cumsum(0), atol=1e-6)
    y = xt.clone()
    y.cumprod_(1)
    assert torch.allclose(y.cpu(), x.cumprod(1), atol=1e-6)


def test_bad_explicit_params_raise_a_clear_error(device):
    """Explicit parameters a kernel cannot run are an InvalidConfigError naming the family and the
    rule; the next call runs."""
    from tvk_kernels import InvalidConfigError
    from tvk_kernels.kernels.scan import scan
    from tvk_kernels.kernels.sort import sort

    x = np.arange(8, dtype=np.float32)
    buf, out, idx = device.upload(x), device.allocator.alloc(32), device.allocator.alloc(64)
    with pytest.raises(InvalidConfigError, match="scan: WG=48 must be a power of two"):
        scan(device, "sum", buf.address, out.address, 1, 8, 1, params={"WG": 48})
    with pytest.raises(InvalidConfigError, match="sort: ELEMS=24 must be a power of two"):
        sort(device, buf.address, out.address, idx.address, 1, 8, params={"ELEMS": 24, "WG": 8})
    with pytest.raises(InvalidConfigError, match="sort.*ELEMS >= 2 \\* WG"):
        sort(device, buf.address, out.address, idx.address, 1, 8, params={"ELEMS": 16, "WG": 16})
    scan(device, "sum", buf.address, out.address, 1, 8, 1, params={"WG": 32})
    np.testing.assert_array_equal(device.download(out, np.float32, (8,)), np.cumsum(x))


def test_one_spirv_module_serves_every_elems_and_items_value():
    """sort's ELEMS and scan's ITEMS are specialization constants: one SPIR-V module per kernel
    variant serves every value (compiled once, shipped once); the pipeline sets it."""
    from tvk_kernels.kernels import scan as scan_kernels, sort as sort_kernels
    from tvk_kernels.runtime.compiler import split_defines

    variants = {
        "sort.comp": [sort_kernels.defines({"ELEMS": e}, sort_kernels.LOCAL, True) for e in (256, 1024, 4096)],
        "scan.comp": [scan_kernels.defines({"ITEMS": i}, scan_kernels.OPS["logsumexp"], False, scan_kernels.SCAN)
                      for i in (1, 2, 4, 8)],
    }
    for template, kernels in variants.items():
        split = [split_defines(template, d) for d in kernels]
        assert len({tuple(sorted(compiled.items())) for compiled, _ in split}) == 1, template
        assert len({tuple(sorted(spec.items())) for _, spec in split}) == len(kernels), template
