"""Shape, indexing and reduction-like ops (issue #15) against torch CPU: forward and backward,
odd shapes, negative dims, empty tensors; every op runs on Vulkan (no CPU fallback)."""
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional
import torchvk  # noqa: E402

NAN = float("nan")


def _flat(out):
    return [t for o in out for t in _flat(o)] if isinstance(out, (tuple, list)) else [out]


def _run(fn, inputs, device):
    xs = [x.detach().to(device).requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
          for x in inputs]
    out = fn(*xs)
    outs = _flat(out)
    floats = [o for o in outs if o.dtype.is_floating_point and o.requires_grad]
    grads = []
    if floats:
        loss = sum((o * torch.linspace(-1, 2, o.numel()).view(o.shape).to(device)).sum() for o in floats)
        leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
    return [o.detach().cpu() for o in outs], [g.cpu() if g is not None else None for g in grads]


def check(fn, *inputs):
    """fn on tvk equals fn on CPU, values and gradients (float inputs require grad)."""
    torchvk.reset_op_counts()
    got, got_grads = _run(fn, inputs, "tvk")
    assert not torchvk.op_counts()["cpu"], torchvk.op_counts()["cpu"]
    ref, ref_grads = _run(fn, inputs, "cpu")
    for g, r in zip(got + got_grads, ref + ref_grads):
        torch.testing.assert_close(g, r, equal_nan=True)


def on(x, values, dtype=torch.int64):
    """An index (or mask) tensor on x's device."""
    return torch.tensor(values, dtype=dtype, device=x.device)


def rand(*shape):
    return torch.randn(*shape).requires_grad_()


X = rand(3, 5)
B = rand(2, 3, 4)


@pytest.mark.parametrize("fn", [
    lambda x: torch.permute_copy(x, (2, 0, 1)), lambda x: torch.transpose_copy(x, -1, 0),
    lambda x: torch.narrow_copy(x, -1, 1, 2), lambda x: torch.diagonal_copy(x, 1, -1, -2),
    lambda x: torch.unfold_copy(x, -1, 2, 1), lambda x: torch.as_strided_copy(x, (2, 2), (3, 1), 1),
    lambda x: torch.expand_copy(x[:1], (3, 3, 4)), lambda x: torch.unsqueeze_copy(x, -1),
    lambda x: torch.squeeze_copy(x[:1], 0), lambda x: torch.view_copy(x, (4, -1)), torch.alias_copy,
    lambda x: torch.split_with_sizes_copy(x, [1, 3], -1), lambda x: torch.unbind_copy(x, 1),
    lambda x: torch.t_copy(x[0]),
], ids=lambda f: "")
def test_copy_of_view(fn):
    check(fn, B)


@pytest.mark.parametrize("fn, src", [
    (lambda x, s: torch.slice_scatter(x, s, -1, 1, 5, 2), rand(3, 2)),
    (lambda x, s: torch.select_scatter(x, s, -1, -1), rand(3)),
    (lambda x, s: torch.diagonal_scatter(x, s, 1), rand(3)),
    (lambda x, s: torch.as_strided_scatter(x, s, (2, 2), (1, 3), 2), rand(2, 2)),
])
def test_scatter_into_view(fn, src):
    check(fn, X, src)


@pytest.mark.parametrize("fn", [
    lambda x: torch.roll(x, (2, -7), (-1, 0)), lambda x: torch.roll(x, 4), lambda x: torch.roll(x[:, :0], 1, 1),
    torch.trace, torch.diag_embed, lambda x: torch.diag(x[0], -2), torch.diagflat,
    lambda x: torch.aminmax(x, dim=-1, keepdim=True), torch.aminmax,
    lambda x: torch.nansum(torch.where(x > 1, NAN, x), -1),
    lambda x: torch.vdot(x[0], x[1]), lambda x: torch.addmv(x[:, 0], x, x[0], beta=0.5, alpha=2),
    lambda x: torch.take(x, on(x, [[0, -1], [7, 7]])),
    lambda x: x.put(on(x, [1, -2, 1]), x[0, :3] * 3, accumulate=True),
    lambda x: x.index_add(-1, on(x, [4, 0, 4]), x[:, :3], alpha=2),
    lambda x: x.index_copy(0, on(x, [2, 0]), x[:2] * 2),
    lambda x: x.index_fill(-1, on(x, [0, -2]), 7.0),
    lambda x: x.scatter(0, on(x, [[2, 0, 1], [1, 1, 0]]), -1.5),
    lambda x: x.detach().scatter(0, on(x, [[2, 0, 1], [2, 2, 0]]), x.detach()[:2] * 2, reduce="multiply"),
    lambda x: x.detach().scatter(-1, on(x, [[4, 0, 4]]), 0.5, reduce="add"),
    lambda x: torch.kthvalue(x, 2, -1), lambda x: torch.median(x, 0, keepdim=True), torch.median,
    lambda x: torch.nanmedian(torch.where(x > 0.5, NAN, x), -1), lambda x: torch.cummax(x.round(), -1),
    lambda x: torch.mode(x.round(), -1),
    lambda x: torch.cummin(torch.where(x > 1, NAN, x), 0),
], ids=lambda f: "")
def test_rearrange_and_reduce(fn):
    check(fn, X)


