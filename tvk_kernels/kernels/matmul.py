"""Batched strided GEMM: C[b] = act(alpha * A[b] @ B[b] + bias), fp32 accumulate.

Template: templates/matmul.comp (tiled shared-memory GEMM, split-K partials and their
reduce pass). Search space, buckets and defaults: tuning/matmul.json. fp16 runs the
cooperative-matrix kernel where the device has a verified one (matmul_coopmat.py, a family
of its own), M == 1 or N == 1 the matrix-vector kernel (gemv.py).

Operands are byte addresses (already offset) with element strides (batch, row, col), so
transposed and batch-broadcast (stride 0) views run without copies.
"""
from __future__ import annotations

import math
import struct
from collections import ChainMap

from .. import benchmark_mode
from ..config import by_class, default_params, generation
from ..errors import InvalidConfigError
from ..search_space import search_space, with_derived
from . import activations, dtypes, gemv
from .launch import Family, family, grid_1d, record_shape
from .strides import vector_width

# dtype -> (DTYPE define, element bytes)
DTYPES = {n: (dtypes.DTYPES[n].code, dtypes.DTYPES[n].itemsize) for n in ("float32", "float16", "bfloat16")}
_DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "float": "float32", "fp16": "float16", "f16": "float16",
                  "half": "float16", "bf16": "bfloat16"}
# activation -> the ACT define (its GLSL expression; None: none), from the activation table as it grows
ACTIVATIONS = ChainMap({None: None, "none": None}, activations.EPILOGUES)

# a, b, c, bias (uint64); M, N, K, batch; sAb sAm sAk; sBb sBk sBn; sCb sCm sCn; alpha; k_chunk; splits
_PUSH = struct.Struct("<4Q4I9IfII")
_MODE_GEMM, _MODE_PARTIAL, _MODE_REDUCE = 0, 1, 2
_INT31 = 1 << 31
_UINT32 = 1 << 32


def defines(params: dict, *, mode: int = _MODE_GEMM, dtype_id: int = 0, a_kmajor: bool = True,
            b_nmajor: bool = True, vec_a: int | None = None, vec_b: int | None = None, act: str | None = None) -> dict:
    """The tiled kernel's defines for a config: the one set the runtime, the tuner and the RDNA1
    check compile. vec_a/vec_b: the load widths chosen for the operands (default: the config's VEC)."""
    return {
        "BM": params["BM"], "BN": params["BN"], "BK": params["BK"], "TM": params["TM"], "TN": params["TN"],
        "UNROLL": params["UNROLL"], "PAD": params["PAD"], "PREFETCH": params.get("PREFETCH", 0),
        "VEC_A": params["VEC"] if vec_a is None else vec_a, "VEC_B": params["VEC"] if vec_b is None else vec_b,
        "A_KMAJOR": int(a_kmajor), "B_NMAJOR": int(b_nmajor), "DTYPE": dtype_id, "MODE": mode,
        **activations.act_define(act if mode == _MODE_GEMM else None),
    }


def tiled_params(resolved: dict) -> dict:
    """The tunable parameters of a resolved config (its derived values left out): what a result reports."""
    return {name: resolved[name] for name in search_space(Matmul.family)["params"]}


def layout_name(a_kmajor: bool, b_nmajor: bool) -> str:
    """"nn", "nt", "tn" or "tt": A then B; n = read along its rows (A along K, B along N), t = transposed."""
    return ("n" if a_kmajor else "t") + ("n" if b_nmajor else "t")


