"""torchvk.compile.fusion: fused aten graphs give the CPU results with fewer kernel launches."""
import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import torchvk  # noqa: F401  (registers the tvk device)
from torchvk._storage import get_device
from torchvk.compile.fusion import MAX_EXPR, MAX_SCALARS, FusedElementwise, MatmulEpilogue, fuse
from tvk_kernels.kernels import elementwise as elementwise_kernels

aten = torch.ops.aten


def interpret(gm, *inputs):
    """What the compiled mode does: aten targets through the dispatcher, fused targets called directly."""
    env, it = {}, iter(inputs)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            env[n] = next(it)
        elif n.op == "call_function":
            env[n] = n.target(*fx.node.map_arg(n.args, env.__getitem__),
                              **fx.node.map_arg(n.kwargs, env.__getitem__))
        elif n.op == "output":
            return fx.node.map_arg(n.args[0], env.__getitem__)
        else:
            raise AssertionError(f"unexpected node {n.op}")


def launches(gm, inputs):
    """(outputs on CPU, kernel dispatches) of one interpreted run."""
    stream = get_device().stream
    before = stream.total_dispatches
    out = interpret(gm, *inputs)
    n = stream.total_dispatches - before
    return [o.cpu() for o in (out if isinstance(out, (tuple, list)) else [out])], n


def fused_targets(gm):
    return [n for n in gm.graph.nodes if isinstance(n.target, (FusedElementwise, MatmulEpilogue))]


def check(fn, *cpu_inputs, groups=None, epilogues=0, atol=1e-5, rtol=1e-4):
    """Fuse make_fx(fn); compare to fn on CPU and to the unfused graph on tvk; returns (gm, stats)."""
    outs = fn(*cpu_inputs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    plain = make_fx(fn)(*cpu_inputs)
    gm, stats = fuse(make_fx(fn)(*cpu_inputs))
    tvk = [t.to("tvk") for t in cpu_inputs]
    ref, n_plain = launches(plain, tvk)
    got, n_fused = launches(gm, tvk)
    for want, r, g in zip(outs, ref, got):
        torch.testing.assert_close(g, want, atol=atol, rtol=rtol)
        torch.testing.assert_close(g, r, atol=atol, rtol=rtol)
    for n in fused_targets(gm):
        assert len([a for a in n.args if isinstance(a, fx.Node)]) <= 3, n
    if groups is not None:
        assert stats["fused_groups"] == groups, (stats, gm.graph)
    assert stats["epilogues"] == epilogues, (stats, gm.graph)
    if stats["fused_groups"] or stats["epilogues"]:
        assert n_fused < n_plain, (n_fused, n_plain)
    # the recompiled module runs too (fused targets are plain callables in its code)
    direct = gm(*tvk)
    direct = direct if isinstance(direct, (tuple, list)) else [direct]
    for g, d in zip(got, direct):
        torch.testing.assert_close(d.cpu(), g)
    return gm, stats, n_plain, n_fused


def r(*shape):
    return torch.randn(*shape)


def test_relu_mul_add_is_one_launch():
    gm, stats, n_plain, n_fused = check(lambda x, y: torch.relu(x * 2 + y), r(4, 8), r(4, 8), groups=1)
    assert stats["fused_ops"] == 3
    assert (n_plain, n_fused) == (3, 1)
    (node,) = fused_targets(gm)
    assert repr(node.target) == "fused[mul,add,relu]"
    assert "fused" in gm.code


def test_three_inputs_one_group():
    _, stats, _, n_fused = check(lambda x, y, z: torch.sigmoid(x) * y - z, r(3, 5), r(3, 5), r(3, 5), groups=1)
    assert stats["fused_ops"] == 3 and n_fused == 1


def test_four_inputs_split_into_legal_groups():
    def fn(w, x, y, z):
        return torch.relu((w + x) * y - z).exp() * 0.5

    gm, stats, n_plain, n_fused = check(fn, r(2, 6), r(2, 6), r(2, 6), r(2, 6))
    # the best legal split: add alone, then one group of the other five ops over (add, y, z)
    assert stats == {"fused_groups": 1, "fused_ops": 5, "epilogues": 0, "bn_relu": 0, "cross_entropy_backward": 0}
    assert (n_plain, n_fused) == (6, 2)


def test_strided_operand():
    _, stats, _, n_fused = check(lambda x, y: torch.relu(x.t() * 2 + y), r(5, 3), r(3, 5), groups=1)
    assert n_fused == 1


def test_broadcast_operands():
    def fn(x, b, s):  # b*2 has b's shape: it stays outside the [4, 8] group
        return torch.tanh(x + b * 2) * s

    gm, stats, _, _ = check(fn, r(4, 8), r(8), r(4, 1), groups=1)
    assert stats["fused_ops"] == 3


def test_many_ops_and_scalars():
    def fn(x, y):
        a = torch.clamp(torch.rsub(x, 2.0).pow(3) / (y * y + 1), min=-3.0)
        b = F.gelu(x, approximate="tanh") + F.silu(y, ) * F.leaky_relu(x, 0.2)
        c = torch.clamp_max(torch.abs(y).sqrt().log() - x.neg(), 2.5)
        d = torch.maximum(torch.sigmoid(x), y).rsqrt().reciprocal().sub(x, alpha=0.5)
        e = torch.addcmul(x, y, F.gelu(x), value=0.25).square()
        return a, b, c, d, e

    gm, stats, _, _ = check(fn, r(3, 7), r(3, 7).abs() + 0.1, groups=5, atol=1e-4)
    assert stats["fused_ops"] >= 20


def test_backward_chain():
    def fn(g, x, y):
        t = aten.threshold_backward(g * 2, x, 0.0)
        s = aten.sigmoid_backward(t, torch.sigmoid(y))
        return aten.gelu_backward(s, x) + aten.tanh_backward(g, y)

    check(fn, r(5, 4), r(5, 4), r(5, 4), groups=1, atol=1e-5)


def test_relu_grad_from_autograd():
    def fn(x, w):
        x = x.detach().requires_grad_()
        y = torch.relu(x * w + 1)
        return torch.autograd.grad((y * y).sum(), x)

    gm, stats, _, _ = check(fn, r(16), r(16))
    assert stats["fused_groups"] >= 1


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "tanh"])
def test_addmm_epilogue(act):
    fn = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "tanh": torch.tanh}[act]
    gm, _, n_plain, n_fused = check(lambda x, w, b: fn(F.linear(x, w, b)), r(5, 6), r(3, 6), r(3),
                                    epilogues=1, atol=1e-5)
    (node,) = fused_targets(gm)
    assert node.target.activation == act and not any(n.target is aten.addmm.default for n in gm.graph.nodes)
    assert n_fused < n_plain


