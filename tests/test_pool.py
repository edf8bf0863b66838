"""Pooling kernels (tvk_kernels.kernels.pool) against torch CPU autograd.

Error bound: max |got - ref| <= 1e-5 * max(1, max |ref|) (forward: a max is exact, an
average is a short float32 sum); max-pool indices must match torch exactly.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tvk_kernels import InvalidConfigError  # noqa: E402
from tvk_kernels.kernels import pool  # noqa: E402
from tvk_kernels.tune.targets import pool as pool_target  # noqa: E402

REL = 1e-5


def _close(got, ref, rel=REL):
    ref = np.asarray(ref, dtype=np.float32)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    err = float(np.abs(got - ref).max(initial=0.0))
    assert err <= rel * scale, f"max abs error {err:.3g} > {rel:g} * {scale:.3g}"


def _bufs(device, x, go):
    return device.upload(x), device.upload(go), device.allocator.alloc(x.nbytes)


MAX_CASES = [
    # x shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 8, 8), 2, 2, 0, 1, False),          # non-overlapping, the CNN case
    ((1, 2, 7, 9), 3, 2, 0, 1, False),          # overlapping windows
    ((3, 2, 13, 7), 3, 2, 1, 1, False),         # overlapping + padding
    ((2, 1, 13, 13), (3, 2), (2, 1), (1, 0), 1, False),
    ((1, 2, 11, 10), 3, 2, 1, 2, False),        # dilation
    ((2, 2, 7, 7), 2, 2, 0, 1, True),           # ceil_mode: a partial last window
    ((1, 3, 9, 8), 3, 2, 1, 1, True),
    ((1, 1, 1, 1), 1, 1, 0, 1, False),
]


@pytest.mark.parametrize("shape,k,s,p,d,ceil", MAX_CASES)
def test_max_pool2d(device, rng, shape, k, s, p, d, ceil):
    x = rng.standard_normal(shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    ref, ridx = F.max_pool2d(xt, k, s, p, d, ceil_mode=ceil, return_indices=True)
    go = rng.standard_normal(ref.shape).astype(np.float32)
    ref.backward(torch.tensor(go))
    X, GO, GI = _bufs(device, x, go)
    out_shape = pool.pool2d_output_shape(shape, k, s, p, d, ceil)
    assert out_shape == tuple(ref.shape)
    n_out = int(np.prod(out_shape))
    O, I = device.allocator.alloc(4 * n_out), device.allocator.alloc(8 * n_out)
    assert pool.max_pool2d(device, X.address, O.address, I.address, shape, k, s, p, d, ceil) == out_shape
    pool.max_pool2d_backward(device, GO.address, I.address, GI.address, shape, k, s, p, d, ceil)
    _close(device.download(O, np.float32, out_shape), ref.detach().numpy())
    np.testing.assert_array_equal(device.download(I, np.int64, out_shape), ridx.numpy())
    _close(device.download(GI, np.float32, shape), xt.grad.numpy())


def test_max_pool2d_ties_and_nan(device):
    """Ties keep the first tap; a NaN propagates with its index, as torch's CPU kernel does."""
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 0, 2:, 2:] = [[5, 7], [7, 1]]
    ref, ridx = F.max_pool2d(torch.tensor(x), 2, 2, return_indices=True)
    X = device.upload(x)
    O, I = device.allocator.alloc(16), device.allocator.alloc(32)
    pool.max_pool2d(device, X.address, O.address, I.address, x.shape, 2, 2)
    got = device.download(O, np.float32, (1, 1, 2, 2))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref.numpy()))
    np.testing.assert_array_equal(np.nan_to_num(got), np.nan_to_num(ref.numpy()))
    np.testing.assert_array_equal(device.download(I, np.int64, (1, 1, 2, 2)), ridx.numpy())


AVG_CASES = [
    # x shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
    ((2, 3, 8, 8), 2, 2, 0, False, True, None),
    ((1, 2, 7, 9), 3, 2, 0, False, True, None),        # overlapping
    ((3, 2, 13, 7), 3, 2, 1, False, True, None),       # padding counted (torch default)
    ((3, 2, 13, 7), 3, 2, 1, False, False, None),      # padding not counted
    ((2, 2, 7, 7), 3, 2, 1, True, True, None),         # ceil_mode: clipped last window
    ((2, 2, 7, 7), 3, 2, 1, True, False, None),
    ((1, 2, 9, 6), (3, 2), (1, 2), (1, 1), False, True, 5),
]


