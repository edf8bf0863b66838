"""Launch plans (tvk_kernels/kernels/launch.py): a family keeps what a call's geometry decides in
one memo, reused by the next call with that geometry, dropped when the configs reload."""
import numpy as np

from tvk_kernels import config
from tvk_kernels.kernels import elementwise as elementwise_kernels
from tvk_kernels.kernels import matmul as matmul_kernels
from tvk_kernels.kernels.launch import MAX_PLANS, Family, family


def _gemm(device, buffers, M=5, N=7, K=3, **kw):
    a, b, out = buffers
    return matmul_kernels.matmul(device, a.address, b.address, out.address, M, N, K, **kw)


def _buffers(device, M=5, N=7, K=3):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, K), dtype=np.float32), rng.standard_normal((K, N), dtype=np.float32)
    return (device.upload(a), device.upload(b), device.allocator.alloc(4 * M * N)), a @ b


def test_a_repeated_gemm_reuses_its_plan_and_stays_right(device, monkeypatch):
    buffers, expected = _buffers(device)
    fam = family(device, matmul_kernels.Matmul)
    fam.forget_plans()
    planned = []
    real = matmul_kernels.plan
    monkeypatch.setattr(matmul_kernels, "plan", lambda *a, **k: planned.append(1) or real(*a, **k))
    for _ in range(3):
        _gemm(device, buffers)
    assert len(planned) == 1
    np.testing.assert_allclose(device.download(buffers[2], np.float32, (5, 7)), expected, rtol=1e-5, atol=1e-5)
    _gemm(device, buffers, params={"BM": 16, "BN": 16, "BK": 8, "TM": 2, "TN": 2, "VEC": 1, "UNROLL": 1, "PAD": 0,
                                   "PREFETCH": 0, "SUBGROUP": 0})
    _gemm(device, buffers, params={"BM": 16, "BN": 16, "BK": 8, "TM": 2, "TN": 2, "VEC": 1, "UNROLL": 1, "PAD": 0,
                                   "PREFETCH": 0, "SUBGROUP": 0})
    assert len(planned) == 3, "an explicit candidate (the tuner's) is planned every time, never kept"
    config.reload()  # tuned configs may have changed: what was planned from them goes
    _gemm(device, buffers)
    assert len(planned) == 4
    for buf in buffers:
        buf.free()


def test_strides_given_as_lists_are_planned_and_not_kept(device):
    buffers, expected = _buffers(device)
    fam = family(device, matmul_kernels.Matmul)
    fam.forget_plans()
    _gemm(device, buffers, a_strides=[15, 3, 1], b_strides=[21, 7, 1], out_strides=[35, 7, 1])
    assert not fam._plans
    np.testing.assert_allclose(device.download(buffers[2], np.float32, (5, 7)), expected, rtol=1e-5, atol=1e-5)
    for buf in buffers:
        buf.free()


def test_an_empty_gemm_has_a_plan_that_records_nothing(device):
    buffers, _ = _buffers(device)
    before = device.stream.total_dispatches
    info = _gemm(device, buffers, M=0)
    assert info["kernel"] == "none" and _gemm(device, buffers, M=0)["kernel"] == "none"
    assert device.stream.total_dispatches == before
    for buf in buffers:
        buf.free()


def test_elementwise_plans_live_in_the_same_memo(device):
    fam = family(device, elementwise_kernels.Elementwise)
    fam.forget_plans()
    x = device.upload(np.arange(12, dtype=np.float32))
    out = device.allocator.alloc(48)
    operand = elementwise_kernels.Operand
    first = fam.plan("neg", (operand(x, (3, 4)),), operand(out, (3, 4)), None)
    assert fam.plan("neg", (operand(x, (3, 4)),), operand(out, (3, 4)), None) is first
    assert len(fam._plans) == 1
    x.free()
    out.free()


def test_the_memo_is_bounded(device):
    class Probe(Family):
        family = "elementwise"
        template = "elementwise_binary.comp"

    fam = Probe(device)
    for key in range(MAX_PLANS + 5):
        assert fam.keep_plan(key, object()) is not None
    assert len(fam._plans) <= MAX_PLANS and fam.kept_plan(MAX_PLANS + 4) is not None
    assert fam.kept_plan("never") is None and fam.kept_plan([1]) is None  # unhashable: None, no error
