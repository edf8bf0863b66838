"""Fused multi-tensor optimizer steps (SGD, Adam, AdamW) and gradient norms (templates/optim.comp).

Tensors are given as tuples of device addresses (ints or DeviceBuffers) and an element count;
all are contiguous float32. torch.optim's ops (below) take them as columns instead: one tuple
of int addresses per role, as torchvk/aten/foreach.py keeps them between steps.

fused=True (default): the host packs a table of (param, grad, states, numel) per tensor and a
list of (tensor, chunk start) per workgroup into device buffers, once per distinct tensor set
(cached, LRU, keyed by the table's columns); a step then records one dispatch whose push
constants carry only the scalars (lr, betas, bias corrections), so host cost does not grow with
the number of tensors, and chunks of big and small tensors balance across workgroups.
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

from .launch import Family, address, family, grid_1d, powers_of_two, record_shape, recording

MODE_SGD, MODE_ADAM, MODE_NORM, MODE_NORM_FINAL, MODE_CLIP, MODE_FOREACH, MODE_NORMS = range(7)
F_NESTEROV, F_MAXIMIZE, F_FIRST, F_AMSGRAD, F_DECOUPLED, F_SQUARED = 1, 2, 4, 8, 16, 32
F_DEVICE_STEP, F_LR_TENSOR, F_GRAD_SCALE, F_FOUND_INF, F_PER_TENSOR, F_B_SCALAR = 64, 128, 256, 512, 1024, 2048
OP_SHIFT = 16
# MODE_FOREACH opcodes, in templates/optim.comp's order: out = op(a, b, c, v)
FOREACH_OPS = ("copy", "add", "add_s", "mul", "mul_s", "div", "div_s", "neg", "sqrt", "reciprocal", "lerp",
               "addcmul", "addcdiv", "maximum", "minimum", "clamp_min", "clamp_max", "fill", "abs", "unscale")
_SCALARS = "8fI"
_PUSH_FUSED = struct.Struct("<QQQII" + _SCALARS + "4xQQQ")  # + lr, grad_scale, found_inf addresses
_PUSH_TENSOR = struct.Struct("<QQQQQQII" + _SCALARS)
TABLE_CACHE_SIZE = 64


def _slots(entries) -> tuple:
    """The table's columns (slots 0-6: a0, a1, a2, a3, a4, numel, a6; None: all zeros) from
    per-tensor rows (a0, a1, a2, a3, a4, numel[, a6])."""
    cols = tuple(zip(*entries))
    return cols + (None,) * (7 - len(cols)) if cols else (None,) * 5 + ((), None)


def _rows(slots) -> list:
    n = len(slots[5])
    return list(zip(*(col if col is not None else (0,) * n for col in slots)))


def _block_list(device, numels: tuple, chunk: int):
    """(device buffer, count) of a table's workgroup list: (tensor, chunk start) per workgroup; a
    tensor of numel 0 gets none."""
    numels = np.asarray(numels, dtype=np.int64)
    counts = (numels + chunk - 1) // chunk
    owner = np.repeat(np.arange(len(numels), dtype=np.int64), counts)  # per workgroup: its tensor, then its chunk
    first = np.cumsum(counts) - counts
    blocks = np.stack([owner, (np.arange(len(owner), dtype=np.int64) - first[owner]) * chunk], axis=1)
    return device.upload(blocks.astype(np.uint32) if len(blocks) else np.zeros((1, 2), np.uint32)), len(blocks)


class _Table:
    """Device-side tensor table and workgroup list for one tensor set."""

    __slots__ = ("table", "blocks", "nblocks", "partials")

    def __init__(self, device, slots: tuple, blocks: tuple):
        """slots: the table's columns (_slots), one entry per tensor; blocks: its _block_list."""
        n = len(slots[5])
        tab = np.zeros((max(n, 1), 8), dtype=np.uint64)
        for k, col in enumerate(slots):
            if col is not None and n:
                tab[:n, k] = np.asarray(col, dtype=np.uint64)
        self.table = device.upload(tab)
        self.blocks, self.nblocks = blocks
        self.partials = None  # norm partial sums, one float per block, made on first use


