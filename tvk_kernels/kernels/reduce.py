"""Reductions over any set of dims of a strided N-d view (templates/reduce.comp).

    reduce(device, op, in_addr, out_addr, shape, strides, dims, keepdim=False, dtype="float32",
           params=None, index_addr=0) -> output shape

op: sum, mean, prod, max (amax), min (amin), argmax, argmin. Values are written as float32,
contiguous in the output shape; argmax/argmin write int64 indices (the first occurrence,
counted row-major over the reduced dims, i.e. the flat index when all dims are reduced,
like torch). max/min with `index_addr` also write the int64 indices there
(torch.max(x, dim)). NaN propagates (max/min return NaN, argmax the first NaN).

How: the host drops size-1 dims, splits the rest into kept and reduced dims (both in their
original order) and merges neighbours that are contiguous with each other, so most
reductions run with one or two dims each; up to 6 dims remain. Each output is reduced by T
threads of one workgroup, T chosen from the shape: adjacent threads share one output when
the reduction is the innermost stride (COLS=0; subgroup arithmetic where the device has it
and T covers whole subgroups), adjacent threads own adjacent outputs otherwise (COLS=1).
When there are too few outputs to fill the device and the reduced range is long, pass 1
splits the range into chunks (gl_WorkGroupID.z) and writes partials, pass 2 reduces them.
"""
from __future__ import annotations

import math
import struct

from . import dtypes
from ..search_space import search_space
from .kept_calls import kept_call
from .launch import Family, family, grid_1d, pow2ceil, powers_of_two, record_shape, recording
from .strides import contiguous_strides

OPS = {"sum": 0, "mean": 0, "prod": 1, "max": 2, "amax": 2, "min": 3, "amin": 3, "argmax": 4, "argmin": 5}
MAX_DIMS = 6
_PUSH = struct.Struct("<QQQQIIIIfI6I6I")
_DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2}
INPUT_DTYPE_CODES = dtypes.codes("float32", "float16", "bfloat16")  # IN_F16 in reduce.comp


def normalize_dims(ndim: int, dims) -> tuple[int, ...]:
    """dims (int, iterable, or None/() for all) -> sorted, non-negative, unique."""
    if dims is None or ndim == 0:
        return tuple(range(ndim))
    if isinstance(dims, int):
        dims = (dims,)
    dims = tuple(dims)
    if not dims:
        return tuple(range(ndim))
    out = set()
    for d in dims:
        d = int(d)
        if not -max(ndim, 1) <= d < max(ndim, 1):
            raise IndexError(f"dim {d} out of range for a {ndim}-d tensor")
        out.add(d % ndim if ndim else 0)
    return tuple(sorted(out))


def output_shape(shape, dims=None, keepdim: bool = False) -> tuple[int, ...]:
    """The shape torch gives `x.sum(dims, keepdim)` for an input of `shape`."""
    shape = tuple(int(s) for s in shape)
    red = set(normalize_dims(len(shape), dims))
    if keepdim:
        return tuple(1 if i in red else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in red)


def _collapse(dims: list) -> list:
    """[(size, stride)] outer->inner without size-1 dims, contiguous neighbours merged."""
    out: list = []
    for size, stride in dims:
        if size == 1:
            continue
        if out and out[-1][1] == stride * size:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


def sum_span(dims) -> int:
    """Offset of the last element of [(size, stride)], plus one."""
    span = 1
    for size, stride in dims:
        span += (size - 1) * stride
    return span


class Reduce(Family):
    family = "reduce"
    template = "reduce.comp"

    def check_config(self, params: dict) -> dict:
        return powers_of_two(self.family, params, "WG")


def defines(params: dict, op: int, reduced_dims: int, cols: bool, subgroup: bool, in_code: int = 0,
            in_idx: bool = False, idx64: bool = False, out_code: int = 0) -> dict:
    """The defines of one reduce kernel: the tuned ITEMS and the launch's choices (the runtime
    and the tuner target build them here). out_code: the values' storage (OUT_F16), absent for
    float32 so that those modules are the ones tuned before it existed."""
    out = {"OP": op, "RD": reduced_dims, "COLS": int(cols), "ITEMS": params["ITEMS"], "SUBGROUP": int(subgroup),
           "IN_F16": in_code, "IN_IDX": int(in_idx), "IDX64": int(idx64)}
    if out_code != INPUT_DTYPE_CODES["float32"]:
        out["OUT_F16"] = out_code
    return out


def use_subgroups(device, params: dict) -> bool:
    """Whether a reduce, norm or softmax kernel is built with subgroup arithmetic (SUBGROUP set, the
    device has it). The kernel itself takes the subgroup path only where a row's threads cover whole
    subgroups of the dispatch (templates/common/subgroup.glsl), as the width is known only there."""
    return bool(params.get("SUBGROUP")) and device.facts.features.get("subgroup_arithmetic", False)


