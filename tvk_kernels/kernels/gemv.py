"""Matrix-vector products of the matmul family: y[b] = act(alpha * W[b] @ x[b] + bias).

Template: templates/gemv.comp. Search space, buckets and defaults: tuning/gemv.json.

matmul() routes here when N == 1 (W = A, x = B's column) or M == 1 (y^T = a^T B, so W = B^T
and x = A's row), unless the caller passed the tiled kernel's parameters: a 16-128 wide tile
computes one useful column. Operands arrive checked by matmul() (addresses, element strides
within 31 bits, dtype supported), so `prepare` only picks the layout, vector widths and threads.
"""
from __future__ import annotations

import math
import struct

from ..errors import InvalidConfigError
from ..search_space import search_space
from . import activations
from .launch import Family, family, grid_1d, pow2ceil, powers_of_two
from .strides import vector_width

# w, x, y, bias (uint64); R, K; sWb sWr sWk; sxb sxk; syb syr; sbias; alpha; tlog
_PUSH = struct.Struct("<4Q10IfI")


class Gemv(Family):
    family = "gemv"
    template = "gemv.comp"

    def check_config(self, params: dict) -> dict:
        names = search_space(self.family)["params"]
        unknown = [n for n in params if n not in names]
        if unknown:
            raise InvalidConfigError(f"gemv: unknown parameter {', '.join(map(repr, unknown))}; the matrix-vector "
                                     f"kernel takes {', '.join(names)} (tuning/gemv.json)")
        if params["VEC"] not in (1, 2, 4):
            raise InvalidConfigError(f"gemv VEC={params['VEC']} must be 1, 2 or 4 (the kernel's load widths)")
        return powers_of_two(self.family, params, "WG", "KT", "MT")


def is_gemv_params(params) -> bool:
    """Whether an explicit params dict is this kernel's (a matmul call with such a dict runs it): only
    its names, one at least that the tiled kernel lacks ({"VEC": 4} alone is the tiled kernel's too)."""
    if not isinstance(params, dict) or not params:
        return False
    names, tiled = search_space(Gemv.family)["params"], search_space("matmul")["params"]
    return all(n in names for n in params) and any(n not in tiled for n in params)


def defines(params: dict, *, dtype_id: int = 0, mmajor: bool = False, vec_w: int | None = None,
            vec_x: int | None = None, act: str | None = None) -> dict:
    """The kernel's defines for a config: the one set the runtime, the tuner and the RDNA1 check
    compile. vec_w/vec_x: the load widths chosen for W and x (default: the config's VEC)."""
    vec_w = params["VEC"] if vec_w is None else vec_w
    return {"VEC_W": vec_w, "VEC_X": vec_w if vec_x is None else vec_x, "MMAJOR": int(mmajor), "DTYPE": dtype_id,
            **activations.act_define(act)}


def reads_along_rows(R: int, K: int, s_row: int, s_k: int) -> bool:
    """Whether adjacent threads should take adjacent rows of W (the M-major layout): W is closer
    to contiguous along its rows than along K. One row, or K == 1, runs K-major."""
    return R > 1 and K > 1 and s_row < s_k