@pytest.mark.parametrize("shape,k,s,p,ceil,cip,div", AVG_CASES)
def test_avg_pool2d(device, rng, shape, k, s, p, ceil, cip, div):
    x = rng.standard_normal(shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    ref = F.avg_pool2d(xt, k, s, p, ceil_mode=ceil, count_include_pad=cip, divisor_override=div)
    go = rng.standard_normal(ref.shape).astype(np.float32)
    ref.backward(torch.tensor(go))
    X, GO, GI = _bufs(device, x, go)
    O = device.allocator.alloc(4 * ref.numel())
    out_shape = pool.avg_pool2d(device, X.address, O.address, shape, k, s, p, ceil, cip, div)
    assert out_shape == tuple(ref.shape)
    pool.avg_pool2d_backward(device, GO.address, GI.address, shape, k, s, p, ceil, cip, div)
    _close(device.download(O, np.float32, out_shape), ref.detach().numpy())
    _close(device.download(GI, np.float32, shape), xt.grad.numpy())


@pytest.mark.parametrize("shape,osize", [
    ((2, 3, 7, 7), (1, 1)),     # global average pooling
    ((1, 2, 13, 7), (4, 3)),    # non-divisible: overlapping windows
    ((2, 2, 8, 8), (4, 4)),     # divisible
    ((1, 1, 5, 6), (7, 9)),     # upsampling-like: output larger than input
    ((1, 2, 10, 9), (3, None)),
])
def test_adaptive_avg_pool2d(device, rng, shape, osize):
    x = rng.standard_normal(shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    ref = F.adaptive_avg_pool2d(xt, osize)
    go = rng.standard_normal(ref.shape).astype(np.float32)
    ref.backward(torch.tensor(go))
    X, GO, GI = _bufs(device, x, go)
    O = device.allocator.alloc(4 * ref.numel())
    out_shape = pool.adaptive_avg_pool2d(device, X.address, O.address, shape, osize)
    assert out_shape == tuple(ref.shape)
    pool.adaptive_avg_pool2d_backward(device, GO.address, GI.address, shape, osize)
    _close(device.download(O, np.float32, out_shape), ref.detach().numpy())
    _close(device.download(GI, np.float32, shape), xt.grad.numpy())


def test_candidates_all_correct(device, rng):
    """Several explicit tuning candidates give the same (correct) result, incl. a ragged grid."""
    cands = pool.candidates(device)
    assert cands and all(c["WG"] <= device.facts.max_workgroup_invocations for c in cands)
    picks = [c for c in cands if (c["WG"], c["ITEMS"]) in {(32, 1), (64, 4), (128, 2), (256, 1)}]
    assert len(picks) >= 3
    shape = (2, 3, 11, 13)
    x = rng.standard_normal(shape).astype(np.float32)
    xt = torch.tensor(x, requires_grad=True)
    ref, _ = F.max_pool2d(xt, 3, 2, 1, return_indices=True)
    go = rng.standard_normal(ref.shape).astype(np.float32)
    ref.backward(torch.tensor(go))
    X, GO, GI = _bufs(device, x, go)
    O, I = device.allocator.alloc(4 * ref.numel()), device.allocator.alloc(8 * ref.numel())
    for c in picks:
        pool.max_pool2d(device, X.address, O.address, I.address, shape, 3, 2, 1, params=c)
        pool.max_pool2d_backward(device, GO.address, I.address, GI.address, shape, 3, 2, 1, params=c)
        _close(device.download(O, np.float32, ref.shape), ref.detach().numpy())
        _close(device.download(GI, np.float32, shape), xt.grad.numpy())


def test_invalid_config(device):
    x = device.allocator.alloc(4 * 64)
    too_big = device.facts.max_workgroup_invocations * 2
    with pytest.raises(InvalidConfigError):
        pool.avg_pool2d(device, x.address, x.address, (1, 1, 8, 8), 2, params={"WG": too_big, "ITEMS": 1})
    with pytest.raises(InvalidConfigError):
        pool.avg_pool2d(device, x.address, x.address, (1, 1, 8, 8), 2, params={"WG": 64, "ITEMS": 0})


def test_bad_shapes():
    with pytest.raises(ValueError):
        pool.pool2d_output_shape((1, 1, 8, 8), 2, 2, 2)  # padding > half the kernel
    with pytest.raises(ValueError):
        pool.pool2d_output_shape((1, 1, 2, 2), 3, 1, 0)  # window larger than the image


def test_tune_target(device):
    """The tuner's pooling target: candidates reproduce the default result; work() is sane."""
    target = pool_target.TARGET
    for shape in pool_target.pool_suite((1, 3, 9, 11)):
        case = target.prepare(device, shape, n_inputs=2)
        try:
            ok, err = case.check({"WG": 32, "ITEMS": 4})
            assert ok, (shape, err)
            case.run({"WG": 64, "ITEMS": 1}, 0)
        finally:
            case.free()
    assert target.work(shape, {"WG": 64, "ITEMS": 2})["groups"] >= 1


def test_one_spirv_module_serves_every_items_value():
    """ITEMS is a specialization constant: one SPIR-V module per op serves every value
    (compiled once, shipped once); the pipeline sets it."""
    from tvk_kernels.runtime.compiler import split_defines

    for op in pool.OPS:
        split = [split_defines(pool.Pool.template, pool.defines(op, {"ITEMS": items})) for items in (1, 2, 4)]
        assert [compiled for compiled, _ in split] == [{"OP": pool.OPS[op]}] * 3, op
        assert len({tuple(spec.items()) for _, spec in split}) == 3, op


def test_tune_target_lists_every_op_kernel():
    """carry_over compiles a tuned config's kernels from the tuner target's list: every op."""
    kernels = pool_target.PoolTarget.kernel_defines({"WG": 64, "ITEMS": 2})
    assert sorted(d["OP"] for d in kernels) == sorted(pool.OPS.values())
    assert all(d["ITEMS"] == 2 for d in kernels)