def test_addmm_with_two_users_is_kept():
    def fn(x, w, b):
        h = torch.addmm(b, x, w)
        return torch.relu(h), h

    gm, stats, _, _ = check(fn, r(4, 5), r(5, 3), r(3))
    assert stats["epilogues"] == 0


def test_graph_output_and_shared_nodes_are_not_swallowed():
    def fn(x, y):
        a = x * 2          # a graph output: not inside a group
        s = torch.exp(y)   # two users: not inside a group
        return a, torch.relu(a + s) - s

    gm, stats, _, _ = check(fn, r(3, 4), r(3, 4), groups=1)
    assert stats["fused_ops"] == 3  # add, relu, sub
    assert sum(n.target is aten.mul.Tensor for n in gm.graph.nodes) == 1
    assert sum(n.target is aten.exp.default for n in gm.graph.nodes) == 1


def test_in_place_write_blocks_moving_a_read():
    def fn(x, y):
        a = x * 2
        x.mul_(3)   # a must see x before this write
        return torch.relu(a + y), x

    cpu_in = [r(3, 4), r(3, 4)]
    gm, _ = fuse(make_fx(fn)(*[t.clone() for t in cpu_in]))
    want = fn(*[t.clone() for t in cpu_in])
    got = interpret(gm, *[t.to("tvk") for t in cpu_in])
    for w, g in zip(want, got):
        torch.testing.assert_close(g.cpu(), w)
    assert any(n.target is aten.mul.Tensor for n in gm.graph.nodes)


def test_int64_chain_is_left_alone():
    def fn(x, y):
        return torch.relu(x * 2 + y) - 1

    x, y = torch.randint(-5, 5, (3, 4)), torch.randint(-5, 5, (3, 4))
    gm, stats = fuse(make_fx(fn)(x, y))
    assert stats == {"fused_groups": 0, "fused_ops": 0, "epilogues": 0, "bn_relu": 0, "cross_entropy_backward": 0}
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == \
        [aten.mul.Tensor, aten.add.Tensor, aten.relu.default, aten.sub.Tensor]
    (out,) = [interpret(gm, x.to("tvk"), y.to("tvk"))]
    torch.testing.assert_close(out.cpu(), fn(x, y))


