"""torch.optim on tvk: its default (foreach) path and fused=True run multi-tensor kernels and match torch CPU."""
import io

import pytest

torch = pytest.importorskip("torch")
torchvk = pytest.importorskip("torchvk")

STEPS = 3
CASES = [
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True)),
    (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1)),
    (torch.optim.Adam, dict(lr=1e-2, amsgrad=True, maximize=True)),
    (torch.optim.AdamW, dict(lr=1e-2)),
    (torch.optim.AdamW, dict(lr=1e-2, amsgrad=True, weight_decay=0.1)),
]
MODES = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def _step_pair(cls, kw, mode):
    """The same few steps on CPU (torch's for-loop path) and on tvk in `mode`: (cpu params, tvk params, opts)."""
    torch.manual_seed(0)
    ps = [torch.randn(n, requires_grad=True) for n in (5, 12, 1, 7)]
    pt = [p.detach().to("tvk").requires_grad_() for p in ps]
    oc, ot = cls(ps, **kw, foreach=False), cls(pt, **kw, **MODES[mode])
    torch.manual_seed(1)
    for _ in range(STEPS):
        grads = [torch.randn_like(p) for p in ps]
        for p, q, g in zip(ps, pt, grads):
            p.grad, q.grad = g, g.to("tvk")
        oc.step()
        ot.step()
    return ps, pt, oc, ot


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("cls,kw", CASES, ids=lambda x: x.__name__ if isinstance(x, type) else "-".join(x))
def test_matches_cpu(cls, kw, mode):
    ps, pt, oc, ot = _step_pair(cls, kw, mode)
    for p, q in zip(ps, pt):
        _close(q, p)
        for name, v in oc.state[p].items():
            _close(ot.state[q][name], v)


@pytest.mark.parametrize("cls,kw", [
    (torch.optim.Adagrad, dict(lr=0.1, weight_decay=0.01)),
    (torch.optim.RMSprop, dict(lr=1e-2, momentum=0.9, centered=True, weight_decay=0.01)),
], ids=["Adagrad", "RMSprop"])
def test_other_optimizers_foreach_match_cpu(cls, kw):
    torchvk.reset_op_counts()
    ps, pt, oc, ot = _step_pair(cls, kw, "default")
    assert any("_foreach_" in op for op in torchvk.op_counts()["vulkan"])
    for p, q in zip(ps, pt):
        _close(q, p)


def _dispatches(t):
    return t._tvk.device.stream.total_dispatches


@pytest.mark.parametrize("cls,kw,mode,launches", [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9), "default", 3),  # mul_, add_ (buffers), add_ (params)
    (torch.optim.Adam, dict(lr=1e-2), "default", 7),
    (torch.optim.AdamW, dict(lr=1e-2), "fused", 2),  # _foreach_add_ (steps), _fused_adamw_
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9), "fused", 1),
])
def test_one_launch_per_op_for_all_parameters(cls, kw, mode, launches):
    """The default path is torch's foreach path: a few ops per step whatever the parameter count, each one
    kernel for all parameters, nothing on the CPU; fused=True is one kernel (plus the step counts)."""
    pt = [torch.randn(n, device="tvk", requires_grad=True) for n in (3, 9, 4, 2, 8, 5, 6, 1)]
    opt = cls(pt, **kw, **MODES[mode])
    for p in pt:
        p.grad = torch.randn_like(p)
    opt.step()  # the first step makes the state
    torchvk.synchronize()
    torchvk.reset_op_counts()
    before = _dispatches(pt[0])
    opt.step()
    counts = torchvk.op_counts()
    assert counts["cpu"] == {}
    assert all("_foreach_" in op or "_fused_" in op for op in counts["vulkan"]), counts["vulkan"]
    assert sum(counts["vulkan"].values()) == launches
    assert _dispatches(pt[0]) - before == launches


@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm(norm_type):
    torch.manual_seed(0)
    ps = [torch.randn(n, requires_grad=True) for n in (5, 300, 1)]
    pt = [p.detach().to("tvk").requires_grad_() for p in ps]
    for p, q in zip(ps, pt):
        p.grad = torch.randn_like(p) * 3
        q.grad = p.grad.to("tvk")
    torchvk.reset_op_counts()
    norm_t = torch.nn.utils.clip_grad_norm_(pt, 1.5, norm_type)
    norm_c = torch.nn.utils.clip_grad_norm_(ps, 1.5, norm_type, foreach=False)
    counts = torchvk.op_counts()
    assert counts["vulkan"]["aten._foreach_norm.Scalar"] == counts["vulkan"]["aten._foreach_mul_.Tensor"] == 1
    _close(norm_t, norm_c)
    for p, q in zip(ps, pt):
        _close(q.grad, p.grad)