class Optim(Family):
    family = "optim"
    template = "optim.comp"

    def __init__(self, device):
        Family.__init__(self, device)
        self.tables: OrderedDict = OrderedDict()
        self.block_lists: OrderedDict = OrderedDict()  # (numels, chunk) -> _block_list, shared by tables

    def check_config(self, params: dict) -> dict:
        return powers_of_two(self.family, params, "WG")  # the norm modes reduce in a tree

    def mode_variant(self, mode: int, fused: bool, wg: int, chunk: int, inf: bool = False):
        push = _PUSH_FUSED if fused else _PUSH_TENSOR
        shared = 4 * wg if mode in (MODE_NORM, MODE_NORM_FINAL, MODE_NORMS) else 0
        defines = {"MODE": mode, "FUSED": int(fused), "WG": wg, "CHUNK": chunk, "NORM_INF": int(inf)}
        return self.variant(defines, wg, push.size, shared_bytes=shared)

    def table(self, slots: tuple, chunk: int) -> _Table:
        key = (slots, chunk)
        t = self.tables.get(key)
        if t is None:
            t = self.tables[key] = _Table(self.device, slots, self._blocks(slots[5], chunk))
            while len(self.tables) > TABLE_CACHE_SIZE:
                _, old = self.tables.popitem(last=False)
                for buf in (old.table, old.blocks, old.partials):  # may still be read by recorded work
                    if buf is not None:
                        self.device.stream.keep_alive(buf)
        else:
            self.tables.move_to_end(key)
        return t

    def _blocks(self, numels: tuple, chunk: int) -> tuple:
        """The workgroup list for these tensor sizes: one upload for all tables of them (a step
        with fresh grads gets a new table, not a new list); a table holds its list's buffer."""
        key = (numels, chunk)
        b = self.block_lists.get(key)
        if b is None:
            b = self.block_lists[key] = _block_list(self.device, numels, chunk)
            while len(self.block_lists) > TABLE_CACHE_SIZE:
                self.device.stream.keep_alive(self.block_lists.popitem(last=False)[1][0])
        else:
            self.block_lists.move_to_end(key)
        return b


def _setup(device, total: int, params):
    fam = family(device, Optim)
    params = fam.resolve({"total_numel": total}, params)
    return fam, params["WG"], params["CHUNK"]


def _push(table, blocks, out, n: int, scalars: tuple, aux: tuple = (0, 0, 0)) -> bytes:
    return _PUSH_FUSED.pack(table, blocks, out, n, 0, *scalars, *aux)


def _launch(device, mode: int, slots: tuple, scalars: tuple, fused: bool, params, label: str, aux=(0, 0, 0)):
    """slots: the table's columns (_slots); aux: lr, grad_scale, found_inf addresses. A caller that
    passes the same column tuples every step finds its table with one hash of them."""
    if 0 in slots[5]:  # a tensor without elements gets no row
        keep = [i for i, n in enumerate(slots[5]) if n > 0]
        slots = tuple(col if col is None else tuple(col[i] for i in keep) for col in slots)
    if not slots[5]:
        return
    if recording():
        record_shape(Optim.family, {"total_numel": sum(slots[5]), "tensors": len(slots[5])}, op=label)  # no target
    fam, wg, chunk = _setup(device, sum(slots[5]), params)
    pipe = fam.mode_variant(mode, fused, wg, chunk)
    mx = device.facts.max_workgroup_count[0]
    if fused:
        t = fam.table(slots, chunk)
        device.stream.dispatch(pipe, grid_1d(t.nblocks, mx), _push(t.table.address, t.blocks.address, 0, t.nblocks,
                                                                   scalars, aux), label)
    else:
        for e in _rows(slots):
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
    if momentum != 0 and any(address(t[2]) == 0 and t[3] > 0 for t in tensors):
        raise ValueError("SGD with momentum needs a momentum buffer for every tensor")
    flags = (F_NESTEROV if nesterov else 0) | (F_MAXIMIZE if maximize else 0) | (F_FIRST if first_step else 0)
    entries = [(address(p), address(g), address(m), 0, 0, int(n)) for p, g, m, n in tensors]
    scalars = (lr, momentum, 1.0 - dampening, weight_decay, 0.0, 0.0, 0.0, 0.0, flags)
    _launch(device, MODE_SGD, _slots(entries), scalars, fused, params, "sgd_step")


