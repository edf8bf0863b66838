"""Reductions (tvk_kernels/kernels/reduce.py) against torch CPU.

Error bounds: sum/mean |got - ref| <= 2e-6 * sum(|x|) (per output, over its reduced range)
+ 1e-6; prod relative 1e-5; max/min/argmax/argmin exact (indices: the first occurrence).
"""
import itertools

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvk_kernels import InvalidConfigError
from tvk_kernels.kernels.reduce import output_shape, reduce

OPS = ["sum", "mean", "prod", "max", "min", "argmax", "argmin"]


def torch_ref(op, x, dims, keepdim):
    t = torch.from_numpy(np.ascontiguousarray(x)).double()
    nd = t.dim()
    dims = tuple(range(nd)) if dims is None else ((dims,) if isinstance(dims, int) else tuple(dims))
    dims = tuple(range(nd)) if not dims else dims
    if op == "sum":
        return t.sum(dims, keepdim=keepdim).numpy()
    if op == "mean":
        return t.mean(dims, keepdim=keepdim).numpy()
    if op == "max":
        return t.amax(dims, keepdim=keepdim).numpy()
    if op == "min":
        return t.amin(dims, keepdim=keepdim).numpy()
    if op == "prod":
        r = t
        for d in sorted((d % nd for d in dims), reverse=True):
            r = r.prod(d, keepdim=keepdim)
        return r.numpy()
    f = torch.argmax if op == "argmax" else torch.argmin
    dims = tuple(sorted(d % nd for d in dims))
    if 1 < len(dims) < nd:  # TorchVK extension: row-major index over the reduced dims
        kept = [d for d in range(nd) if d not in dims]
        r = f(t.permute(*kept, *dims).reshape(*[t.shape[d] for d in kept], -1), -1)
        return (r.reshape([1 if d in dims else t.shape[d] for d in range(nd)]) if keepdim else r).numpy()
    if len(dims) == nd and nd != 1:
        r = f(t)  # flattened index
        return (r.reshape([1] * nd) if keepdim else r).numpy()
    assert len(dims) == 1
    return f(t, dims[0], keepdim=keepdim).numpy()


def run(device, op, x, dims=None, keepdim=False, params=None, base=None, dtype="float32", index=False):
    """Reduce the numpy view x (of `base`, default x itself) on the device."""
    base = x if base is None else base
    itemsize = base.dtype.itemsize
    buf = device.upload(base)
    offset = x.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    assert base.flags.c_contiguous and offset % itemsize == 0
    strides = [s // itemsize for s in x.strides]
    oshape = output_shape(x.shape, dims, keepdim)
    n = max(int(np.prod(oshape)), 1)
    isidx = op.startswith("arg")
    out = device.allocator.alloc(n * (8 if isidx else 4))
    idx = device.allocator.alloc(n * 8) if index else None
    got_shape = reduce(device, op, buf.address + offset, out.address, x.shape, strides, dims, keepdim,
                       dtype=dtype, params=params, index_addr=idx.address if index else 0)
    assert got_shape == oshape
    vals = device.download(out, np.int64 if isidx else np.float32, oshape)
    if index:
        return vals, device.download(idx, np.int64, oshape)
    return vals


def check(op, got, x, dims, keepdim):
    ref = torch_ref(op, x.astype(np.float64), dims, keepdim)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if op in ("sum", "mean"):
        l1 = torch_ref(op, np.abs(x.astype(np.float64)), dims, keepdim)
        np.testing.assert_array_less(np.abs(got - ref), 2e-6 * l1 + 1e-6)
    elif op == "prod":
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-30)
    elif op.startswith("arg"):
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_array_equal(got, ref.astype(np.float32))


