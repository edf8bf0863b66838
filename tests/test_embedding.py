"""Embedding gather and deterministic scatter-add backward vs torch autograd."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from tvk_kernels.kernels.embedding import embedding_backward, embedding_forward  # noqa: E402

SMALL_SORT = {"WG": 32, "VEC": 1, "ITEMS": 2, "BWD_WG": 32, "SORT_WG": 32, "SCAN_MAX": 0}


def _ref_grad(w, idx, g, padding_idx=None):
    wt = torch.tensor(w, requires_grad=True)
    out = F.embedding(torch.tensor(idx), wt, padding_idx=padding_idx)
    out.backward(torch.tensor(g))
    return wt.grad.numpy()


@pytest.mark.parametrize("V,D,n", [(1, 1, 1), (7, 5, 13), (127, 16, 7), (10, 33, 100), (3, 4, 257)])
def test_forward(device, rng, V, D, n):
    w = rng.standard_normal((V, D)).astype(np.float32)
    idx = rng.integers(0, V, n).astype(np.int64)
    wb, ib = device.upload(w), device.upload(idx)
    ob = device.allocator.alloc(4 * n * D)
    embedding_forward(device, wb, ib, ob, n, V, D)
    ref = F.embedding(torch.tensor(idx), torch.tensor(w)).numpy()
    np.testing.assert_array_equal(device.download(ob, np.float32, (n, D)), ref)


def test_forward_strided_unaligned_explicit_params(device, rng):
    V, D, stride, n = 9, 6, 10, 31
    full = rng.standard_normal((V, stride)).astype(np.float32)
    wb, ib = device.upload(full), device.upload(rng.integers(0, V, n).astype(np.int64))
    idx = device.download(ib, np.int64, (n,))
    out = device.allocator.alloc(4 * (n * D + 1))
    # a weight view starting one column in (address not 16-byte aligned), output view at +4 bytes
    embedding_forward(device, wb.address + 4, ib, out.address + 4, n, V, D, weight_stride=stride,
                      params={"WG": 32, "VEC": 4, "ITEMS": 3})
    got = device.download(out, np.float32, (n * D + 1,))[1:].reshape(n, D)
    np.testing.assert_array_equal(got, full[idx, 1:1 + D])


def test_forward_out_of_range_reads_nothing_outside_the_weight(device):
    """The kernel alone: a bad index gives a zero row, not a read out of bounds. The torch layer
    checks indices first and raises (tests/test_index_errors.py)."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([2, -1, 3, 0], dtype=np.int64)
    wb, ib = device.upload(w), device.upload(idx)
    ob = device.allocator.alloc(4 * 16)
    embedding_forward(device, wb, ib, ob, 4, 3, 4)
    got = device.download(ob, np.float32, (4, 4))
    np.testing.assert_array_equal(got, np.stack([w[2], np.zeros(4), np.zeros(4), w[0]]))


@pytest.mark.parametrize("strategy", ["scan", "sort"])
@pytest.mark.parametrize("V,D,n,padding_idx", [(1, 1, 1, None), (7, 5, 40, 3), (127, 16, 7, None),
                                               (20, 33, 300, -1), (4, 3, 129, 0)])
def test_backward(device, rng, strategy, V, D, n, padding_idx):
    w = rng.standard_normal((V, D)).astype(np.float32)
    idx = rng.integers(0, V, n).astype(np.int64)
    g = rng.standard_normal((n, D)).astype(np.float32)
    ref = _ref_grad(w, idx, g, padding_idx)
    gb, ib = device.upload(g), device.upload(idx)
    gw = device.upload(np.full((V, D), 7.0, np.float32))  # garbage: accumulate=False must zero it
    params = dict(SMALL_SORT) if strategy == "sort" else None
    embedding_backward(device, gb, ib, gw, n, V, D, padding_idx=padding_idx, strategy=strategy, params=params)
    np.testing.assert_allclose(device.download(gw, np.float32, (V, D)), ref, rtol=1e-5, atol=1e-5)


