"""matmul family (templates/matmul.comp, matmul_coopmat.comp, matmul_coopmat2.comp) against torch CPU in float64.

Error bound, per output element, with scale = |alpha| * (|A| @ |B|) + |bias|:
  float32  : |got - ref| <= 1e-5 * scale + 1e-6   (fp32 accumulation)
  float16  : |got - ref| <= 2e-3 * scale + 1e-3   (fp32 accumulation, fp16 output rounding 2^-11)
  bfloat16 : |got - ref| <= 1e-2 * scale + 1e-2   (fp32 accumulation, bf16 output rounding 2^-8)
The reference uses the same (already rounded) fp16/bf16 inputs, so only the accumulation
and the output rounding differ. Activations are evaluated by torch (gelu: exact erf).
"""
import warnings

import numpy as np
import pytest
import torch

from tvk_kernels.errors import InvalidConfigError, ShaderCompileError
from tvk_kernels.kernels import matmul as matmul_kernels
from tvk_kernels.kernels import matmul_coopmat as coopmat
from tvk_kernels.kernels import matmul_coopmat2 as coopmat2
from tvk_kernels.search_space import candidates, search_space, with_derived

TOL = {"float32": (1e-5, 1e-6), "float16": (2e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}
ACTS = [None, "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"]


# ------------------------------------------------------------------ helpers
def _storage(x: np.ndarray, dtype: str) -> np.ndarray:
    """float array -> the numpy array holding it in `dtype` storage (bf16 as raw uint16 bits)."""
    if dtype == "float32":
        return np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "float16":
        return np.ascontiguousarray(x, dtype=np.float16)
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16).copy()


def _values(x: np.ndarray, dtype: str) -> np.ndarray:
    """storage array (or a view of it) -> float64 values."""
    if dtype == "bfloat16":
        return (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def _operand(device, base: np.ndarray, view: np.ndarray):
    """Upload a contiguous base array; return (buffer, address of view[0,0,0], element strides of view)."""
    assert base.flags.c_contiguous and view.ndim == 3
    buf = device.upload(base)
    off = view.__array_interface__["data"][0] - base.__array_interface__["data"][0]
    return buf, buf.address + off, tuple(s // base.itemsize for s in view.strides)


def _act(t: torch.Tensor, activation):
    fns = {None: lambda x: x, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
           "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"), "silu": torch.nn.functional.silu,
           "sigmoid": torch.sigmoid, "tanh": torch.tanh}
    return fns[activation](t)


def check(device, rng, M, N, K, *, batch=1, dtype="float32", a_layout="mk", b_layout="kn", a_bcast=False,
          b_bcast=False, out_layout="mn", bias=False, activation=None, alpha=1.0, params=None, split_k=None,
          a_step=1):
    """Build A, B in the given layouts, run matmul_kernels.matmul, compare with torch float64; returns the info dict."""
    npdt = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}[dtype]
    ab = 1 if a_bcast else batch
    bb = 1 if b_bcast else batch
    # A: "mk" row-major, "km" transposed (column-major) storage; a_step > 1 leaves gaps between columns
    if a_layout == "mk":
        a_base = _storage(rng.standard_normal((ab, M, K * a_step)), dtype)
        a_view = a_base[:, :, ::a_step]
    else:
        a_base = _storage(rng.standard_normal((ab, K * a_step, M)), dtype)
        a_view = a_base[:, ::a_step, :].transpose(0, 2, 1)
    if b_layout == "kn":
        b_base = _storage(rng.standard_normal((bb, K, N)), dtype)
        b_view = b_base
    else:
        b_base = _storage(rng.standard_normal((bb, N, K)), dtype)
        b_view = b_base.transpose(0, 2, 1)
    if a_bcast:
        a_view = np.broadcast_to(a_view, (batch, M, K))
    if b_bcast:
        b_view = np.broadcast_to(b_view, (batch, K, N))
    abuf, a_addr, sa = _operand(device, a_base, a_view)
    bbuf, b_addr, sb = _operand(device, b_base, b_view)
    if out_layout == "mn":
        out_shape, sc = (batch, M, N), (M * N, N, 1)
    else:  # transposed output: out[b, m, n] at b*M*N + n*M + m
        out_shape, sc = (batch, N, M), (M * N, 1, M)
    out = device.allocator.alloc(batch * M * N * np.dtype(npdt).itemsize)
    bias_buf, bias_addr, bias_v = None, 0, np.zeros(N)
    if bias:
        bias_s = _storage(rng.standard_normal(N), dtype)
        bias_buf = device.upload(bias_s)
        bias_addr, bias_v = bias_buf.address, _values(bias_s, dtype)

    info = matmul_kernels.matmul(device, a_addr, b_addr, out.address, M, N, K, batch=batch, a_strides=sa, b_strides=sb,
                     out_strides=sc, bias_addr=bias_addr, activation=activation, alpha=alpha, dtype=dtype,
                     params=params, split_k=split_k)
    got = _values(device.download(out, npdt, out_shape), dtype)
    if out_layout != "mn":
        got = got.transpose(0, 2, 1)

    A, B = torch.from_numpy(_values(a_view, dtype)), torch.from_numpy(_values(b_view, dtype))
    pre = alpha * (A @ B) + torch.from_numpy(bias_v)
    ref = _act(pre, activation).numpy()
    scale = abs(alpha) * (A.abs() @ B.abs()).numpy() + np.abs(bias_v)
    rtol, atol = TOL[dtype]
    err = np.abs(got - ref)
    bad = err > rtol * scale + atol
    assert not bad.any(), (f"{dtype} {M}x{N}x{K} batch={batch} act={activation} {info}: {bad.sum()} of {bad.size} "
                           f"outside the bound; worst error {err.max():.3g} at scale {scale.flat[err.argmax()]:.3g}")
    for buf in (abuf, bbuf, out, bias_buf):
        if buf is not None:
            buf.free()
    return info


