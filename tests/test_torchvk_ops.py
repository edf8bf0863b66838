"""Each implemented op, forward and backward, against torch CPU autograd; contiguous and
non-contiguous inputs, odd sizes."""
import pytest
import torch
import torch.nn.functional as F

import torchvk

torch.manual_seed(0)


def _make(spec, noncontig):
    """spec: shape tuple (float, requires grad), or a callable returning a CPU tensor (used as is)."""
    if callable(spec):
        return spec(), False
    if noncontig and len(spec) >= 1:
        base = torch.randn(*spec[:-1], spec[-1] * 2)
        return base[..., ::2], True
    return torch.randn(spec), True


def check(fn, *specs, atol=1e-4, rtol=1e-4, noncontig=True, grad=True):
    for nc in ([False, True] if noncontig else [False]):
        torch.manual_seed(1)
        made = [_make(s, nc) for s in specs]
        cpu_in, tvk_in = [], []
        for t, diff in made:
            c = t.detach().clone().requires_grad_(grad and diff and t.is_floating_point())
            if nc and diff:   # the same strided view on the device
                base = t._base if t._base is not None else t
                v = base.detach().to("tvk").as_strided(t.shape, t.stride(), t.storage_offset())
                assert not v.is_contiguous() or t.is_contiguous()
            else:
                v = t.detach().to("tvk")
            v.requires_grad_(c.requires_grad)
            cpu_in.append(c)
            tvk_in.append(v)
        out_c = fn(*cpu_in)
        out_t = fn(*tvk_in)
        outs_c = out_c if isinstance(out_c, (tuple, list)) else (out_c,)
        outs_t = out_t if isinstance(out_t, (tuple, list)) else (out_t,)
        for a, b in zip(outs_c, outs_t):
            assert b.device.type == "tvk"
            assert a.shape == b.shape and a.dtype == b.dtype
            torch.testing.assert_close(b.cpu(), a.detach(), atol=atol, rtol=rtol, equal_nan=True)
        if not any(c.requires_grad for c in cpu_in):
            continue
        diff_outs = [(a, b) for a, b in zip(outs_c, outs_t) if a.requires_grad]
        if not diff_outs:
            continue
        loss_c, loss_t = 0, 0
        for a, b in diff_outs:
            g = torch.randn(a.shape)
            loss_c = loss_c + (a * g).sum()
            loss_t = loss_t + (b * g.to("tvk")).sum()
        gc = torch.autograd.grad(loss_c, [c for c in cpu_in if c.requires_grad], allow_unused=True)
        gt = torch.autograd.grad(loss_t, [t for t in tvk_in if t.requires_grad], allow_unused=True)
        for a, b in zip(gc, gt):
            if a is None:
                assert b is None
                continue
            torch.testing.assert_close(b.cpu(), a, atol=atol * 10, rtol=rtol * 10)


def _idx(n, high):
    return lambda: torch.randint(0, high, (n,))


POINTWISE = {
    "add": (lambda a, b: a + b, (5, 7), (7,)),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=-0.5), (5, 7), (5, 7)),
    "sub_scalar": (lambda a: 3 - a, (5, 7)),
    "mul": (lambda a, b: a * b, (3, 1, 7), (5, 7)),
    "div": (lambda a, b: a / (b.abs() + 0.5), (5, 7), (5, 1)),
    "maximum": (lambda a, b: torch.maximum(a, b), (5, 7), (5, 7)),
    "pow": (lambda a: a.abs().pow(1.7), (5, 7)),
    "square": (lambda a: a ** 2, (6, 5)),
    "exp": (torch.exp, (5, 7)),
    "log": (lambda a: torch.log(a.abs() + 0.1), (5, 7)),
    "sqrt": (lambda a: (a.abs() + 0.1).sqrt(), (5, 7)),
    "rsqrt": (lambda a: (a.abs() + 0.5).rsqrt(), (5, 7)),
    "neg_abs": (lambda a: -a.abs(), (5, 7)),
    "relu": (F.relu, (5, 7)),
    "gelu": (F.gelu, (5, 7)),
    "gelu_tanh": (lambda a: F.gelu(a, approximate="tanh"), (5, 7)),
    "silu": (F.silu, (5, 7)),
    "sigmoid": (torch.sigmoid, (5, 7)),
    "tanh": (torch.tanh, (5, 7)),
    "leaky_relu": (lambda a: F.leaky_relu(a, 0.1), (5, 7)),
    "clamp": (lambda a: a.clamp(-0.5, 0.7), (5, 7)),
    "hardtanh": (F.hardtanh, (5, 7)),
    "where": (lambda a, b: torch.where(a > 0, a, b), (5, 7), (7,)),
    "masked_fill": (lambda a: a.masked_fill(a > 0.3, -1e9), (5, 7)),
    "addcmul": (lambda a, b, c: torch.addcmul(a, b, c, value=0.5), (5, 7), (5, 7), (7,)),
    "lerp": (lambda a, b: torch.lerp(a, b, 0.3), (5, 7), (5, 7)),
    "compare": (lambda a, b: ((a > b) | (a < -1)) & ~(a == b), (5, 7), (5, 7)),
    "tril": (lambda a: a.tril(), (7, 7)),
    "triu": (lambda a: a.triu(1), (2, 5, 7)),
    "tril_bool": (lambda m: m.tril(-1), lambda: torch.rand(5, 6) > 0.5),
    "isnan_isinf": (lambda a: torch.isnan(a.log()) | torch.isinf(1 / (a > 0.5).float()), (5, 7)),
    "softmax": (lambda a: F.softmax(a, -1), (5, 7)),
    "softmax_dim0": (lambda a: F.softmax(a, 0), (5, 7)),
    "log_softmax": (lambda a: F.log_softmax(a, -1), (5, 7)),
}


