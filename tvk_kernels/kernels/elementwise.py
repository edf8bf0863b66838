"""Binary elementwise kernels on contiguous float32 buffers (templates/elementwise_binary.comp)."""
from __future__ import annotations

import struct

from .launch import Family, family, grid_1d

# op name -> GLSL expression in x, y (and p.alpha)
BINARY_OPS = {
    "add": "((x) + p.alpha * (y))",
    "sub": "((x) - p.alpha * (y))",
    "mul": "((x) * (y))",
    "div": "((x) / (y))",
    "maximum": "max(x, y)",
    "minimum": "min(x, y)",
}
_PUSH = struct.Struct("<QQQIf")
SMALL = 1 << 16


class Binary(Family):
    def __init__(self, device):
        super().__init__(device, "elementwise", "elementwise_binary.comp")

    def variant(self, op: str, bucket: str, vec: int | None = None):
        params, _ = self.params(bucket)
        vec = params["VEC"] if vec is None else vec
        key = (op, bucket, vec)
        return self.pipeline(key, lambda: self.device.pipelines.get(
            self.template, {"OP(x,y)": BINARY_OPS[op], "VEC": vec, "ITEMS": params["ITEMS"]},
            local_size=(params["WG"], 1, 1), push_size=_PUSH.size)), params, vec


def binary(device, op: str, a, b, out, n: int, alpha: float = 1.0, params: dict | None = None):
    """out[:n] = op(a[:n], b[:n]); a, b, out are DeviceBuffers (or anything with .address)."""
    fam = family(device, Binary)
    bucket = "small" if n < SMALL else "large"
    if params is None:
        aligned = (a.address | b.address | out.address) & 15 == 0
        pipe, params, vec = fam.variant(op, bucket, None if aligned else 1)
    else:  # explicit parameters: the tuner and ablations
        vec = params["VEC"]
        pipe = device.pipelines.get(fam.template, {"OP(x,y)": BINARY_OPS[op], "VEC": vec, "ITEMS": params["ITEMS"]},
                                    local_size=(params["WG"], 1, 1), push_size=_PUSH.size)
    per_group = params["WG"] * params["ITEMS"] * vec
    groups = grid_1d((n + per_group - 1) // per_group, device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, groups, _PUSH.pack(a.address, b.address, out.address, n, alpha), op)


def add(device, a, b, out, n: int, alpha: float = 1.0, params: dict | None = None):
    binary(device, "add", a, b, out, n, alpha, params)
