"""What the GEMM kernels share: the tiled kernel's family (templates/matmul.comp) and the launch plan.

The cooperative-matrix kernel (matmul_coopmat.py) reads matmul.comp's push constants and dtypes,
splits K by the tiled kernel's rule against the same device target, and sums its partials with
the tiled family's reduce pass. It takes them from here, so that matmul.py, which routes a call
to the matrix-vector, cooperative-matrix or tiled kernel, imports matmul_coopmat.py and never
the reverse.
"""
from __future__ import annotations

import math
import struct

from ..config import by_class, default_params
from ..errors import InvalidConfigError
from ..search_space import search_space, with_derived
from . import activations, dtypes
from .launch import Family, grid_1d
from .strides import vector_width

# dtype -> (DTYPE define, element bytes)
DTYPES = {n: (dtypes.DTYPES[n].code, dtypes.DTYPES[n].itemsize) for n in ("float32", "float16", "bfloat16")}

# a, b, c, bias (uint64); M, N, K, batch; sAb sAm sAk; sBb sBk sBn; sCb sCm sCn; alpha; k_chunk; splits
PUSH = struct.Struct("<4Q4I9IfII")
MODE_GEMM, MODE_PARTIAL, MODE_REDUCE = 0, 1, 2
INT31 = 1 << 31


def defines(params: dict, *, mode: int = MODE_GEMM, dtype_id: int = 0, a_kmajor: bool = True,
            b_nmajor: bool = True, vec_a: int | None = None, vec_b: int | None = None, act: str | None = None) -> dict:
    """The tiled kernel's defines for a config: the one set the runtime, the tuner and the RDNA1
    check compile. vec_a/vec_b: the load widths chosen for the operands (default: the config's VEC)."""
    return {
        "BM": params["BM"], "BN": params["BN"], "BK": params["BK"], "TM": params["TM"], "TN": params["TN"],
        "UNROLL": params["UNROLL"], "PAD": params["PAD"], "PREFETCH": params.get("PREFETCH", 0),
        "FRAG": params.get("FRAG", 0), "STAGES": params.get("STAGES", 1),
        "VEC_A": params["VEC"] if vec_a is None else vec_a, "VEC_B": params["VEC"] if vec_b is None else vec_b,
        "A_KMAJOR": int(a_kmajor), "B_NMAJOR": int(b_nmajor), "DTYPE": dtype_id, "MODE": mode,
        **activations.act_define(act if mode == MODE_GEMM else None),
    }