def adam_step(device, tensors, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
              weight_decay: float = 0.0, step: int = 1, amsgrad: bool = False, decoupled: bool = False,
              fused: bool = True, *, maximize: bool = False, params: dict | None = None):
    """One torch.optim.Adam (decoupled=False) or AdamW (decoupled=True) step over
    tensors = [(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq_or_0, numel), ...].

    `step` is the step count after this step (1 on the first step), used for bias correction;
    the state buffers start as zeros."""
    if step < 1:
        raise ValueError(f"step counts from 1, got {step}")
    if amsgrad and any(address(t[4]) == 0 and t[5] > 0 for t in tensors):
        raise ValueError("amsgrad needs a max_exp_avg_sq buffer for every tensor")
    bc1 = 1.0 - beta1 ** step
    bc2 = 1.0 - beta2 ** step
    flags = (F_AMSGRAD if amsgrad else 0) | (F_DECOUPLED if decoupled else 0) | (F_MAXIMIZE if maximize else 0)
    entries = [(address(p), address(g), address(m), address(v), address(mx), int(n)) for p, g, m, v, mx, n in tensors]
    scalars = (0.0 if decoupled else weight_decay, 1.0 - beta1, beta2, 1.0 - beta2, eps,
               1.0 - lr * weight_decay if decoupled else 1.0, lr / bc1, math.sqrt(bc2), flags)
    _launch(device, MODE_ADAM, _slots(entries), scalars, fused, params, "adamw_step" if decoupled else "adam_step")


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
    entries = tuple((address(a), 0, 0, 0, 0, int(n)) for a, n in tensors if n > 0)
    fam, wg, chunk = _setup(device, sum(e[5] for e in entries), params)
    mx = device.facts.max_workgroup_count[0]
    pipe = fam.mode_variant(MODE_NORM, fused, wg, chunk, inf)
    if fused:
        t = fam.table(_slots(entries), chunk)
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
    final = fam.mode_variant(MODE_NORM_FINAL, False, wg, chunk, inf)
    device.stream.dispatch(final, (1, 1, 1), _PUSH_TENSOR.pack(
        partials.address, address(out), 0, 0, 0, 0, nparts, 0, *([0.0] * 8), F_SQUARED if squared else 0), "foreach_norm")


