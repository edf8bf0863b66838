"""2-D convolution (NCHW, float32): forward, grad wrt input, grad wrt weight, grad wrt bias.

All three directions are one implicit-GEMM template (templates/conv2d.comp, `DIR` 0/1/2)
with the tile shape as defines; grad_weight can split its long reduction (K = N*OH*OW)
over workgroups and sum the partials with templates/conv2d_reduce.comp, which also
computes grad_bias. Search space, constraints, buckets and defaults: tuning/conv2d.json.

Buffers are plain byte addresses (ints, or anything with `.address`); shapes are tuples.
Inputs must be contiguous NCHW / (OC, IC/groups, KH, KW).

The small helpers for search spaces (`space_limits`, `check_params`, `enumerate_space`)
are shared with pool.py.
"""
from __future__ import annotations

import itertools
import struct

from .launch import Family, family, grid_1d
from ..config import arch_family, params_for, search_space
from ..errors import InvalidConfigError

FAMILY = "conv2d"
DIRS = {"fwd": 0, "bwd_input": 1, "bwd_weight": 2}
_PUSH = struct.Struct("<4Q18I")  # a, b, c, bias; n ic h w; oc oh ow groups; kh kw sh sw; ph pw dh dw; kchunk flags
_RPUSH = struct.Struct("<2Q5I")  # src, dst; count A B sa si
_GEMM_KEYS = ("BM", "BN", "BK", "TM", "TN", "PAD", "WG")


# ------------------------------------------------------------------ search-space helpers
def _addr(x) -> int:
    if x is None:
        return 0
    return int(getattr(x, "address", x))


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(e) for e in v)
    if len(t) == 1:
        return (t[0], t[0])
    if len(t) != 2:
        raise ValueError(f"{name} must be an int or a pair, got {v!r}")
    return t


def space_limits(device) -> dict:
    """Device limits by the names the constraint expressions use."""
    f = device.facts
    return {"max_shared_memory": f.max_shared_memory, "max_workgroup_invocations": f.max_workgroup_invocations,
            "max_workgroup_size_x": f.max_workgroup_size[0], "subgroup_size": f.subgroup_size,
            "max_push_constants": f.max_push_constants}


def _eval(expr: str, names: dict):
    return eval(expr, {"__builtins__": {}, "min": min, "max": max}, names)  # our own JSON, no user input


def derived(space: dict, params: dict) -> dict:
    return {k: _eval(e, dict(params)) for k, e in space.get("derived", {}).items()}


def check_params(device, family_name: str, params: dict) -> dict:
    """Raise InvalidConfigError if `params` breaks a constraint of the family on `device`.
    Returns the derived values (shared_bytes, ...)."""
    space = search_space(family_name)
    missing = [k for k in space["params"] if k not in params]
    if missing:
        raise InvalidConfigError(f"{family_name}: parameter set lacks {missing}")
    bad = {k: v for k, v in params.items() if k in space["params"] and not isinstance(v, int)}
    if bad or any(v <= 0 for k, v in params.items() if k in space["params"] and k != "PAD") \
            or params.get("PAD", 0) < 0:
        raise InvalidConfigError(f"{family_name}: parameters must be positive ints, got {params}")
    names = dict(params)
    try:
        names.update(derived(space, params))
    except ZeroDivisionError:
        raise InvalidConfigError(f"{family_name}: parameters {params} divide by zero") from None
    names.update(space_limits(device))
    failed = [c for c in space.get("constraints", []) if not _eval(c, names)]
    if failed:
        raise InvalidConfigError(f"{family_name} parameters {params} do not fit {device.facts.name}: violates "
                                 + "; ".join(failed) + f" (limits {space_limits(device)})")
    return {k: names[k] for k in space.get("derived", {})}


def enumerate_space(device, family_name: str, keys=None, fixed: dict | None = None) -> list[dict]:
    """Every valid parameter set of the space (over `keys`, others fixed from `fixed`)."""
    space = search_space(family_name)
    keys = list(space["params"]) if keys is None else list(keys)
    fixed = dict(fixed or {})
    out = []
    for values in itertools.product(*(space["params"][k]["values"] for k in keys)):
        cand = dict(fixed)
        cand.update(zip(keys, values))
        try:
            check_params(device, family_name, cand)
        except InvalidConfigError:
            continue
        out.append(cand)
    return out


