"""Bad inputs raise torch's own exceptions on tvk, as on the CPU, before any kernel runs.

One table, CASES: a row is (name, op, arguments, the exception torch raises, key words of
torch's message). Each row runs on the CPU (the reference: torch must raise that exception
there) and on tvk (TorchVK must raise the same type, its message containing the key words).
Arguments are specs built on the device of the run: T(3, 4) is a float32 tensor, T(3, dtype=L)
an int64 one, "device" the run's device (factories); Cpu(spec) stays on the CPU in both runs
(torchvk.ops drop-ins; a tensor mixed in with tvk ones). A row with `tvk_op` calls that instead
on tvk (torchvk.ops.* on CPU inputs); a row with op=None has no CPU counterpart (device mixing,
the memory cap) and runs on tvk only. To add a case, append a row.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import pytest
import torch
import torch.nn.functional as F

import torchvk

L, H, B = torch.int64, torch.float16, torch.bool


class T:
    """A tensor argument: random floats, or zeros for integer and bool dtypes (valid indices)."""

    def __init__(self, *shape, dtype=torch.float32):
        self.shape, self.dtype = shape, dtype


class Cpu:
    """A tensor argument that stays on the CPU whatever the run's device."""

    def __init__(self, spec: T):
        self.spec = spec


class Case(NamedTuple):
    name: str
    op: Callable | None
    args: tuple
    error: type
    words: tuple = ()
    tvk_op: Callable | None = None


def build(x, device, gen):
    if isinstance(x, Cpu):
        return build(x.spec, "cpu", gen)
    if isinstance(x, T):
        if x.dtype.is_floating_point:
            return torch.randn(x.shape, generator=gen).to(device=device, dtype=x.dtype)
        return torch.zeros(x.shape, dtype=x.dtype, device=device)
    if isinstance(x, (list, tuple)):
        return type(x)(build(y, device, gen) for y in x)
    return x


SAME_DEVICE = ("Expected all tensors to be on the same device",)
MM_WORDS = ("shapes cannot be multiplied", "3x4 and 5x2")
NEG_DIM = ("negative",)

