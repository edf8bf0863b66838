"""Batched strided GEMM: C[b] = act(alpha * A[b] @ B[b] + bias), fp32 accumulate.

Template: templates/matmul.comp (tiled shared-memory GEMM, split-K partials and their
reduce pass; its family and the launch plan both GEMM kernels share: matmul_plan.py).
Search space, buckets and defaults: tuning/matmul.json. fp16 runs a
cooperative-matrix kernel where the device has a verified one: workgroup scope
(matmul_coopmat2.py, also bf16) first, then subgroup scope (matmul_coopmat.py); on GPUs without
them the packed-fp16 kernel (matmul_packed_f16.py); each a family of its own;
M == 1 or N == 1 the matrix-vector kernel (gemv.py).

Operands are byte addresses (already offset) with element strides (batch, row, col), so
transposed and batch-broadcast (stride 0) views run without copies.
"""
from __future__ import annotations

from collections import ChainMap

from .. import benchmark_mode
from ..env_flags import env_flag
from ..errors import InvalidConfigError
from ..search_space import search_space
from . import activations, gemv, matmul_coopmat2 as coopmat2, matmul_packed_f16 as packed_f16
from .launch import family, record_shape, recording
from .matmul_coopmat import verified
from .matmul_plan import DTYPES, INT31, Matmul, check_int, contig_choice, fit_tile, load_widths, plan_launch
from .matmul_plan import defines  # noqa: F401  (the tiled kernel's defines: its callers name them matmul.defines)

_DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "float": "float32", "fp16": "float16", "f16": "float16",
                  "half": "float16", "bf16": "bfloat16"}
# activation -> the ACT define (its GLSL expression; None: none), from the activation table as it grows
ACTIVATIONS = ChainMap({None: None, "none": None}, activations.EPILOGUES)
_UINT32 = 1 << 32


def tiled_params(resolved: dict) -> dict:
    """The tunable parameters of a resolved config (its derived values left out): what a result reports."""
    return {name: resolved[name] for name in search_space(Matmul.family)["params"]}


def layout_name(a_kmajor: bool, b_nmajor: bool) -> str:
    """"nn", "nt", "tn" or "tt": A then B; n = read along its rows (A along K, B along N), t = transposed."""
    return ("n" if a_kmajor else "t") + ("n" if b_nmajor else "t")


def fp16_kernels(facts) -> list[str]:
    """The kernels matmul() runs fp16 GEMMs on for a device with these facts, first choice first (each
    cooperative-matrix and the packed kernel once its check against numpy passed on the device): what
    tvk-info reports."""
    feats = facts.features
    found = []
    if env_flag("TVK_COOPMAT", default=True):
        if feats.get("cooperative_matrix2"):
            found.append("workgroup-scope cooperative matrices (glslang 15+)")
        if feats.get("cooperative_matrix"):
            found.append("cooperative matrices")
    if packed_f16.routes(facts) and env_flag("TVK_PACKED_F16", default=True):
        found.append(f"packed fp16 where {search_space(packed_f16.PackedMatmul.family)['over_tiled']}")
    return found + ["tiled (fp32 arithmetic)"]


# ------------------------------------------------------------------ validation helpers
def _norm_dtype(dtype) -> str:
    name = getattr(dtype, "name", None) or str(dtype)
    name = name.replace("torch.", "")
    name = _DTYPE_ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"matmul: dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    return name


def _check_strides(name: str, strides, dims) -> tuple[int, int, int]:
    """Returns the strides with those of size-1 dimensions set to 0 (never used)."""
    if strides is None or len(tuple(strides)) != 3:
        raise ValueError(f"matmul: {name} must be 3 element strides (batch, row, col), got {strides!r}")
    out = []
    for label, s, d in zip(("batch", "row", "col"), strides, dims):
        s = check_int(f"{name} {label} stride", s)
        if s >= _UINT32:
            raise ValueError(f"matmul: {name} {label} stride {s} does not fit 32 bits")
        out.append(0 if d == 1 else s)
    return tuple(out)


def _check_extent(name: str, rows: int, cols: int, s_row: int, s_col: int):
    span = (rows - 1) * s_row + (cols - 1) * s_col
    if span >= INT31:
        raise ValueError(f"matmul: one {name} matrix spans {span + 1} elements; the kernels index within a matrix "
                         f"with 31 bits (at most {INT31} elements)")


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
    launch = key = None
    if params is None:  # a tuned-config call: the family keeps its plan per geometry and alignment
        key = (M, N, K, batch, a_strides, b_strides, out_strides, activation, dtype, split_k,
               a_addr % 16, b_addr % 16, out_addr % 16, bias_addr % 16, not a_addr, not b_addr, not out_addr,
               not bias_addr, benchmark_mode.enabled())
        fam = family(device, Matmul)
        launch = fam.kept_plan(key)
    if launch is None:  # a new geometry, or an explicit candidate (the tuner, ablations, tests): never kept
        launch = plan(device, a_addr, b_addr, out_addr, M, N, K, batch=batch, a_strides=a_strides,
                      b_strides=b_strides, out_strides=out_strides, bias_addr=bias_addr, activation=activation,
                      alpha=alpha, dtype=dtype, params=params, split_k=split_k)
        if key is not None:
            fam.keep_plan(key, launch)
    if launch.tune_shape is not None:
        if recording():
            record_shape(launch.family, launch.tune_shape, dtype=dtype)
    return launch.record(device, a_addr, b_addr, out_addr, bias_addr, alpha)


