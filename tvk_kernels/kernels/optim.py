"""Fused multi-tensor optimizer steps (SGD, Adam, AdamW) and gradient norms (templates/optim.comp).

Tensors are given as tuples of device addresses (ints or DeviceBuffers) and an element count;
all are contiguous float32.

fused=True (default): the host packs a table of (param, grad, states, numel) per tensor and a
list of (tensor, chunk start) per workgroup into device buffers, once per distinct tensor set
(cached, LRU); a step then records one dispatch whose push constants carry only the scalars
(lr, betas, bias corrections), so host cost does not grow with the number of tensors, and
chunks of big and small tensors balance across workgroups.
fused=False: one dispatch per tensor (the "per-tensor" arm of the fused-vs-per-tensor ablation).

torch.optim's own multi-tensor paths come here through torchvk/aten/foreach.py: the `_fused_*`
ops (fused_sgd, fused_adam: step counts, lr, grad_scale and found_inf read on the device) and
the `_foreach_*` ops (foreach_pointwise, foreach_norms: one dispatch per op for all tensors).

Every step follows torch.optim's single-tensor update formulas element for element.
"""
from __future__ import annotations

import math
import struct
from collections import OrderedDict

import numpy as np

from ..errors import InvalidConfigError
from .launch import Family, family, grid_1d

MODE_SGD, MODE_ADAM, MODE_NORM, MODE_NORM_FINAL, MODE_CLIP, MODE_FOREACH, MODE_NORMS = range(7)
F_NESTEROV, F_MAXIMIZE, F_FIRST, F_AMSGRAD, F_DECOUPLED, F_SQUARED = 1, 2, 4, 8, 16, 32
F_DEVICE_STEP, F_LR_TENSOR, F_GRAD_SCALE, F_FOUND_INF, F_PER_TENSOR, F_B_SCALAR = 64, 128, 256, 512, 1024, 2048
OP_SHIFT = 16
# MODE_FOREACH opcodes, in templates/optim.comp's order: out = op(a, b, c, v)
FOREACH_OPS = ("copy", "add", "add_s", "mul", "mul_s", "div", "div_s", "neg", "sqrt", "reciprocal", "lerp",
               "addcmul", "addcdiv", "maximum", "minimum", "clamp_min", "clamp_max", "fill", "abs")
_SCALARS = "8fI"
_PUSH_FUSED = struct.Struct("<QQQII" + _SCALARS + "4xQQQ")  # + lr, grad_scale, found_inf addresses
_PUSH_TENSOR = struct.Struct("<QQQQQQII" + _SCALARS)
LARGE = 1 << 20
TABLE_CACHE_SIZE = 64


def _addr(x) -> int:
    if x is None:
        return 0
    return x if isinstance(x, int) else x.address


class _Table:
    """Device-side tensor table and workgroup list for one tensor set."""

    __slots__ = ("table", "blocks", "nblocks", "partials")

    def __init__(self, device, entries, chunk: int):
        """entries: (a0, a1, a2, a3, a4, numel[, a6]) per tensor: table slots 0-6."""
        tab = np.zeros((max(len(entries), 1), 8), dtype=np.uint64)
        if entries:
            tab[:, :len(entries[0])] = np.array(entries, dtype=np.uint64)
        parts = []
        for t, e in enumerate(entries):
            starts = np.arange(0, e[5], chunk, dtype=np.uint32)
            parts.append(np.stack([np.full_like(starts, t), starts], axis=1))
        blocks = np.concatenate(parts) if parts else np.zeros((0, 2), np.uint32)
        self.nblocks = len(blocks)
        self.table = device.upload(tab)
        self.blocks = device.upload(blocks if len(blocks) else np.zeros((1, 2), np.uint32))
        self.partials = None  # norm partial sums, one float per block, made on first use