CASES = [
    # ---------------------------------------------------------------- matmul family
    Case("mm inner mismatch", torch.mm, (T(3, 4), T(5, 2)), RuntimeError, MM_WORDS),
    Case("mm reads past B", torch.mm, (T(3, 8), T(2, 2)), RuntimeError, ("shapes cannot be multiplied",)),
    Case("mm 1-D operand", torch.mm, (T(3), T(3, 4)), RuntimeError, ("must be a matrix",)),
    Case("mm dtype mix", torch.mm, (T(3, 4), T(4, 2, dtype=H)), RuntimeError, ("same dtype",)),
    Case("@ inner mismatch", torch.Tensor.__matmul__, (T(3, 4), T(5, 2)), RuntimeError, MM_WORDS),
    Case("matmul 1-D @ 2-D", torch.matmul, (T(3), T(4, 2)), RuntimeError, ("shapes cannot be multiplied",)),
    Case("matmul 2-D @ 1-D", torch.matmul, (T(3, 4), T(3)), RuntimeError, ("size mismatch",)),
    Case("matmul batched inner", torch.matmul, (T(2, 3, 4), T(2, 5, 2)), RuntimeError, ()),
    Case("matmul batch broadcast", torch.matmul, (T(2, 3, 4), T(3, 4, 2)), RuntimeError, ()),
    Case("matmul 0-dim", torch.matmul, (T(), T(3)), RuntimeError, ("at least 1D",)),
    Case("rmatmul 1-D", torch.Tensor.__rmatmul__, (T(4, 2), T(3)), RuntimeError, ("shapes cannot be multiplied",)),
    Case("bmm inner mismatch", torch.bmm, (T(2, 3, 4), T(2, 5, 2)), RuntimeError, ("batch2",)),
    Case("bmm batch mismatch", torch.bmm, (T(2, 3, 4), T(3, 4, 2)), RuntimeError, ("batch2",)),
    Case("bmm 2-D operand", torch.bmm, (T(3, 4), T(4, 2)), RuntimeError, ("3D tensor",)),
    Case("addmm inner mismatch", torch.addmm, (T(3, 2), T(3, 4), T(5, 2)), RuntimeError, MM_WORDS),
    Case("addmm bias shape", torch.addmm, (T(4, 3), T(3, 4), T(4, 2)), RuntimeError, ()),
    Case("baddbmm inner mismatch", torch.baddbmm, (T(2, 3, 2), T(2, 3, 4), T(2, 5, 2)), RuntimeError, ()),
    Case("mv mismatch", torch.mv, (T(3, 4), T(3)), RuntimeError, ("size mismatch",)),
    Case("dot length mismatch", torch.dot, (T(3), T(4)), RuntimeError, ("inconsistent tensor size",)),
    Case("dot 2-D", torch.dot, (T(3, 3), T(3, 3)), RuntimeError, ("1D tensors expected",)),
    Case("ops.matmul CPU", torch.matmul, (Cpu(T(3, 4)), Cpu(T(5, 2))), RuntimeError, MM_WORDS,
         tvk_op=torchvk.ops.matmul),
    Case("ops.mm CPU", torch.mm, (Cpu(T(3, 8)), Cpu(T(2, 2))), RuntimeError, ("shapes cannot be multiplied",),
         tvk_op=torchvk.ops.mm),
    Case("ops.bmm CPU", torch.bmm, (Cpu(T(2, 3, 4)), Cpu(T(2, 5, 2))), RuntimeError, ("batch2",),
         tvk_op=torchvk.ops.bmm),
    Case("ops.addmm CPU", torch.addmm, (Cpu(T(3, 2)), Cpu(T(3, 4)), Cpu(T(5, 2))), RuntimeError, MM_WORDS,
         tvk_op=torchvk.ops.addmm),
    Case("ops.linear CPU", F.linear, (Cpu(T(3, 4)), Cpu(T(2, 5))), RuntimeError, ("shapes cannot be multiplied",),
         tvk_op=torchvk.ops.linear),
    Case("ops.softmax CPU int", lambda x: F.softmax(x, 1), (Cpu(T(3, 4, dtype=L)),), NotImplementedError,
         ("not implemented for 'Long'",), tvk_op=lambda x: torchvk.ops.softmax(x, 1)),
    # ---------------------------------------------------------------- linear
    Case("linear in_features", F.linear, (T(3, 4), T(2, 5)), RuntimeError, ("shapes cannot be multiplied",)),
    Case("linear bias size", F.linear, (T(3, 4), T(2, 4), T(3)), RuntimeError, ()),
    Case("linear dtype mix", F.linear, (T(3, 4), T(2, 4, dtype=H)), RuntimeError, ("same dtype",)),
    # ---------------------------------------------------------------- conv2d
    Case("conv2d channels", F.conv2d, (T(1, 3, 8, 8), T(4, 2, 3, 3)), RuntimeError, ()),
    Case("conv2d kernel > input", F.conv2d, (T(1, 3, 2, 2), T(4, 3, 3, 3)), RuntimeError,
         ("Kernel size can't be greater than actual input size",)),
    Case("conv2d groups", lambda x, w: F.conv2d(x, w, groups=2), (T(1, 3, 8, 8), T(4, 1, 3, 3)), RuntimeError, ()),
    Case("conv2d bias size", F.conv2d, (T(1, 3, 8, 8), T(4, 3, 3, 3), T(3)), RuntimeError, ()),
    Case("conv2d stride 0", lambda x, w: F.conv2d(x, w, stride=0), (T(1, 3, 8, 8), T(4, 3, 3, 3)), RuntimeError,
         ("non-positive stride",)),
    Case("conv2d negative padding", lambda x, w: F.conv2d(x, w, padding=-1), (T(1, 3, 8, 8), T(4, 3, 3, 3)),
         RuntimeError, ("negative padding",)),
    Case("conv2d 2-D input", F.conv2d, (T(8, 8), T(4, 3, 3, 3)), RuntimeError, ()),
    # ---------------------------------------------------------------- pooling
    Case("max_pool2d kernel > input", lambda x: F.max_pool2d(x, 3), (T(1, 1, 2, 2),), RuntimeError,
         ("Output size is too small",)),
    Case("avg_pool2d kernel > input", lambda x: F.avg_pool2d(x, 3), (T(1, 1, 2, 2),), RuntimeError,
         ("Output size is too small",)),
    Case("max_pool2d pad > half kernel", lambda x: F.max_pool2d(x, 2, padding=2), (T(1, 1, 8, 8),), RuntimeError,
         ("pad should be at most half",)),
    Case("max_pool2d 2-D input", lambda x: F.max_pool2d(x, 2), (T(8, 8),), RuntimeError, ()),
    Case("adaptive_avg_pool2d 1-D input", lambda x: F.adaptive_avg_pool2d(x, 2), (T(8),), RuntimeError, ()),
    # ---------------------------------------------------------------- norms
    Case("layer_norm shape", lambda x: F.layer_norm(x, (4,)), (T(2, 5),), RuntimeError, ("normalized_shape",)),
    Case("layer_norm weight size", lambda x, w: F.layer_norm(x, (5,), w), (T(2, 5), T(4)), RuntimeError, ()),
    Case("batch_norm running_mean size", lambda x, m, v: F.batch_norm(x, m, v), (T(2, 3, 4), T(4), T(4)),
         RuntimeError, ("running_mean should contain 3 elements not 4",)),
    Case("batch_norm one value per channel", lambda x, m, v: F.batch_norm(x, m, v, training=True),
         (T(1, 3), T(3), T(3)), ValueError, ("Expected more than 1 value per channel when training",)),
    Case("group_norm groups", lambda x: F.group_norm(x, 2), (T(2, 3, 4),), RuntimeError, ()),
    # ---------------------------------------------------------------- losses
    Case("cross_entropy prob target shape", F.cross_entropy, (T(3, 5), T(3, 4)), RuntimeError,
         ("multi-target not supported",)),
    Case("cross_entropy float class target", F.cross_entropy, (T(3, 5), T(3)), RuntimeError, ()),
    Case("cross_entropy 2-D class target", F.cross_entropy, (T(3, 5), T(3, 2, dtype=L)), RuntimeError,
         ("multi-target not supported",)),
    Case("nll_loss batch mismatch", F.nll_loss, (T(3, 5), T(4, dtype=L)), ValueError,
         ("Expected input batch_size (3) to match target batch_size (4)",)),
    Case("nll_loss weight size", lambda x, t, w: F.nll_loss(x, t, weight=w), (T(3, 5), T(3, dtype=L), T(4)),
         RuntimeError, ("weight tensor should be defined either for all 5 classes or no classes",)),
    Case("mse_loss not broadcastable", F.mse_loss, (T(3), T(4)), RuntimeError, ()),
    Case("l1_loss not broadcastable", F.l1_loss, (T(2, 3), T(3, 2)), RuntimeError, ()),
    Case("binary_cross_entropy target size", F.binary_cross_entropy, (T(3), T(4)),
         ValueError, ("Using a target size",)),
    # ---------------------------------------------------------------- reductions
    Case("sum dim out of range", lambda x: x.sum(1), (T(4),), IndexError, ("Dimension out of range",)),
    Case("sum repeated dim", lambda x: x.sum((0, 0)), (T(4, 2),), RuntimeError, ("appears multiple times",)),
    Case("mean of int64", torch.mean, (T(3, 4, dtype=L),), RuntimeError, ("mean(): could not infer output dtype",)),
    Case("mean dim of int64", lambda x: x.mean(0), (T(3, 4, dtype=L),), RuntimeError,
         ("could not infer output dtype",)),
    Case("max over empty dim", lambda x: torch.max(x, 0), (T(0, 3),), IndexError,
         ("Expected reduction dim 0 to have non-zero size",)),
    Case("min over empty dim", lambda x: torch.min(x, 1), (T(3, 0),), IndexError,
         ("Expected reduction dim 1 to have non-zero size",)),
    Case("max of empty", torch.max, (T(0, 3),), RuntimeError, ("Expected reduction dim to be specified",)),
    Case("argmax over empty dim", lambda x: x.argmax(0), (T(0, 3),), IndexError, ("to have non-zero size",)),
    Case("amax of empty", torch.amax, (T(0),), RuntimeError, ("Expected reduction dim to be specified",)),
    Case("max dim out of range", lambda x: torch.max(x, 2), (T(3, 4),), IndexError, ("Dimension out of range",)),
    Case("var of int64", torch.var, (T(3, dtype=L),), RuntimeError, ("floating point",)),
    # ---------------------------------------------------------------- softmax / log_softmax
    Case("softmax of int64", lambda x: torch.softmax(x, 1), (T(3, 4, dtype=L),), NotImplementedError,
         ("not implemented for 'Long'",)),
    Case("log_softmax of int64", lambda x: F.log_softmax(x, 0), (T(3, 4, dtype=L),), NotImplementedError,
         ("not implemented for 'Long'",)),
    Case("softmax dim out of range", lambda x: torch.softmax(x, 2), (T(3, 4),), IndexError,
         ("Dimension out of range",)),
    Case("log_softmax dim out of range", lambda x: F.log_softmax(x, -3), (T(3, 4),), IndexError,
         ("Dimension out of range",)),
    # ---------------------------------------------------------------- views and joins
    Case("view numel", lambda x: x.view(5, -1), (T(3, 4),), RuntimeError, ("is invalid for input of size 12",)),
    Case("view non-contiguous", lambda x: x.t().view(-1), (T(3, 4),), RuntimeError, ("view size is not compatible",)),
    Case("reshape numel", lambda x: x.reshape(7), (T(3, 4),), RuntimeError, ("is invalid for input of size 12",)),
    Case("expand mismatch", lambda x: x.expand(2, 5), (T(2, 3),), RuntimeError, ("expanded size",)),
    Case("permute dims count", lambda x: x.permute(1, 0), (T(2, 3, 4),), RuntimeError, ("permute",)),
    Case("permute repeated dim", lambda x: x.permute(0, 0, 1), (T(2, 3, 4),), RuntimeError, ("permute",)),
    Case("cat sizes", lambda a, b: torch.cat([a, b]), (T(3, 4), T(3, 5)), RuntimeError,
         ("Sizes of tensors must match except in dimension 0",)),
    Case("cat dim out of range", lambda a, b: torch.cat([a, b], 2), (T(3, 4), T(3, 4)), IndexError,
         ("Dimension out of range",)),
    Case("cat 0-dim", lambda a, b: torch.cat([a, b]), (T(), T()), RuntimeError, ("zero-dimensional tensor",)),
    Case("stack shapes", lambda a, b: torch.stack([a, b]), (T(3, 4), T(4, 3)), RuntimeError,
         ("stack expects each tensor to be equal size",)),
    Case("squeeze dim out of range", lambda x: x.squeeze(3), (T(1, 3),), IndexError, ("Dimension out of range",)),
    Case("transpose dim out of range", lambda x: x.transpose(0, 2), (T(2, 3),), IndexError,
         ("Dimension out of range",)),
    Case("narrow past the end", lambda x: x.narrow(0, 2, 3), (T(4, 3),), RuntimeError, ("exceeds dimension size",)),
    # ---------------------------------------------------------------- elementwise broadcasting
    Case("add not broadcastable", torch.add, (T(3), T(4)), RuntimeError, ("must match the size of tensor",)),
    Case("mul not broadcastable", torch.mul, (T(2, 3), T(3, 2)), RuntimeError, ("must match the size of tensor",)),
    Case("where not broadcastable", lambda c, a, b: torch.where(c, a, b), (T(3, dtype=B), T(4), T(3)), RuntimeError,
         ("must match the size of tensor",)),
    Case("add_ into a smaller tensor", lambda a, b: a.add_(b), (T(3), T(2, 3)), RuntimeError,
         ("doesn't match the broadcast shape",)),
    Case("maximum not broadcastable", torch.maximum, (T(5), T(2)), RuntimeError, ("must match the size of tensor",)),
    Case("copy_ not broadcastable", lambda a, b: a.copy_(b), (T(3), T(4)), RuntimeError, ()),
    # ---------------------------------------------------------------- dtype misuse
    Case("int64 div_ by float", lambda a: a.div_(2.5), (T(3, dtype=L),), RuntimeError, ("can't be cast",)),
    Case("int64 add with float alpha", lambda a, b: torch.add(a, b, alpha=0.5), (T(3, dtype=L), T(3, dtype=L)),
         RuntimeError, ("alpha",)),
    Case("embedding float indices", F.embedding, (T(3), T(5, 4)), RuntimeError, ("indices",)),
    Case("layer_norm int64 input", lambda x: F.layer_norm(x, (4,)), (T(2, 4, dtype=L),), NotImplementedError,
         ("not implemented for 'Long'",)),
    # ---------------------------------------------------------------- tvk and CPU tensors mixed
    Case("mm tvk @ cpu", None, (T(3, 4), Cpu(T(4, 2))), RuntimeError, SAME_DEVICE, tvk_op=torch.mm),
    Case("add tvk + cpu", None, (T(3), Cpu(T(3))), RuntimeError, SAME_DEVICE, tvk_op=torch.add),
    Case("cat tvk, cpu", None, (T(3), Cpu(T(3))), RuntimeError, SAME_DEVICE, tvk_op=lambda a, b: torch.cat([a, b])),
    Case("linear cpu weight", None, (T(3, 4), Cpu(T(2, 4))), RuntimeError, SAME_DEVICE, tvk_op=F.linear),
    # ---------------------------------------------------------------- factories
    Case("empty negative size", lambda d: torch.empty(-1, device=d), ("device",), RuntimeError,
         ("Trying to create tensor with negative dimension -1: [-1]",)),
    Case("zeros negative size", lambda d: torch.zeros(2, -3, device=d), ("device",), RuntimeError, NEG_DIM),
    Case("full negative size", lambda d: torch.full((-2,), 1.0, device=d), ("device",), RuntimeError, NEG_DIM),
    Case("randn negative size", lambda d: torch.randn(4, -1, device=d), ("device",), RuntimeError, NEG_DIM),
    Case("new_empty negative size", lambda x: x.new_empty((3, -1)), (T(2),), RuntimeError, NEG_DIM),
    Case("arange step 0", lambda d: torch.arange(0, 4, 0, device=d), ("device",), RuntimeError,
         ("step must be nonzero",)),
    # ---------------------------------------------------------------- the memory cap
    Case("set_memory_limit negative", None, (-5,), ValueError, ("negative",), tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit unreadable", None, ("lots",), ValueError, ("size",), tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit wrong type", None, ([1],), TypeError, ("byte count",), tvk_op=torchvk.set_memory_limit),
]