def test_mixed_dtype_boundary():
    def fn(x, m):  # a bool operand (where) ends the group; the float chain around it still fuses
        return torch.where(m, torch.exp(x) * 2, x).neg().relu()

    gm, stats, _, _ = check(fn, r(4, 4), r(4, 4) > 0)
    assert stats["fused_groups"] == 2
    assert any(n.target is aten.where.self for n in gm.graph.nodes)


def test_shared_inputs_deep_in_the_tree_fit_one_group():
    def fn(g, x, y):  # more than 3 distinct inputs half way up, 3 in all
        return (g * 2 + x).relu() * (torch.tanh(y) - g) + (x * y)

    _, stats, _, n_fused = check(fn, r(4, 3), r(4, 3), r(4, 3), groups=1)
    assert stats["fused_ops"] == 8 and n_fused == 1


def test_long_expressions_are_capped():
    def fn(x):
        for _ in range(14):  # relu repeats its operand: the text doubles per level
            x = torch.relu(x) - 0.1
        return x

    gm, stats, _, n_fused = check(fn, r(8))
    assert stats["fused_groups"] >= 2 and n_fused == stats["fused_groups"]
    assert all(len(elementwise_kernels.OPS[n.target.op].expr) <= MAX_EXPR for n in fused_targets(gm))


def test_scalars_per_group_are_capped():
    def fn(x):
        for k in range(12):  # two push-constant scalars per op pair: alpha and the operand
            x = (x + 0.5 * k) * 0.9
        return x

    gm, stats, _, _ = check(fn, r(2, 3))
    assert stats["fused_groups"] >= 2
    assert all(len(n.target.scalars) <= MAX_SCALARS for n in fused_targets(gm))


def test_cpu_scalar_tensor_operand():
    def fn(x, s):  # a 0-dim CPU tensor (a lifted constant) is uploaded by the fused call
        return torch.relu(x * s) + 1

    x, s = r(3, 2), torch.tensor(-2.0)
    gm, stats = fuse(make_fx(fn)(x, s))
    assert stats["fused_groups"] == 1
    torch.testing.assert_close(interpret(gm, x.to("tvk"), s).cpu(), fn(x, s))


def test_epilogue_with_a_strided_bias_runs_unfused():
    x, w, b = r(4, 5), r(5, 3), r(6)
    fn = MatmulEpilogue("relu", 0.5, aten.relu.default, {})
    got = fn(b.to("tvk")[::2], x.to("tvk"), w.to("tvk"))
    torch.testing.assert_close(got.cpu(), torch.relu(torch.addmm(b[::2], x, w, alpha=0.5)), atol=1e-5, rtol=1e-4)


def _conv_bn_relu_cnn():
    import torch.nn as nn

    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.Flatten(), nn.Linear(4 * 6 * 6, 5))