class Optim(Family):
    def __init__(self, device):
        super().__init__(device, "optim", "optim.comp")
        self.tables: OrderedDict = OrderedDict()

    def variant(self, mode: int, fused: bool, wg: int, chunk: int, inf: bool = False, explicit: bool = False):
        push = _PUSH_FUSED if fused else _PUSH_TENSOR

        def build():
            if wg & (wg - 1):
                raise InvalidConfigError(f"WG={wg} must be a power of two")
            shared = 4 * wg if mode in (MODE_NORM, MODE_NORM_FINAL, MODE_NORMS) else 0
            self.device.pipelines.check_limits((wg, 1, 1), shared_bytes=shared, push_size=push.size)
            defines = {"MODE": mode, "FUSED": int(fused), "WG": wg, "CHUNK": chunk, "NORM_INF": int(inf)}
            return self.device.pipelines.get(self.template, defines, local_size=(wg, 1, 1), push_size=push.size)

        return build() if explicit else self.pipeline((mode, fused, wg, chunk, inf), build)

    def table(self, entries: tuple, chunk: int) -> _Table:
        key = (entries, chunk)
        t = self.tables.get(key)
        if t is None:
            t = self.tables[key] = _Table(self.device, entries, chunk)
            while len(self.tables) > TABLE_CACHE_SIZE:
                _, old = self.tables.popitem(last=False)
                for buf in (old.table, old.blocks, old.partials):  # may still be read by recorded work
                    if buf is not None:
                        self.device.stream.keep_alive(buf)
        else:
            self.tables.move_to_end(key)
        return t


def _setup(device, total: int, params):
    fam = family(device, Optim)
    explicit = params is not None
    if params is None:
        params, _ = fam.params("large" if total >= LARGE else "small")
    return fam, params["WG"], params["CHUNK"], explicit


def _push(table, blocks, out, n: int, scalars: tuple, aux: tuple = (0, 0, 0)) -> bytes:
    return _PUSH_FUSED.pack(table, blocks, out, n, 0, *scalars, *aux)