def split_threads(params: dict, R: int, K: int, batch: int, vec: int, mmajor: bool) -> tuple[int, int]:
    """(threads per row, rows per workgroup) of a launch. K-major: up to KT threads share a row;
    M-major: MT threads take adjacent vec-row blocks, the rest of the workgroup splits K. While
    the grid has fewer than GROUPS workgroups, rows per workgroup halve (more threads per row)."""
    wg, want = params["WG"], params["GROUPS"]
    if mmajor:
        across = min(params["MT"], wg, pow2ceil(-(-R // vec)))  # threads along the rows
        while across > 1 and batch * -(-R // (across * vec)) < want and wg // across < pow2ceil(K):
            across //= 2
        threads = min(wg // across, pow2ceil(K))
        return threads, (wg // threads) * vec
    most = min(wg, pow2ceil(-(-K // vec)))  # more threads than vectors along K would idle
    threads = min(params["KT"], most)
    while threads < most and batch * -(-R // (wg // threads)) < want:
        threads *= 2
    return threads, wg // threads


def prepare(device, a_addr: int, b_addr: int, out_addr: int, M: int, N: int, K: int, batch: int, sa, sb, sc, *,
            act: str | None, dtype_id: int, esize: int, params: dict | None) -> "Launch":
    """The launch of matmul()'s out[b] = act(alpha * A[b] @ B[b] + bias) with N == 1 or M == 1, its
    operands checked by matmul() (sa, sb, sc: element strides (batch, row, col)). N == 1: W = A and
    x = B's column, one bias value for every output; M == 1: out^T = B^T a, so W = B^T, x = A's row
    and a bias value per output. params: None (the tuned/default config of the shape's bucket) or
    an explicit candidate. The addresses only choose the load widths (their alignment)."""
    if N == 1:
        swap, R, sw, sx, sy, bias_stride = False, M, sa, sb[:2], sc[:2], 0
    else:
        swap, R, sw, sx, sy, bias_stride = True, N, (sb[0], sb[2], sb[1]), (sa[0], sa[2]), (sc[0], sc[2]), 1
    w_addr, x_addr = (b_addr, a_addr) if swap else (a_addr, b_addr)
    fam = family(device, Gemv)
    bucket = fam.bucket({"M": R, "K": K, "batch": batch})
    source = "explicit" if params else fam.params(bucket)[1]
    prm = fam.resolve(bucket, params or None)
    wg = prm["WG"]
    mmajor = reads_along_rows(R, K, sw[1], sw[2])
    if mmajor:
        vec_w = vector_width(prm["VEC"], sw[1], w_addr, esize, (sw[0], sw[2]))
        vec_x = 1
    else:
        vec_w = vector_width(prm["VEC"], sw[2], w_addr, esize, (sw[0], sw[1]))
        vec_x = vec_w if vector_width(vec_w, sx[1], x_addr, esize, (sx[0],)) == vec_w else 1
    threads, rows_per_group = split_threads(prm, R, K, batch, vec_w, mmajor)
    pipe = fam.variant(defines(prm, dtype_id=dtype_id, mmajor=mmajor, vec_w=vec_w, vec_x=vec_x, act=act), wg,
                       _PUSH.size, shared_bytes=prm["shared_bytes"])
    facts = device.facts
    groups = grid_1d(math.ceil(R / rows_per_group), facts.max_workgroup_count[0])
    if groups[1] > facts.max_workgroup_count[1]:
        raise ValueError(f"matmul: {R} outputs need more workgroups than this device can launch")
    info = {"kernel": "gemv", "bucket": bucket, "params": {n: prm[n] for n in search_space(Gemv.family)["params"]},
            "source": source, "splits": 1}
    launch = Launch(swap, R, K, batch, sw, sx, sy, bias_stride, esize, threads.bit_length() - 1, pipe, groups,
                    facts.max_workgroup_count[2], info, {"M": R, "K": K, "batch": batch, "layout": "km"[mmajor]})
    return launch


class Launch:
    """Everything prepare() decided for one geometry, a launch plan kept by the Matmul family
    (launch.py's keep_plan()): a repeated matmul() call only records it."""
    __slots__ = ("swap", "R", "K", "batch", "sw", "sx", "sy", "bias_stride", "esize", "tlog", "pipe", "groups",
                 "chunk", "info", "tune_shape")
    family = Gemv.family  # of tune_shape (the gemv tuner target's shapes)

    def __init__(self, *values):
        for name, v in zip(self.__slots__, values):
            setattr(self, name, v)

    def record(self, device, a_addr: int, b_addr: int, out_addr: int, bias_addr: int, alpha: float) -> dict:
        w_addr, x_addr = (b_addr, a_addr) if self.swap else (a_addr, b_addr)
        sw, sx, sy, esize = self.sw, self.sx, self.sy, self.esize
        for b0 in range(0, self.batch, self.chunk):
            nb = min(self.chunk, self.batch - b0)
            push = _PUSH.pack(w_addr + b0 * sw[0] * esize, x_addr + b0 * sx[0] * esize, out_addr + b0 * sy[0] * esize,
                              bias_addr, self.R, self.K, *sw, *sx, *sy, self.bias_stride, float(alpha), self.tlog)
            device.stream.dispatch(self.pipe, (self.groups[0], self.groups[1], nb), push, "gemv")
        return dict(self.info)