def clip_grad_norm(device, tensors, max_norm: float, norm_out, norm_type: float = 2.0, fused: bool = True,
                   params: dict | None = None):
    """torch.nn.utils.clip_grad_norm_ without a host round trip: norm_out[0] = total norm of
    tensors = [(grad_addr, numel), ...], then every grad *= min(max_norm / (norm + 1e-6), 1),
    the factor read on the device."""
    foreach_norm(device, tensors, norm_out, norm_type, False, fused, params)
    scalars = (0.0, float(max_norm), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    entries = tuple((address(a), 0, 0, 0, 0, int(n)) for a, n in tensors if n > 0)
    if not entries:
        return
    fam, wg, chunk = _setup(device, sum(e[5] for e in entries), params)
    pipe = fam.mode_variant(MODE_CLIP, fused, wg, chunk, False)
    mx = device.facts.max_workgroup_count[0]
    na = address(norm_out)
    if fused:
        t = fam.table(_slots(entries), chunk)
        device.stream.dispatch(pipe, grid_1d(t.nblocks, mx),
                               _push(t.table.address, t.blocks.address, na, t.nblocks, scalars), "clip_grad")
    else:
        for e in entries:
            device.stream.dispatch(pipe, grid_1d((e[5] + chunk - 1) // chunk, mx),
                                   _PUSH_TENSOR.pack(*e[:5], na, e[5], 0, *scalars), "clip_grad")


# ------------------------------------------------------------------ torch.optim's fused and foreach ops
def _aux_flags(lr_addr: int, grad_scale: int, found_inf: int) -> int:
    return (F_LR_TENSOR if lr_addr else 0) | (F_GRAD_SCALE if grad_scale else 0) | (F_FOUND_INF if found_inf else 0)


def _missing(states, numels) -> bool:
    """Whether a tensor with elements has no state buffer (address 0) in this column."""
    return states is None or (0 in states and any(a == 0 and n > 0 for a, n in zip(states, numels)))


def fused_sgd(device, tensors, lr: float, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
              nesterov: bool = False, maximize: bool = False, first_step: bool = False, *, lr_addr=0,
              grad_scale=0, found_inf=0, params: dict | None = None):
    """torch._fused_sgd_: sgd_step in one dispatch over tensors = (params, grads, momentum_buffers,
    numels), one tuple per role with an int address (or count) per tensor; momentum_buffers may be
    None without momentum. lr optionally read from lr_addr (a float on the device); grad_scale /
    found_inf: AMP's scale (grads are divided by it, and the unscaled grads stored) and its
    found-inf flag (non-zero: nothing changes), each one float on the device, given as an address
    or a DeviceBuffer; 0: absent."""
    ps, gs, bufs, numels = tensors
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening")
    if momentum != 0 and _missing(bufs, numels):
        raise ValueError("SGD with momentum needs a momentum buffer for every tensor")
    lr_addr, grad_scale, found_inf = address(lr_addr), address(grad_scale), address(found_inf)
    flags = (F_NESTEROV if nesterov else 0) | (F_MAXIMIZE if maximize else 0) | (F_FIRST if first_step else 0) | \
        _aux_flags(lr_addr, grad_scale, found_inf)
    scalars = (lr, momentum, 1.0 - dampening, weight_decay, 0.0, 0.0, 0.0, 0.0, flags)
    _launch(device, MODE_SGD, (ps, gs, bufs, None, None, numels, None), scalars, True, params, "fused_sgd",
            (lr_addr, grad_scale, found_inf))


def fused_adam(device, tensors, lr: float = 1e-3, beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8,
               weight_decay: float = 0.0, amsgrad: bool = False, decoupled: bool = False, maximize: bool = False, *,
               lr_addr=0, grad_scale=0, found_inf=0, params: dict | None = None):
    """torch._fused_adam_ / _fused_adamw_ (decoupled=True) in one dispatch over
    tensors = (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, numels), one tuple per
    role with an int address (or count) per tensor (max_exp_avg_sqs may be None without amsgrad),
    where a step is the address of the tensor's step count (a float, already incremented for this
    step), read on the device like lr_addr / grad_scale / found_inf (see fused_sgd)."""
    ps, gs, ms, vs, mxs, steps, numels = tensors
    if amsgrad and _missing(mxs, numels):
        raise ValueError("amsgrad needs a max_exp_avg_sq buffer for every tensor")
    lr_addr, grad_scale, found_inf = address(lr_addr), address(grad_scale), address(found_inf)
    flags = F_DEVICE_STEP | (F_AMSGRAD if amsgrad else 0) | (F_DECOUPLED if decoupled else 0) | \
        (F_MAXIMIZE if maximize else 0) | _aux_flags(lr_addr, grad_scale, found_inf)
    scalars = (weight_decay, 1.0 - beta1, beta2, 1.0 - beta2, eps, lr, beta1, 0.0, flags)
    _launch(device, MODE_ADAM, (ps, gs, ms, vs, mxs, numels, steps), scalars, True, params,
            "fused_adamw" if decoupled else "fused_adam", (lr_addr, grad_scale, found_inf))


def foreach_pointwise(device, op: str, tensors, value: float = 0.0, values=None, b_scalar: bool = False,
                      params: dict | None = None):
    """out = op(a, b, c, v) elementwise in one dispatch over tensors = (outs, a, b, c, numels), one
    tuple per operand with an int address of contiguous float32 data (or a count) per tensor, an
    operand no tensor uses None: ops in FOREACH_OPS, v = value, or values[i] for tensor i;
    b_scalar: each b is one element used for the whole tensor."""
    outs, a, b, c, numels = tensors
    code = FOREACH_OPS.index(op)
    flags = (code << OP_SHIFT) | (F_B_SCALAR if b_scalar else 0)
    bits = None
    if values is not None:
        flags |= F_PER_TENSOR
        bits = tuple(np.asarray(values, dtype=np.float32).view(np.uint32).tolist())  # slot 6: the tensor's v
    _launch(device, MODE_FOREACH, (outs, a, b, c, None, numels, bits), (float(value),) + (0.0,) * 7 + (flags,), True,
            params, "foreach_" + op)


def foreach_unscale(device, tensors, found_inf, inv_scale, params: dict | None = None):
    """GradScaler's check and unscale of every gradient of tensors = (addresses, numels) (contiguous
    float32) in one dispatch: g *= inv_scale[0]; found_inf[0] = 1.0 where a g is inf or NaN
    (torch._amp_foreach_non_finite_check_and_unscale_; found_inf and inv_scale float32 addresses)."""
    addresses, numels = tensors
    flags = (FOREACH_OPS.index("unscale") << OP_SHIFT) | F_GRAD_SCALE
    _launch(device, MODE_FOREACH, (addresses, addresses, None, None, None, numels, None), (0.0,) * 8 + (flags,), True,
            params, "amp.unscale", aux=(0, address(inv_scale), address(found_inf)))


def foreach_norms(device, tensors, out, norm_type: float = 2.0, params: dict | None = None):
    """out[i] = the norm (2 or inf) of tensor i of tensors = (addresses, numels) (one tuple each;
    torch._foreach_norm), in two dispatches: chunk partials, then one workgroup per tensor;
    deterministic."""
    inf = _norm_type(norm_type)
    addresses, numels = tensors
    if not numels:
        return
    fam, wg, chunk = _setup(device, sum(numels), params)
    mx = device.facts.max_workgroup_count[0]
    t = fam.table((addresses, None, None, None, None, numels, None), chunk)
    if t.partials is None:
        t.partials = device.allocator.alloc(4 * max(t.nblocks, 1))
    if t.nblocks:
        device.stream.dispatch(fam.mode_variant(MODE_NORM, True, wg, chunk, inf), grid_1d(t.nblocks, mx),
                               _push(t.table.address, t.blocks.address, t.partials.address, t.nblocks,
                                     (0.0,) * 8 + (0,)), "foreach_norms")
    counts = [(n + chunk - 1) // chunk for n in numels]
    firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    # slot 1: the tensor's first partial, slot 2: its count; numel 0: a table without blocks
    ranges = fam.table((None, tuple(firsts.tolist()), tuple(counts), None, None, (0,) * len(counts), None), chunk)
    device.stream.dispatch(fam.mode_variant(MODE_NORMS, True, wg, chunk, inf), grid_1d(len(numels), mx),
                           _push(ranges.table.address, address(out), t.partials.address, len(numels), (0.0,) * 8 + (0,)),
                           "foreach_norms")
