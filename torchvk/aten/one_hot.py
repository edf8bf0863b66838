"""F.one_hot on tvk: torch's composite one_hot skips its class range checks on PrivateUse1 and
would give a zero row for a bad class, so tvk tensors get this one, which checks them.

It is registered for the AutogradPrivateUse1 key because a CompositeImplicitAutograd op never
reaches the Python dispatch of TVKTensor. While tracing (fake or functional tensors, Dynamo,
torchvk.compile) torch's own composite runs: its range checks are aten._assert_async ops,
which run here as device-side checks too.
"""
from __future__ import annotations

import torch

from ..op_registry import register, register_composite
from .._tensor import TVKTensor
from ._index_check import check_index_range
from .copies import cast
from .elementwise import run
from .misc import index_vector

aten = torch.ops.aten


def one_hot(self, num_classes: int = -1):
    """out[..., k] = (self[...] == k) as int64, k in [0, num_classes). A class outside that range
    raises RuntimeError at the next sync point. num_classes=-1 takes max(self) + 1: that reads
    the max back to the CPU, a sync point (pass num_classes to avoid it)."""
    if type(self) is not TVKTensor:  # a tracing wrapper (Dynamo, torchvk.compile)
        return traced_one_hot(self, num_classes)
    if self.dtype != torch.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if self.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(self.max().item()) + 1  # a sync point, as documented
    if num_classes < 0:  # torch: a negative num_classes other than -1 is an upper bound no class meets
        raise RuntimeError("Class values must be smaller than num_classes.")
    check_index_range(self, num_classes, "one_hot", "class")
    classes = index_vector(num_classes, self._tvk.device)
    return cast(run("eq", (self.unsqueeze(-1), classes), dtype=torch.bool), torch.int64)


def traced_one_hot(self, num_classes: int):
    """one_hot in aten ops for a traced graph, its range check an aten._assert_async (a device-side
    check below). Not torch's composite: on torch 2.11 that has no check on the fake CPU tensors
    torchvk.compile traces with, and a bad class gave a zero row in compiled mode
    (compile/whole_ops.py puts this in its place while tracing)."""
    if num_classes == -1:  # needs the data: torch's composite (Dynamo breaks the graph there)
        return aten.one_hot.default.decompose(self, num_classes)
    in_range = ((self >= 0) & (self < num_classes)).all()
    torch._assert_async(in_range, "Class values must be non-negative and smaller than num_classes.")
    classes = torch.arange(num_classes, device=self.device)
    return (self.unsqueeze(-1) == classes).to(torch.int64)


@register(aten._assert_async.msg, aten._assert_async.default)
def assert_async(self, assert_msg="Expected Tensor with single nonzero value, but got zero"):
    """Raise RuntimeError(assert_msg) at the next sync point if the one-element self is zero."""
    if self.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    failed = cast(run("eq", (self, 0), dtype=torch.bool), torch.int32)  # 1 where the assert fails
    check_index_range(failed, 1, assert_msg, "assert")


register_composite(aten.one_hot.default, traced=traced_one_hot)(one_hot)