CASES = [
    ((1,), None, False), ((7,), None, True), ((127,), (0,), False), ((1000,), None, False),
    ((127, 33), (1,), False), ((127, 33), (0,), True), ((127, 33), (0, 1), False), ((33, 127), -1, False),
    ((3, 1, 7), (1,), False), ((4, 5, 6), (0,), False), ((4, 5, 6), (1,), True), ((4, 5, 6), (2,), False),
    ((4, 5, 6), (0, 2), True), ((4, 5, 6), (1, 2), False), ((2, 3, 4, 5), (0, 2), False), ((7, 1000), (1,), False),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape,dims,keepdim", CASES)
def test_reduce_contiguous(device, rng, op, shape, dims, keepdim):
    x = rng.standard_normal(shape).astype(np.float32)
    if op == "prod":
        x = (1.0 + 0.05 * x).astype(np.float32)
    check(op, run(device, op, x, dims, keepdim), x, dims, keepdim)


@pytest.mark.parametrize("op", ["sum", "max", "argmax", "mean"])
def test_reduce_noncontiguous(device, rng, op):
    base = rng.standard_normal((40, 30)).astype(np.float32)
    views = [(base.T, (0,)), (base.T, (1,)), (base[3:31, 5:12], (1,)), (base[3:31, 5:12], (0,)), (base[::3], None),
             (base[::2, ::3].T, (0,))]
    b4 = rng.standard_normal((5, 6, 7, 8)).astype(np.float32)
    views += [(b4.transpose(2, 0, 3, 1), (1,)), (b4.transpose(3, 1, 0, 2)[1:7, :, ::2], (2,)),
              (b4.transpose(1, 3, 0, 2), None)]
    b6 = rng.standard_normal((2, 3, 4, 3, 2, 5)).astype(np.float32)
    views += [(b6.transpose(5, 0, 4, 1, 3, 2), (3,)), (b6[:, ::2].transpose(0, 2, 1, 3, 5, 4), (2,))]
    for x, dims in views:
        b = b4 if x.base is b4 else (b6 if x.base is b6 else base)
        assert np.shares_memory(x, b)
        check(op, run(device, op, x, dims, False, base=b), x, dims, False)
    if op in ("sum", "mean", "max"):  # several dims of a strided view
        x = b4.transpose(2, 0, 3, 1)[:, 1:]
        for dims in [(0, 2), (1, 3), (0, 1, 3)]:
            check(op, run(device, op, x, dims, True, base=b4), x, dims, True)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "argmax", "argmin", "prod"])
def test_two_pass(device, rng, op):
    """Few outputs over long ranges: partials + final pass (forced by small SPLIT_MIN)."""
    prm = {"TARGET_GROUPS": 16, "SPLIT_MIN": 256}
    for shape, dims in [((20000,), None), ((5000, 3), (0,)), ((3, 5000), (1,)), ((2, 50, 60), (0, 2))]:
        x = rng.standard_normal(shape).astype(np.float32)
        if op == "prod":
            x = (1.0 + 0.001 * x).astype(np.float32)
        check(op, run(device, op, x, dims, False, params=prm), x, dims, False)
    if op.startswith("arg"):  # ties across chunks: the first occurrence still wins
        x = np.random.default_rng(7).integers(0, 4, (20000,)).astype(np.float32)
        check(op, run(device, op, x, None, False, params=prm), x, None, False)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "argmax", "argmin", "prod"])
def test_column_split(device, rng, op):
    """A strided column sum the tuned rule leaves whole (a bias grad: 2048 rows, few columns, one
    workgroup) is cut into row chunks and finished by a second pass (tuning/reduce.json
    column_split); row sums are not. TARGET_GROUPS as on a big GPU, the tuned rule off."""
    prm = {"TARGET_GROUPS": 512, "SPLIT_MIN": 1 << 30}
    stream = device.stream
    for shape, dims, passes in [((2048, 24), (0,), 2), ((3, 700, 5), (0, 1), 2), ((24, 2048), (1,), 1)]:
        x = rng.standard_normal(shape).astype(np.float32)
        if op == "prod":
            x = (1.0 + 0.001 * x).astype(np.float32)
        before = stream.total_dispatches
        got = run(device, op, x, dims, False, params=prm)
        assert stream.total_dispatches - before == passes, (shape, dims)
        check(op, got, x, dims, False)
    if op.startswith("arg"):  # ties across chunks: the first occurrence still wins
        x = np.random.default_rng(7).integers(0, 4, (2048, 24)).astype(np.float32)
        check(op, run(device, op, x, (0,), False, params=prm), x, (0,), False)


