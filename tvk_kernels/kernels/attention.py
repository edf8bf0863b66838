"""Fused scaled-dot-product attention, forward and backward (templates/attention.comp).

    attention_forward(device, q, k, v, o, lse, shape, ...)
    attention_backward(device, q, k, v, o, d_o, lse, dq, dk, dv, shape, ...)

`shape` is (batch, heads_q, heads_kv, lq, lk, d): q, o, d_o, dq are [batch, heads_q, lq, d],
k, v, dk, dv [batch, heads_kv, lk, d], in one storage dtype (float32 or float16), contiguous, or
as `strides` gives: per tensor (q, k, v, o, d_o, dq, dk, dv; None: contiguous) its (batch, head,
row) strides in elements, unit along d, so a view (heads split off a [batch, l, heads * d] tensor,
q/k/v sliced from one projection) is read and written in place. lse is float32 [batch, heads_q,
lq]. heads_q must be a multiple of heads_kv (grouped heads).
mask: None or (address, "bool" | "float", 4 strides over [batch, heads_q, lq, lk] in elements,
0 where broadcast); an additive mask has the storage dtype. Dropout: p > 0 with `rng` =
(seed, offset, seed_buffer) and `rng_out` = (seed address, offset address), two int64s the
forward writes the seed and offset it drew with to; the backward takes them as one 16-byte
{seed, offset} buffer (`rng_state`), so it regenerates the forward's mask.
The backward writes the grad of the scores (float32 [batch, heads_q, lq, lk]) to `ds` when
given (the additive mask's gradient).

Packed fp16 (the template's PACKED: dot products on f16vec2 FMAs, shared tiles of fp16 pairs, fp32
accumulation) is the route for float16 on a GPU without cooperative matrices, as RDNA1 runs it: on the
H200 with cooperative matrices off it took 0.72x the fp32-arithmetic forward's time and 0.59x the
backward's (design note 48); TVK_PACKED_ATTENTION=0 keeps fp32 arithmetic.
"""
from __future__ import annotations

import struct

from ..env_flags import env_flag
from ..errors import InvalidConfigError
from . import attention_coopmat, dtypes, matmul_coopmat, matmul_packed_f16
from .kept_calls import kept_call
from .launch import Family, address, family, grid_1d, record_shape, recording

_PUSH = struct.Struct("<10Q5I2f4xQ")  # the geometry buffer's address 8-byte aligned, as std430 puts it
_DT = dtypes.codes("float32", "float16")
_MASK = {None: 0, "bool": 1, "float": 2}
_M64 = (1 << 64) - 1
MAX_HEAD = 128