# ------------------------------------------------------------------ the tiled family
class Matmul(Family):
    family = "matmul"
    template = "matmul.comp"

    def __init__(self, device):
        Family.__init__(self, device)
        self.coop = None  # matmul_coopmat.verified: the CoopMatmul family, or False where there is none
        self.coop2 = {}  # dtype -> matmul_coopmat2.verified: the CoopMatmul2 family, or False where it does not run
        self.packed = None  # matmul_packed_f16.verified: the PackedMatmul family, or False where it does not run
        # invocations in flight that fill the device: tuning/matmul.json's split_k target_groups
        # counts workgroups of the device's default config (once here: target_groups is per call)
        space = search_space(self.family)
        self.target_invocations = (by_class(space.get("split_k", {}).get("target_groups"), device.facts, 64)
                                   * with_derived(space, default_params(self.family, device.facts))["WG"])

    def params(self, bucket: str = "*") -> tuple[dict, str]:
        """(params, source) of a bucket. A layout bucket ("medium.tn") not tuned on this device runs
        its size bucket's ("medium") config, per-bucket defaults included."""
        size = bucket.split(".")[0]
        if size != bucket:
            found = Family.params(self, bucket)
            if found[1] != "default":
                return found
        return Family.params(self, size)

    def check_config(self, params: dict) -> dict:
        """The tiled kernel's rules beyond tuning/matmul.json's constraints: known names, positive
        tile sizes (PAD and SUBGROUP may be 0), a load width the template has, the device's limits."""
        names = search_space(self.family)["params"]
        unknown = [n for n in params if n not in names]
        if unknown:
            raise InvalidConfigError(f"matmul: unknown parameter {', '.join(map(repr, unknown))}; the tiled kernel "
                                     f"takes {', '.join(names)} (tuning/matmul.json)")
        for name in ("BM", "BN", "BK", "TM", "TN", "VEC", "UNROLL"):
            if params[name] <= 0:
                raise InvalidConfigError(f"matmul parameter {name}={params[name]} must be a positive integer")
        if params["VEC"] not in (1, 2, 4):
            raise InvalidConfigError(f"matmul VEC={params['VEC']} must be 1, 2 or 4 (the tiled kernel's load widths)")
        if params.get("FRAG", 0) and (params["TM"] % 4 or params["TN"] % 4 or params["PAD"] % 4):
            raise InvalidConfigError(f"matmul FRAG=1 reads runs of 4 rows and columns: TM={params['TM']}, "
                                     f"TN={params['TN']} and PAD={params['PAD']} must be multiples of 4")
        d = with_derived(search_space(self.family), params)
        try:
            self.device.pipelines.check_limits((d["WG"], 1, 1), shared_bytes=d["shared_bytes"],
                                               subgroup_size=params["SUBGROUP"] or None, push_size=PUSH.size)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"matmul parameters {params}: {e}; pick another tile (see "
                                     f"tvk_kernels.search_space.candidates('matmul', device.facts))") from None
        return params

    def gemm(self, params: dict, dtype_id: int, mode: int, a_kmajor: bool, b_nmajor: bool, vec_a: int, vec_b: int,
             act: str | None):
        """The tiled kernel of a resolved config (derived WG and shared_bytes included)."""
        d = defines(params, mode=mode, dtype_id=dtype_id, a_kmajor=a_kmajor, b_nmajor=b_nmajor, vec_a=vec_a,
                    vec_b=vec_b, act=act)
        return self.variant(d, params["WG"], PUSH.size, shared_bytes=params["shared_bytes"],
                            subgroup_size=params["SUBGROUP"] or None)

    def reduce(self, dtype_id: int, act: str | None):
        """The split-K pass summing the partials (and applying the epilogue), and its workgroup size."""
        wg = min(256, self.device.facts.max_workgroup_invocations)
        return self.variant({"MODE": MODE_REDUCE, "DTYPE": dtype_id, **activations.act_define(act)}, wg, PUSH.size), wg