@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pointwise_and_softmax(name):
    fn, *specs = POINTWISE[name]
    check(fn, *specs)


def test_int_and_bool_ops():
    a = torch.randint(-5, 5, (7,))
    b = torch.randint(1, 5, (7,))
    ta, tb = a.to("tvk"), b.to("tvk")
    assert torch.equal((ta + tb).cpu(), a + b)
    assert torch.equal((ta * 3).cpu(), a * 3)
    assert torch.equal((ta / tb).cpu(), a / b)
    assert torch.equal((ta == tb).cpu(), a == b)
    assert torch.equal((ta > 0).sum().cpu(), (a > 0).sum())
    assert torch.equal(ta.max().cpu(), a.max())
    m = ta > 0
    assert torch.equal((m & (tb > 2)).cpu(), (a > 0) & (b > 2))
    assert torch.equal(m.logical_not().cpu(), ~(a > 0))


MATMUL = {
    "mm": (lambda a, b: a @ b, (7, 5), (5, 3)),
    "mm_transposed": (lambda a, b: a @ b.t(), (7, 5), (3, 5)),
    "bmm": (torch.bmm, (2, 7, 5), (2, 5, 3)),
    "matmul_broadcast": (torch.matmul, (2, 7, 5), (5, 3)),
    "linear": (F.linear, (7, 5), (3, 5), (3,)),
    "linear_3d": (F.linear, (2, 7, 5), (3, 5), (3,)),
    "addmm_beta": (lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), (7, 3), (7, 5), (5, 3)),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5), (2, 7, 3), (2, 7, 5), (2, 5, 3)),
    # a 1-D operand: torch drops its dim from the result again (an in-place squeeze_)
    "matmul_vec_mat": (torch.matmul, (5,), (5, 3)),
    "matmul_mat_vec": (torch.matmul, (7, 5), (5,)),
    "matmul_vec_vec": (torch.matmul, (5,), (5,)),
    "matmul_vec_batched": (torch.matmul, (5,), (2, 5, 3)),
    "rmatmul_vec": (lambda m, v: m.__rmatmul__(v), (5, 3), (5,)),
}


@pytest.mark.parametrize("name", sorted(MATMUL))
def test_matmul(name):
    fn, *specs = MATMUL[name]
    check(fn, *specs)


