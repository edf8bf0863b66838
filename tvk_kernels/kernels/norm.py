"""Layer norm and batch norm, forward and backward (templates/norm.comp).

All tensors are contiguous buffers given by address; 0 means "absent" for every optional buffer
(weight, bias, statistics outputs, gradients). `dtype` (every entry point): the storage of x, y,
grad_out and grad_in: float32, or float16/bfloat16 where the device has 16-bit storage (autocast's
batch norm); weights, statistics and their gradients are float32, the arithmetic float32.

Layer norm over the last `normalized_ndim` dims of `shape` (rows = the leading dims):
    layer_norm(device, x_addr, y_addr, shape, normalized_ndim=1, weight_addr=0, bias_addr=0,
               eps=1e-5, mean_addr=0, rstd_addr=0, params=None)
        y = (x - mean) * rstd * weight + bias; mean, rstd = 1/sqrt(var + eps) per row ([rows] float32).
    layer_norm_backward(device, grad_addr, x_addr, mean_addr, rstd_addr, shape, normalized_ndim=1,
                        weight_addr=0, grad_in_addr=0, grad_weight_addr=0, grad_bias_addr=0, params=None)
        grad_in per row; grad_weight / grad_bias ([normalized numel]) as column sums over rows
        (one kernel, or chunks of rows + the reduce kernel when there are few columns).

Batch norm over (N, C, *) (channels on dim 1; (N, C) for 1-d), like torch.nn.functional.batch_norm:
    batch_norm(device, x_addr, y_addr, shape, weight_addr=0, bias_addr=0, running_mean_addr=0,
               running_var_addr=0, training=True, momentum=0.1, eps=1e-5, save_mean_addr=0,
               save_invstd_addr=0, params=None)
        training: per-channel batch mean and biased var normalize x; the running buffers (if
        given) are updated in place: r = (1 - momentum) * r + momentum * stat, with the unbiased
        var for running_var; save_mean / save_invstd ([C]) keep the batch statistics for backward.
        eval (training=False): normalize with running_mean / running_var.
    batch_norm_backward(device, grad_addr, x_addr, shape, save_mean_addr=0, save_invstd_addr=0,
                        weight_addr=0, grad_in_addr=0, grad_weight_addr=0, grad_bias_addr=0,
                        training=True, running_mean_addr=0, running_var_addr=0, eps=1e-5, params=None)
        training: uses the saved batch statistics (the gradient flows through them, like autograd);
        eval: uses the running statistics (grad_in = grad * weight / sqrt(running_var + eps)).
    Both run one workgroup per channel, or, when that would be fewer than TARGET_GROUPS
    workgroups, in split form: per-chunk partial sums (chunks of at least
    max(SPLIT_ROWS, WG * ITEMS) elements of a channel), a per-channel combine, and an
    elementwise pass over all elements.
"""
from __future__ import annotations

import math
import struct

from . import dtypes
from .kept_calls import kept_call
from .launch import Family, family, grid_1d, loop_budget_params, pow2ceil, powers_of_two, record_shape, recording
from .reduce import reduce, required_subgroup_size, use_subgroups

_PUSH = struct.Struct("<10Q4I3f4I")
_ADDRS = ("x", "y", "g", "w", "b", "mean", "rstd", "aux0", "aux1", "scratch")
LN_FWD, LN_BWD, LN_GWB, BN_FWD, BN_BWD, BN_PART_FWD, BN_PART_BWD, BN_COMBINE, BN_APPLY, LN_BWD_FUSED = range(10)
FUSED_MAX_ITEMS = 16  # layer norm backward is fused where a row fits WG threads' registers this many times over
FUSED_MIN_CHUNK = 16  # rows per workgroup at least: the column partials stay a few % of the traffic


class Norm(Family):
    family = "norm"
    template = "norm.comp"

    def check_config(self, params: dict) -> dict:
        return powers_of_two(self.family, params, "WG")

    def kernel(self, params: dict, phase: int, items: int, subgroup: bool, relu: bool = False,
               dtype: str = "float32"):
        """One phase's kernel, every phase with the tuned WG and subgroup size, and 4 bytes of shared memory
        per thread."""
        wg = params["WG"]
        return self.variant(defines(phase, items, subgroup, relu, dtype), wg, _PUSH.size, shared_bytes=4 * wg,
                            subgroup_size=required_subgroup_size(params))


