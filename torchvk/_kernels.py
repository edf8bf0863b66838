"""Glue between tvk tensors and tvk_kernels kernel functions used by the copy paths."""
from __future__ import annotations

from tvk_kernels.kernels import elementwise as _E


def copy(dst, src):
    """dst <- src (broadcast, cast), any strides."""
    from .aten.elementwise import operand

    _E.copy(dst._tvk.device, operand(src), operand(dst))


def fill(t, value):
    from .aten.elementwise import operand

    _E.fill(t._tvk.device, operand(t), value)
