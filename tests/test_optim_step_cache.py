"""torch.optim's repeated steps on tvk: the checked tensor lists and device tables are remembered
(torchvk/aten/_tensor_lists.py, tvk_kernels/kernels/optim.py), and whatever changes a parameter
(new data, a view of its own storage, another dtype, a moved buffer, a new param group) is seen:
the steps after it still match torch CPU."""
import pytest

torch = pytest.importorskip("torch")
torchvk = pytest.importorskip("torchvk")

from torchvk.aten import _tensor_lists  # noqa: E402
from tvk_kernels.kernels import optim as optim_kernels  # noqa: E402

MODES = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}
SIZES = (5, 12, 1, 7)


def _close(a, b, tol=1e-5):
    torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), rtol=tol, atol=tol)


def _pair(cls, kw, mode, sizes=SIZES):
    """The same parameters on CPU (torch's for-loop path) and on tvk, with an optimizer each."""
    torch.manual_seed(0)
    ps = [torch.randn(n, requires_grad=True) for n in sizes]
    pt = [p.detach().to("tvk").requires_grad_() for p in ps]
    return ps, pt, cls(ps, **kw, foreach=False), cls(pt, **kw, **MODES[mode])


def _step(ps, pt, oc, ot):
    """One step on both sides with new grads (fresh tensors, as zero_grad and backward give)."""
    for p, q in zip(ps, pt):
        p.grad = torch.randn_like(p)
        q.grad = p.grad.to("tvk")
    oc.step()
    ot.step()


def _check(ps, pt):
    for p, q in zip(ps, pt):
        assert q.dtype == p.dtype and q.shape == p.shape
        _close(q, p, 1e-5 if p.dtype == torch.float32 else 2e-3)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_repeated_step_checks_nothing_again(mode):
    """From the second step on, a fused step finds every list and its device table remembered; all
    paths match CPU over several steps with the same and with new grads."""
    ps, pt, oc, ot = _pair(torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1), mode)
    _step(ps, pt, oc, ot)
    _step(ps, pt, oc, ot)
    fam = optim_kernels.family(pt[0]._tvk.device, optim_kernels.Optim)
    lists, tables = list(_tensor_lists._remembered), list(fam.tables)
    oc.step()  # the same grads again
    ot.step()
    if mode == "fused":
        assert list(_tensor_lists._remembered) == lists  # not a list checked anew,
        assert list(fam.tables) == tables  # not a table built
    _check(ps, pt)
    _step(ps, pt, oc, ot)
    _check(ps, pt)