# ------------------------------------------------------------------ the launch plan
def check_int(name: str, v, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
        raise ValueError(f"matmul: {name} must be an integer, got {v!r}")
    v = int(v)
    if v < minimum:
        raise ValueError(f"matmul: {name} must be >= {minimum}, got {v}")
    return v


def contig_choice(s_outer: int, s_inner: int, n_outer: int, n_inner: int) -> bool:
    """True when an operand is best read along its inner (second) dimension."""
    inner_ok = s_inner == 1 or n_inner == 1
    outer_ok = s_outer == 1 or n_outer == 1
    if inner_ok != outer_ok:
        return inner_ok
    if inner_ok:  # both: the longer one
        return n_inner >= n_outer
    return s_inner <= s_outer


def target_groups(fam: Matmul, wg: int) -> float:
    """The workgroups of `wg` invocations that fill the device: a config with smaller workgroups
    needs proportionally more of them (Matmul.target_invocations)."""
    return fam.target_invocations / wg


def load_widths(limit: int, a_addr: int, b_addr: int, esize: int, sa, sb, a_kmajor: bool, b_nmajor: bool):
    """(vec_a, vec_b): each operand's vector load width along the dimension it is read by."""
    vec_a = (vector_width(limit, sa[2], a_addr, esize, (sa[0], sa[1])) if a_kmajor
             else vector_width(limit, sa[1], a_addr, esize, (sa[0], sa[2])))
    vec_b = (vector_width(limit, sb[2], b_addr, esize, (sb[0], sb[1])) if b_nmajor
             else vector_width(limit, sb[1], b_addr, esize, (sb[0], sb[2])))
    return vec_a, vec_b


def split_count(fam: Matmul, params: dict, M: int, N: int, K: int, batch: int, split_k) -> int:
    if K == 0:
        return 1
    if split_k is not None:
        s = check_int("split_k", split_k, 1)
        return max(1, min(s, math.ceil(K / params["BK"])))
    cfg = search_space(Matmul.family).get("split_k", {})
    target = target_groups(fam, params["WG"])
    tiles = batch * math.ceil(M / params["BM"]) * math.ceil(N / params["BN"])
    if tiles >= target * cfg.get("min_fill", 1.0):  # the grid fills the GPU well enough already
        return 1
    splits = math.ceil(target / tiles)
    splits = min(splits, cfg.get("max_splits", 32), K // max(cfg.get("min_k_per_split", 256), 1))
    return max(splits, 1)


def tile_fit(fam: Matmul, wg: int, bm: int, bn: int, M: int, N: int, batch: int, splits: int = 1):
    """(useful, fill) of a BM x BN tile of `wg` invocations on this GEMM: the share of its
    outputs that are not padding, and its grid (splits included) over split_k.min_fill of the
    device's target, at most 1 (tuning/matmul.json tile_fit)."""
    tiles = batch * math.ceil(M / bm) * math.ceil(N / bn)
    useful = M * N / (math.ceil(M / bm) * bm * math.ceil(N / bn) * bn)
    min_fill = search_space(Matmul.family)["split_k"].get("min_fill", 1.0)
    return useful, min(1.0, tiles * splits / (target_groups(fam, wg) * min_fill))


def fit_tile(configs: Family, fam: Matmul, bucket: str, M: int, N: int, K: int, batch: int,
             split_k) -> tuple[dict, str]:
    """(resolved params, the bucket whose config they are) of `configs`' family (the tiled kernel, or
    another that shares its buckets) for a GEMM without explicit params; `fam`: the tiled family (its
    split-K target).

    A size bucket ("large") is chosen by the product's volume, so its tile can be far wider
    than one of M, N (63 rows in a 128-row tile: half the work is padding), or leave most of
    the GPU idle even after split-K. tuning/matmul.json "tile_fit": the bucket's config and
    then the smaller size buckets' configs (same layout) are tried, largest first; the first
    whose tiles are at least min_useful useful and whose grid (split-K included) reaches
    min_fill of the device is taken; if none does, the one with the largest product of the two."""
    fit = search_space(Matmul.family).get("tile_fit", {})
    size, dot, layout = bucket.partition(".")
    order = fit.get("order", [])
    if size not in order:
        return configs.resolve(bucket), bucket
    best = None
    for name in order[order.index(size):]:
        key = name + dot + layout
        p = configs.resolve(key)
        useful, fill = tile_fit(fam, p["WG"], p["BM"], p["BN"], M, N, batch,
                                split_count(fam, p, M, N, K, batch, split_k))
        if useful >= fit.get("min_useful", 0.0) and fill >= 1.0:
            return p, key
        if best is None or useful * fill > best[0]:
            best = (useful * fill, p, key)
    return best[1], best[2]


def plan_launch(fam: Matmul, tile: dict, M: int, N: int, K: int, batch: int, sa, sb, sc, esize: int, split_k,
                dtype_id: int, act, gemm, info: dict, tune_shape: dict, label: str) -> "Prepared":
    """The launch of a GEMM kernel (tiled or cooperative matrix) with a tile of tile["WG"] invocations
    and tile["BM"] x tile["BN"] outputs over BK slices: its K splits (matmul.json split_k, against
    `fam`'s target), grid, scratch and pipelines (gemm(mode) builds the kernel for a MODE), and
    `info` with the splits. label: the kernel's family name (its dispatches' label, and the family
    a memoized call records its shape for)."""
    splits = split_count(fam, tile, M, N, K, batch, split_k)
    k_chunk = K if splits <= 1 else math.ceil(math.ceil(K / splits) / tile["BK"]) * tile["BK"]
    if splits > 1:
        splits = math.ceil(K / k_chunk)
    if splits <= 1:
        splits, k_chunk = 1, K
    facts = fam.device.facts
    tiles = math.ceil(M / tile["BM"]) * math.ceil(N / tile["BN"])
    groups = grid_1d(tiles, facts.max_workgroup_count[0])
    if groups[1] > facts.max_workgroup_count[1]:
        raise ValueError(f"matmul: {M}x{N} needs {tiles} output tiles, more than this device can launch")
    chunk = max(1, facts.max_workgroup_count[2] // splits)
    red = red_wg = None
    scratch_bytes = 0
    if splits > 1:
        slice_elems = min(batch, chunk) * M * N
        if splits * slice_elems >= INT31:
            raise ValueError("matmul: the split-K scratch would exceed 2**31 elements; pass split_k=1")
        scratch_bytes = splits * slice_elems * 4
        pipe = gemm(MODE_PARTIAL)
        red, red_wg = fam.reduce(dtype_id, act)
    else:
        pipe = gemm(MODE_GEMM)
    return Prepared(M, N, K, batch, sa, sb, sc, esize, chunk, splits, k_chunk, groups, pipe, red, red_wg,
                    scratch_bytes, dict(info, splits=splits), tune_shape, label)


class Prepared:
    """Everything matmul() decides for one geometry (checks passed, config, split-K, vector
    widths, pipelines), a launch plan kept by the Matmul family (launch.py's keep_plan()): a
    repeated call only records the launches."""
    __slots__ = ("M", "N", "K", "batch", "sa", "sb", "sc", "esize", "chunk", "splits", "k_chunk", "groups", "gemm",
                 "red", "red_wg", "scratch_bytes", "info", "tune_shape", "label")

    @property
    def family(self) -> str:  # of tune_shape: the label is the family's name (matmul, matmul_coopmat(2))
        return self.label

    def __init__(self, *values):
        for name, v in zip(self.__slots__, values):
            setattr(self, name, v)

    def record(self, device, a_addr, b_addr, out_addr, bias_addr, alpha):
        M, N, K, sa, sb, sc, esize, splits = self.M, self.N, self.K, self.sa, self.sb, self.sc, self.esize, self.splits
        alpha = float(alpha)
        scratch = None
        if splits > 1:
            scratch = device.allocator.alloc(self.scratch_bytes)
            device.stream.keep_alive(scratch)
        groups = self.groups
        for b0 in range(0, self.batch, self.chunk):
            nb = min(self.chunk, self.batch - b0)
            a0 = a_addr + b0 * sa[0] * esize
            bb0 = b_addr + b0 * sb[0] * esize
            c0 = out_addr + b0 * sc[0] * esize
            if splits == 1:
                push = PUSH.pack(a0, bb0, c0, bias_addr, M, N, K, nb, *sa, *sb, *sc, alpha, self.k_chunk, 1)
                device.stream.dispatch(self.gemm, (groups[0], groups[1], nb), push, self.label)
            else:
                push = PUSH.pack(a0, bb0, scratch.address, 0, M, N, K, nb, *sa, *sb, *sc, 1.0, self.k_chunk, splits)
                device.stream.dispatch(self.gemm, (groups[0], groups[1], nb * splits), push, self.label + "_splitk")
                total = nb * M * N
                rgroups = grid_1d(math.ceil(total / self.red_wg), device.facts.max_workgroup_count[0])
                push = PUSH.pack(scratch.address, 0, c0, bias_addr, M, N, K, nb, *sa, *sb, *sc, alpha, self.k_chunk,
                                 splits)
                device.stream.dispatch(self.red, rgroups, push, "matmul_splitk_reduce")
        return dict(self.info)