def _launch(device, mode: int, entries: list, scalars: tuple, fused: bool, params, label: str, aux=(0, 0, 0)):
    """entries: (a0, a1, a2, a3, a4, numel[, a6]) per tensor; aux: lr, grad_scale, found_inf addresses."""
    entries = tuple(e for e in entries if e[5] > 0)
    if not entries:
        return
    fam, wg, chunk, explicit = _setup(device, sum(e[5] for e in entries), params)
    pipe = fam.variant(mode, fused, wg, chunk, explicit=explicit)
    mx = device.facts.max_workgroup_count[0]
    if fused:
        t = fam.table(entries, chunk)
        device.stream.dispatch(pipe, grid_1d(t.nblocks, mx), _push(t.table.address, t.blocks.address, 0, t.nblocks,
                                                                   scalars, aux), label)
    else:
        for e in entries:
            device.stream.dispatch(pipe, grid_1d((e[5] + chunk - 1) // chunk, mx),
                                   _PUSH_TENSOR.pack(*e[:5], 0, e[5], 0, *scalars), label)


def sgd_step(device, tensors, lr: float, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
             nesterov: bool = False, maximize: bool = False, first_step: bool = False, fused: bool = True,
             params: dict | None = None):
    """One torch.optim.SGD step over tensors = [(param, grad, momentum_buf_or_0, numel), ...].

    first_step=True initialises the momentum buffers to the (decayed) gradient, as torch does
    when a parameter has no buffer yet."""
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    if momentum != 0 and any(_addr(t[2]) == 0 and t[3] > 0 for t in tensors):
        raise ValueError("SGD with momentum needs a momentum buffer for every tensor")
    flags = (F_NESTEROV if nesterov else 0) | (F_MAXIMIZE if maximize else 0) | (F_FIRST if first_step else 0)
    entries = [(_addr(p), _addr(g), _addr(m), 0, 0, int(n)) for p, g, m, n in tensors]
    scalars = (lr, momentum, 1.0 - dampening, weight_decay, 0.0, 0.0, 0.0, 0.0, flags)
    _launch(device, MODE_SGD, entries, scalars, fused, params, "sgd_step")


def adam_step(device, tensors, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
              weight_decay: float = 0.0, step: int = 1, amsgrad: bool = False, decoupled: bool = False,
              fused: bool = True, *, maximize: bool = False, params: dict | None = None):
    """One torch.optim.Adam (decoupled=False) or AdamW (decoupled=True) step over
    tensors = [(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq_or_0, numel), ...].

    `step` is the step count after this step (1 on the first step), used for bias correction;
    the state buffers start as zeros."""
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    if amsgrad and any(_addr(t[4]) == 0 and t[5] > 0 for t in tensors):
        raise ValueError("amsgrad needs a max_exp_avg_sq buffer for every tensor")
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    flags = (F_AMSGRAD if amsgrad else 0) | (F_DECOUPLED if decoupled else 0) | (F_MAXIMIZE if maximize else 0)
    entries = [(_addr(p), _addr(g), _addr(m), _addr(v), _addr(mx), int(n)) for p, g, m, v, mx, n in tensors]
    scalars = (0.0 if decoupled else weight_decay, 1.0 - beta1, beta2, 1.0 - beta2, eps,
               1.0 - lr * weight_decay if decoupled else 1.0, lr / bc1, math.sqrt(bc2), flags)
    _launch(device, MODE_ADAM, entries, scalars, fused, params, "adamw_step" if decoupled else "adam_step")


def adamw_step(device, tensors, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 1e-2, step: int = 1, amsgrad: bool = False, fused: bool = True, *,
               maximize: bool = False, params: dict | None = None):
    """torch.optim.AdamW: adam_step with decoupled weight decay."""
    adam_step(device, tensors, lr, beta1, beta2, eps, weight_decay, step, amsgrad, True, fused, maximize=maximize,
              params=params)


def _norm_type(norm_type) -> bool:
    if norm_type in (float("inf"), "inf"):
        return True
    if float(norm_type) != 2.0:
        raise ValueError(f"norm_type must be 2 or inf, got {norm_type}")
    return False


def foreach_norm(device, tensors, out, norm_type: float = 2.0, squared: bool = False, fused: bool = True,
                 params: dict | None = None):
    """out[0] = the norm of all elements of tensors = [(addr, numel), ...] taken together
    (torch.nn.utils.clip_grad_norm_'s total_norm). norm_type 2 (squared=True: the sum of squares)
    or inf. Two dispatches (fused) or one per tensor plus one; deterministic."""
    inf = _norm_type(norm_type)
    entries = tuple((_addr(a), 0, 0, 0, 0, int(n)) for a, n in tensors if n > 0)
    fam, wg, chunk, explicit = _setup(device, sum(e[5] for e in entries), params)
    mx = device.facts.max_workgroup_count[0]
    pipe = fam.variant(MODE_NORM, fused, wg, chunk, inf, explicit)
    if fused:
        t = fam.table(entries, chunk)
        nparts = t.nblocks
        if t.partials is None:
            t.partials = device.allocator.alloc(4 * max(nparts, 1))
        partials = t.partials
        if nparts:
            device.stream.dispatch(pipe, grid_1d(nparts, mx), _push(
                t.table.address, t.blocks.address, partials.address, nparts, (0.0,) * 8 + (0,)), "foreach_norm")
    else:
        counts = [(e[5] + chunk - 1) // chunk for e in entries]
        nparts = sum(counts)
        partials = device.allocator.alloc(4 * max(nparts, 1))
        device.stream.keep_alive(partials)
        off = 0
        for e, c in zip(entries, counts):
            device.stream.dispatch(pipe, grid_1d(c, mx), _PUSH_TENSOR.pack(
                e[0], 0, 0, 0, 0, partials.address, e[5], off, *([0.0] * 8), 0), "foreach_norm")
            off += c
    final = fam.variant(MODE_NORM_FINAL, False, wg, chunk, inf, explicit)
    device.stream.dispatch(final, (1, 1, 1), _PUSH_TENSOR.pack(
        partials.address, _addr(out), 0, 0, 0, 0, nparts, 0, *([0.0] * 8), F_SQUARED if squared else 0), "foreach_norm")


def clip_grad_norm(device, tensors, max_norm: float, norm_out, norm_type: float = 2.0, fused: bool = True,
                   params: dict | None = None):
    """torch.nn.utils.clip_grad_norm_ without a host round trip: norm_out[0] = total norm of
    tensors = [(grad_addr, numel), ...], then every grad *= min(max_norm / (norm + 1e-6), 1),
    the factor read on the device."""
    foreach_norm(device, tensors, norm_out, norm_type, False, fused, params)
    scalars = (0.0, float(max_norm), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    entries = tuple((_addr(a), 0, 0, 0, 0, int(n)) for a, n in tensors if n > 0)
    if not entries:
        return
    fam, wg, chunk, explicit = _setup(device, sum(e[5] for e in entries), params)
    pipe = fam.variant(MODE_CLIP, fused, wg, chunk, False, explicit)
    mx = device.facts.max_workgroup_count[0]
    na = _addr(norm_out)
    if fused:
        t = fam.table(entries, chunk)
        device.stream.dispatch(pipe, grid_1d(t.nblocks, mx),
                               _push(t.table.address, t.blocks.address, na, t.nblocks, scalars), "clip_grad")
    else:
        for e in entries:
            device.stream.dispatch(pipe, grid_1d((e[5] + chunk - 1) // chunk, mx),
                                   _PUSH_TENSOR.pack(*e[:5], na, e[5], 0, *scalars), "clip_grad")


# ------------------------------------------------------------------ torch.optim's fused and foreach ops
def _aux_flags(lr_addr: int, grad_scale: int, found_inf: int) -> int:
    return (F_LR_TENSOR if lr_addr else 0) | (F_GRAD_SCALE if grad_scale else 0) | (F_FOUND_INF if found_inf else 0)


def fused_sgd(device, tensors, lr: float, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
              nesterov: bool = False, maximize: bool = False, first_step: bool = False, *, lr_addr=0,
              grad_scale=0, found_inf=0, params: dict | None = None):
    """torch._fused_sgd_: sgd_step in one dispatch, lr optionally read from lr_addr (a float on the
    device); grad_scale / found_inf: AMP's scale (grads are divided by it, and the unscaled grads
    stored) and its found-inf flag (non-zero: nothing changes), each one float on the device, given
    as an address or a DeviceBuffer; 0: absent."""
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    if momentum != 0 and any(_addr(t[2]) == 0 and t[3] > 0 for t in tensors):
        raise ValueError("SGD with momentum needs a momentum buffer for every tensor")
    lr_addr, grad_scale, found_inf = _addr(lr_addr), _addr(grad_scale), _addr(found_inf)
    flags = (F_NESTEROV if nesterov else 0) | (F_MAXIMIZE if maximize else 0) | (F_FIRST if first_step else 0) | \
        _aux_flags(lr_addr, grad_scale, found_inf)
    entries = [(_addr(p), _addr(g), _addr(m), 0, 0, int(n)) for p, g, m, n in tensors]
    scalars = (lr, momentum, 1.0 - dampening, weight_decay, 0.0, 0.0, 0.0, 0.0, flags)
    _launch(device, MODE_SGD, entries, scalars, True, params, "fused_sgd", (lr_addr, grad_scale, found_inf))


def fused_adam(device, tensors, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.0, amsgrad: bool = False, decoupled: bool = False, maximize: bool = False, *,
               lr_addr=0, grad_scale=0, found_inf=0, params: dict | None = None):
    """torch._fused_adam_ / _fused_adamw_ (decoupled=True) in one dispatch over
    tensors = [(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq_or_0, step, numel), ...], where
    `step` is the address of the tensor's step count (a float, already incremented for this step),
    read on the device like lr_addr / grad_scale / found_inf (see fused_sgd)."""
    if amsgrad and any(_addr(t[4]) == 0 and t[6] > 0 for t in tensors):
        raise ValueError("amsgrad needs a max_exp_avg_sq buffer for every tensor")
    lr_addr, grad_scale, found_inf = _addr(lr_addr), _addr(grad_scale), _addr(found_inf)
    flags = F_DEVICE_STEP | (F_AMSGRAD if amsgrad else 0) | (F_DECOUPLED if decoupled else 0) | \
        (F_MAXIMIZE if maximize else 0) | _aux_flags(lr_addr, grad_scale, found_inf)
    entries = [(_addr(p), _addr(g), _addr(m), _addr(v), _addr(mx), int(n), _addr(st)) for p, g, m, v, mx, st, n in tensors]
    scalars = (weight_decay, 1.0 - beta1, beta2, 1.0 - beta2, eps, lr, beta1, 0.0, flags)
    _launch(device, MODE_ADAM, entries, scalars, True, params, "fused_adamw" if decoupled else "fused_adam",
            (lr_addr, grad_scale, found_inf))


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def foreach_pointwise(device, op: str, tensors, value: float = 0.0, values=None, b_scalar: bool = False,
                      params: dict | None = None):
    """out = op(a, b, c, v) elementwise over tensors = [(out, a, b, c, numel), ...] (int addresses
    of contiguous float32 data; unused operands 0) in one dispatch: ops in FOREACH_OPS, v = value,
    or values[i] for tensor i; b_scalar: each b is one element used for the whole tensor."""
    code = FOREACH_OPS.index(op)
    flags = (code << OP_SHIFT) | (F_B_SCALAR if b_scalar else 0)
    if values is not None:
        flags |= F_PER_TENSOR
        entries = [(o, a, b, c, 0, n, _f32_bits(v)) for (o, a, b, c, n), v in zip(tensors, values)]
    else:
        entries = [(o, a, b, c, 0, n) for o, a, b, c, n in tensors]
    _launch(device, MODE_FOREACH, entries, (float(value),) + (0.0,) * 7 + (flags,), True, params, "foreach_" + op)


def foreach_norms(device, tensors, out, norm_type: float = 2.0, params: dict | None = None):
    """out[i] = the norm (2 or inf) of tensor i of tensors = [(addr, numel), ...] (torch._foreach_norm),
    in two dispatches: chunk partials, then one workgroup per tensor; deterministic."""
    inf = _norm_type(norm_type)
    entries = tuple((_addr(a), 0, 0, 0, 0, int(n)) for a, n in tensors)
    if not entries:
        return
    fam, wg, chunk, explicit = _setup(device, sum(e[5] for e in entries), params)
    mx = device.facts.max_workgroup_count[0]
    t = fam.table(entries, chunk)
    if t.partials is None:
        t.partials = device.allocator.alloc(4 * max(t.nblocks, 1))
    if t.nblocks:
        device.stream.dispatch(fam.variant(MODE_NORM, True, wg, chunk, inf, explicit), grid_1d(t.nblocks, mx),
                               _push(t.table.address, t.blocks.address, t.partials.address, t.nblocks,
                                     (0.0,) * 8 + (0,)), "foreach_norms")
    counts = [(e[5] + chunk - 1) // chunk for e in entries]
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    spans = tuple((0, int(f), int(c), 0, 0, 0) for f, c in zip(firsts, counts))  # slot 1 first partial, 2 count
    ranges = fam.table(spans, chunk)  # numel 0: a table without blocks
    device.stream.dispatch(fam.variant(MODE_NORMS, True, wg, chunk, inf, explicit), grid_1d(len(entries), mx),
                           _push(ranges.table.address, _addr(out), t.partials.address, len(entries), (0.0,) * 8 + (0,)),
                           "foreach_norms")