def head_pad(d: int) -> int:
    """The compiled head dim: d rounded up to a multiple of 16 (shared tiles are zero past d)."""
    return max(16, -(-d // 16) * 16)


class Attention(Family):
    family = "attention"
    template = "attention.comp"

    def check_config(self, params: dict) -> dict:
        for tpr in ("TPR", "BTPR"):
            if 16 % params[tpr]:
                raise InvalidConfigError(f"attention: {tpr}={params[tpr]} must divide 16 (the head-dim padding)")
        return params

    def packed(self, dtype: str, head: int, tpr: int) -> bool:
        """Whether a kernel of this storage, compiled head dim and threads per row runs on packed fp16
        arithmetic (module docstring): TVK_PACKED_ATTENTION not 0, float16, a head dim of whole word pairs per
        thread, no cooperative matrices on the device (TVK_COOPMAT=0 counts as none: the H200's stand-in for
        RDNA1), and matmul's packed-fp16 kernel verified here (a GPU with shaderFloat16, TVK_PACKED_F16 not 0)."""
        if dtype != "float16" or head % (2 * tpr) or not env_flag("TVK_PACKED_ATTENTION", default=True):
            return False
        if self.device.facts.features.get("cooperative_matrix") and env_flag("TVK_COOPMAT", default=True):
            return False
        return matmul_packed_f16.verified(self.device) is not None


def shared_bytes(kernel: int, br: int, bc: int, head: int, packed: bool = False) -> int:
    """Shared memory of one kernel of the template (forward 0, dQ 2, dK/dV 3); packed: tiles of fp16 pairs."""
    stride = (head // 2 if packed else head) + 1  # 4-byte words per tile row, padded by one (bank conflicts)
    if kernel == 0:
        return ((br + bc) * stride + br * bc) * 4
    return (2 * (br + bc) * stride + (1 if kernel == 2 else 2) * br * bc) * 4


def threads_per_row(kernel: int, params: dict) -> int:
    """TPR of the forward's kernels (0, 1), BTPR of the backward's (2, 3)."""
    return params["TPR"] if kernel in (0, 1) else params["BTPR"]


def kernel_defines(kernel: int, params: dict, head: int, dtype: str = "float32", mask=None, causal=False,
                   dropout=False, seed_buf=False, packed: bool = False) -> tuple[dict, int, int]:
    """(defines, local size, shared bytes) of one kernel of the family; packed: on packed fp16 arithmetic
    (Attention.packed decides; the row sums of kernel 1 have no tiles and ignore it)."""
    fwd = kernel in (0, 1)
    br, bc, tpr = (params["BR"], params["BC"], params["TPR"]) if fwd else (params["BBR"], params["BBC"], params["BTPR"])
    defines = {"KERNEL": kernel, "DT": _DT[dtype], "HEAD": head, "BR": br, "BC": bc, "TPR": tpr,
               "MASK": _MASK[mask], "CAUSAL": int(bool(causal)), "DROPOUT": int(bool(dropout)),
               "SEED_BUF": int(bool(seed_buf))}
    if kernel == 1:
        return defines, br * tpr, 0
    if packed:
        defines["PACKED"] = 1  # absent otherwise: the fp32-arithmetic modules stay as they were
    return defines, br * tpr, shared_bytes(kernel, br, bc, head, packed)


def _check(device, shape, dtype):
    b, hq, hkv, lq, lk, d = (int(x) for x in shape)
    if dtype not in _DT:
        raise TypeError(f"attention supports float32 and float16 storage, not {dtype}")
    if dtype == "float16" and not device.facts.features.get("storage_16bit"):
        raise TypeError(f"{device.facts.name} lacks 16-bit storage for float16 tensors")
    if not 1 <= d <= MAX_HEAD:
        raise ValueError(f"attention: head dim {d} is outside 1..{MAX_HEAD}")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"attention: {hq} query heads are not a multiple of {hkv} key/value heads")
    if b > 65535 or hq > 65535 or -(-max(lq, lk) // 8) > device.facts.max_workgroup_count[0]:
        raise ValueError(f"attention: batch {b}, heads {hq} or length {max(lq, lk)} is over the grid limits")
    return b, hq, hkv, lq, lk, d


def fits(device, batch: int, heads: int, length: int, head: int) -> bool:
    """Whether the fused kernels take this call on this device: its grid within the device's
    workgroup counts, and parameters whose shared memory fits (a 16 KiB device has none for
    head dims near 128). Where not, the caller runs torch's math decomposition."""
    count = device.facts.max_workgroup_count
    if batch > count[2] or heads > count[1] or -(-length // 8) > count[0]:
        return False
    try:
        family(device, Attention).resolve({"batch": batch, "heads": heads, "lq": length, "lk": length, "head": head})
    except InvalidConfigError:
        return False
    return True


_GEOMETRY: dict = {}  # (device, strides) -> its uploaded geometry buffer, held for the process: kept
# calls (kept_calls.py) replay its address; distinct geometries are few (one per layout and length)
_SLOTS = ("q", "k", "v", "o", "d_o", "dq", "dk", "dv")


def _geometry(device, shape, mask_strides, strides) -> int:
    """The address of the geometry buffer (templates/attention.comp, GeoBuf): the mask's 4 strides,
    then (batch, head, row) strides per tensor slot."""
    b, hq, hkv, lq, lk, d = shape
    given = tuple(strides or ()) + (None,) * (len(_SLOTS) - len(strides or ()))
    words = list(mask_strides)
    for slot, st in zip(_SLOTS, given):
        heads, length = (hkv, lk) if slot in ("k", "v", "dk", "dv") else (hq, lq)
        if st is None:
            st = (heads * length * d, length * d, d)
        st = tuple(int(x) for x in st)
        reach = d + (b - 1) * st[0] + (heads - 1) * st[1] + (length - 1) * st[2]
        if min(st) < 0 or reach > 1 << 32:
            raise ValueError(f"attention: {slot} strides {st} are negative or reach past 2**32 elements")
        words.extend(st)
    key = (id(device), tuple(words))
    buf = _GEOMETRY.get(key)
    if buf is None:
        import numpy as np  # lazy: numpy only to upload a new geometry, as elementwise's meta buffers

        buf = _GEOMETRY[key] = device.upload(np.asarray(words, dtype=np.uint32))
    return buf.address


def _mask_fields(mask):
    if mask is None:
        return 0, None, (0, 0, 0, 0)
    m_addr, kind, strides = mask
    return address(m_addr), kind, tuple(int(s) for s in strides)


def _check_dropout(p, b, hq, lq, lk):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability must be in [0, 1], got {p}")
    if p > 0 and b * hq * lq * lk >= 1 << 32:
        raise ValueError("attention dropout numbers scores with 32 bits: batch * heads * lq * lk must be under 2**32")


@kept_call("q", "k", "v", "o", "lse")
def attention_forward(device, q, k, v, o, lse, shape, *, dtype="float32", scale: float, mask=None,
                      causal: bool = False, dropout_p: float = 0.0, rng=(0, 0, None), rng_out=None,
                      strides=None, params: dict | None = None):
    """o = softmax(q k^T * scale + mask) v (dropout on the probabilities), lse = the rows' logsumexp."""
    b, hq, hkv, lq, lk, d = _check(device, shape, dtype)
    if b * hq * lq == 0:
        return
    _check_dropout(dropout_p, b, hq, lq, lk)
    fam = family(device, Attention)
    # AttentionTarget runs forward and backward, one head count for q and k/v, no mask: its bucket is the head dim
    if recording():
        record_shape(fam.family, {"batch": b, "heads": hq, "lq": lq, "lk": lk, "head": d}, dtype=dtype,
                     direction="forward")
    prm = fam.resolve({"head": d}, params)
    m_addr, m_kind, ms = _mask_fields(mask)
    dropout = dropout_p > 0
    seed, offset, seed_buffer = rng
    if seed_buffer is not None:
        seed = address(seed_buffer)
    head = head_pad(d)
    seed_out, offset_out = map(address, rng_out if rng_out is not None else (0, 0))
    if dropout and not (seed_out and offset_out):
        raise ValueError("attention dropout needs rng_out: where the forward writes its seed and offset")
    q, k, v, o, lse = map(address, (q, k, v, o, lse))
    coop = attention_coopmat.route(device, dtype, check_coopmat) if params is None else None
    if coop:
        cfam, emulate = coop
        vec = attention_coopmat.vec_width(d, (q, k, v), strides)
        pipe, rows = cfam.pipeline(0, cfam.resolve({"head": d}), head, m_kind, causal, dropout,
                                   seed_buffer is not None, vec, emulate)
    else:
        defines, wg, shared = kernel_defines(0, prm, head, dtype, m_kind, causal, dropout, seed_buffer is not None,
                                             fam.packed(dtype, head, threads_per_row(0, prm)))
        pipe, rows = fam.variant(defines, wg, _PUSH.size, shared_bytes=shared), defines["BR"]
    geo = _geometry(device, (b, hq, hkv, lq, lk, d), ms, strides)
    push = _PUSH.pack(q, k, v, o, lse, m_addr, int(seed) & _M64, seed_out, int(offset) & _M64, offset_out,
                      lq, lk, d, hq, hq // hkv, float(scale), float(dropout_p), geo)
    device.stream.dispatch(pipe, (-(-lq // rows), hq, b), push, "attention")


@kept_call("q", "k", "v", "o", "d_o", "lse", "dq", "dk", "dv", "rng_state", "ds", "delta")
def attention_backward(device, q, k, v, o, d_o, lse, dq, dk, dv, shape, *, dtype="float32", scale: float,
                       mask=None, causal: bool = False, dropout_p: float = 0.0, rng_state=None, ds=None,
                       delta=None, strides=None, params: dict | None = None):
    """dq, dk, dv from d_o and the forward's o and lse. `delta` is a float32 scratch buffer of
    batch * heads_q * lq floats; `rng_state` the forward's rng_out (dropout only)."""
    b, hq, hkv, lq, lk, d = _check(device, shape, dtype)
    _check_dropout(dropout_p, b, hq, lq, lk)
    if b * hq * lq * lk == 0:
        return
    fam = family(device, Attention)
    if recording():
        record_shape(fam.family, {"batch": b, "heads": hq, "lq": lq, "lk": lk, "head": d}, dtype=dtype,
                     direction="backward")
    prm = fam.resolve({"head": d}, params)
    head = head_pad(d)
    m_addr, m_kind, ms = _mask_fields(mask)
    dropout = dropout_p > 0
    rows = b * hq * lq
    geo = _geometry(device, (b, hq, hkv, lq, lk, d), ms, strides)
    common = (d, hq, hq // hkv, float(scale), float(dropout_p), geo)
    q, k, v, o, d_o, lse, dq, dk, dv, delta, ds, rng_state = map(
        address, (q, k, v, o, d_o, lse, dq, dk, dv, delta, ds, rng_state))

    defines, wg, _ = kernel_defines(1, prm, head, dtype)
    pre = fam.variant(defines, wg, _PUSH.size)
    device.stream.dispatch(pre, grid_1d(-(-rows // wg), device.facts.max_workgroup_count[0]),
                           _PUSH.pack(0, 0, 0, o, 0, 0, 0, d_o, delta, 0, rows, lq, *common), "attention_backward_delta")
    coop = attention_coopmat.route(device, dtype, check_coopmat, backward=True) if params is None else None
    if coop:
        cfam, emulate = coop
        cprm = cfam.resolve({"head": d})
        vec = attention_coopmat.vec_width(d, (q, k, v, d_o), strides)
        dq_pipe, dq_rows = cfam.pipeline(2, cprm, head, m_kind, causal, dropout, False, vec, emulate)
        dkv_pipe, dkv_rows = cfam.pipeline(3, cprm, head, m_kind, causal, dropout, False, vec, emulate)
        dkv_splits = cfam.splits(3, cprm, head)  # workgroups per key block along the head dim
    else:
        dkv_splits = 1
        packed = fam.packed(dtype, head, threads_per_row(2, prm))
        defines, wg, shared = kernel_defines(2, prm, head, dtype, m_kind, causal, dropout, packed=packed)
        dq_pipe, dq_rows = fam.variant(defines, wg, _PUSH.size, shared_bytes=shared), defines["BR"]
        defines, wg, shared = kernel_defines(3, prm, head, dtype, m_kind, causal, dropout, packed=packed)
        dkv_pipe, dkv_rows = fam.variant(defines, wg, _PUSH.size, shared_bytes=shared), defines["BR"]
    device.stream.dispatch(dq_pipe, (-(-lq // dq_rows), hq, b),
                           _PUSH.pack(q, k, v, d_o, lse, m_addr, rng_state, dq, delta, ds, lq, lk, *common),
                           "attention_backward_dq")
    device.stream.dispatch(dkv_pipe, (-(-lk // dkv_rows) * dkv_splits, hkv, b),
                           _PUSH.pack(q, k, v, d_o, lse, m_addr, rng_state, dk, delta, dv, lq, lk, *common),
                           "attention_backward_dkv")


def check_coopmat(device) -> bool:
    """Attention forward and backward on the cooperative-matrix template, with odd lengths, a padded head dim,
    grouped heads and causal masking, against numpy in float64; a wrong result disables the route with a warning."""
    import numpy as np  # lazy: numpy only for this one-time check, as elementwise's meta buffers

    rng = np.random.default_rng(11)
    b, hq, hkv, lq, lk, d = 1, 4, 2, 37, 53, 40
    scale = d ** -0.5
    q = rng.standard_normal((b, hq, lq, d)).astype(np.float16)
    k, v = (rng.standard_normal((b, hkv, lk, d)).astype(np.float16) for _ in range(2))
    grad = rng.standard_normal((b, hq, lq, d)).astype(np.float16)
    # float64 reference, keys and values repeated over each group's query heads; causal as torch (top-left)
    kk, vv = (np.repeat(x.astype(np.float64), hq // hkv, axis=1) for x in (k, v))
    s = q.astype(np.float64) @ kk.transpose(0, 1, 3, 2) * scale
    s = np.where(np.tril(np.ones((lq, lk), bool)), s, -np.inf)
    pr = np.exp(s - s.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    out = pr @ vv
    g = grad.astype(np.float64)
    dp = g @ vv.transpose(0, 1, 3, 2)
    ds = pr * (dp - (dp * pr).sum(-1, keepdims=True))
    want = {"o": out, "dq": ds @ kk * scale,
            "dk": (ds.transpose(0, 1, 3, 2) @ q.astype(np.float64) * scale).reshape(b, hkv, -1, lk, d).sum(2),
            "dv": (pr.transpose(0, 1, 3, 2) @ g).reshape(b, hkv, -1, lk, d).sum(2)}
    bufs = {name: device.upload(x) for name, x in (("q", q), ("k", k), ("v", v), ("do", grad))}
    sizes = {"o": q.nbytes, "lse": b * hq * lq * 4, "dq": q.nbytes, "dk": k.nbytes, "dv": v.nbytes,
             "delta": b * hq * lq * 4}
    bufs.update({name: device.allocator.alloc(n) for name, n in sizes.items()})
    try:
        shape = (b, hq, hkv, lq, lk, d)
        attention_forward(device, bufs["q"], bufs["k"], bufs["v"], bufs["o"], bufs["lse"], shape,
                                    dtype="float16", scale=scale, causal=True)
        attention_backward(device, bufs["q"], bufs["k"], bufs["v"], bufs["o"], bufs["do"], bufs["lse"],
                                     bufs["dq"], bufs["dk"], bufs["dv"], shape, dtype="float16", scale=scale,
                                     causal=True, delta=bufs["delta"])
        got = {name: device.download(bufs[name], np.float16, want[name].shape).astype(np.float64) for name in want}
    finally:
        device.synchronize()
        for buf in bufs.values():
            buf.free()
    return matmul_coopmat.agrees(device, "attention", got, want, 2e-2, "attention.comp's kernels")