def plan(device, a_addr: int, b_addr: int, out_addr: int, M: int, N: int, K: int, *, batch: int = 1,
         a_strides=None, b_strides=None, out_strides=None, bias_addr: int = 0, activation=None,
         alpha: float = 1.0, dtype="float32", params: dict | None = None, split_k: int | None = None):
    """The launch plan of a matmul() call, its arguments checked (they raise here): a tiled or
    cooperative-matrix GEMM (matmul_plan.Prepared), a matrix-vector product (gemv.Launch), or
    nothing to run (Empty). The addresses only decide alignment and load widths."""
    dtype = _norm_dtype(dtype)
    dtype_id, esize = DTYPES[dtype]
    M, N, K = (check_int(n, v) for n, v in (("M", M), ("N", N), ("K", K)))
    batch = check_int("batch", batch)
    for n, v in (("M", M), ("N", N), ("K", K), ("batch", batch)):
        if v >= INT31:
            raise ValueError(f"matmul: {n}={v} is too large (at most {INT31 - 1})")
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
        addr = check_int(name, addr)
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
    a_kmajor = contig_choice(sa[1], sa[2], M, K)
    b_nmajor = contig_choice(sb[1], sb[2], K, N)
    tune_shape = {"M": M, "N": N, "K": K, "batch": batch, "layout": layout_name(a_kmajor, b_nmajor)}
    bucket = fam.bucket(tune_shape)
    if M == 0 or N == 0 or batch == 0:
        return Empty({"kernel": "none", "bucket": bucket, "params": None, "source": None, "splits": 0})
    if (M == 1 or N == 1) and split_k is None and (params is None or gemv.is_gemv_params(params)):
        # a matrix-vector product: the tiled kernel would compute one useful column of its tile
        return gemv.prepare(device, a_addr, b_addr, out_addr, M, N, K, batch, sa, sb, sc, act=act,
                            dtype_id=dtype_id, esize=esize, params=params)
    coop2_params = isinstance(params, dict) and "WGS" in params  # an explicit workgroup-scope candidate
    half = dtype in ("float16", "bfloat16")
    if coop2_params or params is None and half and not bucket.startswith("skinny"):
        coop2 = coopmat2.verified(device, dtype) if half else None
        if coop2_params and coop2 is None:
            raise InvalidConfigError("workgroup-scope cooperative-matrix parameters (WGS, ...) need dtype float16 or "
                                     "bfloat16 on a device with a verified VK_NV_cooperative_matrix2 matmul for it "
                                     f"({device.facts.name}, {dtype}: none)")
        if coop2 is not None and (coop2_params or coop2.usable(M, N, K, sa, sb, sc)):
            coop = None if coop2_params or dtype != "float16" else verified(device)
            if coop2_params or coop is None or not coop.usable(M, N, K) or coop2.preferred(M, N, K, batch):
                return coop2.prepare(a_addr, b_addr, M, N, K, batch, sa, sb, sc, act, coop2.bucket(tune_shape),
                                     tune_shape, params if coop2_params else None, split_k, dtype)
    coop_params = isinstance(params, dict) and "SG_M" in params  # an explicit cooperative-matrix candidate
    if coop_params or params is None and dtype == "float16" and not bucket.startswith("skinny"):
        coop = verified(device)
        if coop_params and (dtype != "float16" or coop is None):
            raise InvalidConfigError("cooperative-matrix parameters (SG_M, ...) need dtype float16 on a device with "
                                     f"a verified cooperative-matrix matmul ({device.facts.name}: "
                                     f"{'none' if coop is None else dtype})")
        if coop is not None and (coop_params or coop.usable(M, N, K)):
            return coop.prepare(a_addr, b_addr, M, N, K, batch, sa, sb, sc, act, coop.bucket(tune_shape), tune_shape,
                                params if coop_params else None, split_k)
    packed_params = isinstance(params, dict) and "CHAIN" in params  # an explicit packed-fp16 candidate
    if packed_params or params is None and dtype == "float16" and not bucket.startswith("skinny"):
        if packed_params and dtype != "float16":
            raise InvalidConfigError(f"packed-fp16 parameters (CHAIN, ...) need dtype float16, not {dtype}")
        packed = family(device, packed_f16.PackedMatmul) if packed_params else packed_f16.verified(device)
        if packed is not None and (packed_params or packed.preferred(M, N, K, batch)):
            return packed.prepare(a_addr, b_addr, M, N, K, batch, sa, sb, sc, act, packed.bucket(tune_shape),
                                  tune_shape, params if packed_params else None, split_k)
    if params is None:
        params, config_bucket = fit_tile(fam, fam, bucket, M, N, K, batch, split_k)
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

    vec_a, vec_b = load_widths(params["VEC"], a_addr, b_addr, esize, sa, sb, a_kmajor, b_nmajor)
    return plan_launch(fam, params, M, N, K, batch, sa, sb, sc, esize, split_k, dtype_id, act,
                       lambda mode: fam.gemm(params, dtype_id, mode, a_kmajor, b_nmajor, vec_a, vec_b, act),
                       {"kernel": "tiled", "bucket": bucket, "config_bucket": config_bucket,
                        "params": tiled_params(params), "source": source}, tune_shape, "matmul")


class Empty:
    """The plan of a call with nothing to compute (M, N or batch 0): it records nothing."""
    __slots__ = ("info",)
    family = Matmul.family
    tune_shape = None

    def __init__(self, info: dict):
        self.info = info

    def record(self, device, a_addr, b_addr, out_addr, bias_addr, alpha) -> dict:
        return dict(self.info)
