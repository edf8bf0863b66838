"""Helpers shared by kernel families: grid shapes and the per-device pipeline memo."""
from __future__ import annotations

from ..config import generation, params_for
from ..runtime.compiler import template_checksum


def grid_1d(groups: int, max_x: int = 65535) -> tuple[int, int, int]:
    """Spread `groups` workgroups over x and y: x is capped at 65535 on many devices."""
    groups = max(groups, 1)
    if groups <= max_x:
        return (groups, 1, 1)
    y = (groups + max_x - 1) // max_x
    return ((groups + y - 1) // y, y, 1)


class Family:
    """One kernel family on one device: its config lookup and compiled variants, memoized."""

    def __init__(self, device, family: str, template: str):
        self.device, self.family, self.template = device, family, template
        self.checksum = template_checksum(template)
        self._params: dict = {}
        self._generation = generation()
        self._pipelines: dict = {}

    def params(self, bucket: str = "*") -> tuple[dict, str]:
        """(params, source) of a shape bucket: the first tuned config that passes the checks, else the default."""
        if self._generation != generation():  # config.reload() ran: configs may have changed
            self._params.clear()
            self._generation = generation()
        p = self._params.get(bucket)
        if p is None:
            p = self._params[bucket] = params_for(self.device, self.family, bucket, self.checksum, self.check_config)
        return p

    def check_config(self, params: dict) -> dict:
        """A family's own rules beyond its search space (raise InvalidConfigError); returns `params` completed."""
        return params

    def workgroup_variant(self, defines: dict, wg: int, push_size: int, shared_bytes: int = 0):
        """The family's template with these defines and a 1-D workgroup of `wg`, limits checked, built once."""
        key = ("variant", tuple(sorted(defines.items())), wg)
        return self.pipeline(key, lambda: self.device.pipelines.get(
            self.template, defines, local_size=(wg, 1, 1), push_size=push_size, shared_bytes=shared_bytes))

    def pipeline(self, key, build):
        """`build()` runs once per key and returns a Pipeline."""
        p = self._pipelines.get(key)
        if p is None:
            p = self._pipelines[key] = build()
        return p


_families: dict = {}


def family(device, cls):
    key = (device.index, cls)
    f = _families.get(key)
    if f is None:
        f = _families[key] = cls(device)
    return f
