"""2-D convolution (NCHW): forward, grad wrt input, grad wrt weight, grad wrt bias.

Storage (`dtype=`): float32, or float16/bfloat16 where the device has 16-bit storage; the
arithmetic is float32 (each output is rounded once to the storage type, as a 16-bit GEMM's
fp32-accumulated output), and split-K partials stay float32 until they are summed. The exception,
opt-in with TVK_PACKED_CONV=1 until it is measured faster (design note 47): float16 on a GPU without
cooperative matrices (RDNA1, most Intel and older GPUs) where matmul's packed-fp16 kernel passed its
check multiplies on packed fp16 arithmetic (conv2d.comp PACKED: two fp16 FMAs an instruction, fp16
partials of at most 16 products folded into fp32, matmul_packed_f16's error bound; overflowed
outputs summed again in fp32).

All three directions are one implicit-GEMM template (templates/conv2d.comp, `DIR` 0/1/2)
with the tile shape as defines; each can split its reduction K over workgroups when its
output tiles alone would leave the device idle (split-K: late CNN layers with small images,
and grad_weight's long K = N*OH*OW), and sum the partials with templates/conv2d_reduce.comp.
Search space, constraints, buckets and defaults: tuning/conv2d.json.
Depthwise convs (groups > 1, one input channel per group) take direct kernels instead
(conv_depthwise.py, tuning/conv2d_depthwise.json): the same entry functions route there, and
their `params=` are then that family's.

Buffers are plain byte addresses (ints, or anything with `.address`); shapes are tuples.
Inputs must be contiguous NCHW / (OC, IC/groups, KH, KW).
"""
from __future__ import annotations

import math

from . import conv_coopmat, conv_depthwise, dtypes
from .conv_family import PUSH, PUSH_BACKWARD_INPUT, REDUCE_PUSH, ACTIVATIONS, DIRS, Conv2d, gemm_dims
from .conv_geometry import checked_split_k, conv2d_output_shape, geometry
from .kept_calls import kept_call
from .launch import address, family, grid_1d
from .matmul_coopmat import agrees
from .reduce import reduce
from ..config import by_class
from ..errors import InvalidConfigError
from ..search_space import candidates as space_candidates, search_space