REDUCTIONS = {
    "sum": (lambda a: a.sum(), (5, 7)),
    "sum_dim": (lambda a: a.sum(1, keepdim=True), (3, 5, 7)),
    "sum_dims": (lambda a: a.sum((0, 2)), (3, 5, 7)),
    "mean": (lambda a: a.mean(-1), (5, 7)),
    "amax": (lambda a: a.amax(0), (5, 7)),
    "max_dim": (lambda a: a.max(1), (5, 7)),
    "min_dim": (lambda a: a.min(0).values, (5, 7)),
    "max_all": (lambda a: a.max(), (5, 7)),
    "max_dim_0d": (lambda a: a.max(0), ()),  # OpInfo's max/min reduction_with_dim samples
    "min_dim_0d_keepdim": (lambda a: a.min(0, keepdim=True), ()),
    "empty_any_all_prod": (lambda a: ((a > 0).any(), (a > 0).all(0), a.detach().prod(0), a.detach().prod()), (0, 3)),
    "argmax": (lambda a: a.argmax(1), (5, 7)),
    "var": (lambda a: a.var(1), (5, 7)),
    "std": (lambda a: a.std(), (5, 7)),
    "norm": (lambda a: a.norm(), (5, 7)),
    "logsumexp": (lambda a: a.logsumexp(1), (5, 7)),
    "cat": (lambda a, b: torch.cat([a, b], 1), (5, 7), (5, 3)),
    "stack": (lambda a, b: torch.stack([a, b], 1), (5, 7), (5, 7)),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions(name):
    fn, *specs = REDUCTIONS[name]
    check(fn, *specs)


NN = {
    "cross_entropy": (F.cross_entropy, (9, 7), _idx(9, 7)),
    "cross_entropy_sum": (lambda a, t: F.cross_entropy(a, t, reduction="sum"), (9, 7), _idx(9, 7)),
    "cross_entropy_none": (lambda a, t: F.cross_entropy(a, t, reduction="none"), (9, 7), _idx(9, 7)),
    "nll_loss": (lambda a, t: F.nll_loss(F.log_softmax(a, 1), t), (9, 7), _idx(9, 7)),
    "mse_loss": (F.mse_loss, (5, 7), (5, 7)),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (7,), w, b), (5, 7), (7,), (7,)),
    "layer_norm_plain": (lambda a: F.layer_norm(a, (3, 7)), (2, 3, 7)),
    "batch_norm_train": (lambda a, w, b: F.batch_norm(a, None, None, w, b, training=True), (6, 3, 5), (3,), (3,)),
    "batch_norm_2d": (lambda a: F.batch_norm(a, None, None, training=True), (4, 3, 5, 5)),
    "embedding": (lambda i, w: F.embedding(i, w), lambda: torch.randint(0, 11, (3, 5)), (11, 7)),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, padding=1), (2, 3, 7, 7), (4, 3, 3, 3), (4,)),
    "conv2d_stride_groups": (lambda x, w: F.conv2d(x, w, stride=2, groups=2), (2, 4, 9, 9), (6, 2, 3, 3)),
    "conv1d": (lambda x, w: F.conv1d(x, w, padding=2), (2, 3, 11), (4, 3, 5)),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), (2, 3, 7, 7)),
    "max_pool2d_overlap": (lambda x: F.max_pool2d(x, 3, 2, 1), (2, 3, 9, 9)),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1), (2, 3, 9, 9)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), (2, 3, 7, 7)),
    "adaptive_avg_pool2d_1": (lambda x: F.adaptive_avg_pool2d(x, 1), (2, 3, 7, 7)),
    "sdpa_causal": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    (2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4)),
    "attention": (lambda q, k, v: torch.softmax((q @ k.transpose(-1, -2)).masked_fill(
        torch.ones(5, 5, dtype=torch.bool).triu(1).to(q.device), float("-inf")) / 2, -1) @ v,
        (2, 5, 4), (2, 5, 4), (2, 5, 4)),
}


@pytest.mark.parametrize("name", sorted(NN))
def test_nn_ops(name):
    fn, *specs = NN[name]
    check(fn, *specs, atol=2e-4, rtol=2e-4)


def test_batch_norm_running_stats_and_eval():
    x = torch.randn(6, 3, 4)
    bn_c = torch.nn.BatchNorm1d(3)
    bn_t = torch.nn.BatchNorm1d(3).to("tvk")
    xt = x.to("tvk")
    for _ in range(2):
        yc, yt = bn_c(x), bn_t(xt)
    torch.testing.assert_close(yt.cpu(), yc.detach(), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(bn_t.running_mean.cpu(), bn_c.running_mean, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bn_t.running_var.cpu(), bn_c.running_var, atol=1e-5, rtol=1e-5)
    bn_c.eval(), bn_t.eval()
    torch.testing.assert_close(bn_t(xt).cpu(), bn_c(x).detach(), atol=1e-4, rtol=1e-4)


def test_dropout():
    torch.manual_seed(0)
    x = torch.ones(2000, device="tvk", requires_grad=True)
    y = F.dropout(x, 0.25)
    kept = (y.cpu() != 0).float().mean().item()
    assert abs(kept - 0.75) < 0.05
    assert torch.allclose(y.cpu()[y.cpu() != 0], torch.full((1,), 1 / 0.75))
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), y.detach().cpu())
    assert torch.equal(F.dropout(x, 0.25, training=False).cpu(), x.detach().cpu())