# ------------------------------------------------------------------ family
class Matmul(Family):
    family = "matmul"
    template = "matmul.comp"

    def __init__(self, device):
        Family.__init__(self, device)
        self.coop = None  # matmul_coopmat.verified: the CoopMatmul family, or False where there is none
        # invocations in flight that fill the device: tuning/matmul.json's split_k target_groups
        # counts workgroups of the device's default config (once here: _target_groups is per call)
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
        d = with_derived(search_space(self.family), params)
        try:
            self.device.pipelines.check_limits((d["WG"], 1, 1), shared_bytes=d["shared_bytes"],
                                               subgroup_size=params["SUBGROUP"] or None, push_size=_PUSH.size)
        except InvalidConfigError as e:
            raise InvalidConfigError(f"matmul parameters {params}: {e}; pick another tile (see "
                                     f"tvk_kernels.search_space.candidates('matmul', device.facts))") from None
        return params

    def gemm(self, params: dict, dtype_id: int, mode: int, a_kmajor: bool, b_nmajor: bool, vec_a: int, vec_b: int,
             act: str | None):
        """The tiled kernel of a resolved config (derived WG and shared_bytes included)."""
        d = defines(params, mode=mode, dtype_id=dtype_id, a_kmajor=a_kmajor, b_nmajor=b_nmajor, vec_a=vec_a,
                    vec_b=vec_b, act=act)
        return self.variant(d, params["WG"], _PUSH.size, shared_bytes=params["shared_bytes"],
                            subgroup_size=params["SUBGROUP"] or None)

    def reduce(self, dtype_id: int, act: str | None):
        """The split-K pass summing the partials (and applying the epilogue), and its workgroup size."""
        wg = min(256, self.device.facts.max_workgroup_invocations)
        return self.variant({"MODE": _MODE_REDUCE, "DTYPE": dtype_id, **activations.act_define(act)}, wg, _PUSH.size), wg


# ------------------------------------------------------------------ validation helpers
def _norm_dtype(dtype) -> str:
    name = getattr(dtype, "name", None) or str(dtype)
    name = name.replace("torch.", "")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"matmul: dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    return name


