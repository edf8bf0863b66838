"""Memory overlap of out= and in-place ops (torchvk/_checks.py, check_overlap), against torch on the CPU.

One table, ROWS: an op and a way its written tensor overlaps (none: another part of the same
storage; same: the input tensor itself; full: another view of the same elements; partial: shifted;
internal: a stride-0 output, as expand makes; index: the output is the index tensor). A row is
`call(x, i, c)` on one float32 storage x and one int64 storage i (valid indices), with `c` around
each input. Each row runs on the CPU and on tvk: where the CPU raises, tvk raises the same type
with torch's message and writes what the CPU wrote (nothing, but for foreach ops); where the CPU
succeeds, tvk gives the CPU's values. Some overlaps torch allows without defining the result
(mm(x, x, out=x): its loops read elements they already wrote); there tvk gives the result on
separate tensors, which is the CPU's with c = clone.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import pytest
import torch

import torchvk  # noqa: F401
from torchvk import _checks

NONE, SAME, FULL, PARTIAL, INTERNAL, INDEX = "none", "same", "full", "partial", "internal", "index"
PARTIAL_WORDS = "some elements of the input tensor and the written-to tensor refer to a single memory location"
INTERNAL_WORDS = "more than one element of the written-to tensor refers to a single memory location"


class Row(NamedTuple):
    op: str
    kind: str
    call: Callable            # call(x, i, c)
    order_dependent: bool = False  # torch allows it but its result depends on its loop order


def out_rows(op, f, kinds=(NONE, SAME, FULL, PARTIAL, INTERNAL), order_dependent=()):
    """Rows for `f(input, out)`, an op writing into `out` what it computes from `input` (8 floats)."""
    calls = {
        NONE: lambda x, i, c: f(c(x[:8]), x[16:24]),
        SAME: lambda x, i, c: (lambda v: f(c(v), v))(x[:8]),
        FULL: lambda x, i, c: f(c(x[:8]), x[:8]),
        PARTIAL: lambda x, i, c: f(c(x[:8]), x[1:9]),
        INTERNAL: lambda x, i, c: f(c(x[:8]), x[24:25].expand(8)),
    }
    return [Row(op, k, calls[k], k in order_dependent) for k in kinds]


def inplace_rows(op, f, kinds=(NONE, SAME, FULL, PARTIAL, INTERNAL)):
    """Rows for `f(self, other)`, an in-place op on self (8 floats) reading `other` beside it."""
    calls = {
        NONE: lambda x, i, c: f(x[:8], c(x[8:16])),
        SAME: lambda x, i, c: (lambda v: f(v, c(v)))(x[:8]),
        FULL: lambda x, i, c: f(x[:8], c(x[:8])),
        PARTIAL: lambda x, i, c: f(x[1:9], c(x[:8])),
        INTERNAL: lambda x, i, c: f(x[24:25].expand(8), c(x[8:16])),
    }
    return [Row(op, k, calls[k]) for k in kinds]


def _m(x, at=0, n=64):
    """An n x n matrix view of x from element `at`."""
    return x[at:at + n * n].view(n, n)


ROWS = [
    # ---------------------------------------------------------------- elementwise, out=
    *out_rows("neg", lambda a, out: torch.neg(a, out=out)),
    *out_rows("exp", lambda a, out: torch.exp(a, out=out)),
    *out_rows("sigmoid", lambda a, out: torch.sigmoid(a, out=out)),
    *out_rows("abs", lambda a, out: torch.abs(a, out=out)),
    *out_rows("add", lambda a, out: torch.add(a, 2.0, out=out)),
    *out_rows("mul tensor", lambda a, out: torch.mul(a, torch.arange(8.0, device=a.device), out=out)),
    *out_rows("sub", lambda a, out: torch.sub(torch.ones(8, device=a.device), a, alpha=3, out=out)),
    *out_rows("div", lambda a, out: torch.div(a, 4.0, out=out)),
    *out_rows("maximum", lambda a, out: torch.maximum(a, torch.zeros(8, device=a.device), out=out)),
    *out_rows("clamp", lambda a, out: torch.clamp(a, -0.5, 0.5, out=out)),
    *out_rows("addcmul", lambda a, out: torch.addcmul(a, a, torch.ones(8, device=a.device), value=2, out=out)),
    *out_rows("lerp", lambda a, out: torch.lerp(a, torch.ones(8, device=a.device), 0.25, out=out)),
    *out_rows("where", lambda a, out: torch.where(a > 0, a, torch.zeros(8, device=a.device), out=out)),
    # ---------------------------------------------------------------- elementwise, in place
    *inplace_rows("add_", lambda s, o: s.add_(o, alpha=2)),
    *inplace_rows("mul_", lambda s, o: s.mul_(o)),
    *inplace_rows("sub_", lambda s, o: s.sub_(o)),
    *inplace_rows("div_", lambda s, o: s.div_(o.abs() + 1)),
    *inplace_rows("copy_", lambda s, o: s.copy_(o)),
    *inplace_rows("addcmul_", lambda s, o: s.addcmul_(o, o, value=0.5)),
    *inplace_rows("addcdiv_", lambda s, o: s.addcdiv_(o, torch.full((8,), 2.0, device=o.device))),
    *inplace_rows("lerp_", lambda s, o: s.lerp_(o, 0.5)),
    *inplace_rows("clamp_ tensor", lambda s, o: s.clamp_(min=o)),
    *inplace_rows("maximum_", lambda s, o: torch.maximum(s, o, out=s)),
    Row("relu_", INTERNAL, lambda x, i, c: x[:1].expand(8).relu_()),
    Row("exp_", INTERNAL, lambda x, i, c: x[:1].expand(8).exp_()),
    Row("neg_", INTERNAL, lambda x, i, c: x[:1].expand(2, 4).neg_()),
    Row("clamp_", INTERNAL, lambda x, i, c: x[:1].expand(8).clamp_(0, 1)),
    Row("sigmoid_", INTERNAL, lambda x, i, c: x[:4].view(4, 1).expand(4, 3).sigmoid_()),
    Row("relu_", NONE, lambda x, i, c: x[3:11].relu_()),
    Row("fill_", INTERNAL, lambda x, i, c: x[:1].expand(8).fill_(7.0)),
    Row("zero_", INTERNAL, lambda x, i, c: x[:4].view(4, 1).expand(4, 3).zero_()),
    Row("copy_ shift (not dense)", NONE, lambda x, i, c: x[:64].view(8, 8)[:, :4].copy_(c(x[:64].view(8, 8)[:, 4:]))),
    Row("copy_ shift (not dense)", PARTIAL,
        lambda x, i, c: x[:64].view(8, 8)[:, 1:].copy_(c(x[:64].view(8, 8)[:, :-1])), order_dependent=True),
    Row("copy_ transposed", PARTIAL, lambda x, i, c: _m(x, n=8).copy_(c(_m(x, n=8).t()))),
    Row("copy_ from a broadcast view", PARTIAL, lambda x, i, c: x[:8].copy_(c(x[:1].expand(8)))),
    # ---------------------------------------------------------------- reductions, out=
    Row("sum", NONE, lambda x, i, c: torch.sum(c(x[:32].view(4, 8)), 1, out=x[40:44])),
    Row("sum", PARTIAL, lambda x, i, c: torch.sum(c(x[:32].view(4, 8)), 1, out=x[1:5]), order_dependent=True),
    Row("mean", PARTIAL, lambda x, i, c: torch.mean(c(x[:32].view(4, 8)), 0, out=x[4:12]), order_dependent=True),
    Row("amax", PARTIAL, lambda x, i, c: torch.amax(c(x[:32].view(4, 8)), 1, out=x[1:5]), order_dependent=True),
    Row("prod", NONE, lambda x, i, c: torch.prod(c(x[:32].view(4, 8)), 1, out=x[50:54])),
    *out_rows("cumsum", lambda a, out: torch.cumsum(a, 0, out=out)),
    Row("argmax", INDEX, lambda x, i, c: torch.argmax(c(i[:8].view(2, 4)), 1, out=i[:2]), order_dependent=True),
    # ---------------------------------------------------------------- indexing
    Row("index_select", NONE, lambda x, i, c: torch.index_select(c(_m(x, n=4)), 0, c(i[:2]), out=_m(x, 16, 4)[:2])),
    Row("index_select", SAME, lambda x, i, c: (lambda v: torch.index_select(c(v), 0, c(i[:4]), out=v))(_m(x, n=4))),
    Row("index_select", FULL, lambda x, i, c: torch.index_select(c(_m(x, n=4)), 0, c(i[:4]), out=_m(x, n=4))),
    Row("index_select", PARTIAL,
        lambda x, i, c: torch.index_select(c(_m(x, n=4)), 0, c(i[:2]), out=x[2:10].view(2, 4))),
    Row("index_select", INTERNAL,
        lambda x, i, c: torch.index_select(c(_m(x, n=4)), 0, c(i[:2]), out=x[20:24].expand(2, 4))),
    Row("index_select", INDEX, lambda x, i, c: torch.index_select(c(i[4:12]), 0, c(i[:4]), out=i[:4])),
    Row("gather", NONE, lambda x, i, c: torch.gather(c(_m(x, n=4)), 1, c(i[:8].view(4, 2)), out=x[20:28].view(4, 2))),
    Row("gather", FULL, lambda x, i, c: torch.gather(c(_m(x, n=4)), 1, c(i[:16].view(4, 4)), out=_m(x, n=4))),
    Row("gather", PARTIAL, lambda x, i, c: torch.gather(c(_m(x, n=4)), 1, c(i[:8].view(4, 2)), out=x[1:9].view(4, 2))),
    Row("gather", INTERNAL,
        lambda x, i, c: torch.gather(c(_m(x, n=4)), 1, c(i[:8].view(4, 2)), out=x[20:22].expand(4, 2))),
    Row("gather", INDEX, lambda x, i, c: (lambda v: torch.gather(c(i[8:16].view(2, 4)), 1, c(v), out=v))(
        i[:4].view(2, 2))),
    Row("scatter_", NONE, lambda x, i, c: x[:8].scatter_(0, c(i[:4]), c(x[8:12]))),
    Row("scatter_", SAME, lambda x, i, c: (lambda v: v.scatter_(0, c(i[:8]), c(v)))(x[:8])),
    Row("scatter_", PARTIAL, lambda x, i, c: x[2:10].scatter_(0, c(i[:4]), c(x[:4]))),
    Row("scatter_", INTERNAL, lambda x, i, c: x[:1].expand(8).scatter_(0, c(i[:4]), c(x[8:12]))),
    Row("scatter_", INDEX, lambda x, i, c: (lambda v: v.scatter_(0, c(v[:4]), 1))(i[:8])),
    Row("scatter_add_", PARTIAL, lambda x, i, c: x[2:10].scatter_add_(0, c(i[:4]), c(x[:4]))),
    Row("scatter_add_", INDEX, lambda x, i, c: (lambda v: v.scatter_add_(0, c(v[4:8]), c(i[8:12])))(i[:8])),
    Row("index_put_", NONE, lambda x, i, c: x[:8].index_put_((c(i[:2]),), c(x[8:10]))),
    Row("index_put_", PARTIAL, lambda x, i, c: x[:8].index_put_((c(i[:2]),), c(x[1:3]))),
    Row("index_put_ accumulate", PARTIAL, lambda x, i, c: x[:8].index_put_((c(i[:2]),), c(x[6:8]), accumulate=True)),
    Row("index_put_", INDEX, lambda x, i, c: i[:8].index_put_((c(i[:2]),), c(i[8:10]))),
    Row("index_add_", PARTIAL, lambda x, i, c: x[:8].index_add_(0, c(i[:2]), c(x[4:6]))),
    Row("index_copy_", PARTIAL, lambda x, i, c: x[:8].index_copy_(0, c(i[:1]), c(x[7:8]))),
    Row("index_fill_", NONE, lambda x, i, c: x[:8].index_fill_(0, c(i[:2]), -1.0)),
    Row("masked_fill_", NONE, lambda x, i, c: x[:8].masked_fill_(c(x[8:16]) > 0, 3.0)),
    Row("masked_fill_ value", PARTIAL, lambda x, i, c: x[:8].masked_fill_(c(x[8:16]) > 0, c(x[3]))),
    Row("masked_scatter_", PARTIAL, lambda x, i, c: x[1:9].masked_scatter_(c(x[16:24]) > 0, c(x[:8])),
        order_dependent=True),
    Row("take", PARTIAL, lambda x, i, c: torch.take(c(x[:8]), c(i[:4]), out=x[2:6])),
    Row("take", INDEX, lambda x, i, c: torch.take(c(i[4:12]), c(i[:4]), out=i[:4])),
    Row("put_", PARTIAL, lambda x, i, c: x[:8].put_(c(i[:2]), c(x[6:8]))),
    # ---------------------------------------------------------------- joining
    Row("cat", NONE, lambda x, i, c: torch.cat([c(x[:3]), c(x[3:6])], out=x[8:14])),
    Row("cat", FULL, lambda x, i, c: torch.cat([c(x[:3]), c(x[3:6])], out=x[:6])),
    Row("cat", PARTIAL, lambda x, i, c: torch.cat([c(x[:3]), c(x[3:6])], out=x[4:10])),
    Row("cat", INTERNAL, lambda x, i, c: torch.cat([c(x[:3]), c(x[3:6])], out=x[20:21].expand(6))),
    Row("stack", PARTIAL, lambda x, i, c: torch.stack([c(x[:3]), c(x[3:6])], out=x[5:11].view(2, 3))),
    # ---------------------------------------------------------------- matmul family
    Row("mm", NONE, lambda x, i, c: torch.mm(c(_m(x)), c(_m(x, 4096)), out=_m(x, 8192))),
    Row("mm", SAME, lambda x, i, c: (lambda v: torch.mm(c(v), c(v), out=v))(_m(x)), order_dependent=True),
    Row("mm", PARTIAL, lambda x, i, c: torch.mm(c(_m(x)), c(_m(x, 4096)), out=_m(x, 2048)), order_dependent=True),
    Row("mm", INTERNAL, lambda x, i, c: torch.mm(c(_m(x, n=4)), c(_m(x, 16, 4)), out=x[40:44].expand(4, 4))),
    Row("matmul", SAME, lambda x, i, c: (lambda v: torch.matmul(c(v), c(v), out=v))(_m(x)), order_dependent=True),
    Row("bmm", SAME, lambda x, i, c: (lambda v: torch.bmm(c(v), c(v), out=v))(x[:8192].view(2, 64, 64)),
        order_dependent=True),
    Row("addmm", SAME, lambda x, i, c: (lambda v: torch.addmm(c(v), c(v), c(v), out=v))(_m(x)), order_dependent=True),
    Row("addmm_", SAME, lambda x, i, c: (lambda v: v.addmm_(c(v), c(v)))(_m(x)), order_dependent=True),
    Row("mv", PARTIAL, lambda x, i, c: torch.mv(c(_m(x)), c(x[4096:4160]), out=x[:64]), order_dependent=True),
    # no mv into a stride-0 out: torch allows it, and 64 results land in one element (the CPU keeps its last, a GPU any)
    # ---------------------------------------------------------------- sorting
    Row("sort", FULL, lambda x, i, c: torch.sort(c(x[:8]), out=(x[:8], i[:8]))),
    Row("sort", PARTIAL, lambda x, i, c: torch.sort(c(x[:8]), out=(x[2:10], i[:8]))),
    Row("topk", PARTIAL, lambda x, i, c: torch.topk(c(x[:8]), 3, out=(x[1:4], i[:3]))),
    # ---------------------------------------------------------------- foreach (torch.optim's)
    Row("_foreach_add_", NONE, lambda x, i, c: torch._foreach_add_([x[:4], x[4:8]], [c(x[8:12]), c(x[12:16])])),
    Row("_foreach_add_", SAME,
        lambda x, i, c: (lambda v: torch._foreach_add_([v, x[4:8]], [c(v), c(x[12:16])]))(x[:4])),
    Row("_foreach_add_", PARTIAL, lambda x, i, c: torch._foreach_add_([x[:4], x[4:8]], [c(x[8:12]), c(x[2:6])])),
    Row("_foreach_add_", INTERNAL, lambda x, i, c: torch._foreach_add_([x[:1].expand(4), x[4:8]], 1.0)),
    Row("_foreach_mul_", INTERNAL, lambda x, i, c: torch._foreach_mul_([x[4:8], x[:1].expand(4)], [c(x[8:12]),
                                                                                                    c(x[12:16])])),
    Row("_foreach_lerp_", PARTIAL, lambda x, i, c: torch._foreach_lerp_([x[:4]], [c(x[1:5])], 0.5)),
]


def _bases(device):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3 * 64 * 64, generator=gen)
    # i[:4] distinct: a scatter or index_put with repeated indices writes in no defined order on a GPU
    i = torch.cat([torch.randperm(4, generator=gen), torch.randint(0, 4, (12,), generator=gen)])
    return x.to(device), i.to(device)


def _run(row, device, c):
    x, i = _bases(device)
    try:
        row.call(x, i, c)
    except Exception as e:  # noqa: BLE001 - compared with the other side's
        return e, x.cpu(), i.cpu()
    return None, x.cpu(), i.cpu()


def _same(x):
    return x


def _clone(x):
    return x.clone()


def _id(row):
    return f"{row.op}-{row.kind}"


@pytest.mark.parametrize("row", ROWS, ids=[_id(r) for r in ROWS])
def test_overlap_like_torch(row):
    cpu_error, cpu_x, cpu_i = _run(row, "cpu", _same)
    got_error, got_x, got_i = _run(row, "tvk", _same)
    if cpu_error is not None:
        assert type(got_error) is type(cpu_error), f"tvk gave {got_error!r} where the CPU raised {cpu_error!r}"
        for words in (PARTIAL_WORDS, INTERNAL_WORDS):
            if words in str(cpu_error):
                assert words in str(got_error)
        # nothing written (a foreach op has done the tensors before the refused one, as on the CPU)
        assert torch.equal(got_x, cpu_x) and torch.equal(got_i, cpu_i), "refused after writing"
        return
    assert got_error is None, f"tvk raised {got_error!r} where the CPU did not"
    if row.order_dependent:
        _, cpu_x, cpu_i = _run(row, "cpu", _clone)
    torch.testing.assert_close(got_x, cpu_x, rtol=1e-5, atol=1e-4)
    assert torch.equal(got_i, cpu_i)


# ------------------------------------------------------------------ what the check costs
def test_the_common_calls_end_at_the_screen(monkeypatch):
    """In-place ops on their own storage, out= into a fresh tensor, a slice copied into: the screen
    (a few metadata reads) passes them; no overlap is computed, no CPU stand-in made."""
    looked = []
    monkeypatch.setattr(_checks, "_overlapping", lambda *a: looked.append(a[0]) or (a[1], a[2]))
    x, y = torch.randn(8, device="tvk"), torch.randn(8, device="tvk")
    x.add_(1)
    x.mul_(y)
    x.relu_()
    x.clamp_(-1, 1)
    x.addcmul_(y, y, value=0.1)
    x[1:].copy_(y[1:])
    torch.add(x, y, out=torch.empty(8, device="tvk"))
    torch.index_select(x, 0, torch.tensor([0, 2], device="tvk"), out=torch.empty(2, device="tvk"))
    torch.cat([x, y], out=torch.empty(16, device="tvk"))
    assert looked == []
    x.mul_(x)  # the screen sees a shared storage: overlap is looked at
    assert looked == [torch.ops.aten.mul_.Tensor]


def test_a_verdict_is_kept_per_op_and_pattern(monkeypatch):
    """The CPU is asked once about an op and a way of overlapping, whatever the sizes."""
    asked = []
    judge = _checks._cpu_verdict
    monkeypatch.setattr(_checks, "_cpu_verdict", lambda *a: asked.append(a[0]) or judge(*a))
    monkeypatch.setattr(_checks, "_verdicts", {})
    for n in (4, 6, 9):
        a = torch.arange(n + 1.0, device="tvk")
        with pytest.raises(RuntimeError, match="some elements of the input tensor"):
            torch.mul(a[:n], 2, out=a[1:])
        a.mul_(a)  # the same tensor: allowed, asked once
    assert len(asked) == 2


def test_a_call_too_large_to_ask_the_cpu_gets_the_elementwise_rule(monkeypatch):
    monkeypatch.setattr(_checks, "_CPU_CONFIRM_BYTES", 0)
    monkeypatch.setattr(_checks, "_verdicts", {})
    a = torch.arange(6.0, device="tvk")
    with pytest.raises(RuntimeError, match=PARTIAL_WORDS):
        torch.mul(a[:4], 2, out=a[1:5])
    with pytest.raises(RuntimeError, match=INTERNAL_WORDS):
        torch.zeros(1, device="tvk").expand(3).add_(1)
    a.add_(a)  # exactly the output: allowed
    torch.testing.assert_close(a.cpu(), torch.arange(6.0) * 2)


def test_legitimate_in_place_ops_and_optimizer_steps_match_the_cpu():
    torch.manual_seed(0)
    w = torch.randn(6, 5)
    cpu, tvk = w.clone().requires_grad_(), w.to("tvk").requires_grad_()
    opt_c = torch.optim.Adam([cpu], lr=0.1, foreach=False)
    opt_t = torch.optim.Adam([tvk], lr=0.1, foreach=True)
    for _ in range(3):
        for p, opt in ((cpu, opt_c), (tvk, opt_t)):
            opt.zero_grad()
            (p.sin() * p).sum().backward()
            opt.step()
            with torch.no_grad():
                p[1:].copy_(p[:-1].clone())  # a shift through a copy: no overlap left
                p.mul_(p).relu_().add_(p, alpha=-0.5)
    torch.testing.assert_close(tvk.detach().cpu(), cpu.detach(), rtol=1e-5, atol=1e-5)