def pick_bucket(space: dict, names: dict) -> str:
    for name, expr in space["buckets"].items():
        if _eval(expr, names):
            return name
    return "*"


# ------------------------------------------------------------------ shapes
def conv2d_output_shape(x_shape, w_shape, stride=1, padding=0, dilation=1, groups=1) -> tuple:
    """(N, OC, OH, OW) of conv2d(x, w); raises ValueError on inconsistent shapes."""
    n, c, h, w = (int(v) for v in x_shape)
    oc, icg, kh, kw = (int(v) for v in w_shape)
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    if groups < 1 or c % groups or oc % groups:
        raise ValueError(f"groups={groups} must divide in_channels={c} and out_channels={oc}")
    if icg != c // groups:
        raise ValueError(f"weight {tuple(w_shape)} expects {icg * groups} input channels, input has {c}")
    if min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise ValueError("stride and dilation must be >= 1, padding >= 0")
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"input {tuple(x_shape)} is smaller than the dilated kernel {kh}x{kw} (padding {padding})")
    return (n, oc, oh, ow)


def _geometry(x_shape, w_shape, stride, padding, dilation, groups):
    out = conv2d_output_shape(x_shape, w_shape, stride, padding, dilation, groups)
    n, c, h, w = (int(v) for v in x_shape)
    oc, icg, kh, kw = (int(v) for v in w_shape)
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    return dict(n=n, ic=c, h=h, w=w, oc=oc, oh=out[2], ow=out[3], groups=int(groups), kh=kh, kw=kw,
                sh=sh, sw=sw, ph=ph, pw=pw, dh=dh, dw=dw), out


def gemm_dims(direction: str, g: dict) -> tuple[int, int, int]:
    icg, ocg = g["ic"] // g["groups"], g["oc"] // g["groups"]
    khw, hw, ohw = g["kh"] * g["kw"], g["h"] * g["w"], g["oh"] * g["ow"]
    if direction == "fwd":
        return g["n"] * ohw, ocg, icg * khw
    if direction == "bwd_input":
        return g["n"] * hw, icg, ocg * khw
    return ocg, icg * khw, g["n"] * ohw


# ------------------------------------------------------------------ the family
class Conv2d(Family):
    def __init__(self, device):
        super().__init__(device, FAMILY, "conv2d.comp")
        self.space = search_space(FAMILY)
        self._checked: dict = {}

    def params(self, bucket: str = "*") -> tuple[dict, str]:
        """Tuned params for the bucket, else the device-class default with the bucket's shape override."""
        p = self._params.get(bucket)
        if p is None:
            params, source = params_for(self.device, self.family, bucket, self.checksum)
            if source == "default":
                bd = self.space.get("bucket_defaults", {})
                for key in ("generic", self.device.facts.vendor.lower(), arch_family(self.device.facts)):
                    for shape, override in bd.get(key, {}).items():
                        if bucket.endswith(shape):
                            params.update(override)
            p = self._params[bucket] = (params, source)
        return p

    def resolve(self, bucket: str, explicit: dict | None) -> tuple[dict, dict]:
        """(params, derived) for a launch: an explicit candidate is merged over the bucket's params."""
        params = dict(self.params(bucket)[0])
        if explicit:
            params.update(explicit)
        key = tuple(sorted(params.items()))
        d = self._checked.get(key)
        if d is None:
            d = self._checked[key] = check_params(self.device, FAMILY, params)
        return params, d

    def gemm_pipeline(self, dir_id: int, params: dict, shared_bytes: int):
        key = ("gemm", dir_id) + tuple(params[k] for k in _GEMM_KEYS)

        def build():
            wg = params["WG"]
            self.device.pipelines.check_limits((wg, 1, 1), shared_bytes=shared_bytes, push_size=_PUSH.size)
            defines = {"DIR": dir_id, **{k: params[k] for k in _GEMM_KEYS}}
            return self.device.pipelines.get(self.template, defines, local_size=(wg, 1, 1), push_size=_PUSH.size)

        return self.pipeline(key, build)

    def reduce_pipeline(self, per_thread: bool, wg: int):
        if wg & (wg - 1):
            raise InvalidConfigError(f"conv2d REDUCE_WG={wg} must be a power of two")
        key = ("reduce", per_thread, wg)

        def build():
            self.device.pipelines.check_limits((wg, 1, 1), shared_bytes=0 if per_thread else 4 * wg,
                                               push_size=_RPUSH.size)
            return self.device.pipelines.get("conv2d_reduce.comp", {"PER_THREAD": int(per_thread)},
                                             local_size=(wg, 1, 1), push_size=_RPUSH.size)

        return self.pipeline(key, build)