@pytest.mark.parametrize("mode", ["default", "fused"])
def test_state_dict_round_trip(mode):
    ps, pt, oc, ot = _step_pair(torch.optim.Adam, dict(lr=1e-2, amsgrad=True), mode)
    step = ot.state[pt[0]]["step"]
    assert step.device.type == ("tvk" if mode == "fused" else "cpu")  # torch's rule: on the device only if fused
    buf = io.BytesIO()
    torch.save(ot.state_dict(), buf)
    copies = []
    for map_location in (None, "cpu"):  # as saved (tvk state), and loaded onto the CPU first
        buf.seek(0)
        params = [q.detach().clone().requires_grad_() for q in pt]
        opt = torch.optim.Adam(params, lr=1e-2, amsgrad=True, **MODES[mode])
        opt.load_state_dict(torch.load(buf, map_location=map_location))
        for q in params:
            assert opt.state[q]["exp_avg"].device.type == "tvk"
            assert opt.state[q]["step"].device.type == step.device.type
        copies.append((params, opt))
    grads = [torch.randn_like(p) for p in ps]
    for p, q, g in zip(ps, pt, grads):
        p.grad, q.grad = g, g.to("tvk")
    for params, opt in copies:
        for q, g in zip(params, grads):
            q.grad = g.to("tvk")
    for opt in [oc, ot] + [opt for _, opt in copies]:
        opt.step()
    for i, p in enumerate(ps):
        for q in [pt[i]] + [params[i] for params, _ in copies]:
            _close(q, p)


@pytest.mark.parametrize("op", ["adam", "adamw", "sgd"])
@pytest.mark.parametrize("found_inf", [0.0, 1.0])
def test_fused_amp_arguments(op, found_inf):
    """grad_scale divides the grads (the unscaled grads are stored back), found_inf=1 skips the step,
    lr may be a tensor: as torch's CPU fused kernels do."""
    torch.manual_seed(0)
    sizes = (4, 9)

    def lists(device):
        torch.manual_seed(0)
        n = 5 if op != "sgd" else 3
        return [[torch.randn(s).abs().to(device) for s in sizes] for _ in range(n)]

    out = {}
    for device in ("cpu", "tvk"):
        ls = lists(device)
        scale = torch.tensor(4.0, device=device)
        inf = torch.tensor(found_inf, device=device)
        lr = torch.tensor(0.05, device=device)
        if op == "sgd":
            torch._fused_sgd_(*ls, weight_decay=0.01, momentum=0.9, lr=lr, dampening=0.0, nesterov=True,
                              maximize=False, is_first_step=False, grad_scale=scale, found_inf=inf)
        else:
            steps = [torch.tensor(2.0, device=device) for _ in sizes]
            fn = torch._fused_adam_ if op == "adam" else torch._fused_adamw_
            fn(*ls, steps, lr=lr, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=True, maximize=True,
               grad_scale=scale, found_inf=inf)
        out[device] = ls
    for lc, lt in zip(out["cpu"], out["tvk"]):
        for c, t in zip(lc, lt):
            _close(t, c)


FOREACH_CALLS = {
    "add_scalar": lambda xs, ys, zs: torch._foreach_add(xs, 0.5),
    "sub_list_alpha": lambda xs, ys, zs: torch._foreach_sub(xs, ys, alpha=2.0),
    "mul_scalarlist": lambda xs, ys, zs: torch._foreach_mul(xs, [1.5, -2.0, 3.0]),
    "div_list_": lambda xs, ys, zs: torch._foreach_div_(xs, ys),
    "mul_tensor_": lambda xs, ys, zs: torch._foreach_mul_(xs, zs[1].reshape([])),
    "add_tensor_alpha": lambda xs, ys, zs: torch._foreach_add(xs, zs[1].reshape([]), alpha=-1.5),
    "lerp_scalar_": lambda xs, ys, zs: torch._foreach_lerp_(xs, ys, 0.7),
    "addcmul_tensor": lambda xs, ys, zs: torch._foreach_addcmul(xs, ys, zs, torch.tensor([0.5, 1.0, -2.0])),
    "addcdiv_scalarlist_": lambda xs, ys, zs: torch._foreach_addcdiv_(xs, ys, zs, [0.1, 0.2, 0.3]),
    "maximum_": lambda xs, ys, zs: torch._foreach_maximum_(xs, ys),
    "clamp_min": lambda xs, ys, zs: torch._foreach_clamp_min(xs, 0.1),
    "clamp_max_": lambda xs, ys, zs: torch._foreach_clamp_max_(xs, 0.2),
    "neg": lambda xs, ys, zs: torch._foreach_neg(xs),
    "sqrt_": lambda xs, ys, zs: torch._foreach_sqrt_(zs),
    "reciprocal": lambda xs, ys, zs: torch._foreach_reciprocal(zs),
    "zero_": lambda xs, ys, zs: torch._foreach_zero_(xs),
    "copy_": lambda xs, ys, zs: torch._foreach_copy_(xs, ys),
    "norm": lambda xs, ys, zs: torch._foreach_norm(xs),
    "norm_inf": lambda xs, ys, zs: torch._foreach_norm(ys, float("inf")),
}