# ------------------------------------------------------------------ float32 shapes and layouts
@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 7, 7), (127, 127, 127), (1, 127, 7), (127, 1, 33), (7, 65, 1),
                                   (65, 33, 129), (64, 128, 96), (0, 5, 3), (3, 4, 0)])
def test_shapes(device, rng, M, N, K):
    check(device, rng, M, N, K)


@pytest.mark.parametrize("a_layout,b_layout,out_layout", [("km", "kn", "mn"), ("mk", "nk", "mn"), ("km", "nk", "nm")])
def test_transposed(device, rng, a_layout, b_layout, out_layout):
    check(device, rng, 45, 37, 70, a_layout=a_layout, b_layout=b_layout, out_layout=out_layout)
    check(device, rng, 64, 32, 48, a_layout=a_layout, b_layout=b_layout, out_layout=out_layout)  # vector loads


def test_general_strides(device, rng):
    """No unit stride at all on A (every other column), transposed B."""
    check(device, rng, 19, 23, 21, a_step=2, b_layout="nk")
    check(device, rng, 19, 23, 21, a_layout="km", a_step=3)


def test_batched_broadcast(device, rng):
    check(device, rng, 9, 13, 17, batch=3)
    check(device, rng, 9, 13, 17, batch=3, a_bcast=True, alpha=0.5)
    check(device, rng, 33, 20, 40, batch=2, b_bcast=True, b_layout="nk", bias=True, activation="relu")


@pytest.mark.parametrize("activation", ACTS)
def test_bias_activation(device, rng, activation):
    check(device, rng, 37, 45, 29, bias=True, activation=activation, alpha=0.75)


# ------------------------------------------------------------------ 16-bit storage
def _need16(device, dtype):
    f = device.facts.features
    if not f["storage_16bit"] or (dtype == "float16" and not f["shader_float16"]):
        pytest.skip(f"{device.facts.name} has no {dtype} storage")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16bit_storage(device, rng, dtype):
    _need16(device, dtype)
    check(device, rng, 7, 7, 7, dtype=dtype)
    check(device, rng, 127, 65, 33, dtype=dtype, bias=True, activation="gelu", b_layout="nk")
    check(device, rng, 64, 64, 64, dtype=dtype, a_layout="km", batch=2, b_bcast=True)


# ------------------------------------------------------------------ split-K
def test_split_k(device, rng):
    info = check(device, rng, 5, 3, 2000)
    assert info["bucket"] == "skinny" and info["splits"] > 1, info
    info = check(device, rng, 9, 17, 300, batch=2, split_k=4, bias=True, activation="silu", alpha=2.0,
                 b_layout="nk", out_layout="nm")
    assert info["splits"] == 4, info
    info = check(device, rng, 7, 7, 7, split_k=8)  # more splits than K slices: clamped
    assert info["splits"] == 1, info