def bucket_for(direction: str, M: int, N: int, K: int) -> str:
    return pick_bucket(search_space(FAMILY), {"dir": direction, "M": M, "N": N, "K": K})


def candidates(device, direction: str | None = None) -> list[dict]:
    """Every valid parameter set of tuning/conv2d.json on `device` (for the autotuner).
    Host-side split-K and reduce parameters vary only for direction 'bwd_weight' (or None);
    for other directions they are fixed at the device default."""
    space = search_space(FAMILY)
    base = dict(family(device, Conv2d).params("*")[0])
    keys = [k for k, v in space["params"].items()
            if direction is None or "directions" not in v or direction in v["directions"]]
    return enumerate_space(device, FAMILY, keys, fixed=base)


def _split_plan(params: dict, M: int, N: int, K: int, groups: int) -> tuple[int, int]:
    """(splits, kchunk) for grad_weight's K = N*OH*OW reduction."""
    bk = params["BK"]
    if K <= 0:
        return 1, max(bk, 1)
    tiles = -(-M // params["BM"]) * -(-N // params["BN"]) * groups
    want = max(1, -(-params["SPLIT_GROUPS"] // tiles))
    by_k = max(1, K // params["SPLIT_MIN_K"])
    splits = max(1, min(want, by_k, 1024))
    chunk = -(-K // splits)
    chunk = -(-chunk // bk) * bk
    return -(-K // chunk), chunk


def _push(a, b, c, bias, g, kchunk, flags):
    return _PUSH.pack(a, b, c, bias, g["n"], g["ic"], g["h"], g["w"], g["oc"], g["oh"], g["ow"], g["groups"],
                      g["kh"], g["kw"], g["sh"], g["sw"], g["ph"], g["pw"], g["dh"], g["dw"], kchunk, flags)


def _dispatch_gemm(device, fam, direction, g, a, b, c, bias, params, kchunk=None, splits=1, flags=0, label=""):
    M, N, K = gemm_dims(direction, g)
    bucket = bucket_for(direction, M, N, K)
    params, d = fam.resolve(bucket, params)
    pipe = fam.gemm_pipeline(DIRS[direction], params, d["shared_bytes"])
    tiles = -(-M // params["BM"]) * -(-N // params["BN"])
    gx, gy, _ = grid_1d(tiles, device.facts.max_workgroup_count[0])
    gz = g["groups"] * splits
    if gz > device.facts.max_workgroup_count[2]:
        raise InvalidConfigError(f"conv2d: groups*splits={gz} exceeds the device's z grid limit")
    push = _push(a, b, c, bias, g, K if kchunk is None else kchunk, flags)
    device.stream.dispatch(pipe, (gx, gy, gz), push, label or f"conv2d_{direction}")
    return params


def _reduce(device, fam, src, dst, count, A, B, sa, si, wg, label):
    per_thread = A * B <= 64
    pipe = fam.reduce_pipeline(per_thread, wg)
    groups = -(-count // wg) if per_thread else count
    gx, gy, _ = grid_1d(groups, device.facts.max_workgroup_count[0])
    device.stream.dispatch(pipe, (gx, gy, 1), _RPUSH.pack(src, dst, count, A, B, sa, si), label)


# ------------------------------------------------------------------ public API
def conv2d_forward(device, x_addr, w_addr, bias_addr, out_addr, x_shape, w_shape, stride=1, padding=0, dilation=1,
                   groups=1, params=None) -> tuple:
    """out = conv2d(x, w, bias); bias_addr may be None/0. Returns the output shape (N, OC, OH, OW)."""
    g, out_shape = _geometry(x_shape, w_shape, stride, padding, dilation, groups)
    if out_shape[0] * out_shape[1] == 0:
        return out_shape
    fam = family(device, Conv2d)
    bias = _addr(bias_addr)
    _dispatch_gemm(device, fam, "fwd", g, _addr(x_addr), _addr(w_addr), _addr(out_addr), bias, params,
                   flags=1 if bias else 0)
    return out_shape


def conv2d_backward_input(device, grad_out_addr, w_addr, grad_in_addr, x_shape, w_shape, stride=1, padding=0,
                          dilation=1, groups=1, params=None) -> tuple:
    """grad_in (shape x_shape) = d conv2d / d x applied to grad_out. Returns x_shape."""
    g, _ = _geometry(x_shape, w_shape, stride, padding, dilation, groups)
    x_shape = tuple(int(v) for v in x_shape)
    if x_shape[0] * x_shape[1] * x_shape[2] * x_shape[3] == 0:
        return x_shape
    fam = family(device, Conv2d)
    _dispatch_gemm(device, fam, "bwd_input", g, _addr(grad_out_addr), _addr(w_addr), _addr(grad_in_addr), 0, params)
    return x_shape


def conv2d_backward_weight(device, grad_out_addr, x_addr, grad_w_addr, x_shape, w_shape, stride=1, padding=0,
                           dilation=1, groups=1, params=None) -> tuple:
    """grad_w (shape w_shape) = d conv2d / d w applied to grad_out. Returns w_shape.
    Long reductions (K = N*OH*OW) are split over workgroups into a scratch buffer of partial
    sums, then summed (SPLIT_MIN_K / SPLIT_GROUPS in the parameters)."""
    g, _ = _geometry(x_shape, w_shape, stride, padding, dilation, groups)
    w_shape = tuple(int(v) for v in w_shape)
    numel = w_shape[0] * w_shape[1] * w_shape[2] * w_shape[3]
    if numel == 0:
        return w_shape
    fam = family(device, Conv2d)
    M, N, K = gemm_dims("bwd_weight", g)
    full, _ = fam.resolve(bucket_for("bwd_weight", M, N, K), params)
    splits, chunk = _split_plan(full, M, N, K, g["groups"])
    if splits == 1:
        _dispatch_gemm(device, fam, "bwd_weight", g, _addr(grad_out_addr), _addr(x_addr), _addr(grad_w_addr), 0,
                       params, kchunk=chunk, splits=1)
        return w_shape
    scratch = device.allocator.alloc(4 * numel * splits)
    _dispatch_gemm(device, fam, "bwd_weight", g, _addr(grad_out_addr), _addr(x_addr), scratch.address, 0,
                   params, kchunk=chunk, splits=splits)
    _reduce(device, fam, scratch.address, _addr(grad_w_addr), numel, splits, 1, numel, 1, full["REDUCE_WG"],
            "conv2d_splitk_sum")
    device.stream.keep_alive(scratch)
    return w_shape


def conv2d_backward_bias(device, grad_out_addr, grad_bias_addr, out_shape, params=None) -> tuple:
    """grad_bias[oc] = sum of grad_out[:, oc, :, :]. `out_shape` is (N, OC, OH, OW). Returns (OC,)."""
    n, oc, oh, ow = (int(v) for v in out_shape)
    if oc == 0:
        return (oc,)
    fam = family(device, Conv2d)
    full = dict(fam.params("*")[0])
    if params:
        full.update(params)
    wg = full["REDUCE_WG"]
    if wg > device.facts.max_workgroup_invocations or wg > device.facts.max_workgroup_size[0]:
        raise InvalidConfigError(f"conv2d REDUCE_WG={wg} exceeds the device's workgroup limits")
    _reduce(device, fam, _addr(grad_out_addr), _addr(grad_bias_addr), oc, n, oh * ow, oc * oh * ow, oh * ow, wg,
            "conv2d_grad_bias")
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