def _histc_exact(values, bins, lo, hi):
    """CUDA's integer histc: min and max truncated to integers (the data's range when equal, widened by 1 each
    side when still equal), bin (v - lo) * bins // (hi - lo), max in the last bin, outsiders dropped."""
    lo, hi = int(lo), int(hi)
    if lo == hi and values:
        lo, hi = min(values), max(values)
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    counts = [0] * bins
    for v in values:
        if lo <= v <= hi:
            counts[min((v - lo) * bins // (hi - lo), bins - 1)] += 1
    return counts


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8])
def test_histc_of_integers_counts_as_cuda(dtype):
    """transformers' MoE layers (Mixtral, Qwen2-MoE) count tokens per expert with an int32 histc on any
    device but the CPU (whose torch has no integer histc): the counts, in the input's dtype, are exact."""
    values = torch.randint(0, 9, (61,)).tolist() + [0, 8, 7, 7]
    x = torch.tensor(values, dtype=dtype).to("tvk")
    for bins, lo, hi in ((8, 0, 7), (3, 0, 8), (5, 2, 6), (4, 0, 0), (7, 0.5, 0.9), (1, 3, 3)):
        got = torch.histc(x, bins=bins, min=lo, max=hi)
        assert got.dtype == dtype and got.device.type == "tvk"
        assert got.cpu().tolist() == _histc_exact(values, bins, lo, hi), (bins, lo, hi)
    same = torch.full((5,), 4, dtype=dtype).to("tvk")
    assert torch.histc(same, bins=2).cpu().tolist() == _histc_exact([4] * 5, 2, 0, 0)
    assert torch.histc(x[:0], bins=3).cpu().tolist() == [0, 0, 0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_histc_of_16_bit_floats_counts_their_float32_values(dtype):
    x = torch.randn(50).to(dtype)
    got = torch.histc(x.to("tvk"), 6, -1, 1)
    assert got.dtype == dtype
    assert torch.equal(got.cpu(), torch.histc(x.float(), 6, -1, 1).to(dtype))
    with pytest.raises(NotImplementedError, match="histc"):
        torch.histc(torch.ones(3, dtype=torch.bool).to("tvk"), 2)


def test_addbmm_equal_and_searches():
    check(lambda c, a, b: torch.addbmm(c, a, b, beta=0.5, alpha=-1), rand(3, 5), rand(2, 3, 4), rand(2, 4, 5))
    x = torch.randn(4, 3)
    assert torch.equal(x.to("tvk"), x.clone().to("tvk")) is True
    assert not torch.equal(x.to("tvk"), (x + 1).to("tvk")) and not torch.equal(x.to("tvk"), x[:2].to("tvk"))
    data = torch.randn(40)
    check(lambda x: (torch.histc(x, 7, -1, 1), torch.histc(x, 5), torch.histc(x[:0], 3)), data)
    check(lambda x: (torch.histogram(x, 6, density=True), torch.histogram(x[:0], 2, range=(1.0, 1.0))), data)
    check(lambda x, e: torch.histogram(x, e, weight=x.abs()), data, torch.tensor([-1.0, 0, 0.5, 2]))
    seq = torch.tensor([[0.0, 1, 1, 3], [-2, 0, 0, 5]])
    vals = torch.tensor([[1.0, 4, -3, NAN], [0, 5, 6, -0.0]])  # NaN goes last, as torch's binary search
    for right in (False, True):
        check(lambda s, v: torch.searchsorted(s, v, right=right), seq, vals)
        check(lambda s, v: torch.bucketize(v, s[0], right=right, out_int32=True), seq, vals)
        check(lambda s, v: torch.searchsorted(s[1], v[:, :0], right=right), seq, vals)  # no values
    shuffled = torch.tensor([3.0, -1, 2, 0])
    check(lambda s, v: torch.searchsorted(s, v, sorter=on(s, [1, 3, 2, 0]), side="right"), shuffled, vals)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    index = [[0, 2, 0, 1], [2, 2, 0, 2]]
    check(lambda x, s: x.scatter_reduce(-1, on(x, index), s, reduce, include_self=include_self), X[:2], rand(2, 4))
    check(lambda x, s: x.index_reduce(0, on(x, [2, 0, 2]), s, reduce if reduce != "sum" else "mean",
                                      include_self=include_self), X, rand(3, 5))


def test_data_dependent_sizes():
    x = torch.tensor([[0.0, 1.5, 0], [-2, 0, 3]]).requires_grad_()
    mask_values = [[True, False, True], [False, False, True]]

    def mask(x):
        return on(x, mask_values, torch.bool)

    check(torch.nonzero, x)
    check(torch.argwhere, x[:, :0])  # empty
    check(lambda x: torch.masked_select(x, mask(x)[0]), x)  # the mask broadcasts
    check(lambda x, s: x.masked_scatter(mask(x), s), x, rand(5))
    check(lambda x: x[mask(x)], x)
    check(lambda x: x[:, mask(x)[1]] * 2, x)
    check(lambda x: x[mask(x) & False], x)  # nothing selected
    check(lambda x: [torch.nonzero_static(x, size=n, fill_value=-7) for n in (0, 2, 5)], x)
    check(lambda x: torch.isin(x, x[0]), x)
    dup = torch.tensor([[3.0, 1, 3], [NAN, 1, 2]])
    check(lambda x: torch.unique(x, return_inverse=True, return_counts=True), dup)
    check(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True), dup)
    check(lambda x, v: x.index_fill(1, on(x, [2, 0, 2]), v), x, torch.tensor(5.0, requires_grad=True))

    def assign(x, v):
        y = x.clone()
        y[mask(x)] = v
        return y

    check(assign, x, rand(3))


