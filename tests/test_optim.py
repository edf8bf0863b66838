"""Fused and per-tensor SGD / Adam / AdamW steps and gradient norms vs torch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tvk_kernels.kernels import optim as optim_kernels  # noqa: E402

SIZES = [1, 7, 1000, 33]
STEPS = 5
SMALL_CHUNKS = {"WG": 32, "CHUNK": 64}  # a 1000-element tensor spans 16 workgroups


def _state(device, sizes, count):
    return [[device.upload(np.zeros(n, np.float32)) for _ in range(count)] for n in sizes]


def _check_params(device, pbufs, ps, sizes):
    for b, p, n in zip(pbufs, ps, sizes):
        np.testing.assert_allclose(device.download(b, np.float32, (n,)), p.detach().numpy(), rtol=1e-5, atol=1e-6)


def _run(device, rng, kind, kw, fused, params=None, sizes=SIZES):
    ps = [torch.tensor(rng.standard_normal(n).astype(np.float32), requires_grad=True) for n in sizes]
    opt = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[kind](ps, **kw)
    pb = [device.upload(p.detach().numpy()) for p in ps]
    st = _state(device, sizes, 3)
    for step in range(1, STEPS + 1):
        grads = [rng.standard_normal(n).astype(np.float32) for n in sizes]
        for p, g in zip(ps, grads):
            p.grad = torch.tensor(g)
        opt.step()
        gb = [device.upload(g) for g in grads]
        if kind == "sgd":
            optim_kernels.sgd_step(device, [(pb[i], gb[i], st[i][0], n) for i, n in enumerate(sizes)], kw["lr"],
                       kw.get("momentum", 0.0), kw.get("dampening", 0.0), kw.get("weight_decay", 0.0),
                       kw.get("nesterov", False), kw.get("maximize", False), first_step=step == 1, fused=fused,
                       params=params)
        else:
            fn = optim_kernels.adamw_step if kind == "adamw" else optim_kernels.adam_step
            wd = kw.get("weight_decay", 1e-2 if kind == "adamw" else 0.0)
            fn(device, [(pb[i], gb[i], st[i][0], st[i][1], st[i][2] if kw.get("amsgrad") else 0, n)
                        for i, n in enumerate(sizes)], kw["lr"], *kw.get("betas", (0.9, 0.999)), kw.get("eps", 1e-8),
               wd, step=step, amsgrad=kw.get("amsgrad", False), maximize=kw.get("maximize", False), fused=fused,
               params=params)
        _check_params(device, pb, ps, sizes)
    return pb, ps, st, opt


SGD_CASES = [
    dict(lr=0.1),
    dict(lr=0.1, weight_decay=0.05),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01),
    dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9, maximize=True),
]


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("kw", SGD_CASES)
def test_sgd(device, rng, kw, fused):
    pb, ps, st, opt = _run(device, rng, "sgd", kw, fused)
    if kw.get("momentum"):
        for i, (p, n) in enumerate(zip(ps, SIZES)):
            np.testing.assert_allclose(device.download(st[i][0], np.float32, (n,)),
                                       opt.state[p]["momentum_buffer"].numpy(), rtol=1e-5, atol=1e-6)


ADAM_CASES = [
    ("adam", dict(lr=1e-2)),
    ("adam", dict(lr=1e-2, weight_decay=0.1, betas=(0.8, 0.99), eps=1e-6)),
    ("adam", dict(lr=1e-2, amsgrad=True, maximize=True)),
    ("adamw", dict(lr=1e-2)),
    ("adamw", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
]


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("kind,kw", ADAM_CASES)
def test_adam(device, rng, kind, kw, fused):
    pb, ps, st, opt = _run(device, rng, kind, kw, fused)
    for i, (p, n) in enumerate(zip(ps, SIZES)):
        s = opt.state[p]
        np.testing.assert_allclose(device.download(st[i][0], np.float32, (n,)), s["exp_avg"].numpy(), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(device.download(st[i][1], np.float32, (n,)), s["exp_avg_sq"].numpy(), rtol=1e-5,
                                   atol=1e-8)


@pytest.mark.parametrize("fused", [True, False])
def test_small_chunks_explicit_params(device, rng, fused):
    _run(device, rng, "adamw", dict(lr=1e-2, weight_decay=0.1), fused, params=SMALL_CHUNKS)
    _run(device, rng, "sgd", dict(lr=0.1, momentum=0.9, nesterov=True), fused, params=SMALL_CHUNKS)


def test_fused_is_one_dispatch_and_table_is_cached(device, rng):
    sizes = [3 + (i % 5) for i in range(40)]
    bufs = [device.upload(np.ones(n, np.float32)) for n in sizes]
    grads = [device.upload(np.ones(n, np.float32)) for n in sizes]
    tensors = [(b, g, 0, n) for b, g, n in zip(bufs, grads, sizes)]
    fam = optim_kernels.family(device, optim_kernels.Optim)
    s = device.stream
    optim_kernels.sgd_step(device, tensors, 0.5)
    n_tables = len(fam.tables)
    before = s.total_dispatches
    optim_kernels.sgd_step(device, tensors, 0.25)
    assert s.total_dispatches - before == 1
    assert len(fam.tables) == n_tables  # the second step reused the uploaded table
    before = s.total_dispatches
    optim_kernels.sgd_step(device, tensors, 0.25, fused=False)
    assert s.total_dispatches - before == len(sizes)
    for b, n in zip(bufs, sizes):
        np.testing.assert_allclose(device.download(b, np.float32, (n,)), np.zeros(n), atol=1e-7)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_foreach_norm(device, rng, fused, norm_type):
    xs = [rng.standard_normal(n).astype(np.float32) for n in SIZES + [5000]]
    tensors = [(device.upload(x), x.size) for x in xs]
    out = device.allocator.alloc(4)
    optim_kernels.foreach_norm(device, tensors, out, norm_type, fused=fused)
    ref = torch.nn.utils.get_total_norm([torch.tensor(x) for x in xs], norm_type)
    np.testing.assert_allclose(device.download(out, np.float32, (1,))[0], float(ref), rtol=1e-5)
    if norm_type == 2.0:
        optim_kernels.foreach_norm(device, tensors, out, squared=True, fused=fused, params=SMALL_CHUNKS)
        np.testing.assert_allclose(device.download(out, np.float32, (1,))[0], float(ref) ** 2, rtol=1e-5)


def test_foreach_norm_empty(device):
    out = device.upload(np.full(1, 3.0, np.float32))
    optim_kernels.foreach_norm(device, [], out)
    assert device.download(out, np.float32, (1,))[0] == 0.0


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("max_norm", [0.5, 1e4])
def test_clip_grad_norm(device, rng, fused, max_norm):
    xs = [rng.standard_normal(n).astype(np.float32) for n in SIZES]
    ts = [torch.nn.Parameter(torch.zeros(n)) for n in SIZES]
    for t, x in zip(ts, xs):
        t.grad = torch.tensor(x)
    ref_norm = torch.nn.utils.clip_grad_norm_(ts, max_norm)
    bufs = [device.upload(x) for x in xs]
    norm = device.allocator.alloc(4)
    optim_kernels.clip_grad_norm(device, [(b, x.size) for b, x in zip(bufs, xs)], max_norm, norm, fused=fused)
    np.testing.assert_allclose(device.download(norm, np.float32, (1,))[0], float(ref_norm), rtol=1e-5)
    for b, t in zip(bufs, ts):
        np.testing.assert_allclose(device.download(b, np.float32, (t.numel(),)), t.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_argument_errors(device):
    buf = device.allocator.alloc(64)
    with pytest.raises(ValueError):
        optim_kernels.sgd_step(device, [(buf, buf, buf, 4)], 0.1, momentum=0.0, nesterov=True)
    with pytest.raises(ValueError):
        optim_kernels.sgd_step(device, [(buf, buf, 0, 4)], 0.1, momentum=0.9)
    with pytest.raises(ValueError):
        optim_kernels.adam_step(device, [(buf, buf, buf, buf, 0, 4)], amsgrad=True)
    with pytest.raises(ValueError):
        optim_kernels.foreach_norm(device, [(buf, 4)], buf, norm_type=1.0)


def test_invalid_params(device):
    from tvk_kernels import InvalidConfigError

    buf = device.allocator.alloc(64)
    with pytest.raises(InvalidConfigError):
        optim_kernels.sgd_step(device, [(buf, buf, 0, 4)], 0.1, params={"WG": 48, "CHUNK": 96})
    with pytest.raises(InvalidConfigError):
        optim_kernels.sgd_step(device, [(buf, buf, 0, 4)], 0.1, params={"WG": 2048, "CHUNK": 4096})


@pytest.mark.parametrize("decoupled", [False, True])
def test_fused_adam_reads_steps_on_the_device(device, rng, decoupled):
    """fused_adam (torch._fused_adam(w)_'s kernel: step counts and lr read on the device) follows
    torch's Adam / AdamW like adam_step does with the step given by the host; found_inf=1 skips."""
    sizes = [5, 1000]
    ps = [torch.tensor(rng.standard_normal(n).astype(np.float32), requires_grad=True) for n in sizes]
    opt = (torch.optim.AdamW if decoupled else torch.optim.Adam)(ps, lr=1e-2, weight_decay=0.1, amsgrad=True)
    pb = [device.upload(p.detach().numpy()) for p in ps]
    st = _state(device, sizes, 3)
    lr = device.upload(np.full(1, 1e-2, np.float32))
    inf = device.upload(np.ones(1, np.float32))
    for step in range(1, 4):
        grads = [rng.standard_normal(n).astype(np.float32) for n in sizes]
        for p, g in zip(ps, grads):
            p.grad = torch.tensor(g)
        opt.step()
        gb = [device.upload(g) for g in grads]
        steps = [device.upload(np.full(1, step, np.float32)) for _ in sizes]
        entries = [(pb[i], gb[i], st[i][0], st[i][1], st[i][2], steps[i]) for i in range(len(sizes))]
        entries = tuple(tuple(b.address for b in col) for col in zip(*entries)) + (tuple(sizes),)  # one tuple per role
        optim_kernels.fused_adam(device, entries, 0.5, 0.9, 0.999, 1e-8, 0.1, amsgrad=True, decoupled=decoupled, found_inf=inf)
        optim_kernels.fused_adam(device, entries, 0.5, 0.9, 0.999, 1e-8, 0.1, amsgrad=True, decoupled=decoupled, lr_addr=lr)
        _check_params(device, pb, ps, sizes)
