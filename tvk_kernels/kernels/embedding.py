"""Embedding lookup and its deterministic backward (templates/embedding.comp).

Buffers are DeviceBuffers or plain device addresses (ints). Data is float32, indices int64.
The weight / grad_weight are [V, D] with row stride `weight_stride` (default D); grad_out and
out are contiguous [n, D].

Backward is a race-free scatter-add without float atomics: every (row, column) of grad_weight
is written by exactly one invocation, and the sum over repeated indices always runs in
increasing index position, in chunks of `chunk_length(n)` occurrences summed apart and then
added in order, so results are bitwise reproducible and identical between the two strategies:
  "scan"  n <= SCAN_MAX: one workgroup per position, the first position of each row sums the row.
  "sort"  otherwise: bitonic sort of (row, position) keys on the device, then a segmented sum whose
          chunks run in parallel (a row at every position, as BERT's token types, is not one
          invocation's walk over n positions), and a pass adding the chunk sums of long runs.
"""
from __future__ import annotations

import struct

from .launch import Family, address, family, grid_1d, positive, powers_of_two

_PUSH = struct.Struct("<QQQQQIIIIiIIII")
MODE_FWD, MODE_SCAN, MODE_KEYS, MODE_SORT, MODE_STEP, MODE_MERGE, MODE_SEGSUM, MODE_ZERO, MODE_RUNS = range(9)


class Embedding(Family):
    family = "embedding"
    template = "embedding.comp"

    def check_config(self, params: dict) -> dict:
        positive(self.family, params, "WG", "VEC", "ITEMS", "BWD_WG")
        return powers_of_two(self.family, params, "SORT_WG")  # bitonic sort

    def mode_variant(self, mode: int, wg: int, vec: int = 1, items: int = 1):
        """The template for one MODE, with its shared memory (the sort's blocks)."""
        shared = 16 * wg if mode in (MODE_SORT, MODE_MERGE) else 0
        return self.variant({"MODE": mode, "WG": wg, "VEC": vec, "ITEMS": items}, wg, _PUSH.size,
                            shared_bytes=shared)


def _push(a=0, idx=0, c=0, keys=0, parts=0, n=0, D=0, V=0, ws=0, pad=-1, k=0, j=0, N=0, chunk=1) -> bytes:
    return _PUSH.pack(a, idx, c, keys, parts, n, D, V, ws, pad, k, j, N, chunk)