def _args(case, device):
    gen = torch.Generator().manual_seed(0)
    return [device if a == "device" else build(a, device, gen) for a in case.args]


@pytest.fixture(autouse=True)
def _no_memory_cap():
    yield
    torchvk.set_memory_limit(None)


@pytest.mark.filterwarnings("ignore:Using a target size")  # mse/l1 loss warn before they raise
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_raises_torchs_error(case):
    if case.op is not None:  # the reference: torch itself refuses the call on the CPU
        with pytest.raises(case.error) as ref:
            case.op(*_args(case, "cpu"))
        assert type(ref.value) is case.error
        assert all(word in str(ref.value) for word in case.words), f"torch's own message changed: {ref.value}"
    with pytest.raises(Exception) as got:
        (case.tvk_op or case.op)(*_args(case, "tvk"))
    assert type(got.value) is case.error, f"tvk raised {type(got.value).__name__}: {got.value}"
    for word in case.words:
        assert word in str(got.value), f"{word!r} not in tvk's message: {got.value}"


def test_runtime_usable_after_bad_inputs():
    """Refused calls leave nothing behind: the next valid ops run and agree with the CPU."""
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with pytest.raises(RuntimeError):
        torch.mm(a.to("tvk"), torch.randn(5, 2, device="tvk"))
    torch.testing.assert_close((a.to("tvk") @ b.to("tvk")).cpu(), a @ b)