def test_split_k_fp16(device, rng):
    _need16(device, "float16")
    info = check(device, rng, 6, 10, 1100, dtype="float16", split_k=3, bias=True, activation="tanh")
    assert info["splits"] == 3, info


# ------------------------------------------------------------------ tuning candidates
EXPLICIT = [
    {"BM": 16, "BN": 16, "BK": 8, "TM": 1, "TN": 1, "VEC": 1, "UNROLL": 1, "PAD": 0, "PREFETCH": 0,
     "FRAG": 0, "STAGES": 1, "SUBGROUP": 0},
    {"BM": 32, "BN": 64, "BK": 16, "TM": 4, "TN": 8, "VEC": 2, "UNROLL": 4, "PAD": 1, "PREFETCH": 1,
     "FRAG": 0, "STAGES": 1, "SUBGROUP": 0},
    {"BM": 64, "BN": 32, "BK": 32, "TM": 8, "TN": 2, "VEC": 4, "UNROLL": 8, "PAD": 4, "PREFETCH": 0,
     "FRAG": 0, "STAGES": 1, "SUBGROUP": 0},
    {"BM": 128, "BN": 16, "BK": 8, "TM": 8, "TN": 1, "VEC": 4, "UNROLL": 8, "PAD": 0, "PREFETCH": 1,
     "FRAG": 0, "STAGES": 1, "SUBGROUP": 0},
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_prefetch_every_layout_and_split(device, rng, dtype):
    """PREFETCH 1 (the next K slice loaded into registers during the current one's products): a
    ragged K of many slices, each operand layout, with and without split-K."""
    if dtype != "float32":
        _need16(device, dtype)
    params = {"BM": 16, "BN": 32, "BK": 8, "TM": 2, "TN": 4, "VEC": 4, "UNROLL": 4, "PAD": 1, "PREFETCH": 1,
              "SUBGROUP": 0}
    for (al, bl), split in zip([("mk", "kn"), ("km", "kn"), ("mk", "nk"), ("km", "nk")], (1, 3, 1, 3)):
        info = check(device, rng, 37, 45, 83, batch=2, dtype=dtype, params=params, split_k=split, a_layout=al,
                     b_layout=bl, bias=True, activation="relu")
        assert info["params"]["PREFETCH"] == 1 and info["splits"] == split, info


LOOP_VARIANTS = {  # the inner loop's tunables at 1/2: FRAG (runs of 4 rows and columns), STAGES (two shared buffers)
    "frag-4x4-prefetch": {"BM": 16, "BN": 16, "BK": 8, "TM": 4, "TN": 4, "VEC": 4, "UNROLL": 4, "PAD": 4, "PREFETCH": 1,
                          "FRAG": 1, "STAGES": 1, "SUBGROUP": 0},
    "frag-8x4": {"BM": 32, "BN": 16, "BK": 8, "TM": 8, "TN": 4, "VEC": 2, "UNROLL": 1, "PAD": 0, "PREFETCH": 0,
                 "FRAG": 1, "STAGES": 1, "SUBGROUP": 0},
    "stages-2x4": {"BM": 16, "BN": 32, "BK": 8, "TM": 2, "TN": 4, "VEC": 4, "UNROLL": 4, "PAD": 1, "PREFETCH": 0,
                   "FRAG": 0, "STAGES": 2, "SUBGROUP": 0},
    "stages-frag-prefetch": {"BM": 16, "BN": 16, "BK": 8, "TM": 4, "TN": 4, "VEC": 2, "UNROLL": 1, "PAD": 4,
                             "PREFETCH": 1, "FRAG": 1, "STAGES": 2, "SUBGROUP": 0},
}


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", LOOP_VARIANTS)
def test_loop_variants_every_layout_and_split(device, rng, dtype, name):
    """FRAG 1 and STAGES 2: a K of one slice, a ragged last slice and many; ragged M and N (rows and
    columns past the edge inside a run of 4), each operand layout, split-K, bias and activation,
    batched; a transposed output."""
    params = LOOP_VARIANTS[name]
    if dtype != "float32":
        _need16(device, dtype)
    for K in (5, 8, 83):
        splits = (1, 3, 1, 2) if K > 64 else (1, 1, 1, 1)
        for (al, bl), split in zip([("mk", "kn"), ("km", "kn"), ("mk", "nk"), ("km", "nk")], splits):
            info = check(device, rng, 37, 45, K, batch=2, dtype=dtype, params=params, split_k=split, a_layout=al,
                         b_layout=bl, bias=True, activation="relu")
            assert info["params"] == params and info["splits"] == split, info
    check(device, rng, 29, 22, 40, dtype=dtype, params=params, out_layout="nm")


def test_frag_needs_runs_of_four(device):
    """FRAG 1 with a TM, TN or PAD that is no multiple of 4 is refused, naming the rule."""
    fam = matmul_kernels.family(device, matmul_kernels.Matmul)
    for bad in ({"TM": 2}, {"TN": 2}, {"PAD": 1}):
        with pytest.raises(InvalidConfigError, match="FRAG=1"):
            fam.check_config(dict(LOOP_VARIANTS["frag-4x4-prefetch"], **bad))


@pytest.mark.parametrize("params", EXPLICIT, ids=lambda p: f"{p['BM']}x{p['BN']}x{p['BK']}-{p['TM']}x{p['TN']}")
def test_explicit_candidates(device, rng, params):
    info = check(device, rng, 67, 45, 52, params=params)
    assert info["params"] == params and info["source"] == "explicit"
    check(device, rng, 64, 64, 64, params=params, a_layout="km", b_layout="nk", bias=True, activation="relu")


def test_candidates_list(device):
    cands = candidates("matmul", device.facts)
    assert len(cands) > 100
    f = device.facts
    for p in cands:
        d = with_derived(search_space("matmul"), p)
        assert d["WG"] <= f.max_workgroup_invocations and d["shared_bytes"] <= f.max_shared_memory
        assert p["BM"] % p["TM"] == 0 and p["BN"] % p["TN"] == 0
    assert {(p["BM"], p["BN"]) for p in cands} >= {(16, 16), (64, 64)}
    fam = matmul_kernels.family(device, matmul_kernels.Matmul)
    for p in cands[:: max(1, len(cands) // 50)]:  # a sample passes the full check (the family's own rules too)
        assert matmul_kernels.tiled_params(fam.resolve("small", p)) == p


def test_partial_explicit_params_complete_from_the_bucket_config(device, rng):
    """Explicit keys go on top of the shape bucket's config (the tuner, ablations)."""
    fam = matmul_kernels.family(device, matmul_kernels.Matmul)
    base, _ = fam.params("small")
    bm = 16 if base["BM"] != 16 else 32
    info = check(device, rng, 20, 12, 24, params={"BM": bm})
    assert info["bucket"] == "small" and info["source"] == "explicit"
    assert info["params"] == {**base, "BM": bm}


def test_invalid_config(device, rng):
    too_much_shared = {"BM": 128, "BN": 128, "BK": 256, "TM": 8, "TN": 8, "VEC": 4, "UNROLL": 4, "PAD": 0}
    with pytest.raises(InvalidConfigError, match="shared_bytes <= max_shared_memory"):
        check(device, rng, 8, 8, 8, params=too_much_shared)
    too_many_threads = {"BM": 128, "BN": 128, "BK": 8, "TM": 1, "TN": 1, "VEC": 1, "UNROLL": 1, "PAD": 0}
    with pytest.raises(InvalidConfigError, match="invocations"):
        check(device, rng, 8, 8, 8, params=too_many_threads)
    cases = [({"BM": 48, "BN": 64, "TM": 5, "TN": 4}, r"matmul.*BM % TM == 0"),
             ({"BK": 0}, "matmul parameter BK=0 must be a positive integer"),
             ({"VEC": 8}, "matmul VEC=8 must be 1, 2 or 4"),
             ({"UNROLL": 2.5}, "matmul: parameter UNROLL=2.5 must be an integer"),
             ({"Bm": 32}, "matmul: unknown parameter 'Bm'; the tiled kernel takes BM, BN")]  # a typo never runs silently
    for params, message in cases:
        with pytest.raises(InvalidConfigError, match=message):
            check(device, rng, 8, 8, 8, params=params)
    check(device, rng, 8, 8, 8)  # the family still runs its config afterwards


def test_validation_errors(device):
    buf = device.allocator.alloc(4096)
    a = buf.address
    cases = [
        (dict(dtype="int8"), "dtype"),
        (dict(M=-1), "M must be >= 0"),
        (dict(K=2.5), "K must be an integer"),
        (dict(a_strides=(1, 2)), "a_strides must be 3"),
        (dict(b_strides=(0, -4, 1)), "b_strides row stride"),
        (dict(activation="swish"), "activation"),
        (dict(batch=2, out_strides=(0, 4, 1)), "batch stride is 0"),
        (dict(out_strides=(16, 0, 1)), "several outputs"),
        (dict(a_addr=a + 2), "not aligned"),
        (dict(b_addr=0), "b_addr is 0"),
        (dict(split_k=0), "split_k must be >= 1"),
        (dict(params="big"), "params must be a dict"),
    ]
    for kw, msg in cases:
        args = dict(a_addr=a, b_addr=a, out_addr=a, M=4, N=4, K=4)
        args.update(kw)
        with pytest.raises(ValueError, match=msg):
            matmul_kernels.matmul(device, args.pop("a_addr"), args.pop("b_addr"), args.pop("out_addr"), args.pop("M"),
                      args.pop("N"), args.pop("K"), **args)
    buf.free()


# ------------------------------------------------------------------ cooperative matrices
def test_coopmat_skips_cleanly(device, rng):
    """Where the device has no cooperative matrices, fp16 runs on the tiled kernel without warnings."""
    if device.facts.features["cooperative_matrix"]:
        pytest.skip("device has cooperative matrices: see test_coopmat")
    _need16(device, "float16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        info = check(device, rng, 96, 80, 64, dtype="float16")
    assert info["kernel"] == "tiled"
    assert coopmat.candidates(device) == []
    with pytest.raises(InvalidConfigError, match="cooperative-matrix"):
        check(device, rng, 96, 80, 64, dtype="float16",
              params={"SG_M": 2, "SG_N": 2, "FM": 2, "FN": 2, "BK": 32, "PAD": 8})


def test_coopmat(device, rng, monkeypatch, request):
    if not device.facts.features["cooperative_matrix"]:
        pytest.skip(f"{device.facts.name} has no VK_KHR_cooperative_matrix")
    monkeypatch.setattr(coopmat2, "verified", lambda device, dtype="float16": None)  # not its successor
    plans = matmul_kernels.family(device, matmul_kernels.Matmul)
    plans.forget_plans()
    request.addfinalizer(plans.forget_plans)  # plans made without the workgroup-scope kernel go with the patch
    coop = coopmat.verified(device)
    if coop is None:
        pytest.skip(f"the cooperative-matrix kernel is unavailable here (shapes {coopmat.coop_shapes(device)})")
    for layout in (("mk", "kn"), ("km", "nk")):
        info = check(device, rng, 200, 136, 100, dtype="float16", a_layout=layout[0], b_layout=layout[1],
                     bias=True, activation="gelu", alpha=0.5)
        assert info["kernel"] == "coopmat", info
    info = check(device, rng, 130, 70, 48, batch=2, dtype="float16", a_bcast=True, out_layout="nm")
    assert info["kernel"] == "coopmat", info
    # explicit candidates (the tuner's path), single- and double-buffered, all four operand layouts
    cands = coopmat.candidates(device)
    assert cands
    base = dict(coop.params("large")[0])
    for cfg, (al, bl) in [(dict(base, STAGES=1), ("mk", "kn")), (dict(base, SG_M=2, SG_N=2, FM=2, FN=2), ("km", "kn")),
                          (dict(base, SG_M=2, SG_N=2, FM=4, FN=2, BK=16), ("mk", "nk"))]:
        info = check(device, rng, 150, 100, 72, dtype="float16", params=cfg, a_layout=al, b_layout=bl, bias=True)
        assert info["kernel"] == "coopmat" and info["source"] == "explicit", info
    with pytest.raises(InvalidConfigError, match="shared memory"):
        check(device, rng, 64, 64, 64, dtype="float16", params=dict(base, BK=512))
    # split-K: forced, and chosen for few output tiles over a long K (each split's partials summed by
    # matmul.comp's reduce, which applies the epilogue)
    info = check(device, rng, 130, 70, 700, dtype="float16", split_k=3, bias=True, activation="relu", alpha=0.5)
    assert info["kernel"] == "coopmat" and info["splits"] == 3, info
    info = check(device, rng, 130, 96, 1000, batch=2, dtype="float16", b_layout="nk", bias=True, activation="gelu")
    assert info["kernel"] == "coopmat" and info["splits"] > 1, info


def test_coopmat_template_compiles():
    """matmul_coopmat.comp compiles wherever glslc knows GL_KHR_cooperative_matrix (glslang >= 13),
    its tile parameters split off as specialization constants as the pipeline cache does."""
    from tvk_kernels.runtime.compiler import compile_template, find_glslang, split_defines

    defines = {"MS": 16, "NS": 16, "KS": 16, "SG_M": 2, "SG_N": 4, "FM": 4, "FN": 2, "BK": 32, "PAD": 8,
               "SUBGROUP_SIZE": 32, "ACT": 2, "VEC_A": 4, "VEC_B": 2, "A_KMAJOR": 0, "B_NMAJOR": 1, "DTYPE": 1}
    compiled, spec = split_defines("matmul_coopmat.comp", defines)
    assert sorted(spec.values()) == [2, 2, 4, 4, 8, 32]  # SG_M, SG_N, FM, FN, BK, PAD
    try:
        spirv = compile_template("matmul_coopmat.comp", compiled)
    except ShaderCompileError as e:
        if find_glslang() is None and "GL_KHR_cooperative_matrix" in str(e) and "not supported" in str(e):
            pytest.skip("this glslc predates GL_KHR_cooperative_matrix (needs glslang >= 13)")
        raise
    assert spirv[:4] == b"\x03\x02\x23\x07"


# ------------------------------------------------------------------ workgroup-scope cooperative matrices
def test_coopmat2_absent_is_clean(device, rng):
    """Without VK_NV_cooperative_matrix2, fp16 runs another kernel without warnings, and explicit
    workgroup-scope parameters are refused with the reason."""
    if coopmat2.verified(device) is not None:
        pytest.skip("device has a verified workgroup-scope kernel: see test_coopmat2")
    _need16(device, "float16")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        info = check(device, rng, 96, 80, 64, dtype="float16")
    assert info["kernel"] in ("tiled", "coopmat")
    assert coopmat2.candidates(device) == []
    with pytest.raises(InvalidConfigError, match="VK_NV_cooperative_matrix2"):
        check(device, rng, 96, 80, 64, dtype="float16", params={"BM": 64, "BN": 64, "BK": 32, "WGS": 128})


def _granular(device, granules, max_dimension=256, max_workgroup_size=256):
    """A CoopMatmul2 of `device` that believes it has these workgroup-scope granularities (host rules only)."""
    fam = coopmat2.CoopMatmul2.__new__(coopmat2.CoopMatmul2)
    fam.device, fam.granules = device, granules if isinstance(granules, dict) else {"float16": granules, "bfloat16": []}
    fam.props = {"max_dimension": max_dimension, "max_workgroup_size": max_workgroup_size}
    return fam


def test_coopmat2_candidates_fit_the_granularities(device, monkeypatch):
    """candidates() lists the search space's tiles that a device's granularities allow (here a device that
    lists 32x32x16 at 256 invocations only; the space's device constraints are the host rules' concern)."""
    fam = _granular(device, [{"MGranularity": 32, "NGranularity": 32, "KGranularity": 16,
                              "workgroupInvocations": 256}])
    fam.validate = fam.check_config
    monkeypatch.setattr(coopmat2, "verified", lambda device, dtype="float16": fam)
    cands = coopmat2.candidates(device)
    assert cands and all(c["WGS"] == 256 and c["BM"] % 32 == 0 and c["BN"] % 32 == 0 for c in cands)
    assert {"BM": 128, "BN": 128, "BK": 32, "WGS": 256} in cands


def test_tvk_coopmat_0_turns_both_cooperative_matrix_kernels_off(device, monkeypatch):
    """TVK_COOPMAT=0 runs fp16 and bf16 GEMMs as on a GPU without cooperative matrices, whatever was verified."""
    plans = matmul_kernels.family(device, matmul_kernels.Matmul)
    monkeypatch.setattr(plans, "coop", object())  # as if each kernel had passed its check here
    monkeypatch.setattr(plans, "coop2", {"float16": object(), "bfloat16": object()})
    assert coopmat.verified(device) is plans.coop and coopmat2.verified(device, "bfloat16") is not None
    monkeypatch.setenv("TVK_COOPMAT", "0")
    assert coopmat.verified(device) is None
    assert coopmat2.verified(device) is None and coopmat2.verified(device, "bfloat16") is None
    monkeypatch.setenv("TVK_COOPMAT", "maybe")
    with pytest.raises(ValueError, match="TVK_COOPMAT"):
        coopmat.verified(device)


def test_coopmat2_config_rules(device):
    """A tile must be a multiple of the granularities listed for its workgroup size, within the device's largest
    dimension and workgroup; unknown names are refused (no device needed: the rules are the host's)."""
    g16 = {"MGranularity": 16, "NGranularity": 16, "KGranularity": 16, "workgroupInvocations": 256}
    g32 = {"MGranularity": 32, "NGranularity": 32, "KGranularity": 16, "workgroupInvocations": 128}
    fam = _granular(device, [g16, g32])
    assert fam.check_config({"BM": 128, "BN": 64, "BK": 32, "WGS": 256})["BM"] == 128
    assert fam.check_config({"BM": 64, "BN": 96, "BK": 16, "WGS": 128})["BN"] == 96
    for bad, why in [({"BM": 48, "BN": 64, "BK": 32, "WGS": 128}, "no workgroup-scope"),  # 48 % 32
                     ({"BM": 64, "BN": 64, "BK": 32, "WGS": 64}, "no workgroup-scope"),  # none for 64
                     ({"BM": 512, "BN": 64, "BK": 32, "WGS": 256}, "largest matrix dimension"),
                     ({"BM": 64, "BN": 64, "BK": 32, "WGS": 256, "PAD": 8}, "unknown parameter"),
                     ({"BM": 64, "BN": 64, "BK": 0, "WGS": 256}, "positive integer")]:
        with pytest.raises(InvalidConfigError, match=why):
            fam.check_config(bad)
    # where the device also has bf16 shapes, a config must fit those too: it serves both dtypes
    bf16 = dict(g16, MGranularity=64)
    both = _granular(device, {"float16": [g16], "bfloat16": [bf16]})
    assert both.check_config({"BM": 128, "BN": 32, "BK": 16, "WGS": 256})["BM"] == 128
    with pytest.raises(InvalidConfigError, match="bfloat16"):
        both.check_config({"BM": 96, "BN": 32, "BK": 16, "WGS": 256})


def test_coopmat2_reads_only_unit_strides():
    """Each operand is read along a unit stride (either dimension: a transposed view is one); an operand with none
    (every other column of A) keeps the subgroup-scope kernel, which reads any strides."""
    assert coopmat2.unit_major(64, 1, 10, 64) is True    # rows of K contiguous elements
    assert coopmat2.unit_major(1, 80, 10, 64) is False   # stored transposed
    assert coopmat2.unit_major(0, 7, 1, 64) is False     # one row (stride 0): read along the other dimension
    assert coopmat2.unit_major(128, 2, 10, 64) is None   # every other column
    assert coopmat2.unit_major(5, 3, 1, 1) is True       # a single element


def test_coopmat2(device, rng):
    """The workgroup-scope kernel on a device that has it: every layout, a transposed and a broadcast operand,
    ragged and unaligned sizes, the epilogue, split-K forced and chosen, explicit tiles (the tuner's path)."""
    coop2 = coopmat2.verified(device)
    if coop2 is None:
        pytest.skip(f"{device.facts.name} has no verified VK_NV_cooperative_matrix2 matmul "
                    f"(features: {device.facts.features.get('cooperative_matrix2')})")
    matmul_kernels.family(device, matmul_kernels.Matmul).forget_plans()
    for al, bl in (("mk", "kn"), ("km", "kn"), ("mk", "nk"), ("km", "nk")):
        info = check(device, rng, 200, 136, 100, dtype="float16", a_layout=al, b_layout=bl, bias=True,
                     activation="gelu", alpha=0.5)
        assert info["kernel"] == "coopmat2", info
    for M, N, K in ((17, 300, 33), (129, 65, 257), (64, 64, 16)):  # rows of odd length: ALIGNED 0
        info = check(device, rng, M, N, K, dtype="float16", b_layout="nk")
        assert info["kernel"] == "coopmat2", info
    info = check(device, rng, 130, 70, 48, batch=3, dtype="float16", a_bcast=True, out_layout="nm", bias=True)
    assert info["kernel"] == "coopmat2", info
    info = check(device, rng, 130, 70, 700, dtype="float16", split_k=3, bias=True, activation="relu", alpha=0.5)
    assert info["kernel"] == "coopmat2" and info["splits"] == 3, info
    info = check(device, rng, 130, 96, 1000, batch=2, dtype="float16", b_layout="nk", bias=True, activation="silu")
    assert info["kernel"] == "coopmat2" and info["splits"] > 1, info
    cands = coopmat2.candidates(device)
    assert cands
    for cfg in cands[:: max(1, len(cands) // 6)]:
        info = check(device, rng, 150, 100, 72, dtype="float16", params=cfg, a_layout="km", bias=True)
        assert info["kernel"] == "coopmat2" and info["source"] == "explicit", info
    # an operand without a unit stride goes to the subgroup-scope kernel, correct all the same
    info = check(device, rng, 96, 80, 64, dtype="float16", a_step=2)
    assert info["kernel"] != "coopmat2", info
    # a large 2-D product both kernels take runs where "over_subgroup_scope" sends it (the measured winner)
    info = check(device, rng, 512, 384, 64, dtype="float16")
    want = "coopmat2" if coopmat.verified(device) is None or coop2.preferred(512, 384, 64, 1) else "coopmat"
    assert info["kernel"] == want, info


def test_coopmat2_bfloat16(device, rng):
    """bf16 GEMMs on the workgroup-scope kernel where the device has bf16 cooperative matrices
    (VK_KHR_shader_bfloat16): layouts, ragged sizes, the epilogue, split-K, a batch; elsewhere bf16 runs the
    tiled kernel (fp32 arithmetic on bf16 storage)."""
    coop2 = coopmat2.verified(device, "bfloat16")
    if coop2 is None:
        _need16(device, "bfloat16")
        assert check(device, rng, 70, 40, 33, dtype="bfloat16")["kernel"] == "tiled"
        pytest.skip(f"{device.facts.name} has no verified bf16 workgroup-scope matmul "
                    f"(bf16 cooperative matrices: {device.facts.features.get('bfloat16_cooperative_matrix')})")
    matmul_kernels.family(device, matmul_kernels.Matmul).forget_plans()
    for al, bl in (("mk", "kn"), ("km", "nk")):
        info = check(device, rng, 200, 136, 100, dtype="bfloat16", a_layout=al, b_layout=bl, bias=True,
                     activation="gelu", alpha=0.5)
        assert info["kernel"] == "coopmat2", info
    info = check(device, rng, 17, 300, 33, dtype="bfloat16", out_layout="nm")
    assert info["kernel"] == "coopmat2", info
    info = check(device, rng, 512, 384, 200, batch=3, dtype="bfloat16", b_bcast=True, bias=True)
    assert info["kernel"] == "coopmat2", info
    info = check(device, rng, 130, 70, 700, dtype="bfloat16", split_k=3, bias=True, activation="relu")
    assert info["kernel"] == "coopmat2" and info["splits"] == 3, info


def test_coopmat2_template_compiles():
    """matmul_coopmat2.comp compiles to SPIR-V 1.6 wherever the compiler knows GL_NV_cooperative_matrix2
    (glslang >= 15: TVK_GLSLANG, or a Vulkan SDK's), its tile and layouts split off as specialization constants."""
    from tvk_kernels.runtime.compiler import compile_template, split_defines

    defines = {"BM": 128, "BN": 128, "BK": 32, "A_KMAJOR": 0, "B_NMAJOR": 1, "C_NMAJOR": 0, "ALIGNED": 1, "DTYPE": 1,
               "MODE": 0, "ACT": matmul_kernels.ACTIVATIONS["gelu"]}
    compiled, spec = split_defines("matmul_coopmat2.comp", defines)
    assert spec == {3: 128, 4: 128, 5: 32, 6: 0, 7: 1, 8: 0, 9: 1}
    for dtype in (1, 5):  # fp16, bf16 (dtypes.glsl)
        try:
            spirv = compile_template("matmul_coopmat2.comp", dict(compiled, DTYPE=dtype))
        except ShaderCompileError as e:
            if "GL_NV_cooperative_matrix2" in str(e) and "not supported" in str(e):
                pytest.skip("no compiler here knows GL_NV_cooperative_matrix2 (needs glslang >= 15; set TVK_GLSLANG)")
            raise
        assert spirv[:4] == b"\x03\x02\x23\x07" and spirv[4:8] == b"\x00\x06\x01\x00"  # SPIR-V 1.6


def test_integer_matmul_is_a_clear_error_also_through_the_operator():
    """`a @ b` turns a TypeError into Python's bare "unsupported operand type(s)": the error names the dtype."""
    import torch

    import torchvk  # noqa: F401

    a = torch.arange(6).view(2, 3).to("tvk")
    for call in (lambda: a @ a.t(), lambda: torch.mm(a, a.t())):
        with pytest.raises(NotImplementedError, match="int64 operands"):
            call()
    cpu = a.cpu().float()
    assert torch.equal((a.float() @ a.float().t()).cpu(), cpu @ cpu.t())