def test_foreach_and_clip_grad_norm():
    ps_c = [torch.randn(5, 3, requires_grad=True), torch.randn(7, requires_grad=True)]
    ps_t = [p.detach().to("tvk").requires_grad_() for p in ps_c]
    for ps in (ps_c, ps_t):
        (ps[0].sum() * 3 + (ps[1] ** 2).sum()).backward()
    n_c = torch.nn.utils.clip_grad_norm_(ps_c, 1.0)
    n_t = torch.nn.utils.clip_grad_norm_(ps_t, 1.0)
    torch.testing.assert_close(n_t.cpu(), n_c, atol=1e-5, rtol=1e-5)
    for a, b in zip(ps_c, ps_t):
        torch.testing.assert_close(b.grad.cpu(), a.grad, atol=1e-5, rtol=1e-5)
    xs = [p.detach().to("tvk") for p in ps_c]
    torch._foreach_mul_(xs, 2.0)
    torch._foreach_add_(xs, xs, alpha=0.5)
    torch._foreach_addcdiv_(xs, xs, [x.abs() + 1 for x in xs], value=0.1)
    ref = [p.detach() * 2 for p in ps_c]
    ref = [r + 0.5 * r for r in ref]
    ref = [r + 0.1 * r / (r.abs() + 1) for r in ref]
    for a, b in zip(ref, xs):
        torch.testing.assert_close(b.cpu(), a, atol=1e-5, rtol=1e-5)
    norms = torch._foreach_norm(xs)
    for a, b in zip(ref, norms):
        torch.testing.assert_close(b.cpu(), a.norm(), atol=1e-5, rtol=1e-5)


def test_inplace_ops_and_views_autograd():
    x = torch.randn(5, 7)
    xt = x.to("tvk")
    for t in (x, xt):
        t.mul_(2).add_(1).clamp_(-1, 2)
        t[:, 1:3].zero_()
        t.t()[0].fill_(5)
    assert torch.equal(xt.cpu(), x)
    a = torch.randn(4, 6, requires_grad=True)
    at = a.detach().to("tvk").requires_grad_()
    for t in (a, at):
        (t[1:, ::2].sum() + t.t()[2].pow(2).sum() + t.reshape(3, 8)[1].exp().sum()).backward()
    torch.testing.assert_close(at.grad.cpu(), a.grad, atol=1e-5, rtol=1e-5)


def test_inplace_view_ops_change_geometry():
    """squeeze_, unsqueeze_, t_, transpose_ give self the view's shape and strides (no data moves)."""
    for op in (lambda t: t.squeeze_(0), lambda t: t.unsqueeze_(1), lambda t: t.t_(), lambda t: t.transpose_(0, 1)):
        x = torch.randn(1, 4)
        xt = x.to("tvk")
        assert op(xt) is xt
        op(x)
        assert xt.shape == x.shape and xt.stride() == x.stride()
        assert torch.equal(xt.cpu(), x)


def test_dropins_accept_cpu_and_tvk():
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    r = torchvk.ops.matmul(a, b)
    assert r.device.type == "cpu"
    torch.testing.assert_close(r, a @ b, atol=1e-5, rtol=1e-5)
    assert torchvk.ops.matmul(a[0], b).shape == (4,)
    rt = torchvk.ops.matmul(a.to("tvk"), b.to("tvk"))
    assert rt.device.type == "tvk"
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    torch.testing.assert_close(torchvk.ops.conv2d(x, w, padding=1), F.conv2d(x, w, padding=1), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torchvk.ops.softmax(a, dim=1), F.softmax(a, 1), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(torchvk.ops.log_softmax(a, dim=0), F.log_softmax(a, 0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torchvk.ops.sum(a, 1), a.sum(1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torchvk.ops.add(a, 1.5), a + 1.5)
    leaf = torch.randn(3, 3, requires_grad=True)   # gradients flow back to CPU leaves
    torchvk.ops.matmul(leaf, leaf).sum().backward()
    ref = torch.autograd.grad((leaf @ leaf).sum(), leaf)[0]
    torch.testing.assert_close(leaf.grad, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("call", [
    lambda x, out: torch.mul(x, 2, out=out),          # mul.out computes mul.Tensor (no mul.default)
    lambda x, out: torch.add(x, x, alpha=3, out=out),
    lambda x, out: torch.sum(x.view(2, 2), 1, out=out[:2]),  # sum.IntList_out computes sum.dim_IntList
])
def test_out_variants_reach_their_functional_overload(call):
    x = torch.randn(4)
    out_cpu, out_tvk = torch.zeros(4), torch.zeros(4).to("tvk")
    call(x, out_cpu)
    call(x.to("tvk"), out_tvk)
    torch.testing.assert_close(out_tvk.cpu(), out_cpu)