def test_backward_strategies_bitwise_equal_and_deterministic(device, rng):
    V, D, n = 30, 8, 2000  # sort path with several global bitonic stages (SORT_WG=32: blocks of 64)
    idx = rng.integers(-3, V + 3, n).astype(np.int64)  # out-of-range indices get no gradient
    g = rng.standard_normal((n, D)).astype(np.float32)
    gb, ib = device.upload(g), device.upload(idx)
    results = []
    for strategy, params in [("scan", None), ("sort", SMALL_SORT), ("sort", None), ("sort", SMALL_SORT)]:
        gw = device.allocator.alloc(4 * V * D)
        embedding_backward(device, gb, ib, gw, n, V, D, padding_idx=5, strategy=strategy, params=params)
        results.append(device.download(gw, np.float32, (V, D)))
    ok = (idx >= 0) & (idx < V) & (idx != 5)
    ref = np.zeros((V, D), np.float64)
    np.add.at(ref, idx[ok], g[ok])
    np.testing.assert_allclose(results[0], ref, rtol=1e-5, atol=1e-4)
    assert not results[0][5].any()
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_backward_one_row_repeated_accumulate_strided(device, rng):
    V, D, stride, n = 5, 3, 4, 600
    idx = np.full(n, 2, np.int64)
    g = rng.standard_normal((n, D)).astype(np.float32)
    start = rng.standard_normal((V, stride)).astype(np.float32)
    gb, ib = device.upload(g), device.upload(idx)
    gw = device.upload(start)
    embedding_backward(device, gb, ib, gw, n, V, D, weight_stride=stride, accumulate=True)
    got = device.download(gw, np.float32, (V, stride))
    want = start.copy()
    want[2, :D] += g.astype(np.float64).sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[:, D:], start[:, D:])  # the stride gap is untouched


def test_bad_padding_idx(device):
    buf = device.allocator.alloc(64)
    with pytest.raises(ValueError):
        embedding_backward(device, buf, buf, buf, 1, 3, 1, padding_idx=3)


def test_invalid_params(device):
    from tvk_kernels import InvalidConfigError

    buf = device.allocator.alloc(256)
    with pytest.raises(InvalidConfigError):
        embedding_backward(device, buf, buf, buf, 4, 2, 1, strategy="sort", params=dict(SMALL_SORT, SORT_WG=48))
    with pytest.raises(InvalidConfigError):
        embedding_forward(device, buf, buf, buf, 4, 2, 1, params={"WG": 4096, "VEC": 1, "ITEMS": 1})


def test_long_runs_sum_in_parallel_chunks_with_identical_bits(device, rng):
    """Rows held by many positions (BERT's token types: one row everywhere) are summed in chunks of
    chunk_length(n) in parallel; runs of every length around the chunk's, next to each other, give the
    same bits on both strategies and the float64 sums within rounding."""
    from tvk_kernels.kernels.embedding import chunk_length

    n_target = 2500
    chunk = chunk_length(n_target)
    lengths = [1, chunk, chunk + 1, 3 * chunk + 5, 2, chunk - 1, 2 * chunk, 7, 4 * chunk + 1]
    idx = np.concatenate([np.full(k, row, np.int64) for row, k in enumerate(lengths)])
    idx = np.concatenate([idx, np.full(n_target - len(idx), len(lengths), np.int64)])  # one long run to finish
    rng.shuffle(idx)
    n, V, D = len(idx), len(lengths) + 1, 33
    assert chunk_length(n) == chunk
    g = rng.standard_normal((n, D)).astype(np.float32)
    gb, ib = device.upload(g), device.upload(idx)
    results = []
    for strategy, params in [("scan", None), ("sort", SMALL_SORT), ("sort", None)]:
        gw = device.allocator.alloc(4 * V * D)
        embedding_backward(device, gb, ib, gw, n, V, D, strategy=strategy, params=params)
        results.append(device.download(gw, np.float32, (V, D)))
    ref = np.zeros((V, D), np.float64)
    np.add.at(ref, idx, g.astype(np.float64))
    np.testing.assert_allclose(results[0], ref, rtol=1e-5, atol=1e-4)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])


def test_one_row_at_every_position(device, rng):
    """A token-type embedding: every position holds row 0, far more positions than a chunk."""
    n, V, D = 6000, 2, 16
    idx = np.zeros(n, np.int64)
    g = rng.standard_normal((n, D)).astype(np.float32)
    gw = device.allocator.alloc(4 * V * D)
    embedding_backward(device, device.upload(g), device.upload(idx), gw, n, V, D, strategy="sort")
    got = device.download(gw, np.float32, (V, D))
    np.testing.assert_allclose(got[0], g.astype(np.float64).sum(0), rtol=1e-5, atol=1e-3)
    assert not got[1].any()