# ------------------------------------------------------------------ shapes
def stride_phases(size: int, k: int, s: int, p: int, d: int) -> list[tuple]:
    """grad-input phases along one axis: for each r < s, the inputs i with (i + p) % s == r
    (i = i0 + a*s, a < count) and the kernel taps t with t*d % s == r (t = t0 + b*step, b < taps).
    Returns (i0, count, t0, step, taps, base, ostep): output index = base + a - b*ostep."""
    out = []
    for r in range(s):
        i0 = (r - p) % s
        count = max(0, -(-(size - i0) // s))
        taps = [t for t in range(k) if (t * d) % s == r]
        t0 = taps[0] if taps else 0
        step = taps[1] - taps[0] if len(taps) > 1 else 1
        base = (i0 + p - t0 * d) // s  # exact when taps exist
        ostep = step * d // s
        out.append((i0, count, t0, step, len(taps), base, ostep))
    return out



def candidates(device, max_count: int | None = None) -> list[dict]:
    """Every parameter set of tuning/conv2d.json that satisfies its constraints on `device`
    (for the autotuner); each can be passed as `params=` to the conv2d functions."""
    return space_candidates(Conv2d.family, device.facts, max_count)


def _split_plan(device, params: dict, M: int, N: int, K: int, groups: int, split_k=None,
                numel: int | None = None, direction: str = "bwd_weight") -> tuple[int, int]:
    """(splits, kchunk): how to cut a GEMM's reduction K into slices of kchunk (a multiple of BK)
    so that (M x N output tiles) x groups x splits workgroups fill the device (tuning/conv2d.json
    "split_k"); split_k forces a count (1: none). M is what one launch covers (one stride phase
    of grad_input). numel: the elements of one partial-sum slice (default groups*M*N, the
    output), which caps splits so that the slices' indices stay 32-bit. direction: whose min_fill
    applies (a grid already that full is not split)."""
    bk = params["BK"]
    if K <= 0:
        return 1, bk
    if split_k is not None:
        splits = checked_split_k(split_k)
    else:
        cfg = search_space(Conv2d.family).get("split_k", {})
        facts = device.facts
        target = by_class(cfg.get("target_groups"), facts, 64)
        min_k = by_class(cfg.get("min_k_per_split"), facts, 1024)
        tiles = math.ceil(M / params["BM"]) * math.ceil(N / params["BN"]) * groups
        min_fill = cfg.get("min_fill", {}).get(direction, 0.0)
        if min_fill and tiles >= target * min_fill:
            splits = 1  # full enough: the partials' traffic would cost more than the idle part
        else:
            splits = min(math.ceil(target / tiles), cfg.get("max_splits", 64), K // max(min_k, 1))
    numel = groups * M * N if numel is None else numel
    cap = min(device.facts.max_workgroup_count[2] // groups, ((1 << 31) - 1) // max(numel, 1))
    splits = max(1, min(splits, math.ceil(K / bk), cap))
    chunk = _chunk(K, splits, bk)
    return math.ceil(K / chunk), chunk


def _chunk(K: int, splits: int, bk: int) -> int:
    """K per slice when K is cut into at most `splits` slices: a multiple of BK."""
    return max(1, math.ceil(math.ceil(K / splits) / bk)) * bk


def _bwd_input_phases(g: dict) -> list[tuple]:
    """grad_input's launches, one per stride phase that holds input pixels: (M, K, fields), the
    fields being the push constants from pix0 to step_w (see the template: pixels and taps as offsets)."""
    rows = stride_phases(g["h"], g["kh"], g["sh"], g["ph"], g["dh"])
    cols = stride_phases(g["w"], g["kw"], g["sw"], g["pw"], g["dw"])
    ocg = g["oc"] // g["groups"]
    out = []
    for ih0, hc, kh0, khs, khc, base_h, step_h in rows:
        for iw0, wc, kw0, kws, kwc, base_w, step_w in cols:
            if hc and wc:
                pixels = (ih0 * g["w"] + iw0, g["sh"] * g["w"], g["sw"], hc, wc)
                taps = (kh0 * g["kw"] + kw0, khs * g["kw"], kws, khc, kwc)
                out.append((g["n"] * hc * wc, ocg * khc * kwc, (*pixels, *taps, base_h, base_w, step_h, step_w)))
    return out


def _push(a, b, c, bias, g, kchunk, flags):
    return PUSH.pack(a, b, c, bias, g["n"], g["ic"], g["h"], g["w"], g["oc"], g["oh"], g["ow"], g["groups"],
                     g["kh"], g["kw"], g["sh"], g["sw"], g["ph"], g["pw"], g["dh"], g["dw"], kchunk, flags)


def _grid(device, M, N, params, gz):
    tiles = -(-M // params["BM"]) * -(-N // params["BN"])
    gx, gy, _ = grid_1d(tiles, device.facts.max_workgroup_count[0])
    if gz > device.facts.max_workgroup_count[2]:
        raise InvalidConfigError(f"conv2d: groups*splits={gz} exceeds the device's z grid limit")
    return gx, gy, gz


def _dispatch_gemm(device, fam, direction, g, a, b, c, bias, params, kchunk=None, splits=1, flags=0, label="",
                   act=None, dtype="float32"):
    """The forward's or grad_weight's GEMM with resolved `params` (Conv2d.resolve_gemm). With
    splits > 1, `c` is the scratch of `splits` float32 partial-sum slices (_split_k_sum)."""
    M, N, K = gemm_dims(direction, g)
    pipe = fam.gemm_pipeline(DIRS[direction], params, act, dtype, splits > 1)
    label = label or f"conv2d_{direction}" + (f"_{act}" if act else "")
    push = _push(a, b, c, bias, g, K if kchunk is None else kchunk, flags)
    device.stream.dispatch(pipe, _grid(device, M, N, params, g["groups"] * splits), push, label)


def _dispatch_bwd_input(device, fam, g, phases, a, b, c, params, splits=1, dtype="float32"):
    """grad_input's GEMM: one launch per stride phase (_bwd_input_phases; one for stride 1), each
    writing every partial-sum slice (zeros past its K)."""
    pipe = fam.gemm_pipeline(DIRS["bwd_input"], params, dtype=dtype, partials=splits > 1)
    n = g["ic"] // g["groups"]
    head = (a, b, c, g["n"], g["ic"], g["h"], g["w"], g["oc"], g["oh"], g["ow"], g["groups"], g["kh"], g["kw"])
    for m, k, fields in phases:
        push = PUSH_BACKWARD_INPUT.pack(*head, *fields, _chunk(k, splits, params["BK"]))
        device.stream.dispatch(pipe, _grid(device, m, n, params, g["groups"] * splits), push, "conv2d_bwd_input")


def _split_k_sum(device, fam, dst, numel: int, splits: int, launch, act: str | None = None,
                 label: str = "conv2d_splitk_sum", dtype: str = "float32"):
    """launch(c) runs the GEMM with output c: `dst` itself, or with splits > 1 a scratch buffer of
    `splits` float32 partial-sum slices of `numel` values that one reduce adds into dst (in a fixed
    order: deterministic), applying `act` (the forward's epilogue) to each sum and writing it in
    `dtype`."""
    if splits == 1:
        launch(dst)
        return
    scratch = device.allocator.alloc(4 * numel * splits)
    launch(scratch.address)
    _reduce(device, fam, scratch.address, dst, numel, splits, 1, numel, 1, fam.reduce_wg(), label, act, dtype)
    device.stream.keep_alive(scratch)


def _reduce(device, fam, src, dst, count, A, B, sa, si, wg, label, act=None, dtype="float32"):
    per_thread = A * B <= 64
    pipe = fam.reduce_pipeline(per_thread, wg, act, dtype)
    groups = -(-count // wg) if per_thread else count
    gx, gy, _ = grid_1d(groups, device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, (gx, gy, 1), REDUCE_PUSH.pack(src, dst, count, A, B, sa, si), label)


# ------------------------------------------------------------------ public API
@kept_call('x_addr', 'w_addr', 'bias_addr', 'out_addr')
def conv2d_forward(device, x_addr, w_addr, bias_addr, out_addr, x_shape, w_shape, stride=1, padding=0, dilation=1,
                   groups=1, params=None, act: str | None = None, out_hw=None, split_k=None,
                   dtype: str = "float32") -> tuple:
    """out = act(conv2d(x, w, bias)); bias_addr may be None/0; act None or an activation of
    activations.EPILOGUES (an epilogue: no extra pass); out_hw: see conv_geometry.geometry.
    Returns the output shape (N, OC, OH, OW). split_k: as conv2d_backward_weight's (None: planned,
    an int: forced, 1: none); split, act is applied by the pass that sums the partials; the
    depthwise kernels do not split. dtype: the storage of x, w, bias and out (module docstring)."""
    if act is not None and act not in ACTIVATIONS:
        raise ValueError(f"conv2d_forward: activation {act!r} is not one of {sorted(ACTIVATIONS)}")
    dtypes.check_storage(device, dtype, "conv2d")
    g, out_shape = geometry(x_shape, w_shape, stride, padding, dilation, groups, out_hw)
    if out_shape[0] * out_shape[1] == 0:
        return out_shape
    bias = address(bias_addr)

    def run(p):  # benchmark mode: the same call with a candidate (it overwrites out, reads no output)
        conv2d_forward(device, x_addr, w_addr, bias_addr, out_addr, x_shape, w_shape, stride, padding, dilation,
                       groups, p, act, out_hw, split_k, dtype)

    if conv_depthwise.is_depthwise(g):  # one input channel per group: direct kernels, params theirs
        conv_depthwise.forward(device, g, address(x_addr), address(w_addr), bias, address(out_addr), params, act, run,
                               dtype)
        return out_shape
    M, N, K = gemm_dims("fwd", g)
    fam = conv_coopmat.gemm_family(device, dtype, params, check_coopmat, M, N)
    params = fam.resolve_gemm("fwd", g, params, run)
    splits, chunk = _split_plan(device, params, M, N, K, g["groups"], split_k, direction="fwd")

    def launch(c):  # split: act(sum of partials) is not the sum of act(partial), so the reduce applies it
        _dispatch_gemm(device, fam, "fwd", g, address(x_addr), address(w_addr), c, bias, params, chunk, splits,
                       flags=1 if bias else 0, act=act if splits == 1 else None, dtype=dtype)

    _split_k_sum(device, fam, address(out_addr), math.prod(out_shape), splits, launch, act, dtype=dtype)
    return out_shape


@kept_call('grad_out_addr', 'w_addr', 'grad_in_addr')
def conv2d_backward_input(device, grad_out_addr, w_addr, grad_in_addr, x_shape, w_shape, stride=1, padding=0,
                          dilation=1, groups=1, params=None, out_hw=None, split_k=None, dtype: str = "float32") -> tuple:
    """grad_in (shape x_shape) = d conv2d / d x applied to grad_out (out_hw: see conv_geometry.geometry).
    Returns x_shape. It is also a transposed conv's forward (aten/conv.py). split_k: as
    conv2d_backward_weight's, planned from one stride phase's launch (phases run one after
    another); all phases write the same partial-sum slices, summed once at the end. dtype: the
    storage of grad_out, w and grad_in."""
    dtypes.check_storage(device, dtype, "conv2d")
    g, _ = geometry(x_shape, w_shape, stride, padding, dilation, groups, out_hw)
    x_shape = tuple(int(v) for v in x_shape)
    if x_shape[0] * x_shape[1] * x_shape[2] * x_shape[3] == 0:
        return x_shape

    def run(p):
        conv2d_backward_input(device, grad_out_addr, w_addr, grad_in_addr, x_shape, w_shape, stride, padding,
                              dilation, groups, p, out_hw, split_k, dtype)

    if conv_depthwise.is_depthwise(g):
        conv_depthwise.backward_input(device, g, address(grad_out_addr), address(w_addr), address(grad_in_addr),
                                      params, run, dtype)
        return x_shape
    M, N, _ = gemm_dims("bwd_input", g)
    fam = conv_coopmat.gemm_family(device, dtype, params, check_coopmat, M, N)
    params = fam.resolve_gemm("bwd_input", g, params, run)
    phases = _bwd_input_phases(g)
    numel = math.prod(x_shape)
    splits, _ = _split_plan(device, params, max(m for m, _, _ in phases), g["ic"] // g["groups"],
                            max(k for _, k, _ in phases), g["groups"], split_k, numel, "bwd_input")

    def launch(c):
        _dispatch_bwd_input(device, fam, g, phases, address(grad_out_addr), address(w_addr), c, params, splits, dtype)

    _split_k_sum(device, fam, address(grad_in_addr), numel, splits, launch, dtype=dtype)
    return x_shape


@kept_call('grad_out_addr', 'x_addr', 'grad_w_addr')
def conv2d_backward_weight(device, grad_out_addr, x_addr, grad_w_addr, x_shape, w_shape, stride=1, padding=0,
                           dilation=1, groups=1, params=None, split_k=None, out_hw=None,
                           dtype: str = "float32") -> tuple:
    """grad_w (shape w_shape) = d conv2d / d w applied to grad_out. Returns w_shape.
    The long reduction (K = N*OH*OW) is split over workgroups when the output tiles alone
    would leave the device idle (tuning/conv2d.json "split_k"; split_k= forces a count):
    the slices write partial sums to a scratch buffer that a second pass adds up. out_hw: see
    conv_geometry.geometry. dtype: the storage of grad_out, x and grad_w."""
    dtypes.check_storage(device, dtype, "conv2d")
    g, _ = geometry(x_shape, w_shape, stride, padding, dilation, groups, out_hw)
    w_shape = tuple(int(v) for v in w_shape)
    numel = w_shape[0] * w_shape[1] * w_shape[2] * w_shape[3]
    if numel == 0:
        return w_shape
    fam = family(device, Conv2d)
    M, N, K = gemm_dims("bwd_weight", g)

    def run(p):
        conv2d_backward_weight(device, grad_out_addr, x_addr, grad_w_addr, x_shape, w_shape, stride, padding,
                               dilation, groups, p, split_k, out_hw, dtype)

    if conv_depthwise.is_depthwise(g):
        splits, launch = conv_depthwise.backward_weight(device, g, address(grad_out_addr), address(x_addr), params,
                                                        run, split_k, dtype)
        _split_k_sum(device, fam, address(grad_w_addr), numel, splits, launch, label="conv2d_depthwise_split_sum",
                     dtype=dtype)
        return w_shape
    fam = conv_coopmat.gemm_family(device, dtype, params, check_coopmat, M, N)
    params = fam.resolve_gemm("bwd_weight", g, params, run)
    splits, chunk = _split_plan(device, params, M, N, K, g["groups"], split_k, direction="bwd_weight")

    def launch(c):
        _dispatch_gemm(device, fam, "bwd_weight", g, address(grad_out_addr), address(x_addr), c, 0, params,
                       kchunk=chunk, splits=splits, dtype=dtype)

    _split_k_sum(device, fam, address(grad_w_addr), numel, splits, launch, dtype=dtype)
    return w_shape


def conv2d_backward_bias(device, grad_out_addr, grad_bias_addr, out_shape) -> tuple:
    """grad_bias[oc] = sum of grad_out[:, oc, :, :]. `out_shape` is (N, OC, OH, OW). Returns (OC,)."""
    n, oc, oh, ow = (int(v) for v in out_shape)
    if oc == 0:
        return (oc,)
    # the reduce family splits a long reduction over many workgroups; one workgroup per channel
    # (conv's own reduce) left the device mostly idle for few channels (13% of an MNIST CNN step)
    reduce(device, "sum", address(grad_out_addr), address(grad_bias_addr), (n, oc, oh * ow), dims=(0, 2))
    return (oc,)


def conv2d_backward(device, grad_out_addr, x_addr, w_addr, grad_in_addr, grad_w_addr, grad_bias_addr, x_shape,
                    w_shape, stride=1, padding=0, dilation=1, groups=1, params=None):
    """All three gradients; any address may be None to skip that gradient."""
    out_shape = conv2d_output_shape(x_shape, w_shape, stride, padding, dilation, groups)
    if grad_in_addr:
        conv2d_backward_input(device, grad_out_addr, w_addr, grad_in_addr, x_shape, w_shape, stride, padding,
                              dilation, groups, params)
    if grad_w_addr:
        conv2d_backward_weight(device, grad_out_addr, x_addr, grad_w_addr, x_shape, w_shape, stride, padding,
                               dilation, groups, params)
    if grad_bias_addr:
        conv2d_backward_bias(device, grad_out_addr, grad_bias_addr, out_shape)


def check_coopmat(device) -> bool:
    """The three directions of a float16 conv on cooperative matrices (conv_coopmat.py), with ragged tiles,
    groups, stride 2 (several grad-input phases), a bias and split-K partials, against numpy in float64; a
    wrong result turns the route off with a warning."""
    import numpy as np  # lazy: numpy only for this one-time check: importing the kernels loads no numpy

    rng = np.random.default_rng(5)
    # every GEMM side at least conv2d_coopmat.json's min_size, so all three directions take the route
    xs, ws, geo = (2, 36, 9, 11), (40, 18, 3, 3), dict(stride=2, padding=1, groups=2)
    x, w, grad = (rng.standard_normal(s).astype(np.float16) for s in (xs, ws, (2, 40, 5, 6)))
    bias = rng.standard_normal(40).astype(np.float16)
    ref_gi, ref_gw = reference_conv2d_backward(grad, x, w, **geo)
    want = {"out": reference_conv2d(x, w, bias, **geo), "grad_in": ref_gi, "grad_w": ref_gw}
    bufs = {name: device.upload(a) for name, a in (("x", x), ("w", w), ("grad", grad), ("bias", bias))}
    bufs.update({name: device.allocator.alloc(2 * want[name].size) for name in want})
    try:
        conv2d_forward(device, bufs["x"], bufs["w"], bufs["bias"], bufs["out"], xs, ws, **geo, dtype="float16")
        conv2d_backward_input(device, bufs["grad"], bufs["w"], bufs["grad_in"], xs, ws, **geo, dtype="float16")
        conv2d_backward_weight(device, bufs["grad"], bufs["x"], bufs["grad_w"], xs, ws, **geo, split_k=2,
                               dtype="float16")
        got = {name: device.download(bufs[name], np.float16, want[name].shape).astype(np.float64) for name in want}
    finally:
        device.synchronize()
        for buf in bufs.values():
            buf.free()
    return agrees(device, "conv2d", got, want, 5e-3, "conv2d.comp's fp32-arithmetic kernels")


# ------------------------------------------------------------------ host reference (numpy, float64)
def _taps(xp, g, kh, kw):
    """The input pixels tap (kh, kw) reads for every output pixel: a view of padded x."""
    h0, w0 = kh * g["dh"], kw * g["dw"]
    return xp[:, :, h0:h0 + g["sh"] * (g["oh"] - 1) + 1:g["sh"], w0:w0 + g["sw"] * (g["ow"] - 1) + 1:g["sw"]]


def reference_conv2d(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """conv2d in numpy (float64), for checks without torch."""
    import numpy as np  # lazy: numpy only for the host reference: importing the kernels loads no numpy

    g, (n, oc, oh, ow) = geometry(x.shape, w.shape, stride, padding, dilation, groups)
    G, icg, ocg = groups, g["ic"] // groups, oc // groups
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (g["ph"],) * 2, (g["pw"],) * 2))
    w64 = np.asarray(w, np.float64).reshape(G, ocg, icg, g["kh"], g["kw"])
    out = np.zeros((n, G, ocg, oh, ow))
    for kh in range(g["kh"]):
        for kw in range(g["kw"]):
            xs = _taps(xp, g, kh, kw).reshape(n, G, icg, oh, ow)
            out += np.einsum("ngchw,goc->ngohw", xs, w64[..., kh, kw], optimize=True)
    out = out.reshape(n, oc, oh, ow)
    if bias is not None:
        out += np.asarray(bias, np.float64)[None, :, None, None]
    return out


def reference_conv2d_backward(grad_out, x, w, stride=1, padding=0, dilation=1, groups=1):
    """(grad_input, grad_weight) of conv2d in numpy (float64)."""
    import numpy as np  # lazy: numpy only for the host reference: importing the kernels loads no numpy

    g, (n, oc, oh, ow) = geometry(x.shape, w.shape, stride, padding, dilation, groups)
    G, icg, ocg = groups, g["ic"] // groups, oc // groups
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (g["ph"],) * 2, (g["pw"],) * 2))
    gip = np.zeros_like(xp)
    w64 = np.asarray(w, np.float64).reshape(G, ocg, icg, g["kh"], g["kw"])
    go = np.asarray(grad_out, np.float64).reshape(n, G, ocg, oh, ow)
    gw = np.zeros_like(w64)
    for kh in range(g["kh"]):
        for kw in range(g["kw"]):
            xs = _taps(xp, g, kh, kw).reshape(n, G, icg, oh, ow)
            gw[..., kh, kw] = np.einsum("ngohw,ngchw->goc", go, xs, optimize=True)
            _taps(gip, g, kh, kw)[...] += np.einsum("ngohw,goc->ngchw", go, w64[..., kh, kw],
                                                    optimize=True).reshape(n, g["ic"], oh, ow)
    gi = gip[:, :, g["ph"]:g["ph"] + g["h"], g["pw"]:g["pw"] + g["w"]]
    return gi, gw.reshape(w.shape)