def required_subgroup_size(params: dict) -> int | None:
    """The subgroup size a reduce, norm or softmax config asks the pipeline for (SUBGROUP_SIZE; None: the
    driver's choice). Its search space admits a size only where the device can give it."""
    return params.get("SUBGROUP_SIZE") or None


@kept_call('in_addr', 'out_addr', 'index_addr')
def reduce(device, op: str, in_addr: int, out_addr: int, shape, strides=None, dims=None, keepdim: bool = False,
           dtype: str = "float32", params: dict | None = None, index_addr: int = 0,
           out_dtype: str = "float32") -> tuple[int, ...]:
    """Reduce the view (in_addr, shape, strides in elements) over `dims` into out_addr.

    out_addr receives the values in out_dtype (float32, or float16/bfloat16 rounded once from the
    float32 result; int64 indices for argmax/argmin), contiguous in output_shape(shape, dims,
    keepdim), which is returned. index_addr (max/min only, float32 values): also write int64
    indices there. dtype: the input's storage, float32, float16 or bfloat16 (16-bit ones where
    device.facts.features['storage_16bit']). params: an explicit parameter set (WG, ITEMS,
    SUBGROUP, TARGET_GROUPS, SPLIT_MIN, SPLIT_PER_THREAD), merged over the tuned/default one.
    """
    if op not in OPS:
        raise ValueError(f"unknown reduction {op!r}; one of {sorted(OPS)}")
    for name, value in (("dtype", dtype), ("out_dtype", out_dtype)):
        if value not in _DTYPES:
            raise ValueError(f"reduce: {name} {value!r} is not supported (float32, float16, bfloat16)")
        if value != "float32" and not device.facts.features.get("storage_16bit"):
            raise ValueError(f"{device.facts.name} has no 16-bit storage; {value} tensors are not supported there")
    if out_dtype != "float32" and (op in ("argmax", "argmin") or index_addr):
        raise ValueError(f"reduce: {op} with indices writes float32 values; out_dtype {out_dtype!r} is for "
                         "value reductions only")
    shape = tuple(int(s) for s in shape)
    strides = contiguous_strides(shape) if strides is None else tuple(int(s) for s in strides)
    if len(strides) != len(shape):
        raise ValueError(f"shape {shape} and strides {strides} differ in length")
    if any(s < 0 for s in strides):
        raise ValueError("negative strides are not supported; pass the base address of the lowest element")
    red_dims = normalize_dims(len(shape), dims)
    out_shape = output_shape(shape, red_dims, keepdim)
    n_out = math.prod(out_shape)
    n_red = math.prod(shape[d] for d in red_dims)
    if n_out == 0:
        return out_shape
    if n_red == 0 and OPS[op] >= 2:
        raise ValueError(f"{op}: cannot reduce over an empty range (no identity)")
    if op in ("argmax", "argmin"):
        index_addr, out_addr = out_addr, 0
    elif index_addr and OPS[op] in (2, 3):
        op = "argmax" if OPS[op] == 2 else "argmin"

    kept = _collapse([(shape[i], strides[i]) for i in range(len(shape)) if i not in red_dims])
    red = _collapse([(shape[i], strides[i]) for i in red_dims]) or [(1, 0)]
    if len(kept) + len(red) > MAX_DIMS:
        raise ValueError(f"reduce: the view {shape} / strides {strides} needs {len(kept) + len(red)} dims after "
                         f"merging contiguous ones; at most {MAX_DIMS} are supported. Make the input contiguous.")
    if sum_span(kept + red) >= 1 << 32:
        raise ValueError(f"reduce: the view {shape} / strides {strides} spans 2**32 elements or more; split it")
    fam = family(device, Reduce)
    if recording():
        record_shape(fam.family, _tune_shape(kept, red), dtype=dtype, op=op)
    prm = fam.resolve({"n": n_out * max(n_red, 1)}, params)
    scale = (1.0 / n_red if n_red else float("nan")) if op == "mean" else 1.0
    _launch(device, fam, prm, OPS[op], in_addr, 0, out_addr, index_addr, kept, red, n_out, n_red, scale,
            INPUT_DTYPE_CODES[dtype], allow_split=True, out_code=INPUT_DTYPE_CODES[out_dtype])
    return out_shape


def _tune_shape(kept: list, red: list):
    """ReduceTarget's contiguous [rows, cols] reduced over dim 1, 0 or both, where the collapsed view
    is one of those (tvk-tune --model); None for other views (not recorded)."""
    if not kept and len(red) == 1 and red[0][1] == 1:
        rows, cols, dim = 1, red[0][0], None
    elif len(kept) == 1 and len(red) == 1 and red[0][1] == 1 and kept[0][1] == red[0][0]:
        rows, cols, dim = kept[0][0], red[0][0], 1
    elif len(kept) == 1 and len(red) == 1 and kept[0][1] == 1 and red[0][1] == kept[0][0]:
        rows, cols, dim = red[0][0], kept[0][0], 0
    else:
        return None
    return {"rows": rows, "cols": cols, "dim": dim, "n": rows * cols}