def test_split_per_thread_grows_the_splits_with_the_data():
    """SPLIT_PER_THREAD: where TARGET_GROUPS splits a long range, no thread walks more than that many elements
    of it (a full sum of 16M floats: 2048 chunks, not TARGET_GROUPS' 512); the H200's tuned 4M plans stay."""
    from tvk_kernels.kernels.reduce import plan

    h200 = {"WG": 128, "ITEMS": 4, "TARGET_GROUPS": 512, "SPLIT_MIN": 16384}
    assert plan(h200, 1, 1 << 24, False)[3] == 512  # off: TARGET_GROUPS alone
    assert plan({**h200, "SPLIT_PER_THREAD": 64}, 1, 1 << 24, False)[3] == 2048
    assert plan({**h200, "SPLIT_PER_THREAD": 64}, 1, 1 << 22, False)[3] == 512
    assert plan({**h200, "SPLIT_PER_THREAD": 64}, 2, 1 << 24, False)[3] == 2048  # per output
    assert plan({**h200, "SPLIT_PER_THREAD": 64}, 4096, 1 << 14, False)[3] == 1  # enough workgroups already
    t, _, _, nsplit, chunk = plan({**h200, "SPLIT_PER_THREAD": 64}, 1, 10 ** 7 + 3, False)
    assert nsplit * chunk >= 10 ** 7 + 3 and -(-chunk // t) <= 64


@pytest.mark.parametrize("op", ["sum", "max", "argmin"])
def test_split_per_thread_results(device, rng, op):
    """The finer split of a long range, finished by the second pass, against numpy."""
    x = rng.standard_normal((3, 50001)).astype(np.float32)
    prm = {"WG": 64, "ITEMS": 2, "TARGET_GROUPS": 4, "SPLIT_MIN": 4096, "SPLIT_PER_THREAD": 8}
    stream = device.stream
    before = stream.total_dispatches
    for dims in ((1,), None):
        check(op, run(device, op, x, dims, False, params=prm), x, dims, False)
    assert stream.total_dispatches - before == 4  # two passes each


@pytest.mark.parametrize("wg", [32, 256, 1024])
@pytest.mark.parametrize("subgroup", [0, 1])
def test_variants(device, rng, wg, subgroup):
    """Subgroup-arithmetic and shared-memory trees at several workgroup sizes and items."""
    if subgroup and not device.facts.features["subgroup_arithmetic"]:
        pytest.skip("no subgroup arithmetic")
    x = rng.standard_normal((9, 3001)).astype(np.float32)
    x[4, 17] = x[4, 2900] = 50.0  # a tie: first occurrence wins
    for items in (1, 4):
        prm = {"WG": wg, "SUBGROUP": subgroup, "ITEMS": items}
        for op in ("sum", "max", "argmax", "min"):
            check(op, run(device, op, x, (1,), False, params=prm), x, (1,), False)
        check("sum", run(device, "sum", x, (0,), False, params=prm), x, (0,), False)


def test_nan_and_ties(device):
    x = np.array([[1, 3, 3, 2], [np.nan, 1, np.nan, 5], [-np.inf, -np.inf, -np.inf, -np.inf],
                  [2, 2, 2, 2]], np.float32)
    for op in ("max", "min", "argmax", "argmin", "sum"):
        got = run(device, op, x, (1,))
        ref = torch_ref(op, x, (1,), False)
        np.testing.assert_array_equal(got, ref.astype(got.dtype))
    np.testing.assert_array_equal(run(device, "argmax", x), torch.argmax(torch.from_numpy(x)).numpy())
    y = np.random.default_rng(3).integers(-3, 3, (4, 300)).astype(np.float32)
    y[1, [150, 290]] = np.nan
    y[2] = -np.inf
    for sg in (0, 1):  # long rows: the subgroup / shared trees see the NaNs and ties
        for op in ("max", "min", "argmax", "argmin"):
            got = run(device, op, y, (1,), params={"WG": 32, "SUBGROUP": sg, "ITEMS": 1})
            np.testing.assert_array_equal(got, torch_ref(op, y, (1,), False).astype(got.dtype))


def test_max_with_indices(device, rng):
    x = rng.integers(0, 5, (6, 300)).astype(np.float32)
    vals, idx = run(device, "max", x, (1,), True, index=True)
    ref = torch.from_numpy(x).max(1, keepdim=True)
    np.testing.assert_array_equal(vals, ref.values.numpy())
    np.testing.assert_array_equal(idx, ref.indices.numpy())
    vals, idx = run(device, "min", x, (0,), False, index=True)
    ref = torch.from_numpy(x).min(0)
    np.testing.assert_array_equal(vals, ref.values.numpy())
    np.testing.assert_array_equal(idx, ref.indices.numpy())


def test_float16_input(device, rng):
    if not device.facts.features.get("storage_16bit"):
        pytest.skip("no 16-bit storage")
    x = rng.standard_normal((7, 130)).astype(np.float16)
    for op in ("sum", "max", "argmax"):
        got = run(device, op, x, (1,), dtype="float16")
        check(op, got, x.astype(np.float32), (1,), False)
    xt = x.T  # strided half view
    check("sum", run(device, "sum", xt, (0,), base=x, dtype="float16"), xt.astype(np.float32), (0,), False)


def test_edge_cases(device, rng):
    x = np.zeros((3, 0), np.float32)
    buf = device.upload(np.zeros(4, np.float32))
    out = device.allocator.alloc(64)
    assert reduce(device, "sum", buf.address, out.address, (3, 0), None, (1,)) == (3,)
    np.testing.assert_array_equal(device.download(out, np.float32, (3,)), np.zeros(3, np.float32))
    assert reduce(device, "prod", buf.address, out.address, (3, 0), None, (1,)) == (3,)
    np.testing.assert_array_equal(device.download(out, np.float32, (3,)), np.ones(3, np.float32))
    assert reduce(device, "sum", buf.address, out.address, (0, 3), None, (1,)) == (0,)
    with pytest.raises(ValueError):
        reduce(device, "max", buf.address, out.address, x.shape, None, (1,))
    with pytest.raises(ValueError):
        reduce(device, "median", buf.address, out.address, (4,), None, None)
    with pytest.raises(IndexError):
        reduce(device, "sum", buf.address, out.address, (4,), None, (1,))
    s = np.array(3.5, np.float32)  # 0-d
    np.testing.assert_array_equal(run(device, "sum", s), np.float32(3.5))
    assert output_shape((2, 3, 4), (0, -1), True) == (1, 3, 1)
    assert output_shape((2, 3, 4), None, False) == ()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_sweep(device, data):
    nd = data.draw(st.integers(1, 4), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(1, 9), min_size=nd, max_size=nd), label="shape"))
    perm = data.draw(st.permutations(range(nd)), label="perm")
    op = data.draw(st.sampled_from(["sum", "max", "argmax"]), label="op")
    if op == "argmax":
        dims = data.draw(st.one_of(st.none(), st.integers(-nd, nd - 1)), label="dims")
    else:
        dims = tuple(data.draw(st.sets(st.integers(0, nd - 1), min_size=1), label="dims"))
    keepdim = data.draw(st.booleans(), label="keepdim")
    seed = data.draw(st.integers(0, 2 ** 16), label="seed")
    base = np.random.default_rng(seed).integers(-8, 8, shape).astype(np.float32)  # ties are common
    x = base.transpose(perm)
    check(op, run(device, op, x, dims, keepdim, base=base), x, dims, keepdim)