def test_a_repeated_call_is_checked_once(monkeypatch):
    """The meta-kernel check runs once per signature; later calls cost a dict lookup."""
    from torchvk import _checks

    runs = []
    meta_error = _checks._meta_error
    monkeypatch.setattr(_checks, "_meta_error", lambda f, a, k: runs.append(f) or meta_error(f, a, k))
    monkeypatch.setattr(_checks, "_passed", {})
    mm = torch.ops.aten.mm.default
    for _ in range(3):
        torch.randn(3, 5, device="tvk") @ torch.randn(5, 2, device="tvk")
    assert runs.count(mm) == 1
    torch.randn(4, 5, device="tvk") @ torch.randn(5, 2, device="tvk")  # another shape: checked again
    assert runs.count(mm) == 2
    with pytest.raises(RuntimeError):  # a refused call is not remembered
        torch.randn(3, 5, device="tvk") @ torch.randn(4, 2, device="tvk")
    with pytest.raises(RuntimeError):
        torch.randn(3, 5, device="tvk") @ torch.randn(4, 2, device="tvk")


def _between_nans(cpu, pad=67):
    """cpu's values on tvk, in a buffer whose elements right before and after them are NaN:
    a kernel that reads past either end of the operand puts NaN into its result."""
    n = cpu.numel()
    buf = torch.full((pad + n + pad,), float("nan"), device="tvk")
    inner = buf[pad:pad + n]
    inner.copy_(cpu.reshape(-1).to("tvk"))
    return inner.view(cpu.shape)