def test_pixel_pool_and_fold():
    check(lambda x: F.pixel_shuffle(x, 2), rand(1, 8, 2, 3))
    check(lambda x: F.pixel_unshuffle(x, 2), rand(1, 2, 4, 6))
    check(lambda x: F.channel_shuffle(x, 3), rand(1, 6, 2, 2))
    check(lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True), rand(2, 5, 7))
    check(lambda x: F.adaptive_max_pool1d(x, 3), rand(1, 2, 7))
    check(lambda x: F.adaptive_max_pool3d(x, (2, 1, 3), return_indices=True), rand(1, 3, 3, 2, 5))
    check(lambda x: F.unfold(x, (2, 3), padding=1, stride=2), rand(1, 2, 5, 4))
    check(lambda x: F.fold(x, (4, 5), (2, 2)), rand(1, 8, 12))
    pooled, idx = F.max_pool2d(torch.randn(1, 2, 4, 6), 2, return_indices=True)
    check(lambda p: F.max_unpool2d(p, idx.to(p.device), 2), pooled.requires_grad_())


def test_bad_indices_raise():
    x = X.detach().to("tvk")
    with pytest.raises(IndexError, match="out of bounds"):
        torch.take(x, torch.tensor([15], device="tvk")).cpu()
    with pytest.raises(RuntimeError, match="out of bounds"):
        x.scatter_reduce(1, torch.tensor([[5]], device="tvk"), x, "amax").cpu()
    with pytest.raises(RuntimeError, match="at least as many elements"):
        x.masked_scatter(x > -100, torch.zeros(3, device="tvk")).cpu()
    with pytest.raises(IndexError, match="does not match the shape"):
        x[torch.ones(3, 4, dtype=torch.bool, device="tvk")]
    negative = torch.tensor([-1], device="tvk")  # torch raises where index_put would wrap it
    with pytest.raises(RuntimeError, match="out of bounds"):
        x.index_add(0, negative, x[:1]).cpu()
    with pytest.raises(IndexError, match="out of bounds"):
        x.index_copy(0, negative, x[:1]).cpu()
    with pytest.raises(IndexError, match="index out of range"):
        x.index_reduce(0, negative, x[:1], "amax").cpu()
    with pytest.raises(RuntimeError, match="invalid max index"):
        F.max_unpool2d(x.view(1, 1, 3, 5)[..., :2, :2], negative.view(1, 1, 1, 1).expand(1, 1, 2, 2), 2).cpu()
    torch.testing.assert_close(x.sum().cpu(), X.detach().sum())  # the runtime still works


def test_scatter_reduce_integers():
    x, src = torch.arange(10).view(2, 5), torch.tensor([[3, -4, 7], [1, 1, 9]])
    index = [[0, 4, 0], [2, 2, 2]]
    for reduce in ("sum", "prod", "amax", "amin"):
        for include_self in (True, False):
            check(lambda x, s: x.scatter_reduce(1, on(x, index), s, reduce, include_self=include_self), x, src)


def test_integer_accumulation_is_exact():
    x = torch.tensor([[2 ** 40 + 3, 5, -7], [1, 2 ** 53 + 1, 0]])  # int64 values float32 cannot hold
    check(lambda x: x.index_add(0, on(x, [1, 1, 0]), torch.cat([x, x[:1]]) * 3), x)
    check(lambda x: x.scatter_add(1, on(x, [[2, 2], [0, 2]]), x[:, :2]), x)
    check(lambda x: x.int().index_put((on(x, [1, -1]),), on(x, 9, torch.int32), accumulate=True), x % 1000)
