"""triu / tril (masks from cached index vectors + where), and other small composites."""
from __future__ import annotations

import torch

from .._dispatch import register, register_decomposition
from .._tensor import from_cpu

aten = torch.ops.aten
_index_cache: dict = {}


def index_vector(n: int, device):
    """A cached int64 tvk tensor [0, 1, ..., n-1] (uploaded once per size)."""
    key = (n, device.index)
    t = _index_cache.get(key)
    if t is None or t._tvk.buffer.freed:
        if len(_index_cache) > 64:
            _index_cache.clear()
        t = _index_cache[key] = from_cpu(torch.arange(n, dtype=torch.int64), device)
    return t


def _tri_mask(self, diagonal, lower):
    from .elementwise import run

    R, C = self.shape[-2], self.shape[-1]
    d = self._tvk.device
    rows = index_vector(R, d).view(R, 1)
    cols = index_vector(C, d).view(1, C)
    diff = run("sub", (cols, rows), dtype=torch.int64, scalars=(1,))
    return run("le" if lower else "ge", (diff, int(diagonal)), dtype=torch.bool)


@register(aten.tril.default)
def tril(self, diagonal=0):
    from .elementwise import where

    return where(_tri_mask(self, diagonal, True), self, 0 if not self.dtype.is_floating_point else 0.0)


@register(aten.triu.default)
def triu(self, diagonal=0):
    from .elementwise import where

    return where(_tri_mask(self, diagonal, False), self, 0 if not self.dtype.is_floating_point else 0.0)


@register(aten.tril_.default)
def tril_(self, diagonal=0):
    from .elementwise import run

    return run("where", (_tri_mask(self, diagonal, True), self, 0), out=self)


@register(aten.triu_.default)
def triu_(self, diagonal=0):
    from .elementwise import run

    return run("where", (_tri_mask(self, diagonal, False), self, 0), out=self)


register_decomposition(aten.one_hot.default if hasattr(aten, "one_hot") else aten.tril.default)