def chunk_length(n: int) -> int:
    """Occurrences of a row summed apart in the backward: about sqrt(n) (a power of two, at least 32), so
    neither a chunk's sum nor the sum of a run's chunk sums is a long serial walk."""
    return max(32, 1 << max(0, (n - 1).bit_length() + 1) // 2)


def _max_x(device) -> int:
    return device.facts.max_workgroup_count[0]


def embedding_forward(device, weight, indices, out, n: int, V: int, D: int, *, weight_stride: int | None = None,
                      params: dict | None = None):
    """out[i, :] = weight[indices[i], :] for i < n (an index outside [0, V) gives a zero row)."""
    if n <= 0 or D <= 0:
        return
    fam = family(device, Embedding)
    ws = D if weight_stride is None else weight_stride
    params = fam.resolve({"n": n}, params)
    wa, ia, oa = address(weight), address(indices), address(out)
    vec = params["VEC"]
    while vec > 1 and (D % vec or ws % vec or (wa | oa) & (4 * vec - 1)):
        vec //= 2
    wg, items = params["WG"], params["ITEMS"]
    pipe = fam.mode_variant(MODE_FWD, wg, vec, items)
    per_group = wg * items
    groups = grid_1d((n * (D // vec) + per_group - 1) // per_group, _max_x(device))
    device.stream.dispatch(pipe, groups, _push(a=wa, idx=ia, c=oa, n=n, D=D, V=V, ws=ws), "embedding_fwd")


def embedding_zero(device, grad_weight, V: int, D: int, *, weight_stride: int | None = None, params: dict | None = None):
    """grad_weight[:V, :D] = 0."""
    fam = family(device, Embedding)
    wg = fam.resolve("small", params)["WG"]  # a fill: its WG is the small bucket's (no shape of its own)
    pipe = fam.mode_variant(MODE_ZERO, wg)
    groups = grid_1d((V * D + wg - 1) // wg, _max_x(device))
    ws = D if weight_stride is None else weight_stride
    device.stream.dispatch(pipe, groups, _push(c=address(grad_weight), V=V, D=D, ws=ws), "embedding_zero")


def embedding_backward(device, grad_out, indices, grad_weight, n: int, V: int, D: int, *,
                       padding_idx: int | None = None, accumulate: bool = False, weight_stride: int | None = None,
                       strategy: str | None = None, params: dict | None = None):
    """grad_weight[v, :] (+)= sum of grad_out[i, :] over i with indices[i] == v.

    accumulate=False zeroes grad_weight first. The padding_idx row (negative counts from the
    end, like torch) and indices outside [0, V) receive no gradient. strategy: "scan", "sort"
    or None (by n and the tuned SCAN_MAX)."""
    if V <= 0 or D <= 0:
        return
    fam = family(device, Embedding)
    config = fam.resolve({"n": n}, params)
    if strategy not in (None, "scan", "sort"):
        raise ValueError(f"strategy must be 'scan' or 'sort', not {strategy!r}")
    ws = D if weight_stride is None else weight_stride
    pad = -1
    if padding_idx is not None:
        pad = padding_idx + V if padding_idx < 0 else padding_idx
        if not 0 <= pad < V:
            raise ValueError(f"padding_idx {padding_idx} is outside the {V} rows")
    if not accumulate:
        embedding_zero(device, grad_weight, V, D, weight_stride=ws, params=params)  # its own bucket
    if n <= 0:
        return
    if strategy is None:
        strategy = "scan" if n <= config["SCAN_MAX"] else "sort"
    ga, ia, gwa = address(grad_out), address(indices), address(grad_weight)
    bwg = config["BWD_WG"]
    chunk = chunk_length(n)
    if strategy == "scan":
        pipe = fam.mode_variant(MODE_SCAN, bwg)
        device.stream.dispatch(pipe, grid_1d(n, _max_x(device)),
                               _push(a=ga, idx=ia, c=gwa, n=n, D=D, V=V, ws=ws, pad=pad, chunk=chunk),
                               "embedding_bwd_scan")
        return
    if n >= 1 << 31 or V >= (1 << 32) - 1:
        raise ValueError("the sort path needs n < 2^31 and V < 2^32 - 1")
    swg = config["SORT_WG"]
    B = 2 * swg
    N = max(B, 1 << (n - 1).bit_length())
    keys = device.allocator.alloc(8 * N)
    parts = device.allocator.alloc(4 * 2 * -(-n // chunk) * D)  # chunk sums of the runs longer than a chunk
    device.stream.keep_alive(keys)
    device.stream.keep_alive(parts)
    mx = _max_x(device)
    base = dict(a=ga, idx=ia, c=gwa, keys=keys.address, parts=parts.address, n=n, D=D, V=V, ws=ws, pad=pad, N=N,
                chunk=chunk)
    device.stream.dispatch(fam.mode_variant(MODE_KEYS, swg), grid_1d(N // swg, mx),
                           _push(**base), "embedding_bwd_keys")
    device.stream.dispatch(fam.mode_variant(MODE_SORT, swg), grid_1d(N // B, mx),
                           _push(**base), "embedding_bwd_sort")
    step = fam.mode_variant(MODE_STEP, swg)
    merge = fam.mode_variant(MODE_MERGE, swg)
    k = 2 * B
    while k <= N:
        j = k // 2
        while j >= B:
            device.stream.dispatch(step, grid_1d(N // 2 // swg, mx), _push(**base, k=k, j=j), "embedding_bwd_sort")
            j //= 2
        device.stream.dispatch(merge, grid_1d(N // B, mx), _push(**base, k=k), "embedding_bwd_sort")
        k *= 2
    device.stream.dispatch(fam.mode_variant(MODE_SEGSUM, bwg), grid_1d(n, mx),
                           _push(**base), "embedding_bwd_segsum")
    device.stream.dispatch(fam.mode_variant(MODE_RUNS, bwg), grid_1d(n, mx), _push(**base), "embedding_bwd_runs")