@pytest.mark.parametrize("layout", ["contiguous", "mixed"])
@pytest.mark.parametrize("name", list(FOREACH_CALLS))
def test_foreach_ops(name, layout):
    """Each op as torch CPU computes it; "mixed" (xs[0] transposed, its partners not) takes the per-tensor path."""
    def make(device):
        torch.manual_seed(0)
        shapes = [(3, 4), (1,), (2, 5)]
        xs = [torch.randn(s) for s in shapes]
        ys = [torch.randn(s) for s in shapes]
        zs = [torch.rand(s) + 0.5 for s in shapes]
        out = [[t.to(device) for t in ts] for ts in (xs, ys, zs)]
        if layout == "mixed":  # a transposed view: dense, but with other strides than its partners
            out[0][0] = out[0][0].t().contiguous().t()
        return out

    res = {}
    for device in ("cpu", "tvk"):
        xs, ys, zs = make(device)
        r = FOREACH_CALLS[name](xs, ys, zs)
        res[device] = list(r if r is not None else []) + xs + ys + zs
    for c, t in zip(res["cpu"], res["tvk"]):
        _close(t, c)


def test_foreach_is_one_dispatch():
    xs = [torch.randn(n, device="tvk") for n in (3, 7, 2, 9, 1)]
    ys = [x.abs() + 1 for x in xs]
    torchvk.synchronize()
    before = _dispatches(xs[0])
    torch._foreach_addcdiv_(xs, xs, ys, [0.1, 0.2, 0.3, 0.4, 0.5])
    assert _dispatches(xs[0]) - before == 1
    torch._foreach_norm(xs)
    assert _dispatches(xs[0]) - before == 3  # chunk partials, then one reduction per tensor


def test_lists_reading_what_another_position_writes_run_in_order():
    """_foreach_add_([a, b], [b, a]): one dispatch would race (b read while written); torch runs them in order."""
    a, b = torch.randn(6), torch.randn(6)
    at, bt = a.to("tvk"), b.to("tvk")
    torchvk.synchronize()
    before = _dispatches(at)
    torch._foreach_add_([at, bt], [bt, at])
    assert _dispatches(at) - before == 2
    torch._foreach_add_([a, b], [b, a])
    _close(at, a)
    _close(bt, b)


def test_unsupported_calls_raise():
    xs = [torch.randn(3, device="tvk").half()]
    with pytest.raises(NotImplementedError, match="fused=True"):
        torch._fused_adam_(xs, xs, xs, xs, [], [torch.tensor(1.0, device="tvk")], lr=0.1, beta1=0.9, beta2=0.9,
                           weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    with pytest.raises(NotImplementedError, match="_foreach_norm"):
        torch._foreach_norm([torch.randn(3, device="tvk")], 3)
    x = torch.randn(3, device="tvk")
    _close(torch._foreach_add([x], 1.0)[0], x.cpu() + 1)  # the runtime stays usable


@pytest.mark.parametrize("call", [
    lambda ts: torch._foreach_exp(ts),
    lambda ts: torch._foreach_log1p(ts),
    lambda ts: torch._foreach_pow(2.0, ts),
    lambda ts: torch._foreach_pow(ts, ts),
    lambda ts: torch._foreach_max(ts),
    lambda ts: torch._foreach_addcmul(ts, ts, ts[::-1], torch.tensor([1.0, -2.0, 0.5])),
    lambda ts: torch._foreach_sigmoid_(ts) or ts,
    lambda ts: torch._foreach_zero_(ts) or ts,
], ids=["exp", "log1p", "pow_scalar_and_tensor", "pow_list", "max", "addcmul_cpu_scalars", "sigmoid_", "zero_"])
def test_foreach_ops_without_a_multi_tensor_kernel_run_per_tensor(call):
    """Every `_foreach_*` op runs, one op per tensor where no multi-tensor kernel takes it."""
    cpu = [torch.rand(4) + 0.5 for _ in range(3)]
    tvk = [t.to("tvk") for t in cpu]
    torchvk.reset_op_counts()
    got, want = call(tvk), call(cpu)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-6)
    assert torchvk.op_counts()["cpu"] == {}
