"""Benchmark mode, TorchVK's `torch.backends.cudnn.benchmark`: per exact shape, the fastest config.

Off by default; on with TVK_BENCHMARK=1 or `torchvk.backends.benchmark = True`. The first time a
family launches an exact shape (the family's key: shape, layout, dtype, ...), it times on the
call's own buffers a few configs: the one the config lookup picks, the tuned and default configs
of the family's other buckets (the winners the tuner found for other shapes), at most
TVK_BENCHMARK_CANDIDATES (6) in all. The fastest is kept for the shape, in memory and in a
per-device file of the on-disk cache, so later calls and later processes reuse it. An entry is
keyed by the template's checksum: after a template change it is not found and the shape is
timed again. `stats()` reports the cost: shapes decided, seconds spent deciding them, reuses.

A family offers a shape only when running its kernels again is harmless (the output is
overwritten, not accumulated into, and aliases no input).
"""
from __future__ import annotations

import hashlib
import json
import os
import time

from .config import default_params, device_key_name
from .env_flags import env_flag
from .errors import InvalidConfigError
from .paths import cache_dir
from .runtime import cache_file
from .search_space import search_space

def _from_environment() -> bool:
    return env_flag("TVK_BENCHMARK")


_enabled = _from_environment()  # read once: enabled() is on every matmul's host path
_stats = {"decided": 0, "seconds": 0.0, "reused_from_disk": 0}


def enabled() -> bool:
    return _enabled


def set_enabled(on: bool | None):
    """True or False; None goes back to TVK_BENCHMARK."""
    global _enabled
    if on is not None and not isinstance(on, bool):  # torch.backends.cudnn.benchmark's check and message
        raise RuntimeError(f"torchvk.backends.benchmark expects a bool, but got {type(on).__name__}")
    _enabled = _from_environment() if on is None else on


def stats() -> dict:
    """Shapes decided in this process, seconds spent timing them (compiles included), and
    shapes whose winner came from the on-disk cache."""
    return dict(_stats)


def _path(fam, key: str):
    facts = fam.device.facts
    name = hashlib.sha256(key.encode()).hexdigest()[:32]
    return cache_dir() / "benchmark" / f"{device_key_name(facts)}-{facts.driver_version}" / fam.family / f"{name}.json"


def _entry_key(fam, key: tuple) -> str:
    return f"benchmark v1|{fam.family}|{fam.checksum}|{key!r}"


def _candidates(fam, first: dict) -> list[dict]:
    """The lookup's config first, then the tuned and default configs of the family's buckets."""
    space = search_space(fam.family)
    names = list(space.get("params", {}))
    buckets = [*space.get("buckets", {}), "*"]
    seen, out = set(), []
    for params in (first, *(fam.params(b)[0] for b in buckets),
                   *(default_params(fam.family, fam.device.facts, b) for b in buckets)):
        sig = tuple(params.get(n) for n in names)
        if sig not in seen:
            seen.add(sig)
            out.append({n: params[n] for n in names if n in params})
    return out[:int(os.environ.get("TVK_BENCHMARK_CANDIDATES", "6"))]


def _time(device, run, params, repeats: int) -> float:
    stream = device.stream
    run(params)  # warm: the pipeline is built, caches are filled
    if stream.timestamps:
        with stream.profiling(exclusive=True) as records:
            for _ in range(repeats):
                run(params)
        return sum(seconds for _, seconds in records) / repeats
    device.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        run(params)
    device.synchronize()
    return (time.perf_counter() - t0) / repeats


def best(fam, key: tuple, shape: dict, run) -> dict:
    """The fastest config for this exact key: from the on-disk cache, else timed now and stored.
    `run(params)` launches the family's kernels for the call with those parameters."""
    entry_key = _entry_key(fam, key)
    path = _path(fam, entry_key)
    bucket = fam.bucket(shape)
    blob = cache_file.read(path, entry_key)
    if blob is not None:
        try:
            params = fam.resolve(bucket, json.loads(blob)["params"])
            _stats["reused_from_disk"] += 1
            return params
        except (ValueError, KeyError, TypeError, InvalidConfigError):
            cache_file.discard(path, "not a usable benchmark entry")
    t0 = time.perf_counter()
    first = fam.resolve(shape)
    candidates = []
    for params in _candidates(fam, first):
        try:
            candidates.append(fam.resolve(bucket, params))
        except InvalidConfigError:  # a config of another bucket this shape or device cannot run
            continue
    device = fam.device
    with device.pipelines.prefetching():  # compile every candidate at once, in parallel
        with device.stream.dry_run():
            for params in candidates:
                run(params)
    times = [_time(device, run, params, 3) for params in candidates]
    winner = candidates[min(range(len(times)), key=times.__getitem__)]
    spent = time.perf_counter() - t0
    _stats["decided"] += 1
    _stats["seconds"] += spent
    names = search_space(fam.family).get("params", {})
    record = {"family": fam.family, "key": repr(key), "params": {k: winner[k] for k in names if k in winner},
              "candidates": len(candidates), "seconds": times, "decide_s": spent}
    cache_file.store(path, entry_key, json.dumps(record).encode())  # a cache that cannot be written: this process only
    return winner