def test_batch_norm_relu_training_and_eval():
    """Conv-BN-ReLU trained with bn+relu fused, unfused and eager: same losses, grads and running
    stats; the forward has one kernel per bn+relu pair instead of two; eval graphs fuse too."""
    import copy

    import torchvk

    torch.manual_seed(0)
    eager = _conv_bn_relu_cnn().to("tvk")
    models = {"eager": eager, "fused": copy.deepcopy(eager), "plain": copy.deepcopy(eager)}
    runs = {"eager": eager, "fused": torchvk.compile(models["fused"]),
            "plain": torchvk.compile(models["plain"], fuse=False)}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1) for k, m in models.items()}
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(2, 3, 6, 6, generator=g), torch.randint(0, 5, (2,), generator=g)) for _ in range(3)]
    losses = {k: [] for k in models}
    for x, y in batches:
        for k in models:
            opts[k].zero_grad(set_to_none=True)
            loss = F.cross_entropy(runs[k](x.to("tvk")), y.to("tvk"))
            loss.backward()
            losses[k].append(loss.item())
            if k != "eager":
                for (name, p), q in zip(models[k].named_parameters(), eager.parameters()):
                    torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), atol=1e-5, rtol=1e-4, msg=name)
            opts[k].step()
    for k in ("fused", "plain"):
        assert losses[k] == pytest.approx(losses["eager"], rel=1e-5, abs=1e-6)
        for bn in (1, 4):
            for buf in ("running_mean", "running_var"):
                torch.testing.assert_close(getattr(models[k][bn], buf).cpu(), getattr(eager[bn], buf).cpu(),
                                           atol=1e-5, rtol=1e-4)
    (fused,), (plain,) = runs["fused"].compile_stats(), runs["plain"].compile_stats()
    assert fused["forward"]["fusion"]["bn_relu"] == 2
    assert fused["forward"]["kernels"] == plain["forward"]["kernels"] - 2, (fused, plain)
    # eval: _native_batch_norm_legit_no_training + relu fuse the same way (run twice: kernels are
    # counted by the replay recording)
    x = batches[0][0].to("tvk")
    for m in models.values():
        m.eval()
    with torch.no_grad():
        outs = {k: [runs[k](x).cpu() for _ in range(2)][-1] for k in models}
    torch.testing.assert_close(outs["fused"], outs["eager"], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(outs["plain"], outs["eager"], atol=1e-5, rtol=1e-4)
    stats = runs["fused"].compile_stats()[-1]
    assert stats["inference"]["fusion"]["bn_relu"] == 2
    assert stats["inference"]["kernels"] == runs["plain"].compile_stats()[-1]["inference"]["kernels"] - 2


@pytest.mark.parametrize("reduction,weighted,ignore", [("mean", False, False), ("mean", True, True),
                                                       ("sum", True, False), ("none", False, True)])
def test_cross_entropy_backward_is_one_kernel(reduction, weighted, ignore):
    """nll_loss_backward then log_softmax's backward, from make_fx of cross-entropy's gradient,
    become one kernel and match torch CPU (class weights, ignored rows, every reduction)."""
    g = torch.Generator().manual_seed(2)
    logits, target = torch.randn(6, 5, generator=g), torch.randint(0, 5, (6,), generator=g)
    if ignore:
        target[1] = -100
    weight = torch.rand(5, generator=g) + 0.5 if weighted else None

    def grad_of_cross_entropy(x, t, w):
        ls = torch.log_softmax(x, 1)
        loss, total = aten.nll_loss_forward(ls, t, w, {"none": 0, "mean": 1, "sum": 2}[reduction], -100)
        grad = torch.ones_like(loss)
        g_nll = aten.nll_loss_backward(grad, ls, t, w, {"none": 0, "mean": 1, "sum": 2}[reduction], -100, total)
        return aten._log_softmax_backward_data(g_nll, ls, 1, torch.float32)

    args = (logits, target, weight if weighted else torch.ones(5))
    gm, stats, n_plain, n_fused = check(grad_of_cross_entropy, *args)
    assert stats["cross_entropy_backward"] == 1
    assert n_fused < n_plain, (n_fused, n_plain)
    x = logits.clone().requires_grad_(True)
    F.cross_entropy(x, target, weight=args[2], reduction=reduction).backward(
        torch.ones(6) if reduction == "none" else None)
    got = gm(*[a.to("tvk") for a in args])
    torch.testing.assert_close(got.cpu(), x.grad, atol=1e-6, rtol=1e-5)


def test_compiled_model_with_loss_fuses_its_cross_entropy_backward():
    import copy

    import torchvk

    torch.manual_seed(0)
    eager = _conv_bn_relu_cnn().to("tvk")
    model = copy.deepcopy(eager)
    run = torchvk.compile(model, loss_fn=F.cross_entropy)
    x, y = torch.randn(3, 3, 6, 6).to("tvk"), torch.randint(0, 5, (3,)).to("tvk")
    for _ in range(2):
        for m in (eager, model):
            m.zero_grad(set_to_none=True)
        F.cross_entropy(eager(x), y).backward()
        run(x, y).backward()
        for (name, p), q in zip(model.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), atol=1e-5, rtol=1e-4, msg=name)
    assert run.compile_stats()[0]["backward"]["fusion"]["cross_entropy_backward"] == 1


def test_conv_relu_epilogue():
    def fn(x, w, b):
        return torch.relu(F.conv2d(x, w, b, padding=1)) * 2

    gm, stats, n_plain, n_fused = check(fn, r(2, 3, 8, 8), r(4, 3, 3, 3), r(4), epilogues=1)
    assert not any(n.target in (aten.convolution.default, aten.relu.default) for n in gm.graph.nodes)
    assert n_fused == n_plain - 1


def test_conv_with_two_users_keeps_its_relu():
    def fn(x, w):
        h = F.conv2d(x, w)
        return torch.relu(h), h

    gm, stats, _, _ = check(fn, r(2, 3, 6, 6), r(4, 3, 3, 3))
    assert stats["epilogues"] == 0 and any(n.target is aten.convolution.default for n in gm.graph.nodes)