CHANGES = {
    # a new tensor of another shape, and a view of the parameter's own storage (same storage object,
    # another offset and size): SGD without momentum, whose state cannot disagree with the new shape
    "new data of another shape": (torch.optim.SGD, dict(lr=0.1),
                                  lambda ps, opt: setattr(ps[1], "data", torch.full((9,), 0.5, device=ps[1].device))),
    "view of its own storage": (torch.optim.SGD, dict(lr=0.1), lambda ps, opt: setattr(ps[1], "data", ps[1].data[2:9])),
    "new data of the same shape": (torch.optim.AdamW, dict(lr=1e-2),
                                   lambda ps, opt: setattr(ps[0], "data", torch.ones_like(ps[0]))),
    "new param group": (torch.optim.AdamW, dict(lr=1e-2), lambda ps, opt: opt.add_param_group(
        {"params": [torch.linspace(-1, 1, 6, device=ps[0].device).requires_grad_()], "lr": 0.05})),
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("change", list(CHANGES))
def test_steps_after_a_parameter_changes_match_cpu(change, mode):
    cls, kw, apply = CHANGES[change]
    ps, pt, oc, ot = _pair(cls, kw, mode)
    _step(ps, pt, oc, ot)
    _step(ps, pt, oc, ot)
    apply(ps, oc)
    apply(pt, ot)
    for side, opt in ((ps, oc), (pt, ot)):
        side[:] = [p for group in opt.param_groups for p in group["params"]]
    _step(ps, pt, oc, ot)
    _step(ps, pt, oc, ot)
    _check(ps, pt)


@pytest.mark.parametrize("mode", ["default", "foreach"])
def test_steps_after_a_parameter_changes_dtype_match_cpu(mode):
    """A float16 parameter leaves the float32 list (torch groups by dtype) and runs per tensor."""
    ps, pt, oc, ot = _pair(torch.optim.SGD, dict(lr=0.1), mode)
    _step(ps, pt, oc, ot)
    _step(ps, pt, oc, ot)
    for p in (ps[2], pt[2]):
        p.data = p.data.half()
    _step(ps, pt, oc, ot)
    _step(ps, pt, oc, ot)
    _check(ps, pt)


@pytest.mark.parametrize("mode", list(MODES))
def test_a_parameter_whose_storage_moves(mode):
    """resize_ of another view grows the storage into a new buffer: the parameter (same tensor, same
    geometry) is updated where it now lives."""
    sides = []
    for device in ("cpu", "tvk"):
        base = torch.zeros(8, device=device)
        p = base[:4].requires_grad_()
        sides.append((base, p, torch.optim.SGD([p], lr=0.5, momentum=0.9, **(MODES[mode] if device == "tvk" else
                                                                                {"foreach": False}))))
    for step in range(4):
        if step == 2:
            for base, _, _ in sides:
                base.resize_(4096)
        g = torch.arange(1.0, 5.0) * (step + 1)
        for _, p, opt in sides:
            p.grad = g.to(p.device)
            opt.step()
    _close(sides[1][1], sides[0][1])


@pytest.mark.parametrize("mode", list(MODES))
def test_a_freed_parameter_raises(mode):
    ps, pt, oc, ot = _pair(torch.optim.SGD, dict(lr=0.1, momentum=0.9), mode)
    _step(ps, pt, oc, ot)
    pt[1]._tvk.free()
    with pytest.raises(torchvk.FreedBufferError):
        ot.step()
    x = torch.randn(3, device="tvk")  # the runtime stays usable
    torch._foreach_add_([x], 1.0)
    _close(x, x.cpu())


@pytest.mark.parametrize("cls,kw,mode,launches", [
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9), "default", 3),  # mul_, add_ (buffers), add_ (params)
    (torch.optim.AdamW, dict(lr=1e-2), "default", 8),  # mul_ (decay), lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_
    (torch.optim.AdamW, dict(lr=1e-2), "fused", 2),  # _foreach_add_ (steps), _fused_adamw_
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9), "fused", 1),
])
def test_dispatches_per_step_stay_few(cls, kw, mode, launches):
    """Every step, with new grads each time, records the same few dispatches, whatever the parameter count."""
    ps, pt, oc, ot = _pair(cls, kw, mode, sizes=[3 + i % 4 for i in range(24)])
    stream = pt[0]._tvk.device.stream
    counts = []
    for _ in range(4):
        for q in pt:
            q.grad = torch.randn_like(q)  # dispatches of its own, before the count
        before = stream.total_dispatches
        ot.step()
        counts.append(stream.total_dispatches - before)
    assert counts[1:] == [launches] * 3, counts


def test_lists_sharing_memory_within_one_list_run_in_order():
    """_foreach_mul_([x, x], 2) and overlapping views: one launch would race (x read at one position
    while another writes it); torch runs them one after the other."""
    for make in (lambda b: [b, b], lambda b: [b[0:4], b[2:6]]):
        cpu = torch.arange(6.0)
        tvk = cpu.to("tvk")
        torchvk.synchronize()
        stream = tvk._tvk.device.stream
        before = stream.total_dispatches
        torch._foreach_mul_(make(tvk), 2.0)
        torch._foreach_mul_(make(cpu), 2.0)
        assert stream.total_dispatches - before == 2
        _close(tvk, cpu)
    xs = [torch.randn(4, device="tvk")] * 2
    with pytest.raises(NotImplementedError, match="share memory"):
        torch._fused_sgd_(xs, [torch.randn(4, device="tvk") for _ in xs], [], weight_decay=0.0, momentum=0.0, lr=0.1,
                          dampening=0.0, nesterov=False, maximize=False, is_first_step=False)