def _column_splits(groups: int, target: int, n_red: int, t: int) -> int:
    """Pass-1 chunks for a strided column sum the tuned rule leaves whole: a handful of workgroups
    whose t threads per output would each walk a long column (tuning/reduce.json column_split)."""
    rule = search_space(Reduce.family).get("column_split")
    if not rule or groups * rule["max_groups_share"] > target or n_red // t < rule["min_per_thread"]:
        return 1
    return max(1, min(-(-target // groups), n_red // (t * rule["per_thread_chunk"]), rule["max_splits"]))


def plan(prm: dict, n_out: int, n_red: int, cols: bool, allow_split: bool = True) -> tuple[int, int, int, int, int]:
    """How one reduction runs: (T threads per output, outputs per workgroup, workgroups, pass-1 chunks of
    the reduced range (1: one pass), chunk length). cols: adjacent threads own adjacent outputs (a strided
    column sum), else T adjacent threads share one output. The range splits when fewer than TARGET_GROUPS
    workgroups would run and it is at least SPLIT_MIN long (then, unless cols, into chunks no thread walks
    more than SPLIT_PER_THREAD elements of, where that is set: enough loads in flight as the data grows), or
    by the column-sum rule (_column_splits)."""
    wg, items = int(prm["WG"]), int(prm["ITEMS"])

    def layout(length):
        if cols:
            g = min(wg, pow2ceil(n_out))
            return wg // g, g
        t = min(wg, pow2ceil(-(-max(length, 1) // items)))
        return t, wg // t

    t, g = layout(n_red)
    groups = -(-n_out // g)
    nsplit = 1
    target, split_min = int(prm.get("TARGET_GROUPS", 1)), int(prm.get("SPLIT_MIN", 1 << 30))
    per_thread = int(prm.get("SPLIT_PER_THREAD", 0))
    if allow_split and groups < target and n_red >= split_min:
        nsplit = min(-(-target // groups), max(1, n_red // max(split_min // 4, 1)))
        if per_thread and not cols:  # no thread walks more than per_thread elements: splits grow with the data
            nsplit = max(nsplit, -(-n_red // (t * per_thread)))
        nsplit = min(nsplit, 65535)
    elif allow_split and cols:
        nsplit = _column_splits(groups, target, n_red, t)
    chunk = n_red
    if nsplit > 1:
        chunk = -(-n_red // nsplit)
        nsplit = -(-n_red // chunk)
        t, g = layout(chunk)
    return t, g, groups, nsplit, chunk


def _launch(device, fam, prm, opc, in_addr, in_idx, out_addr, idx_addr, kept, red, n_out, n_red, scale, in_code,
            allow_split, idx64=True, out_code=0):
    wg = int(prm["WG"])
    cols = bool(kept) and (red[-1][1] == 0 or kept[-1][1] < red[-1][1])
    t, g, groups, nsplit, chunk = plan(prm, n_out, n_red, cols, allow_split)
    pair = opc >= 4

    kernel = defines(prm, opc, len(red), cols, not cols and use_subgroups(device, prm), in_code, in_idx != 0,
                     idx64 and nsplit == 1, out_code if nsplit == 1 else 0)  # pass-1 partials: float32
    # arg ops (OP >= 4) keep an index beside each value
    pipe = fam.variant(kernel, wg, _PUSH.size, shared_bytes=wg * 4 * (2 if pair else 1),
                       subgroup_size=required_subgroup_size(prm))
    tlog = t.bit_length() - 1
    gx, gy, _ = grid_1d(groups, device.facts.max_workgroup_count[0])
    dims = red + kept
    sizes = [d[0] for d in dims] + [1] * (MAX_DIMS - len(dims))
    strides = [d[1] for d in dims] + [0] * (MAX_DIMS - len(dims))

    if nsplit == 1:
        push = _PUSH.pack(in_addr, in_idx, out_addr, idx_addr, n_out, n_red, n_red, len(kept), scale, tlog,
                          *sizes, *strides)
        device.stream.dispatch(pipe, (gx, gy, 1), push, "reduce")
        return
    # pass 1: partials [nsplit, n_out] (+ uint32 indices), pass 2: reduce them over dim 0
    part = device.allocator.alloc(4 * nsplit * n_out)
    part_idx = device.allocator.alloc(4 * nsplit * n_out) if pair else None
    push = _PUSH.pack(in_addr, in_idx, part.address, part_idx.address if pair else 0, n_out, n_red, chunk,
                      len(kept), 1.0, tlog, *sizes, *strides)
    device.stream.dispatch(pipe, (gx, gy, nsplit), push, "reduce.pass1")
    _launch(device, fam, prm, opc, part.address, part_idx.address if pair else 0, out_addr, idx_addr,
            [(n_out, 1)] if n_out > 1 else [], [(nsplit, n_out)], n_out, nsplit, scale, 0, allow_split=False,
            idx64=idx64, out_code=out_code)
    device.stream.keep_alive(part)
    if pair:
        device.stream.keep_alive(part_idx)