def defines(phase: int, items: int, subgroup: bool, relu: bool = False, dtype: str = "float32") -> dict:
    """The defines of one norm kernel (the runtime and the tuner target build them here). RELU is
    only defined when set, and DTYPE for 16-bit storage: the plain float32 kernels stay as they were."""
    return {"PHASE": phase, "ITEMS": items, "SUBGROUP": int(subgroup), **({"RELU": 1} if relu else {}),
            **dtypes.storage_define(dtype)}


def _pack(addrs: dict, rows, n, inner=1, ostride=0, eps=0.0, momentum=0.0, unbias=1.0, flags=0, tlog=0, chunk=0,
          nsplit=0) -> bytes:
    return _PUSH.pack(*(int(addrs.get(k) or 0) for k in _ADDRS), rows, n, inner, ostride, eps, momentum, unbias, flags,
                      tlog, chunk, nsplit)


def _row_launch(device, phase, prm, rows, n, addrs, inner=1, ostride=0, eps=0.0, momentum=0.0, unbias=1.0, flags=0,
                label="norm", relu=False, dtype="float32"):
    """One row (LN row / BN channel) per T adjacent threads."""
    prm = loop_budget_params(family(device, Norm), {"n": rows * n}, prm, n, passes=3)
    wg, items = int(prm["WG"]), int(prm["ITEMS"])
    t = min(wg, pow2ceil(-(-max(n, 1) // items)))
    pipe = family(device, Norm).kernel(prm, phase, items, use_subgroups(device, prm), relu, dtype)
    groups = grid_1d(-(-rows // (wg // t)), device.facts.max_workgroup_count[0])
    push = _pack(addrs, rows, n, inner, ostride, eps, momentum, unbias, flags, t.bit_length() - 1)
    device.stream.dispatch(pipe, groups, push, label)


def _split_ln(shape, normalized_ndim):
    shape = tuple(int(s) for s in shape)
    k = int(normalized_ndim)
    if not 1 <= k <= len(shape):
        raise ValueError(f"layer_norm: normalized_ndim {k} does not fit shape {shape}")
    return math.prod(shape[:-k]), math.prod(shape[-k:])


@kept_call('x_addr', 'y_addr', 'weight_addr', 'bias_addr', 'mean_addr', 'rstd_addr')
def layer_norm(device, x_addr: int, y_addr: int, shape, normalized_ndim: int = 1, weight_addr: int = 0,
               bias_addr: int = 0, eps: float = 1e-5, mean_addr: int = 0, rstd_addr: int = 0,
               params: dict | None = None, dtype: str = "float32"):
    """y = layer_norm(x) over the last normalized_ndim dims; mean/rstd ([rows]) are written if given."""
    dtypes.check_storage(device, dtype, "norm")
    rows, n = _split_ln(shape, normalized_ndim)
    if rows == 0 or n == 0:
        return
    if recording():
        record_shape(Norm.family, {"kind": "ln", "rows": rows, "cols": n, "n": rows * n}, direction="forward")
    prm = family(device, Norm).resolve({"n": rows * n}, params)
    _row_launch(device, LN_FWD, prm, rows, n, dict(x=x_addr, y=y_addr, w=weight_addr, b=bias_addr, mean=mean_addr,
                                                    rstd=rstd_addr), eps=eps, label="layer_norm", dtype=dtype)


@kept_call('grad_addr', 'x_addr', 'mean_addr', 'rstd_addr', 'weight_addr', 'grad_in_addr', 'grad_weight_addr', 'grad_bias_addr')
def layer_norm_backward(device, grad_addr: int, x_addr: int, mean_addr: int, rstd_addr: int, shape,
                        normalized_ndim: int = 1, weight_addr: int = 0, grad_in_addr: int = 0,
                        grad_weight_addr: int = 0, grad_bias_addr: int = 0, params: dict | None = None,
                        dtype: str = "float32"):
    """Gradients of layer_norm from grad_out (grad_addr), x and the saved mean / rstd."""
    dtypes.check_storage(device, dtype, "norm")
    rows, n = _split_ln(shape, normalized_ndim)
    if n == 0:
        return
    if recording():
        record_shape(Norm.family, {"kind": "ln", "rows": rows, "cols": n, "n": rows * n}, direction="backward")
    prm = family(device, Norm).resolve({"n": rows * n}, params)
    fused = (fused_ln_backward_plan(prm, rows, n, device.facts.max_loop_iterations)
             if grad_in_addr and (grad_weight_addr or grad_bias_addr) else None)
    if fused:
        _ln_backward_fused(device, prm, rows, n, fused, dict(x=x_addr, y=grad_in_addr, g=grad_addr, w=weight_addr,
                                                             mean=mean_addr, rstd=rstd_addr),
                           grad_weight_addr, grad_bias_addr, dtype)
        return
    if grad_in_addr and rows:
        _row_launch(device, LN_BWD, prm, rows, n, dict(x=x_addr, y=grad_in_addr, g=grad_addr, w=weight_addr,
                                                        mean=mean_addr, rstd=rstd_addr), label="layer_norm_backward",
                    dtype=dtype)
    if not (grad_weight_addr or grad_bias_addr):
        return
    t, groups, nsplit, chunk = ln_column_split(prm, rows, n)
    pipe = family(device, Norm).kernel(prm, LN_GWB, int(prm["ITEMS"]), False, dtype=dtype)
    gx, gy, _ = grid_1d(groups, device.facts.max_workgroup_count[0])
    if nsplit == 1:
        aux0, aux1, parts = grad_weight_addr, grad_bias_addr, []
    else:
        parts = [device.allocator.alloc(4 * nsplit * n) if a else None for a in (grad_weight_addr, grad_bias_addr)]
        aux0, aux1 = (p.address if p is not None else 0 for p in parts)
    push = _pack(dict(x=x_addr, g=grad_addr, mean=mean_addr, rstd=rstd_addr, aux0=aux0, aux1=aux1), rows, n, chunk,
                 tlog=t.bit_length() - 1)
    device.stream.dispatch(pipe, (gx, gy, nsplit), push, "layer_norm_backward.params")
    for part, dst in zip(parts, (grad_weight_addr, grad_bias_addr)):
        if part is not None:
            reduce(device, "sum", part.address, dst, (nsplit, n), (n, 1), (0,))
            device.stream.keep_alive(part)


def fused_ln_backward_plan(prm: dict, rows: int, n: int, loop_budget: int = 0) -> tuple[int, int, int, int] | None:
    """(ITEMS, T threads a row, rows a workgroup, workgroups) of the fused layer norm backward (PHASE 9), or
    None where a row does not fit WG threads' registers FUSED_MAX_ITEMS times over (or there are no rows):
    at least FUSED_MIN_CHUNK rows a workgroup, in whole steps of WG / T rows, at most TARGET_GROUPS
    workgroups where the rows and the device's loop budget allow (loop_budget: facts.max_loop_iterations,
    0 for none; llvmpipe ends an invocation's loops after 65535 iterations, so a workgroup's row steps,
    each counted with its item loops, stay below it)."""
    wg = int(prm["WG"])
    if rows == 0 or n > wg * FUSED_MAX_ITEMS:
        return None
    items = pow2ceil(-(-n // wg))
    t = min(wg, pow2ceil(-(-n // items)))
    g = wg // t
    chunk = max(-(-rows // int(prm.get("TARGET_GROUPS", 1))), FUSED_MIN_CHUNK)
    if loop_budget:  # a row step: its own iteration, two item loops, two cross-thread sums (log2 T + 2 rounds)
        per_step = 1 + 2 * items + 2 * (t.bit_length() + 1)
        steps = (loop_budget - 256 - 2 * items * g) // per_step  # the partials' sums at the end count too
        chunk = min(chunk, max(steps, 1) * g)
    chunk = -(-chunk // g) * g
    return items, t, chunk, -(-rows // chunk)


def _ln_backward_fused(device, prm, rows, n, plan, addrs, grad_weight_addr, grad_bias_addr, dtype):
    """grad_in and the column sums in one pass over g and x (PHASE 9), each workgroup writing its partial
    column sums; the reduce kernel adds them (one workgroup: written in place)."""
    items, t, chunk, groups = plan
    if groups == 1:
        parts = []
        aux0, aux1 = grad_weight_addr, grad_bias_addr
    else:
        parts = [device.allocator.alloc(4 * groups * n) if a else None for a in (grad_weight_addr, grad_bias_addr)]
        aux0, aux1 = (part.address if part is not None else 0 for part in parts)
    pipe = family(device, Norm).kernel(prm, LN_BWD_FUSED, items, use_subgroups(device, prm), dtype=dtype)
    push = _pack(dict(addrs, aux0=aux0, aux1=aux1), rows, n, chunk, tlog=t.bit_length() - 1)
    device.stream.dispatch(pipe, grid_1d(groups, device.facts.max_workgroup_count[0]), push, "layer_norm_backward")
    for part, dst in zip(parts, (grad_weight_addr, grad_bias_addr)):
        if part is not None:
            reduce(device, "sum", part.address, dst, (groups, n), (n, 1), (0,))
            device.stream.keep_alive(part)


def ln_column_split(prm: dict, rows: int, n: int) -> tuple[int, int, int, int]:
    """How layer_norm_backward sums grad_weight and grad_bias over the rows: (T threads down the rows
    of each column, workgroups across the columns, row chunks, rows per chunk). Adjacent threads take
    adjacent columns; the rows split into chunks of at least SPLIT_ROWS when fewer than TARGET_GROUPS
    workgroups would run, and the reduce kernel then adds the chunks' partial sums."""
    wg = int(prm["WG"])
    g_cols = min(wg, pow2ceil(n))
    groups = -(-n // g_cols)
    nsplit = 1
    target, split_rows = int(prm.get("TARGET_GROUPS", 1)), max(int(prm.get("SPLIT_ROWS", 1 << 30)), 1)
    if groups < target and rows >= 2 * split_rows:
        nsplit = min(-(-target // groups), rows // split_rows, 65535)
    chunk = -(-max(rows, 1) // nsplit)
    return wg // g_cols, groups, max(1, -(-rows // chunk)), chunk


def _split_bn(shape):
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2:
        raise ValueError(f"batch_norm expects (N, C, *) input, got shape {shape}")
    c, inner = shape[1], math.prod(shape[2:])
    return shape[0], c, inner


def _bn_chunks(prm, c: int, m: int):
    """(nsplit, chunk) when one workgroup per channel would be fewer than TARGET_GROUPS
    workgroups and a channel has room for 2+ chunks of max(SPLIT_ROWS, WG * ITEMS) elements; else None."""
    wg, items = int(prm["WG"]), int(prm["ITEMS"])
    groups = -(-c // (wg // min(wg, pow2ceil(-(-m // items)))))  # what _row_launch would run
    target, min_chunk = int(prm.get("TARGET_GROUPS", 1)), max(int(prm.get("SPLIT_ROWS", 1 << 30)), wg * items)
    if groups >= target or m < 2 * min_chunk:
        return None
    chunk = -(-m // min(-(-target // c), m // min_chunk, 65535))
    return -(-m // chunk), chunk


def _bn_split(device, prm, c, m, inner, addrs, split, partials, label, relu=False, dtype="float32", **scalars):
    """Split batch norm: chunk partials (PHASE `partials`; none when split is None), the
    per-channel combine, then the elementwise apply when there is an output (addrs['y']),
    relu of it when `relu`."""
    wg, items = int(prm["WG"]), int(prm["ITEMS"])
    nsplit, chunk = split or (0, 0)
    scratch = device.allocator.alloc(4 * c * (4 + 2 * nsplit))  # coefs [C, 4], partials [nsplit, C, 2]
    push = _pack(dict(addrs, scratch=scratch.address), c, m, inner, c * inner, tlog=wg.bit_length() - 1, chunk=chunk,
                 nsplit=nsplit, **scalars)
    fam, max_x = family(device, Norm), device.facts.max_workgroup_count[0]
    if nsplit:
        pipe = fam.kernel(prm, partials, items, use_subgroups(device, prm), dtype=dtype)
        device.stream.dispatch(pipe, (c, 1, nsplit), push, label + ".partials")
    pipe = fam.kernel(prm, BN_COMBINE, 1, False)
    device.stream.dispatch(pipe, grid_1d(-(-c // wg), max_x), push, label + ".combine")
    if addrs.get("y"):
        pipe = fam.kernel(prm, BN_APPLY, items, False, relu, dtype)
        device.stream.dispatch(pipe, grid_1d(-(-c * m // (wg * items)), max_x), push, label + ".apply")
    device.stream.keep_alive(scratch)


@kept_call('x_addr', 'y_addr', 'weight_addr', 'bias_addr', 'running_mean_addr', 'running_var_addr', 'save_mean_addr', 'save_invstd_addr')
def batch_norm(device, x_addr: int, y_addr: int, shape, weight_addr: int = 0, bias_addr: int = 0,
               running_mean_addr: int = 0, running_var_addr: int = 0, training: bool = True,
               momentum: float = 0.1, eps: float = 1e-5, save_mean_addr: int = 0, save_invstd_addr: int = 0,
               params: dict | None = None, relu: bool = False, dtype: str = "float32"):
    """torch.nn.functional.batch_norm on (N, C, *); see the module docstring. relu: write
    relu(y) instead of y (the statistics are those of y either way)."""
    dtypes.check_storage(device, dtype, "norm")
    n_, c, inner = _split_bn(shape)
    m = n_ * inner
    if c == 0 or m == 0:
        return
    if recording():
        record_shape(Norm.family, {"kind": "bn", "N": n_, "C": c, "HW": inner, "n": c * m}, direction="forward")
    prm = family(device, Norm).resolve({"n": c * m}, params)
    addrs = dict(x=x_addr, y=y_addr, w=weight_addr, b=bias_addr)
    if training:
        if m <= 1:
            raise ValueError(f"batch_norm: expected more than 1 value per channel when training, got input of "
                             f"shape {tuple(shape)}")
        addrs.update(mean=save_mean_addr, rstd=save_invstd_addr, aux0=running_mean_addr, aux1=running_var_addr)
        flags, unbias = 0, m / (m - 1)
    else:
        if not (running_mean_addr and running_var_addr):
            raise ValueError("batch_norm: eval mode needs running_mean and running_var")
        addrs.update(mean=running_mean_addr, rstd=running_var_addr)
        flags, unbias = 1, 1.0
    momentum = 0.0 if momentum is None else momentum
    label = "batch_norm_relu" if relu else "batch_norm"
    split = _bn_chunks(prm, c, m)
    if split:  # eval needs no partials: the combine reads the running stats
        _bn_split(device, prm, c, m, inner, addrs, split if training else None, BN_PART_FWD, label, relu=relu,
                  dtype=dtype, eps=eps, momentum=momentum, unbias=unbias, flags=flags)
        return
    _row_launch(device, BN_FWD, prm, c, m, addrs, inner=inner, ostride=c * inner, eps=eps,
                momentum=momentum, unbias=unbias, flags=flags, label=label, relu=relu, dtype=dtype)


@kept_call('grad_addr', 'x_addr', 'save_mean_addr', 'save_invstd_addr', 'weight_addr', 'grad_in_addr', 'grad_weight_addr', 'grad_bias_addr', 'running_mean_addr', 'running_var_addr')
def batch_norm_backward(device, grad_addr: int, x_addr: int, shape, save_mean_addr: int = 0,
                        save_invstd_addr: int = 0, weight_addr: int = 0, grad_in_addr: int = 0,
                        grad_weight_addr: int = 0, grad_bias_addr: int = 0, training: bool = True,
                        running_mean_addr: int = 0, running_var_addr: int = 0, eps: float = 1e-5,
                        params: dict | None = None, dtype: str = "float32"):
    """Gradients of batch_norm: grad_in (N, C, *), grad_weight and grad_bias ([C]); see the module docstring."""
    dtypes.check_storage(device, dtype, "norm")
    n_, c, inner = _split_bn(shape)
    m = n_ * inner
    if c == 0:
        return
    if recording():
        record_shape(Norm.family, {"kind": "bn", "N": n_, "C": c, "HW": inner, "n": c * m}, direction="backward")
    prm = family(device, Norm).resolve({"n": c * max(m, 1)}, params)
    if training:
        addrs = dict(mean=save_mean_addr, rstd=save_invstd_addr)
        flags = 0
    else:
        if not (running_mean_addr and running_var_addr):
            raise ValueError("batch_norm_backward: eval mode needs running_mean and running_var")
        addrs = dict(mean=running_mean_addr, rstd=running_var_addr)
        flags = 1
    addrs.update(x=x_addr, g=grad_addr, w=weight_addr, y=grad_in_addr, aux0=grad_weight_addr, aux1=grad_bias_addr)
    split = _bn_chunks(prm, c, m)
    if split:  # eval: the sums only feed grad weight / bias
        sums = grad_weight_addr or grad_bias_addr or (training and grad_in_addr)
        _bn_split(device, prm, c, m, inner, addrs, split if sums else None, BN_PART_BWD, "batch_norm_backward",
                  dtype=dtype, eps=eps, flags=flags | 2)
        return
    _row_launch(device, BN_BWD, prm, c, m, addrs, inner=inner, ostride=c * inner, eps=eps, flags=flags,
                label="batch_norm_backward", dtype=dtype)