def _check_int(name: str, v, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
        raise ValueError(f"matmul: {name} must be an integer, got {v!r}")
    v = int(v)
    if v < minimum:
        raise ValueError(f"matmul: {name} must be >= {minimum}, got {v}")
    return v


def _check_strides(name: str, strides, dims) -> tuple[int, int, int]:
    """Returns the strides with those of size-1 dimensions set to 0 (never used)."""
    if strides is None or len(tuple(strides)) != 3:
        raise ValueError(f"matmul: {name} must be 3 element strides (batch, row, col), got {strides!r}")
    out = []
    for label, s, d in zip(("batch", "row", "col"), strides, dims):
        s = _check_int(f"{name} {label} stride", s)
        if s >= _UINT32:
            raise ValueError(f"matmul: {name} {label} stride {s} does not fit 32 bits")
        out.append(0 if d == 1 else s)
    return tuple(out)


def _check_extent(name: str, rows: int, cols: int, s_row: int, s_col: int):
    span = (rows - 1) * s_row + (cols - 1) * s_col
    if span >= _INT31:
        raise ValueError(f"matmul: one {name} matrix spans {span + 1} elements; the kernels index within a matrix "
                         f"with 31 bits (at most {_INT31} elements)")


def _contig_choice(s_outer: int, s_inner: int, n_outer: int, n_inner: int) -> bool:
    """True when an operand is best read along its inner (second) dimension."""
    inner_ok = s_inner == 1 or n_inner == 1
    outer_ok = s_outer == 1 or n_outer == 1
    if inner_ok != outer_ok:
        return inner_ok
    if inner_ok:  # both: the longer one
        return n_inner >= n_outer
    return s_inner <= s_outer


def _target_groups(fam: Matmul, wg: int) -> float:
    """The workgroups of `wg` invocations that fill the device: a config with smaller workgroups
    needs proportionally more of them (Matmul.target_invocations)."""
    return fam.target_invocations / wg


def _load_widths(limit: int, a_addr: int, b_addr: int, esize: int, sa, sb, a_kmajor: bool, b_nmajor: bool):
    """(vec_a, vec_b): each operand's vector load width along the dimension it is read by."""
    vec_a = (vector_width(limit, sa[2], a_addr, esize, (sa[0], sa[1])) if a_kmajor
             else vector_width(limit, sa[1], a_addr, esize, (sa[0], sa[2])))
    vec_b = (vector_width(limit, sb[2], b_addr, esize, (sb[0], sb[1])) if b_nmajor
             else vector_width(limit, sb[1], b_addr, esize, (sb[0], sb[2])))
    return vec_a, vec_b


def _split_count(fam: Matmul, params: dict, M: int, N: int, K: int, batch: int, split_k) -> int:
    if K == 0:
        return 1
    if split_k is not None:
        s = _check_int("split_k", split_k, 1)
        return max(1, min(s, math.ceil(K / params["BK"])))
    cfg = search_space(Matmul.family).get("split_k", {})
    target = _target_groups(fam, params["WG"])
    tiles = batch * math.ceil(M / params["BM"]) * math.ceil(N / params["BN"])
    if tiles >= target * cfg.get("min_fill", 1.0):  # the grid fills the GPU well enough already
        return 1
    splits = math.ceil(target / tiles)
    splits = min(splits, cfg.get("max_splits", 32), K // max(cfg.get("min_k_per_split", 256), 1))
    return max(splits, 1)


def _tile_fit(fam: Matmul, wg: int, bm: int, bn: int, M: int, N: int, batch: int, splits: int = 1):
    """(useful, fill) of a BM x BN tile of `wg` invocations on this GEMM: the share of its
    outputs that are not padding, and its grid (splits included) over split_k.min_fill of the
    device's target, at most 1 (tuning/matmul.json tile_fit)."""
    tiles = batch * math.ceil(M / bm) * math.ceil(N / bn)
    useful = M * N / (math.ceil(M / bm) * bm * math.ceil(N / bn) * bn)
    min_fill = search_space(Matmul.family)["split_k"].get("min_fill", 1.0)
    return useful, min(1.0, tiles * splits / (_target_groups(fam, wg) * min_fill))


def _fit(fam: Matmul, bucket: str, M: int, N: int, K: int, batch: int, split_k) -> tuple[dict, str]:
    """(resolved params, the bucket whose config they are) for a GEMM without explicit params.

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
        return fam.resolve(bucket), bucket
    best = None
    for name in order[order.index(size):]:
        key = name + dot + layout
        p = fam.resolve(key)
        useful, fill = _tile_fit(fam, p["WG"], p["BM"], p["BN"], M, N, batch,
                                 _split_count(fam, p, M, N, K, batch, split_k))
        if useful >= fit.get("min_useful", 0.0) and fill >= 1.0:
            return p, key
        if best is None or useful * fill > best[0]:
            best = (useful * fill, p, key)
    return best[1], best[2]


# ------------------------------------------------------------------ public API
def matmul(device, a_addr: int, b_addr: int, out_addr: int, M: int, N: int, K: int, *, batch: int = 1,
           a_strides=None, b_strides=None, out_strides=None, bias_addr: int = 0, activation=None,
           alpha: float = 1.0, dtype="float32", params: dict | None = None, split_k: int | None = None) -> dict:
    """out[b] = activation(alpha * A[b] @ B[b] + bias) for b < batch, accumulated in fp32.

    A[b][m, k] is at a_addr + (b*sB + m*sM + k*sK) * itemsize with a_strides = (sB, sM, sK);
    likewise B (b_strides = (sB, sK, sN)) and out (out_strides = (sB, sM, sN)). Strides
    are in elements; None means contiguous. A batch stride of 0 broadcasts an operand.
    bias_addr (0: none) points to N values of `dtype`, added per output column.
    activation: None or an activation of kernels/activations.py ("relu", "gelu", "silu", ...,
    applied in float32 before the store). dtype: "float32", "float16" or "bfloat16" (16-bit storage,
    fp32 accumulate). params=None runs the tuned/default config of the shape bucket
    (fp16 may use cooperative matrices); params=dict runs exactly that tiled candidate
    (see `candidates`). split_k=None chooses; an int forces that many K splits (1: none).
    Records the work on the device stream and returns what ran: {"kernel", "bucket",
    "params", "source", "splits"}.
    """
    key = None
    if params is None:  # a repeated tuned-config call skips the checks and choices below: _Prepared
        key = (device, M, N, K, batch, a_strides, b_strides, out_strides, activation, dtype, split_k,
               a_addr % 16, b_addr % 16, out_addr % 16, bias_addr % 16, not a_addr, not b_addr, not out_addr,
               not bias_addr, generation(), benchmark_mode.enabled())
        try:
            prep = _prepared.get(key)
        except TypeError:  # strides given as lists: no memo for this call
            key = prep = None
        if prep is not None:
            record_shape(prep.family, prep.tune_shape)
            return prep.record(device, a_addr, b_addr, out_addr, bias_addr, alpha)
    dtype = _norm_dtype(dtype)
    dtype_id, esize = DTYPES[dtype]
    M, N, K = (_check_int(n, v) for n, v in (("M", M), ("N", N), ("K", K)))
    batch = _check_int("batch", batch)
    for n, v in (("M", M), ("N", N), ("K", K), ("batch", batch)):
        if v >= _INT31:
            raise ValueError(f"matmul: {n}={v} is too large (at most {_INT31 - 1})")
    if activation not in ACTIVATIONS:
        raise ValueError(f"matmul: activation {activation!r} is not one of "
                         f"{', '.join(repr(k) for k in ACTIVATIONS)}")
    act = ACTIVATIONS[activation]
    if a_strides is None:
        a_strides = (M * K, K, 1)
    if b_strides is None:
        b_strides = (K * N, N, 1)
    if out_strides is None:
        out_strides = (M * N, N, 1)
    sa = _check_strides("a_strides", a_strides, (batch, M, K))
    sb = _check_strides("b_strides", b_strides, (batch, K, N))
    sc = _check_strides("out_strides", out_strides, (batch, M, N))
    for name, addr in (("a_addr", a_addr), ("b_addr", b_addr), ("out_addr", out_addr), ("bias_addr", bias_addr)):
        addr = _check_int(name, addr)
        if addr >= 1 << 64:
            raise ValueError(f"matmul: {name} does not fit 64 bits")
        if addr % esize:
            raise ValueError(f"matmul: {name}=0x{addr:x} is not aligned to the {esize}-byte {dtype} elements")
    for name, addr in (("a_addr", a_addr), ("b_addr", b_addr), ("out_addr", out_addr)):
        if addr == 0 and M * N * max(batch, 1) > 0 and (name == "out_addr" or K > 0):
            raise ValueError(f"matmul: {name} is 0 (null)")
    if batch > 1 and sc[0] == 0:
        raise ValueError("matmul: out batch stride is 0 with batch > 1: every batch would write the same output")
    if (M > 1 and sc[1] == 0) or (N > 1 and sc[2] == 0):
        raise ValueError(f"matmul: out_strides {tuple(out_strides)} map several outputs to one element")
    _check_extent("A", M, K, sa[1], sa[2])
    _check_extent("B", K, N, sb[1], sb[2])
    _check_extent("out", M, N, sc[1], sc[2])
    feats = device.facts.features
    if dtype != "float32" and not feats.get("storage_16bit"):
        raise ValueError(f"matmul: dtype {dtype} needs 16-bit storage buffers, which {device.facts.name} lacks; "
                         "use float32")
    if dtype == "float16" and not feats.get("shader_float16"):
        raise ValueError(f"matmul: dtype float16 needs shaderFloat16, which {device.facts.name} lacks; use float32")
    alpha = float(alpha)

    fam = family(device, Matmul)
    a_kmajor = _contig_choice(sa[1], sa[2], M, K)
    b_nmajor = _contig_choice(sb[1], sb[2], K, N)
    tune_shape = {"M": M, "N": N, "K": K, "batch": batch, "layout": layout_name(a_kmajor, b_nmajor)}
    bucket = fam.bucket(tune_shape)
    if M == 0 or N == 0 or batch == 0:
        return {"kernel": "none", "bucket": bucket, "params": None, "source": None, "splits": 0}
    if (M == 1 or N == 1) and split_k is None and (params is None or gemv.is_gemv_params(params)):
        # a matrix-vector product: the tiled kernel would compute one useful column of its tile
        prep = gemv.prepare(device, a_addr, b_addr, out_addr, M, N, K, batch, sa, sb, sc, act=act,
                            dtype_id=dtype_id, esize=esize, params=params)
        if key is not None:
            _remember(key, prep)
        return prep.record(device, a_addr, b_addr, out_addr, bias_addr, alpha)
    coop_params = isinstance(params, dict) and "SG_M" in params  # an explicit cooperative-matrix candidate
    if coop_params or params is None and dtype == "float16" and not bucket.startswith("skinny"):
        from .matmul_coopmat import verified

        coop = verified(device)
        if coop_params and (dtype != "float16" or coop is None):
            raise InvalidConfigError("cooperative-matrix parameters (SG_M, ...) need dtype float16 on a device with "
                                     f"a verified cooperative-matrix matmul ({device.facts.name}: "
                                     f"{'none' if coop is None else dtype})")
        if coop is not None and (coop_params or coop.usable(M, N, K)):
            record_shape(coop.family, tune_shape)
            prep = coop.prepare(a_addr, b_addr, M, N, K, batch, sa, sb, sc, act, coop.bucket(tune_shape), tune_shape,
                                params if coop_params else None, split_k)
            if key is not None:
                _remember(key, prep)
            return prep.record(device, a_addr, b_addr, out_addr, bias_addr, alpha)
    record_shape(fam.family, tune_shape)
    if params is None:
        params, config_bucket = _fit(fam, bucket, M, N, K, batch, split_k)
        source = fam.params(config_bucket)[1]
        if benchmark_mode.enabled() and out_addr not in (a_addr, b_addr, bias_addr):
            layout = layout_name(a_kmajor, b_nmajor)
            exact = (M, N, K, batch, layout, dtype, activation or "", split_k or 0)

            def run(p):  # the same call with a candidate: it overwrites out, reads nothing it writes
                matmul(device, a_addr, b_addr, out_addr, M, N, K, batch=batch, a_strides=sa, b_strides=sb,
                       out_strides=sc, bias_addr=bias_addr, activation=activation, alpha=alpha, dtype=dtype,
                       params=tiled_params(p), split_k=split_k)

            params = fam.resolve(bucket, tiled_params(fam.benchmarked(
                exact, {"M": M, "N": N, "K": K, "batch": batch, "layout": layout}, run)))
            source, config_bucket = "benchmark", bucket
    elif isinstance(params, dict):
        source, config_bucket = "explicit", bucket
        params = fam.resolve(bucket, params)
    else:
        raise ValueError(f"matmul: params must be a dict of {', '.join(search_space(fam.family)['params'])}, "
                         f"got {type(params).__name__}")

    vec_a, vec_b = _load_widths(params["VEC"], a_addr, b_addr, esize, sa, sb, a_kmajor, b_nmajor)
    prep = plan_launch(fam, params, M, N, K, batch, sa, sb, sc, esize, split_k, dtype_id, act,
                       lambda mode: fam.gemm(params, dtype_id, mode, a_kmajor, b_nmajor, vec_a, vec_b, act),
                       {"kernel": "tiled", "bucket": bucket, "config_bucket": config_bucket,
                        "params": tiled_params(params), "source": source}, tune_shape, "matmul")
    if key is not None:
        _remember(key, prep)
    return prep.record(device, a_addr, b_addr, out_addr, bias_addr, alpha)


def plan_launch(fam: Matmul, tile: dict, M: int, N: int, K: int, batch: int, sa, sb, sc, esize: int, split_k,
                dtype_id: int, act, gemm, info: dict, tune_shape: dict, label: str) -> "_Prepared":
    """The launch of a GEMM kernel (tiled or cooperative matrix) with a tile of tile["WG"] invocations
    and tile["BM"] x tile["BN"] outputs over BK slices: its K splits (matmul.json split_k, against
    `fam`'s target), grid, scratch and pipelines (gemm(mode) builds the kernel for a MODE), and
    `info` with the splits. label: the kernel's family name (its dispatches' label, and the family
    a memoized call records its shape for)."""
    splits = _split_count(fam, tile, M, N, K, batch, split_k)
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
        if splits * slice_elems >= _INT31:
            raise ValueError("matmul: the split-K scratch would exceed 2**31 elements; pass split_k=1")
        scratch_bytes = splits * slice_elems * 4
        pipe = gemm(_MODE_PARTIAL)
        red, red_wg = fam.reduce(dtype_id, act)
    else:
        pipe = gemm(_MODE_GEMM)
    return _Prepared(M, N, K, batch, sa, sb, sc, esize, chunk, splits, k_chunk, groups, pipe, red, red_wg,
                     scratch_bytes, dict(info, splits=splits), tune_shape, label)


def _remember(key, prep) -> None:
    if len(_prepared) >= _MAX_PREPARED:
        _prepared.clear()
    _prepared[key] = prep


_prepared: dict = {}  # the checked choices of a tuned-config call, per geometry and alignment
_MAX_PREPARED = 4096


class _Prepared:
    """Everything matmul() decides for one geometry (checks passed, config, split-K, vector
    widths, pipelines): a repeated call only records the launches."""
    __slots__ = ("M", "N", "K", "batch", "sa", "sb", "sc", "esize", "chunk", "splits", "k_chunk", "groups", "gemm",
                 "red", "red_wg", "scratch_bytes", "info", "tune_shape", "label")

    @property
    def family(self) -> str:  # of tune_shape (a gemv.Launch is memoized here too): the label is the family's name
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
                push = _PUSH.pack(a0, bb0, c0, bias_addr, M, N, K, nb, *sa, *sb, *sc, alpha, self.k_chunk, 1)
                device.stream.dispatch(self.gemm, (groups[0], groups[1], nb), push, self.label)
            else:
                push = _PUSH.pack(a0, bb0, scratch.address, 0, M, N, K, nb, *sa, *sb, *sc, 1.0, self.k_chunk, splits)
                device.stream.dispatch(self.gemm, (groups[0], groups[1], nb * splits), push, self.label + "_splitk")
                total = nb * M * N
                rgroups = grid_1d(math.ceil(total / self.red_wg), device.facts.max_workgroup_count[0])
                push = _PUSH.pack(scratch.address, 0, c0, bias_addr, M, N, K, nb, *sa, *sb, *sc, alpha, self.k_chunk,
                                  splits)
                device.stream.dispatch(self.red, rgroups, push, "matmul_splitk_reduce")
        return dict(self.info)


class MatmulTarget:
    """What tvk-tune needs to tune the tiled kernel (see tvk_kernels/tune/targets.py)."""

    family = Matmul.family
    template = Matmul.template
    suites = {
        "suite": [{"M": 128, "N": 128, "K": 128, "batch": 1}, {"M": 512, "N": 512, "K": 512, "batch": 1},
                  {"M": 1024, "N": 1024, "K": 1024, "batch": 1}, {"M": 2048, "N": 2048, "K": 2048, "batch": 1},
                  {"M": 4096, "N": 1024, "K": 1024, "batch": 1}, {"M": 64, "N": 64, "K": 8192, "batch": 1},
                  {"M": 16, "N": 128, "K": 4096, "batch": 1}, {"M": 256, "N": 256, "K": 64, "batch": 8},
                  # a linear layer's forward (x @ W^T) and backward (grad^T @ x): layout buckets .nt, .tn
                  {"M": 512, "N": 2048, "K": 2048, "batch": 1, "layout": "nt"},
                  {"M": 2048, "N": 2048, "K": 512, "batch": 1, "layout": "tn"},
                  {"M": 4096, "N": 1024, "K": 1024, "batch": 1, "layout": "nt"},
                  {"M": 1024, "N": 1024, "K": 1024, "batch": 1, "layout": "tt"},
                  # attention: scores q @ k^T and probs @ v, 32 sequences x 8 heads
                  {"M": 64, "N": 64, "K": 32, "batch": 256, "layout": "nt"},
                  {"M": 64, "N": 32, "K": 64, "batch": 256, "layout": "nn"}],
        "tiny": [{"M": 64, "N": 64, "K": 64, "batch": 1}, {"M": 200, "N": 136, "K": 96, "batch": 1},
                 {"M": 8, "N": 8, "K": 2048, "batch": 1}, {"M": 72, "N": 40, "K": 48, "batch": 1, "layout": "tn"},
                 {"M": 16, "N": 16, "K": 8, "batch": 16, "layout": "nt"}],
    }

    def prepare(self, device, shape, n_inputs=3, seed=0):
        return gemm_case(device, shape, n_inputs, seed, "float32", lambda want, scale: 1e-5 * scale + 1e-6)

    @staticmethod
    def work(shape, params) -> dict:
        M, N, K, batch = shape["M"], shape["N"], shape["K"], shape.get("batch", 1)
        d = with_derived(search_space(Matmul.family), params)
        tm, tn = math.ceil(M / params["BM"]), math.ceil(N / params["BN"])
        groups = batch * tm * tn
        steps = math.ceil(K / params["BK"])
        return {
            "flops": 2 * batch * M * N * K,
            "dram_bytes": 4 * batch * (M * K * tn + K * N * tm + M * N),
            "lds_bytes": groups * steps * (4 * params["BK"] * (params["BM"] + params["BN"])  # stores
                                           + d["WG"] * params["BK"] * (params["TM"] + params["TN"]) * 4),  # reads
            "groups": groups, "invocations": d["WG"], "lds_per_group": d["shared_bytes"],
        }

    @staticmethod
    def static_defines(params) -> tuple[dict, tuple, int | None]:
        wg = with_derived(search_space(Matmul.family), params)["WG"]
        return defines(params), (wg, 1, 1), params.get("SUBGROUP") or None

    @staticmethod
    def kernel_defines(params) -> list[dict]:
        """Kernels one tuned parameter set builds (tune/carry_over.py): the GEMM and its split-K
        partials, every storage dtype and layout, at the config's load width and the scalar fallback."""
        return [defines(params, mode=mode, dtype_id=code, a_kmajor=ak, b_nmajor=bn, vec_a=vec, vec_b=vec)
                for mode in (_MODE_GEMM, _MODE_PARTIAL) for code, _ in DTYPES.values()
                for ak in (True, False) for bn in (True, False) for vec in sorted({params["VEC"], 1})]


def gemm_case(device, shape, n_inputs, seed, dtype: str, tolerance, kernel: str | None = None):
    """The tuner's Case of one GEMM shape (tune/targets.py): random operands of `dtype`, a transposed one
    stored transposed and read through its strides; the check compares with float64 and allows
    tolerance(want, |A| @ |B|) per element, and raises InvalidConfigError unless `kernel` ran."""
    import numpy as np

    from ..tune.targets import Case

    M, N, K, batch = shape["M"], shape["N"], shape["K"], shape.get("batch", 1)
    a_t, b_t = (c == "t" for c in shape.get("layout", "nn"))
    npdt = np.float32 if dtype == "float32" else np.float16
    rng = np.random.default_rng(seed)
    host = [(rng.standard_normal((batch, K, M) if a_t else (batch, M, K), dtype=np.float32).astype(npdt),
             rng.standard_normal((batch, N, K) if b_t else (batch, K, N), dtype=np.float32).astype(npdt))
            for _ in range(n_inputs + 1)]
    sa = (M * K, 1, M) if a_t else (M * K, K, 1)
    sb = (K * N, 1, K) if b_t else (K * N, N, 1)
    bufs = [(device.upload(a), device.upload(b)) for a, b in host]
    out = device.allocator.alloc(np.dtype(npdt).itemsize * batch * M * N)

    def call(params, i):
        a, b = bufs[i]
        return matmul(device, a.address, b.address, out.address, M, N, K, batch=batch, a_strides=sa, b_strides=sb,
                      dtype=dtype, params=params)

    def check(params):
        info = call(params, -1)
        if kernel is not None and info["kernel"] != kernel:
            raise InvalidConfigError(f"the {kernel} kernel did not run ({info['kernel']})")
        got = device.download(out, npdt, (batch, M, N)).astype(np.float64)
        A, B = host[-1][0].astype(np.float64), host[-1][1].astype(np.float64)
        A, B = (np.swapaxes(A, 1, 2) if a_t else A), (np.swapaxes(B, 1, 2) if b_t else B)
        want = A @ B
        err = np.abs(got - want)
        return bool(np.all(err <= tolerance(want, np.abs(A) @ np.abs(B)))), float(err.max()) if err.size else 0.0

    return Case(device, shape, call, check, [bufs, out])


TUNE_TARGET = MatmulTarget()
