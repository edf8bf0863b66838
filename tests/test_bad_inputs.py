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
U8, I8, I16, I32 = torch.uint8, torch.int8, torch.int16, torch.int32


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
PARTIAL_OVERLAP = ("unsupported operation", "some elements of the input tensor and the written-to tensor refer to a "
                   "single memory location")
INTERNAL_OVERLAP = ("unsupported operation", "more than one element of the written-to tensor refers to a single "
                    "memory location")

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
    # ---------------------------------------------------------------- type promotion and scalars
    Case("bool ** -1", lambda a: a ** -1, (T(3, dtype=B),), RuntimeError, ("Integers to negative integer powers are not allowed.",)),
    Case("1 - bool", lambda a: 1 - a, (T(3, dtype=B),), RuntimeError, ("Subtraction, the `-` operator, with a bool tensor is not",)),
    Case("float - True", lambda a: a - True, (T(3),), RuntimeError, ("Subtraction, the `-` operator, with a bool tensor is not",)),
    Case("bool sub_ bool", lambda a, b: a.sub_(b), (T(3, dtype=B), T(3, dtype=B)), RuntimeError, ("Subtraction, the `-` operator",)),
    Case("float add bool alpha", lambda a, b: torch.add(a, b, alpha=True), (T(3), T(3)), RuntimeError, ("Boolean alpha only supported for Boolean results.",)),
    Case("int32 sub alpha 0.5", lambda a, b: torch.sub(a, b, alpha=0.5), (T(3, dtype=I32), T(3, dtype=I32)), RuntimeError, ("For integral input tensors, argument alpha must not be a",)),
    Case("int32 clamp max 2**40", lambda a: a.clamp(max=2**40), (T(3, dtype=I32),), RuntimeError, ("value cannot be converted to type int without overflow",)),
    Case("half clamp min -1e5", lambda a: a.clamp(min=-1e5), (T(3, dtype=H),), RuntimeError, ("value cannot be converted to type c10::Half without overflow",)),
    Case("float clamp_max 1e300", lambda a: torch.clamp_max(a, 1e300), (T(3),), RuntimeError, ("value cannot be converted to type float without overflow",)),
    Case("clamp without bounds", lambda a: torch.clamp(a), (T(3),), RuntimeError, ("At least one of 'min' or 'max' must not be None",)),
    Case("bool clamp", lambda a: a.clamp(min=True, max=True), (T(3, dtype=B),), NotImplementedError, ("not implemented for 'Bool'",)),
    Case("bool clamp_max", lambda a: torch.clamp_max(a, False), (T(3, dtype=B),), NotImplementedError, ("not implemented for 'Bool'",)),
    Case("int32 where scalar 2**40", lambda a, m: torch.where(m, a, 2**40), (T(3, dtype=I32), T(3, dtype=B)), RuntimeError, ("value cannot be converted to type int without overflow",)),
    Case("float where scalar 1e300", lambda a, m: torch.where(m, 1e300, a), (T(3), T(3, dtype=B)), RuntimeError, ("value cannot be converted to type float without overflow",)),
    Case("int16 where scalar 40000", lambda a, m: torch.where(m, a, 40000), (T(3, dtype=I16), T(3, dtype=B)), RuntimeError, ("value cannot be converted to type int16_t without overflow",)),
    Case("where int condition", lambda a, c: torch.where(c, a, a), (T(3), T(3, dtype=L)), RuntimeError, ("where expected condition to be a boolean tensor",)),
    Case("int8 masked_fill 200", lambda a, m: a.masked_fill(m, 200), (T(3, dtype=I8), T(3, dtype=B)), RuntimeError, ("value cannot be converted to type int8_t without overflow",)),
    Case("int32 ** 2**40", lambda a: a ** 2**40, (T(3, dtype=I32),), RuntimeError, ("value cannot be converted to type int without overflow",)),
    Case("half ** 1e5", lambda a: a ** 1e5, (T(3, dtype=H),), RuntimeError, ("value cannot be converted to type c10::Half without overflow",)),
    Case("int32 pow_ 0.5", lambda a: a.pow_(0.5), (T(3, dtype=I32),), RuntimeError, ("result type Float can't be cast to the desired output type Int",)),
    Case("bool ** bool", lambda a, b: a ** b, (T(3, dtype=B), T(3, dtype=B)), NotImplementedError, ("\"pow\" not implemented for 'Bool'",)),
    Case("True ** bool", lambda a: True ** a, (T(3, dtype=B),), NotImplementedError, ("\"pow\" not implemented for 'Bool'",)),
    Case("int64 // 0", lambda a: a // 0, (T(3, dtype=L),), RuntimeError, ("ZeroDivisionError",)),
    Case("int32 // 2**32 (wraps to 0)", lambda a: a // 2**32, (T(3, dtype=I32),), RuntimeError, ("ZeroDivisionError",)),
    Case("int32 % 2**32 (wraps to 0)", lambda a: a % 2**32, (T(3, dtype=I32),), RuntimeError, ("ZeroDivisionError",)),
    Case("uint8 % 256 (wraps to 0)", lambda a: a % 256, (T(3, dtype=U8),), RuntimeError, ("ZeroDivisionError",)),
    Case("int64 fmod 0", lambda a: torch.fmod(a, 0), (T(3, dtype=L),), RuntimeError, ("ZeroDivisionError",)),
    Case("int64 div floor by a zero tensor", lambda a, b: torch.div(a, b, rounding_mode="floor"), (T(3, dtype=L), T(3, dtype=L)), RuntimeError, ("ZeroDivisionError",)),
    Case("int32 div trunc by 0-dim int64 2**32", lambda a, b: torch.div(a, b, rounding_mode="trunc"), (T(3, dtype=I32), T(dtype=L)), RuntimeError, ("ZeroDivisionError",)),
    Case("2 % zero int tensor", lambda a: 2 % a, (T(3, dtype=I32),), RuntimeError, ("ZeroDivisionError",)),
    Case("int64 floor_divide_ 0", lambda a: a.floor_divide_(0), (T(3, dtype=L),), RuntimeError, ("ZeroDivisionError",)),
    Case("div rounding mode 'round'", lambda a: torch.div(a, 2, rounding_mode="round"), (T(3),), RuntimeError, ("div expected rounding_mode to be one of None, 'trunc', or 'floor'",)),
    Case("bool remainder", lambda a: a % True, (T(3, dtype=B),), NotImplementedError, ("\"remainder_cpu\" not implemented for 'Bool'",)),
    Case("bool fmod", lambda a, b: torch.fmod(a, b), (T(3, dtype=B), T(3, dtype=B)), NotImplementedError, ("\"fmod_cpu\" not implemented for 'Bool'",)),
    Case("bool div trunc", lambda a: torch.div(a, True, rounding_mode="trunc"), (T(3, dtype=B),), NotImplementedError, ("\"div_trunc_cpu\" not implemented for 'Bool'",)),
    Case("bool // bool", lambda a, b: a // b, (T(3, dtype=B), T(3, dtype=B)), NotImplementedError, ("\"div_floor_cpu\" not implemented for 'Bool'",)),
    Case("lerp end of another dtype", lambda a, b: torch.lerp(a, b, 0.5), (T(3), T(3, dtype=H)), RuntimeError, ("expected dtype",)),
    Case("half lerp weight 1e300", lambda a, b: torch.lerp(a, b, 1e300), (T(3, dtype=H), T(3, dtype=H)), RuntimeError, ("value cannot be converted to type float without overflow",)),
    Case("bool addcmul", lambda a: torch.addcmul(a, a, a), (T(3, dtype=B),), NotImplementedError, ("not implemented for 'Bool'",)),
    Case("int32 addcmul value 2**40", lambda a: torch.addcmul(a, a, a, value=2**40), (T(3, dtype=I32),), RuntimeError, ("value cannot be converted to type int without overflow",)),
    Case("float addcmul_ value 1e300", lambda a: a.addcmul_(a, a, value=1e300), (T(3),), RuntimeError, ("value cannot be converted to type float without overflow",)),
    Case("int32 threshold 2**40", lambda a: torch.threshold(a, 2**40, 0), (T(3, dtype=I32),), RuntimeError, ("value cannot be converted to type int without overflow",)),
    Case("half hardtanh 1e5", lambda a: F.hardtanh(a, -1e5, 1e5), (T(3, dtype=H),), RuntimeError, ("value cannot be converted to type c10::Half without overflow",)),
    Case("int64 += half 0-dim", lambda a, b: a.add_(b), (T(3, dtype=L), Cpu(T(dtype=H))), RuntimeError, ("result type Half can't be cast to the desired output type Long",)),
    Case("int32 += float tensor", lambda a, b: a.add_(b), (T(3, dtype=I32), T(3)), RuntimeError, ("result type Float can't be cast to the desired output type Int",)),
    Case("bool bitwise_or_ 3", lambda a: a.bitwise_or_(3), (T(3, dtype=B),), RuntimeError, ("result type Long can't be cast to the desired output type Bool",)),
    Case("bool clamp_ 0.5", lambda a: a.clamp_(max=0.5), (T(3, dtype=B),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int64 ** -1", lambda a: a ** -1, (T(3, dtype=L),), RuntimeError, ("Integers to negative integer powers are not allowed.",)),
    Case("int32 ** -2", lambda a: torch.pow(a, -2), (T(3, dtype=I32),), RuntimeError, ("Integers to negative integer powers are not allowed.",)),
    Case("int64 pow_ -1", lambda a: a.pow_(-1), (T(3, dtype=L),), RuntimeError, ("Integers to negative integer powers are not allowed.",)),
    Case("uint8 ** -1", lambda a: a ** -1, (T(3, dtype=U8),), RuntimeError, ("Integers to negative integer powers are not allowed.",)),
    Case("int64 += 0.5", lambda a: a.add_(0.5), (T(3, dtype=L),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int32 *= 1.5", lambda a: a.mul_(1.5), (T(3, dtype=I32),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int64 -= float tensor", lambda a, b: a.sub_(b), (T(3, dtype=L), T(3)), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int32 div_ int", lambda a: a.div_(2), (T(3, dtype=I32),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("bool add_ 1.5", lambda a: a.add_(1.5), (T(3, dtype=B),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("bool add_ 2", lambda a: a.add_(2), (T(3, dtype=B),), RuntimeError, ("result type Long can't be cast to the desired output type",)),
    Case("bool - bool", lambda a, b: a - b, (T(3, dtype=B), T(3, dtype=B)), RuntimeError, ("Subtraction, the `-` operator, with two bool tensors is not",)),
    Case("bool - True", lambda a: a - True, (T(3, dtype=B),), RuntimeError, ("Subtraction, the `-` operator, with two bool tensors is not",)),
    Case("-bool", lambda a: -a, (T(3, dtype=B),), RuntimeError, ("Negation, the `-` operator, on a bool tensor is not",)),
    Case("bool neg", lambda a: torch.neg(a), (T(3, dtype=B),), RuntimeError, ("Negation, the `-` operator, on a bool tensor is not",)),
    Case("int64 clamp_ 0.5", lambda a: a.clamp_(min=0.5), (T(3, dtype=L),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int32 + 2**40 alpha", lambda a, b: torch.add(a, b, alpha=2**40), (T(3, dtype=I32), T(3, dtype=I32)), RuntimeError, ("value cannot be converted to type int without overflow",)),
    Case("half add alpha 1e5", lambda a, b: torch.add(a, b, alpha=1e5), (T(3, dtype=H), T(3, dtype=H)), RuntimeError, ("value cannot be converted to type c10::Half without overflow",)),
    Case("int64 add bool alpha float", lambda a, b: torch.add(a, b, alpha=1.5), (T(3, dtype=L), T(3, dtype=B)), RuntimeError, ("For integral input tensors, argument alpha must not be a",)),
    Case("float bitwise_and", lambda a, b: torch.bitwise_and(a, b), (T(3), T(3)), NotImplementedError, ("\"bitwise_and_cpu\" not implemented for 'Float'",)),
    Case("float | int", lambda a: a | 1, (T(3),), NotImplementedError, ("\"bitwise_or_cpu\" not implemented for 'Float'",)),
    Case("float << 1", lambda a: a << 1, (T(3),), NotImplementedError, ("\"lshift_cpu\" not implemented for 'Float'",)),
    Case("int ^ 1.5", lambda a: a ^ 1.5, (T(3, dtype=L),), NotImplementedError, ("\"bitwise_xor_cpu\" not implemented for 'Float'",)),
    Case("bitwise_not float", lambda a: torch.bitwise_not(a), (T(3),), NotImplementedError, ("\"bitwise_not_cpu\" not implemented for 'Float'",)),
    Case("int64 remainder_ 1.5", lambda a: a.remainder_(1.5), (T(3, dtype=L),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int64 floor_divide_ 1.5", lambda a: a.floor_divide_(1.5), (T(3, dtype=L),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int32 div_ floor float", lambda a: a.div_(1.5, rounding_mode="floor"), (T(3, dtype=I32),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("bool lerp", lambda a, b: torch.lerp(a, b, 0.5), (T(3, dtype=B), T(3, dtype=B)), NotImplementedError, ("\"lerp_kernel_scalar\" not implemented for 'Bool'",)),
    Case("int64 lerp", lambda a, b: torch.lerp(a, b, 0.5), (T(3, dtype=L), T(3, dtype=L)), NotImplementedError, ("\"lerp_kernel_scalar\" not implemented for 'Long'",)),
    Case("int64 addcdiv", lambda a, b, c: torch.addcdiv(a, b, c), (T(3, dtype=L), T(3, dtype=L), T(3, dtype=L)), RuntimeError, ("Integer division with addcdiv is no longer supported, and",)),
    Case("int32 masked_fill 2**40", lambda a, m: a.masked_fill(m, 2**40), (T(3, dtype=I32), T(3, dtype=B)), RuntimeError, ("value cannot be converted to type int without overflow",)),
    Case("half masked_fill 1e6", lambda a, m: a.masked_fill(m, 1e6), (T(3, dtype=H), T(3, dtype=B)), RuntimeError, ("value cannot be converted to type c10::Half without overflow",)),
    Case("int32 fill_ 2**40", lambda a: a.fill_(2**40), (T(3, dtype=I32),), RuntimeError, ("value cannot be converted to type int without overflow",)),
    Case("uint8 full_like 300", lambda a: torch.full_like(a, 300), (T(3, dtype=U8),), RuntimeError, ("value cannot be converted to type uint8_t without overflow",)),
    Case("int64 sqrt_", lambda a: a.sqrt_(), (T(3, dtype=L),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int64 exp_", lambda a: a.exp_(), (T(3, dtype=L),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int64 sigmoid_", lambda a: a.sigmoid_(), (T(3, dtype=L),), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int32 true divide out int", lambda a, b, o: torch.div(a, b, out=o), (T(3, dtype=I32), T(3, dtype=I32), T(3, dtype=I32)), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("float add out int", lambda a, b, o: torch.add(a, b, out=o), (T(3), T(3), T(3, dtype=L)), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("float mul out bool", lambda a, o: torch.mul(a, 2, out=o), (T(3), T(3, dtype=B)), RuntimeError, ("result type Float can't be cast to the desired output type",)),
    Case("int64 clamp out int 0.5", lambda a, o: torch.clamp(a, 0.5, out=o), (T(3, dtype=L), T(3, dtype=L)), RuntimeError, ("Found dtype Long but expected Float",)),
    # ---------------------------------------------------------------- memory overlap (out= and in-place)
    Case("neg out= shifted over its input", lambda a: torch.neg(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("exp out= shifted over its input", lambda a: torch.exp(a[:4], out=a[2:6]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("sqrt out= shifted over its input", lambda a: torch.sqrt(a[1:5], out=a[:4]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("sin out= shifted over its input", lambda a: torch.sin(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("cos out= shifted over its input", lambda a: torch.cos(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("tanh out= shifted over its input", lambda a: torch.tanh(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("sigmoid out= shifted over its input", lambda a: torch.sigmoid(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("log out= shifted over its input", lambda a: torch.log(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("abs out= shifted over its input", lambda a: torch.abs(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("floor out= shifted over its input", lambda a: torch.floor(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("round out= shifted over its input", lambda a: torch.round(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("reciprocal out= shifted over its input", lambda a: torch.reciprocal(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("rsqrt out= shifted over its input", lambda a: torch.rsqrt(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("erf out= shifted over its input", lambda a: torch.erf(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("sign out= shifted over its input", lambda a: torch.sign(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("gelu out= shifted over its input", lambda a: torch._C._nn.gelu(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("silu out= shifted over its input", lambda a: torch._C._nn.silu(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("hardtanh out= shifted over its input", lambda a: torch._C._nn.hardtanh(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("leaky_relu out= shifted over its input", lambda a: torch._C._nn.leaky_relu(a[:4], 0.1, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("softplus out= shifted over its input", lambda a: torch._C._nn.softplus(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("nan_to_num out= shifted over its input", lambda a: torch.nan_to_num(a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("add out= shifted over self", lambda a, b: torch.add(a[:4], b, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("add out= shifted over other", lambda a, b: torch.add(b, a[:4], out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("mul out= shifted over its input", lambda a: torch.mul(a[:4], 2, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("sub out= shifted over its input", lambda a: torch.sub(a[:4], 1, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("div out= shifted over its input", lambda a: torch.div(a[:4], 3, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("pow out= shifted over its input", lambda a: torch.pow(a[:4], 2, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("atan2 out= shifted over its input", lambda a, b: torch.atan2(a[:4], b, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("remainder out= shifted over its input", lambda a: torch.remainder(a[:4], 1.5, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("fmod out= shifted over its input", lambda a: torch.fmod(a[:4], 1.5, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("maximum out= shifted over its input", lambda a, b: torch.maximum(a[:4], b, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("minimum out= shifted over its input", lambda a, b: torch.minimum(a[:4], b, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("hypot out= shifted over its input", lambda a, b: torch.hypot(a[:4], b, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("copysign out= shifted over its input", lambda a, b: torch.copysign(a[:4], b, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("logaddexp out= shifted over its input", lambda a, b: torch.logaddexp(a[:4], b, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("clamp out= shifted over its input", lambda a: torch.clamp(a[:4], -1, 1, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("clamp tensor bound shifted over out", lambda a: torch.clamp(a[4:8].clone(), min=a[:4], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("lerp out= shifted over its input", lambda a, b: torch.lerp(a[:4], b, 0.5, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("addcmul out= shifted over its input", lambda a, b: torch.addcmul(b, a[:4], b, out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("addcdiv out= shifted over its input", lambda a, b: torch.addcdiv(b, b, a[:4], out=a[1:5]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("where out= shifted over its input", lambda a: torch.where(a[:4] > 0, a[:4], a[4:8], out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("eq out= shifted over its input", lambda a: torch.eq(a[:4], 0, out=a[1:5]),
         (T(8, dtype=L),), RuntimeError, PARTIAL_OVERLAP),
    Case("bitwise_and out= shifted over its input", lambda a: torch.bitwise_and(a[:4], 3, out=a[1:5]),
         (T(8, dtype=L),), RuntimeError, PARTIAL_OVERLAP),
    Case("add_ other shifted over self", lambda a: a[1:5].add_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("add_ other the transpose of self", lambda a: a.add_(a.t()), (T(3, 3),), RuntimeError, PARTIAL_OVERLAP),
    Case("add_ other a row of self", lambda a: a.add_(a[0]), (T(3, 4),), RuntimeError, PARTIAL_OVERLAP),
    Case("mul_ other shifted over self", lambda a: a[1:5].mul_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("sub_ other shifted over self", lambda a: a[:4].sub_(a[2:6]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("div_ other shifted over self", lambda a: a[1:5].div_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("atan2_ other shifted over self", lambda a: a[1:5].atan2_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("remainder_ other shifted over self", lambda a: a[1:5].remainder_(a[:4]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("fmod_ other shifted over self", lambda a: a[1:5].fmod_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("hypot_ other shifted over self", lambda a: a[1:5].hypot_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("copysign_ other shifted over self", lambda a: a[1:5].copysign_(a[:4]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("xlogy_ other shifted over self", lambda a: a[1:5].xlogy_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("floor_divide_ other shifted over self", lambda a: a[1:5].floor_divide_(a[:4]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("eq_ other shifted over self", lambda a: a[1:5].eq_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("lt_ other shifted over self", lambda a: a[1:5].lt_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("clamp_ min shifted over self", lambda a: a[1:5].clamp_(min=a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("clamp_max_ shifted over self", lambda a: a[1:5].clamp_max_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("lerp_ end shifted over self", lambda a: a[1:5].lerp_(a[:4], 0.3), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("lerp_ weight shifted over self", lambda a, b: a[1:5].lerp_(b, a[:4]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("addcmul_ tensor shifted over self", lambda a, b: a[1:5].addcmul_(a[:4], b),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("addcdiv_ tensor shifted over self", lambda a, b: a[1:5].addcdiv_(b, a[:4]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("logical_and_ shifted over self", lambda a: a[1:5].logical_and_(a[:4]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("bitwise_or_ shifted over self", lambda a: a[1:5].bitwise_or_(a[:4]),
         (T(8, dtype=L),), RuntimeError, PARTIAL_OVERLAP),
    Case("copy_ shifted over its source", lambda a: a[1:5].copy_(a[:4]), (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("copy_ from its own transpose", lambda a: a.copy_(a.t()), (T(3, 3),), RuntimeError, PARTIAL_OVERLAP),
    Case("setitem from a shifted slice", lambda a: a.__setitem__(slice(1, 5), a[:4]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("add_ into an expand", lambda a: a[:1].expand(3).add_(1), (T(2),), RuntimeError, INTERNAL_OVERLAP),
    Case("mul_ into an expand", lambda a, b: a[:1].expand(3).mul_(b), (T(2), T(3)), RuntimeError, INTERNAL_OVERLAP),
    Case("relu_ of an expand", lambda a: a[:1].expand(4).relu_(), (T(2),), RuntimeError, INTERNAL_OVERLAP),
    Case("exp_ of an expand", lambda a: a.expand(2, 3).exp_(), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("tanh_ of an expand", lambda a: a.expand(2, 3).tanh_(), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("sigmoid_ of an expand", lambda a: a.expand(2, 3).sigmoid_(), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("neg_ of an expand", lambda a: a.expand(2, 3).neg_(), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("sqrt_ of an expand", lambda a: a.expand(2, 3).sqrt_(), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("floor_ of an expand", lambda a: a.expand(2, 3).floor_(), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("clamp_ of an expand", lambda a: a.expand(2, 3).clamp_(0, 1), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("clamp_min_ of an expand", lambda a: a.expand(2, 3).clamp_min_(0), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("hardtanh_ of an expand", lambda a: F.hardtanh_(a.expand(2, 3)), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("leaky_relu_ of an expand", lambda a: F.leaky_relu_(a.expand(2, 3)), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("silu inplace of an expand", lambda a: F.silu(a.expand(2, 3), inplace=True),
         (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("gelu_ of an expand", lambda a: torch._C._nn.gelu_(a.expand(2, 3)), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("pow_ of an expand", lambda a: a.expand(2, 3).pow_(2), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("div_ of an expand", lambda a: a.expand(2, 3).div_(2), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("lerp_ of an expand", lambda a, b: a.expand(2, 3).lerp_(b, 0.5),
         (T(3), T(2, 3)), RuntimeError, INTERNAL_OVERLAP),
    Case("addcmul_ of an expand", lambda a, b: a.expand(2, 3).addcmul_(b, b),
         (T(3), T(2, 3)), RuntimeError, INTERNAL_OVERLAP),
    Case("round_ of an expand", lambda a: a.expand(2, 3).round_(), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("eq_ of an expand", lambda a: a.expand(2, 3).eq_(0), (T(3),), RuntimeError, INTERNAL_OVERLAP),
    Case("copy_ into an expand", lambda a, b: a.expand(2, 3).copy_(b), (T(3), T(2, 3)), RuntimeError, INTERNAL_OVERLAP),
    Case("neg out= an expand", lambda a, o: torch.neg(a, out=o.expand(4)),
         (T(4), T(1)), RuntimeError, INTERNAL_OVERLAP),
    Case("add out= an expand", lambda a, o: torch.add(a, 1, out=o.expand(2, 4)),
         (T(2, 4), T(4)), RuntimeError, INTERNAL_OVERLAP),
    Case("clamp out= an expand", lambda a, o: torch.clamp(a, 0, 1, out=o.expand(4)),
         (T(4), T(1)), RuntimeError, INTERNAL_OVERLAP),
    Case("mm out= an expand", lambda a, o: torch.mm(a, a, out=o.expand(3, 3)),
         (T(3, 3), T(3)), RuntimeError, INTERNAL_OVERLAP),
    Case("addmm out= an expand", lambda a, o: torch.addmm(a, a, a, out=o.expand(3, 3)),
         (T(3, 3), T(3)), RuntimeError, INTERNAL_OVERLAP),
    Case("matmul out= an expand", lambda a, o: torch.matmul(a, a, out=o.expand(3, 3)),
         (T(3, 3), T(3)), RuntimeError, INTERNAL_OVERLAP),
    Case("addmm_ of an expand", lambda a, m: a.expand(3, 3).addmm_(m, m),
         (T(3), T(3, 3)), RuntimeError, INTERNAL_OVERLAP),
    Case("cumsum out= an expand", lambda a, o: torch.cumsum(a, 0, out=o.expand(4)),
         (T(4), T(1)), RuntimeError, INTERNAL_OVERLAP),
    Case("cumsum out= shifted over its input", lambda a: torch.cumsum(a[:4], 0, out=a[1:5]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("cat out= an expand", lambda a, o: torch.cat([a, a], out=o.expand(6)),
         (T(3), T(1)), RuntimeError, INTERNAL_OVERLAP),
    Case("cat out= one of its inputs", lambda a: torch.cat([a[:2], a[2:4]], out=a[:4]),
         (T(6),), RuntimeError, PARTIAL_OVERLAP),
    Case("cat out= over its inputs", lambda a: torch.cat([a[:2], a[2:4]], out=a[1:5]),
         (T(6),), RuntimeError, PARTIAL_OVERLAP),
    Case("cat out= over a 2-D input", lambda a: torch.cat([a[:1], a[1:2]], out=a[1:3]),
         (T(4, 2),), RuntimeError, PARTIAL_OVERLAP),
    Case("stack out= over its inputs", lambda a: torch.stack([a[:2], a[2:4]], out=a[1:5].view(2, 2)),
         (T(6),), RuntimeError, PARTIAL_OVERLAP),
    Case("index_select out= its input", lambda a, i: torch.index_select(a, 0, i, out=a),
         (T(3, 2), T(3, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_select out= part of its input", lambda a, i: torch.index_select(a, 0, i, out=a[:2]),
         (T(3, 2), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_select out= its index", lambda a, i: torch.index_select(a, 0, i, out=i),
         (T(5, dtype=L), T(3, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_select out= an expand", lambda a, i, o: torch.index_select(a, 0, i, out=o.expand(2, 3)),
         (T(4, 3), T(2, dtype=L), T(3)), RuntimeError, INTERNAL_OVERLAP),
    Case("gather out= its input", lambda a, i: torch.gather(a, 1, i, out=a),
         (T(3, 3), T(3, 3, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("gather out= an expand", lambda a, i, o: torch.gather(a, 1, i, out=o.expand(3, 2)),
         (T(3, 3), T(3, 2, dtype=L), T(2)), RuntimeError, INTERNAL_OVERLAP),
    Case("scatter_ src= self", lambda a, i: a.scatter_(0, i, a), (T(4), T(4, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("scatter_ src shifted over self", lambda a, i: a[1:5].scatter_(0, i, a[:4]),
         (T(6), T(4, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("scatter_ index= self", lambda a: a.scatter_(0, a, 1), (T(4, dtype=L),), RuntimeError, PARTIAL_OVERLAP),
    Case("scatter_ of an expand", lambda a, i, s: a.expand(4).scatter_(0, i, s),
         (T(1), T(2, dtype=L), T(2)), RuntimeError, INTERNAL_OVERLAP),
    Case("scatter out= its src", lambda a, i, s: torch.scatter(a, 0, i, s, out=s),
         (T(4), T(4, dtype=L), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("scatter_add_ src= self", lambda a, i: a.scatter_add_(0, i, a),
         (T(4), T(4, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("scatter_add_ index= self", lambda a, s: a.scatter_add_(0, a, s),
         (T(4, dtype=L), T(4, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("scatter_reduce_ src= self", lambda a, i: a.scatter_reduce_(0, i, a, "amax"),
         (T(4), T(4, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_put_ values from self", lambda a, i: a.index_put_((i,), a[1:3]),
         (T(6), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_put_ accumulate values from self", lambda a, i: a.index_put_((i,), a[1:3], accumulate=True),
         (T(6), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_put_ indices= self", lambda a, v: a.index_put_((a[:2],), v),
         (T(4, dtype=L), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("setitem index tensor values from self", lambda a, i: a.__setitem__(i, a[2:4]),
         (T(6), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_add_ source from self", lambda a, i: a.index_add_(0, i, a[1:3]),
         (T(6), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_copy_ source from self", lambda a, i: a.index_copy_(0, i, a[1:3]),
         (T(6), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("index_fill_ index= self", lambda a: a.index_fill_(0, a[:1], 0),
         (T(4, dtype=L),), RuntimeError, PARTIAL_OVERLAP),
    Case("put_ source from self", lambda a, i: a.put_(i, a[1:3]), (T(6), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("put_ index= self", lambda a, v: a.put_(a[:2], v),
         (T(4, dtype=L), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("take out= its input", lambda a, i: torch.take(a, i, out=a[:2]),
         (T(6), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("take out= its index", lambda a, i: torch.take(a, i, out=i),
         (T(6, dtype=L), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("sort out= values over its input", lambda a, i: torch.sort(a[:4], out=(a[1:5], i)),
         (T(6), T(4, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("topk out= values over its input", lambda a, i: torch.topk(a[:4], 2, out=(a[1:3], i)),
         (T(6), T(2, dtype=L)), RuntimeError, PARTIAL_OVERLAP),
    Case("_foreach_add_ list shifted over self", lambda a: torch._foreach_add_([a[1:5]], [a[:4]]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("_foreach_mul_ list shifted over self", lambda a, b: torch._foreach_mul_([b, a[1:5]], [b, a[:4]]),
         (T(8), T(3)), RuntimeError, PARTIAL_OVERLAP),
    Case("_foreach_add_ of an expand", lambda a: torch._foreach_add_([a.expand(3)], 1.0),
         (T(1),), RuntimeError, INTERNAL_OVERLAP),
    Case("_foreach_copy_ shifted over self", lambda a: torch._foreach_copy_([a[1:5]], [a[:4]]),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("_foreach_lerp_ end shifted over self", lambda a: torch._foreach_lerp_([a[1:5]], [a[:4]], 0.5),
         (T(8),), RuntimeError, PARTIAL_OVERLAP),
    Case("_foreach_addcmul_ shifted over self", lambda a, b: torch._foreach_addcmul_([a[1:5]], [a[:4]], [b]),
         (T(8), T(4)), RuntimeError, PARTIAL_OVERLAP),
    Case("_foreach_neg_ of an expand", lambda a: torch._foreach_neg_([a.expand(3)]),
         (T(1),), RuntimeError, INTERNAL_OVERLAP),
    # ---------------------------------------------------------------- small integer dtypes (uint8, int8, int16)
    Case("uint8 clamp max 300", lambda x: x.clamp(0, 300), (T(3, dtype=U8),), RuntimeError,
         ("value cannot be converted to type uint8_t without overflow",)),
    Case("uint8 clamp min -256", lambda x: x.clamp(min=-256), (T(3, dtype=U8),), RuntimeError, ("uint8_t", "overflow")),
    Case("uint8 clip max 256", lambda x: torch.clip(x, 0, 256), (T(3, dtype=U8),), RuntimeError, ("uint8_t", "overflow")),
    Case("uint8 clamp_min 300", lambda x: torch.clamp_min(x, 300), (T(3, dtype=U8),), RuntimeError, ("overflow",)),
    Case("uint8 clamp_ max 300", lambda x: x.clamp_(max=300), (T(3, dtype=U8),), RuntimeError, ("overflow",)),
    Case("int8 clamp max 128", lambda x: x.clamp(max=128), (T(3, dtype=I8),), RuntimeError, ("int8_t", "overflow")),
    Case("int8 clamp min -129", lambda x: x.clamp(min=-129), (T(3, dtype=I8),), RuntimeError, ("int8_t", "overflow")),
    Case("int8 clamp_max -200", lambda x: torch.clamp_max(x, -200), (T(3, dtype=I8),), RuntimeError, ("overflow",)),
    Case("int16 clamp max 32768", lambda x: x.clamp(0, 32768), (T(3, dtype=I16),), RuntimeError, ("int16_t", "overflow")),
    Case("int16 hardtanh 40000", lambda x: F.hardtanh(x, -40000, 40000), (T(3, dtype=I16),), RuntimeError,
         ("int16_t", "overflow")),
    Case("uint8 clamp_ float bound", lambda x: x.clamp_(0, 2.5), (T(3, dtype=U8),), RuntimeError, ("can't be cast",)),
    Case("uint8 fill_ 256", lambda x: x.fill_(256), (T(3, dtype=U8),), RuntimeError, ("uint8_t", "overflow")),
    Case("uint8 fill_ -256", lambda x: x.fill_(-256), (T(3, dtype=U8),), RuntimeError, ("uint8_t", "overflow")),
    Case("uint8 fill_ -1.5", lambda x: x.fill_(-1.5), (T(3, dtype=U8),), RuntimeError, ("uint8_t", "overflow")),
    Case("uint8 fill_ 255.5", lambda x: x.fill_(255.5), (T(3, dtype=U8),), RuntimeError, ("uint8_t", "overflow")),
    Case("uint8 fill_ inf", lambda x: x.fill_(float("inf")), (T(3, dtype=U8),), RuntimeError, ("overflow",)),
    Case("int8 fill_ 128", lambda x: x.fill_(128), (T(3, dtype=I8),), RuntimeError, ("int8_t", "overflow")),
    Case("int8 fill_ -129", lambda x: x.fill_(-129), (T(3, dtype=I8),), RuntimeError, ("int8_t", "overflow")),
    Case("int16 fill_ 32768", lambda x: x.fill_(32768), (T(5, dtype=I16),), RuntimeError, ("int16_t", "overflow")),
    Case("int16 fill_ nan", lambda x: x.fill_(float("nan")), (T(3, dtype=I16),), RuntimeError, ("int16_t", "overflow")),
    Case("uint8 zero_ of a strided view fill 300", lambda x: x[::2].fill_(300), (T(6, dtype=U8),), RuntimeError,
         ("overflow",)),
    Case("uint8 full 300", lambda d: torch.full((2,), 300, dtype=U8, device=d), ("device",), RuntimeError,
         ("uint8_t", "overflow")),
    Case("int8 full -200", lambda d: torch.full((2,), -200, dtype=I8, device=d), ("device",), RuntimeError,
         ("int8_t", "overflow")),
    Case("int16 full 1e5", lambda d: torch.full((2, 2), 1e5, dtype=I16, device=d), ("device",), RuntimeError,
         ("int16_t", "overflow")),
    Case("uint8 new_full 300", lambda x: x.new_full((2,), 300), (T(3, dtype=U8),), RuntimeError, ("overflow",)),
    Case("int8 full_like 128", lambda x: torch.full_like(x, 128), (T(3, dtype=I8),), RuntimeError, ("overflow",)),
    Case("uint8 index_fill 300", lambda x, i: x.index_fill(0, i, 300), (T(3, dtype=U8), T(1, dtype=L)), RuntimeError,
         ("overflow",)),
    Case("int16 index_fill -40000", lambda x, i: x.index_fill(0, i, -40000), (T(3, dtype=I16), T(1, dtype=L)),
         RuntimeError, ("overflow",)),
    Case("uint8 fill_diagonal_ 300", lambda x: x.fill_diagonal_(300), (T(3, 3, dtype=U8),), RuntimeError, ("overflow",)),
    Case("uint8 scatter value 300", lambda x, i: x.scatter(0, i, 300), (T(3, dtype=U8), T(1, dtype=L)), RuntimeError,
         ("overflow",)),
    Case("uint8 where other 700", lambda c, x: torch.where(c, x, 700), (T(3, dtype=B), T(3, dtype=U8)), RuntimeError,
         ("uint8_t", "overflow")),
    Case("int8 where self -129", lambda c, x: torch.where(c, -129, x), (T(3, dtype=B), T(3, dtype=I8)), RuntimeError,
         ("int8_t", "overflow")),
    Case("int16 where 2**40", lambda c, x: torch.where(c, x, 2 ** 40), (T(3, dtype=B), T(3, dtype=I16)), RuntimeError,
         ("int16_t", "overflow")),
    Case("uint8 masked_fill 300", lambda x, m: x.masked_fill(m, 300), (T(3, dtype=U8), T(3, dtype=B)), RuntimeError,
         ("uint8_t", "overflow")),
    Case("uint8 masked_fill -1.5", lambda x, m: x.masked_fill(m, -1.5), (T(3, dtype=U8), T(3, dtype=B)), RuntimeError,
         ("uint8_t", "overflow")),
    Case("uint8 masked_fill nan", lambda x, m: x.masked_fill(m, float("nan")), (T(3, dtype=U8), T(3, dtype=B)),
         RuntimeError, ("overflow",)),
    Case("int8 masked_fill_ 128", lambda x, m: x.masked_fill_(m, 128), (T(3, dtype=I8), T(3, dtype=B)), RuntimeError,
         ("int8_t", "overflow")),
    Case("int16 masked_fill -40000", lambda x, m: x.masked_fill(m, -40000), (T(3, dtype=I16), T(3, dtype=B)),
         RuntimeError, ("int16_t", "overflow")),
    Case("uint8 add alpha 300", lambda x: torch.add(x, x, alpha=300), (T(3, dtype=U8),), RuntimeError, ("overflow",)),
    Case("uint8 sub alpha -256", lambda x: torch.sub(x, x, alpha=-256), (T(3, dtype=U8),), RuntimeError,
         ("overflow",)),
    Case("int8 add alpha 128", lambda x: torch.add(x, 1, alpha=128), (T(3, dtype=I8),), RuntimeError, ("overflow",)),
    Case("int16 add_ alpha 40000", lambda x: x.add_(x, alpha=40000), (T(3, dtype=I16),), RuntimeError, ("overflow",)),
    Case("uint8 add float alpha", lambda x: torch.add(x, x, alpha=0.5), (T(3, dtype=U8),), RuntimeError,
         ("alpha must not be a floating point",)),
    Case("uint8 threshold 300", lambda x: F.threshold(x, 300, 0), (T(3, dtype=U8),), RuntimeError, ("overflow",)),
    Case("int8 threshold value 200", lambda x: F.threshold(x, 0, 200), (T(3, dtype=I8),), RuntimeError, ("overflow",)),
    Case("uint8 pow 300", lambda x: x.pow(300), (T(3, dtype=U8),), RuntimeError, ("overflow",)),
    Case("uint8 addcmul value 300", lambda x: x.addcmul(x, x, value=300), (T(3, dtype=U8),), RuntimeError,
         ("overflow",)),
    Case("int8 pow -1", lambda x: x.pow(-1), (T(3, dtype=I8),), RuntimeError,
         ("Integers to negative integer powers are not allowed",)),
    Case("uint8 ** -2", lambda x: x ** -2, (T(3, dtype=U8),), RuntimeError, ("negative integer powers",)),
    Case("int16 pow_ -2", lambda x: x.pow_(-2), (T(3, dtype=I16),), RuntimeError, ("negative integer powers",)),
    Case("uint8 // 0", lambda x: x // 0, (T(3, dtype=U8),), RuntimeError, ("ZeroDivisionError",)),
    Case("uint8 // 256 (0 in uint8)", lambda x: x // 256, (T(3, dtype=U8),), RuntimeError, ("ZeroDivisionError",)),
    Case("int8 % 256 (0 in int8)", lambda x: x % 256, (T(3, dtype=I8),), RuntimeError, ("ZeroDivisionError",)),
    Case("int16 // 65536 (0 in int16)", lambda x: x // 65536, (T(3, dtype=I16),), RuntimeError,
         ("ZeroDivisionError",)),
    Case("uint8 remainder 0", lambda x: torch.remainder(x, 0), (T(3, dtype=U8),), RuntimeError, ("ZeroDivisionError",)),
    Case("uint8 remainder_ 256", lambda x: x.remainder_(256), (T(3, dtype=U8),), RuntimeError, ("ZeroDivisionError",)),
    Case("int8 fmod 0", lambda x: torch.fmod(x, 0), (T(3, dtype=I8),), RuntimeError, ("ZeroDivisionError",)),
    Case("int8 fmod zero tensor", torch.fmod, (T(3, dtype=I8), T(3, dtype=I8)), RuntimeError, ("ZeroDivisionError",)),
    Case("uint8 div floor 0", lambda x: torch.div(x, 0, rounding_mode="floor"), (T(3, dtype=U8),), RuntimeError,
         ("ZeroDivisionError",)),
    Case("int16 div trunc 65536", lambda x: torch.div(x, 65536, rounding_mode="trunc"), (T(3, dtype=I16),),
         RuntimeError, ("ZeroDivisionError",)),
    Case("uint8 // zero tensor", lambda x, y: x // y, (T(3, dtype=U8), T(3, dtype=U8)), RuntimeError,
         ("ZeroDivisionError",)),
    Case("int8 floor_divide_ 0", lambda x: x.floor_divide_(0), (T(3, dtype=I8),), RuntimeError,
         ("ZeroDivisionError",)),
    Case("uint8 mean", torch.mean, (T(3, 4, dtype=U8),), RuntimeError, ("mean(): could not infer output dtype", "Byte")),
    Case("int8 mean dim", lambda x: x.mean(0), (T(3, 4, dtype=I8),), RuntimeError, ("could not infer output dtype",)),
    Case("int16 mean", torch.mean, (T(3, dtype=I16),), RuntimeError, ("could not infer output dtype", "Short")),
    Case("uint8 var", torch.var, (T(3, dtype=U8),), RuntimeError, ("floating point",)),
    Case("int16 std", torch.std, (T(3, dtype=I16),), RuntimeError, ("floating point",)),
    Case("uint8 nanmean", torch.nanmean, (T(3, dtype=U8),), RuntimeError, ("nanmean(): expected input to have floating",)),
    Case("uint8 quantile", lambda x: x.quantile(0.5), (T(3, dtype=U8),), RuntimeError,
         ("quantile() input tensor must be either float or double dtype",)),
    Case("uint8 add_ float", lambda x: x.add_(1.5), (T(3, dtype=U8),), RuntimeError, ("can't be cast",)),
    Case("int8 mul_ float", lambda x: x.mul_(0.5), (T(3, dtype=I8),), RuntimeError, ("can't be cast",)),
    Case("int16 div_", lambda x: x.div_(2), (T(3, dtype=I16),), RuntimeError, ("can't be cast",)),
    Case("uint8 sqrt_", lambda x: x.sqrt_(), (T(3, dtype=U8),), RuntimeError, ("can't be cast",)),
    Case("int8 sigmoid_", lambda x: x.sigmoid_(), (T(3, dtype=I8),), RuntimeError, ("can't be cast",)),
    Case("uint8 add_ out of float", lambda x: torch.add(x, 1.5, out=x), (T(3, dtype=U8),), RuntimeError,
         ("can't be cast",)),
    Case("int8 dropout", lambda x: F.dropout(x, 0.5), (T(3, dtype=I8),), RuntimeError, ("can't be cast",)),
    Case("uint8 softmax", lambda x: torch.softmax(x, 0), (T(3, dtype=U8),), NotImplementedError,
         ("not implemented for 'Byte'",)),
    Case("int8 log_softmax", lambda x: F.log_softmax(x, 0), (T(3, dtype=I8),), NotImplementedError,
         ("not implemented for 'Char'",)),
    Case("int16 cross_entropy", lambda x, t: F.cross_entropy(x, t), (T(2, 3, dtype=I16), T(2, dtype=L)),
         NotImplementedError, ("not implemented for 'Short'",)),
    Case("uint8 lerp", lambda x: x.lerp(x, 0.5), (T(3, dtype=U8),), NotImplementedError, ("not implemented for 'Byte'",)),
    Case("int16 lerp tensor weight", lambda x: x.lerp(x, x), (T(3, dtype=I16),), NotImplementedError,
         ("not implemented for 'Short'",)),
    Case("int8 lerp_", lambda x: x.lerp_(x, 0.5), (T(3, dtype=I8),), NotImplementedError, ("not implemented for 'Char'",)),
    Case("int8 leaky_relu", F.leaky_relu, (T(3, dtype=I8),), NotImplementedError, ("not implemented for 'Char'",)),
    Case("uint8 elu", F.elu, (T(3, dtype=U8),), NotImplementedError, ("not implemented for 'Byte'",)),
    Case("int16 frac", torch.frac, (T(3, dtype=I16),), NotImplementedError, ("not implemented for 'Short'",)),
    Case("uint8 gelu", F.gelu, (T(3, dtype=U8),), NotImplementedError, ("not implemented for 'Byte'",)),
    Case("int8 silu", F.silu, (T(3, dtype=I8),), NotImplementedError, ("not implemented for 'Char'",)),
    Case("int16 softplus", F.softplus, (T(3, dtype=I16),), NotImplementedError, ("not implemented for 'Short'",)),
    Case("uint8 hardshrink", F.hardshrink, (T(3, dtype=U8),), NotImplementedError, ("not implemented for 'Byte'",)),
    Case("int8 prelu", lambda x: F.prelu(x, x[:1]), (T(3, dtype=I8),), NotImplementedError,
         ("not implemented for 'Char'",)),
    Case("int8 hypot", torch.hypot, (T(3, dtype=I8), T(3, dtype=I8)), NotImplementedError,
         ("not implemented for 'Char'",)),
    Case("int16 logaddexp", torch.logaddexp, (T(3, dtype=I16), T(3, dtype=I16)), NotImplementedError,
         ("not implemented for 'Short'",)),
    Case("int8 nextafter", torch.nextafter, (T(3, dtype=I8), T(3, dtype=I8)), NotImplementedError,
         ("not implemented for 'Char'",)),
    Case("uint8 layer_norm", lambda x: F.layer_norm(x, (3,)), (T(2, 3, dtype=U8),), NotImplementedError,
         ("not implemented for 'Byte'",)),
    Case("uint8 mse_loss", F.mse_loss, (T(3, dtype=U8), T(3, dtype=U8)), NotImplementedError,
         ("not implemented for 'Byte'",)),
    Case("uint8 logcumsumexp", lambda x: x.logcumsumexp(0), (T(3, dtype=U8),), NotImplementedError,
         ("not implemented for 'Byte'",)),
    Case("uint8 round decimals", lambda x: x.round(decimals=1), (T(3, dtype=U8),), NotImplementedError,
         ("not implemented for 'Byte'",)),
    Case("uint8 uniform_", lambda x: x.uniform_(), (T(3, dtype=U8),), NotImplementedError,
         ("not implemented for 'Byte'",)),
    Case("int8 normal_", lambda x: x.normal_(), (T(3, dtype=I8),), NotImplementedError, ("not implemented for 'Char'",)),
    Case("uint8 exponential_", lambda x: x.exponential_(), (T(3, dtype=U8),), RuntimeError,
         ("dtype must be a floating point",)),
    Case("uint8 random_ to 300", lambda x: x.random_(0, 300), (T(3, dtype=U8),), RuntimeError,
         ("to - 1 is out of bounds for unsigned char",)),
    Case("uint8 random_ from -1", lambda x: x.random_(-1, 5), (T(3, dtype=U8),), RuntimeError,
         ("from is out of bounds for unsigned char",)),
    Case("int8 random_ from -200", lambda x: x.random_(-200, 0), (T(3, dtype=I8),), RuntimeError,
         ("from is out of bounds for signed char",)),
    Case("int16 random_ to 2**20", lambda x: x.random_(2 ** 20), (T(3, dtype=I16),), RuntimeError,
         ("to - 1 is out of bounds for short",)),
    Case("uint8 randint_like 300", lambda x: torch.randint_like(x, 300), (T(3, dtype=U8),), RuntimeError,
         ("out of bounds for unsigned char",)),
    Case("float & uint8", lambda a, b: a & b, (T(3), T(3, dtype=U8)), NotImplementedError, ("bitwise_and",)),
    Case("uint8 | float", lambda a, b: a | b, (T(3, dtype=U8), T(3)), NotImplementedError, ("bitwise_or",)),
    Case("uint8 << 1.5", lambda x: x << 1.5, (T(3, dtype=U8),), NotImplementedError, ("not implemented for 'Float'",)),
    Case("int8 >> float tensor", lambda x, y: x >> y, (T(3, dtype=I8), T(3)), NotImplementedError,
         ("not implemented for 'Float'",)),
    Case("uint8 embedding indices", F.embedding, (T(3, dtype=U8), T(5, 4)), RuntimeError, ("indices",)),
    Case("int8 index_select index", lambda w, i: w.index_select(0, i), (T(4), T(2, dtype=I8)), RuntimeError,
         ("Expected dtype int32 or int64 for index",)),
    Case("int16 gather index", lambda w, i: w.gather(0, i), (T(4), T(2, dtype=I16)), RuntimeError,
         ("Expected dtype int32/int64 for index",)),
    Case("uint8 one_hot", F.one_hot, (T(3, dtype=U8),), RuntimeError, ("one_hot is only applicable to index tensor",)),
    Case("uint8 mask of the wrong shape", lambda x, m: x[m], (T(3, dtype=U8), T(4, dtype=U8)), IndexError,
         ("The shape of the mask [4] at index 0 does not match",)),
    Case("uint8 view as int16, odd size", lambda x: x.view(torch.int16), (T(3, dtype=U8),), RuntimeError,
         ("must be divisible by 2",)),
    Case("int8 topk k past the size", lambda x: x.topk(5), (T(3, dtype=I8),), RuntimeError,
         ("selected index k out of range",)),
    Case("int16 kthvalue k past the size", lambda x: x.kthvalue(5), (T(3, dtype=I16),), RuntimeError,
         ("out of range",)),
    Case("uint8 heaviside of mixed dtypes", lambda x: torch.heaviside(x, x.float()), (T(3, dtype=U8),), RuntimeError,
         ("heaviside is not yet implemented for tensors with different dtypes",)),
    Case("uint8 addcdiv", lambda x: x.addcdiv(x, x), (T(3, dtype=U8),), RuntimeError,
         ("Integer division with addcdiv is no longer supported",)),
    Case("uint8 bincount of 2-D", torch.bincount, (T(2, 2, dtype=U8),), RuntimeError, ("1-d non-negative integral",)),
    Case("uint8 add not broadcastable", torch.add, (T(3, dtype=U8), T(4, dtype=U8)), RuntimeError,
         ("must match the size of tensor",)),
    Case("int8 where not broadcastable", torch.where, (T(3, dtype=B), T(4, dtype=I8), T(3, dtype=I8)), RuntimeError,
         ("must match the size of tensor",)),
    Case("int16 copy_ not broadcastable", lambda a, b: a.copy_(b), (T(3, dtype=I16), T(4, dtype=U8)), RuntimeError, ()),
    Case("uint8 << not broadcastable", lambda a, b: a << b, (T(3, dtype=U8), T(2, dtype=U8)), RuntimeError,
         ("must match the size of tensor",)),
    Case("int8 sum dim out of range", lambda x: x.sum(1), (T(4, dtype=I8),), IndexError, ("Dimension out of range",)),
    Case("uint8 max over empty dim", lambda x: torch.max(x, 0), (T(0, 3, dtype=U8),), IndexError,
         ("Expected reduction dim 0 to have non-zero size",)),
    Case("int16 amax of empty", torch.amax, (T(0, dtype=I16),), RuntimeError, ("Expected reduction dim to be specified",)),
    Case("uint8 cumsum dim out of range", lambda x: x.cumsum(2), (T(3, 4, dtype=U8),), IndexError,
         ("Dimension out of range",)),
    Case("int8 clamp with no bounds", torch.clamp, (T(3, dtype=I8),), RuntimeError,
         ("At least one of 'min' or 'max' must not be None",)),
    Case("uint8 add tvk + cpu", None, (T(3, dtype=U8), Cpu(T(3, dtype=U8))), RuntimeError, SAME_DEVICE, tvk_op=torch.add),
    # ---------------------------------------------------------------- settings and limits
    Case("set_memory_limit inf", None, (float("inf"),), ValueError, ("set_memory_limit", "finite", "None for no cap"),
         tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit -inf", None, (float("-inf"),), ValueError, ("set_memory_limit", "finite"),
         tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit nan", None, (float("nan"),), ValueError, ("set_memory_limit", "finite", "None for no cap"),
         tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit negative float", None, (-1.5,), ValueError, ("negative", "None for no cap"),
         tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit 'inf'", None, ("inf",), ValueError, ("set_memory_limit", "size", "None for no cap"),
         tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit '1..2G'", None, ("1..2G",), ValueError, ("set_memory_limit", "size"),
         tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit '-1G'", None, ("-1G",), ValueError, ("set_memory_limit", "size"),
         tvk_op=torchvk.set_memory_limit),
    Case("set_memory_limit ''", None, ("",), ValueError, ("set_memory_limit", "size"), tvk_op=torchvk.set_memory_limit),
    # torch's cudnn flag refuses the same values with the same words (unless a test ran disable_global_flags)
    Case("backends.benchmark = 'maybe'", None, ("maybe",),
         RuntimeError, ("expects a bool, but got str",), tvk_op=lambda v: setattr(torchvk.backends, "benchmark", v)),
    Case("backends.benchmark = 1", None, (1,),
         RuntimeError, ("expects a bool, but got int",), tvk_op=lambda v: setattr(torchvk.backends, "benchmark", v)),
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