def test_bad_explicit_params_raise_a_clear_error(device):
    """A WG that is not a power of two, or that breaks the search space's constraints, is an
    InvalidConfigError naming the family and the parameter; the next call runs."""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(InvalidConfigError, match="reduce: WG=48 must be a power of two"):
        run(device, "sum", x, 1, params={"WG": 48})
    with pytest.raises(InvalidConfigError, match="reduce.*WG \\* 8 <= max_shared_memory"):
        run(device, "sum", x, 1, params={"WG": device.facts.max_shared_memory})
    np.testing.assert_array_equal(run(device, "sum", x, 1, params={"WG": 32}), x.sum(1))


def test_one_spirv_module_serves_every_items_value_and_layout():
    """ITEMS, COLS, RD, IN_IDX and IDX64 are specialization constants: one SPIR-V module per op,
    input dtype and SUBGROUP serves them all (compiled once, shipped once); the pipeline sets them."""
    from tvk_kernels.kernels import reduce as reduce_kernels
    from tvk_kernels.runtime.compiler import split_defines

    modules, specs = set(), set()
    for items, rd, cols, in_idx, idx64 in itertools.product((1, 2, 4, 8), (1, 3), (False, True), (False, True),
                                                            (False, True)):
        compiled, spec = split_defines(reduce_kernels.Reduce.template, reduce_kernels.defines({"ITEMS": items}, 4, rd, cols, False, 0, in_idx,
                                                                    idx64))
        modules.add(tuple(sorted(compiled.items())))
        specs.add(tuple(sorted(spec.items())))
    assert modules == {(("IN_F16", 0), ("OP", 4), ("SUBGROUP", 0))}, modules
    assert len(specs) == 4 * 2 * 2 * 2 * 2