@pytest.mark.parametrize("M, K, N", [(5, 7, 3), (33, 65, 17)])
def test_mm_reads_only_its_operands(M, K, N):
    a, b = torch.randn(M, K), torch.randn(K, N)
    ta, tb = _between_nans(a), _between_nans(b)
    torch.testing.assert_close((ta @ tb).cpu(), a @ b, atol=1e-4, rtol=1e-4)
    bt = torch.randn(N, K)  # a transposed operand: strides (1, K)
    torch.testing.assert_close((ta @ _between_nans(bt).t()).cpu(), a @ bt.t(), atol=1e-4, rtol=1e-4)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):  # would read past B's end
        _between_nans(torch.randn(3, 8)) @ _between_nans(torch.randn(2, 2))


def test_elementwise_reads_only_its_operands():
    a, row, col = torch.randn(5, 7), torch.randn(7), torch.randn(5, 1)
    ta, trow, tcol = _between_nans(a), _between_nans(row), _between_nans(col)
    torch.testing.assert_close((ta + trow).cpu(), a + row)
    torch.testing.assert_close((ta * tcol).cpu(), a * col)
    torch.testing.assert_close((ta.t() - trow.unsqueeze(1)).cpu(), a.t() - row.unsqueeze(1))
    with pytest.raises(RuntimeError, match="must match the size of tensor"):
        ta + _between_nans(torch.randn(6))
