"""One checked file of the on-disk cache (a SPIR-V module, the driver's pipeline cache).

A cache folder outlives crashes, full disks and hand edits, and several processes share it,
so no entry is trusted blindly. Each file is a header (a format tag, the hash of the key it
was written for, the payload's size and hash) and the payload. `read` checks all of them,
plus the caller's own check of the payload; a bad entry is deleted with one warning naming
the file, and the caller rebuilds it. `write` is atomic (a temporary file in the same
folder, fsync, os.replace), so a reader never sees half a file.

The runtime's caches `store` instead of `write`: a cache folder that cannot be written (read-only,
under a file, full) gets one warning naming it, and the process goes on with what it keeps in
memory (compiled modules, the driver's pipeline cache, benchmark winners); entries already in
the folder are still read.
"""
from __future__ import annotations

import hashlib
import os
import secrets
import struct
import threading
import warnings
from pathlib import Path
from typing import Callable

from ..paths import cache_dir

FORMAT = b"TVKCACH1"
_HEADER = struct.Struct("<8s32sQ32s")  # format tag, sha256(key), payload size, sha256(payload)


class CacheWarning(UserWarning):
    """A cache file was bad (corrupt, truncated, written for another key) and is rebuilt."""


class CacheNotWritableWarning(UserWarning):
    """The cache folder cannot be written: what this process builds is kept in memory only."""


_unwritable: set[Path] = set()  # cache folders a write failed in: warned about once, not tried again
_unwritable_lock = threading.Lock()  # pipeline build threads store at once


def read(path: Path, key: str, check_payload: Callable[[bytes], str | None] | None = None) -> bytes | None:
    """The payload stored for `key`, or None when there is none or it is bad (then the file
    is deleted after a warning). check_payload returns what is wrong with a payload, or None."""
    try:
        blob = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError, PermissionError):  # no entry this process can use
        return None
    except OSError as e:
        discard(path, f"unreadable ({e})")
        return None
    payload = blob[_HEADER.size:]
    problem = _problem(blob, key, payload)
    if problem is None and check_payload is not None:
        problem = check_payload(payload)
    if problem is not None:
        discard(path, problem)
        return None
    return payload


def write(path: Path, key: str, payload: bytes) -> None:
    """Store payload for key, atomically: concurrent readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = _HEADER.pack(FORMAT, _sha256(key.encode()), len(payload), _sha256(payload))
    # unique per process, thread and call, so concurrent writers never share a temporary file
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}-{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(header + payload)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the name points at it (a crash leaves no torn file)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def store(path: Path, key: str, payload: bytes) -> None:
    """write() into the cache folder; when the folder cannot be written, one warning (per folder)
    and nothing more: the entry is only missing in later processes, which build it again."""
    root = cache_dir()
    if root in _unwritable:
        return
    try:
        write(path, key, payload)
    except OSError as e:
        with _unwritable_lock:
            first = root not in _unwritable
            _unwritable.add(root)
        if first:
            why = f"{e.strerror or e}: {e.filename}" if e.filename else e.strerror or e  # a full disk names no file
            warnings.warn(f"TorchVK cannot write its cache folder {root} ({why}); "
                          "compiled kernels are kept in memory for this process only and built again in the next. "
                          "Set TVK_CACHE_DIR to a writable folder to keep them.", CacheNotWritableWarning,
                          stacklevel=3)


def discard(path: Path, problem: str) -> None:
    """Delete a bad cache file, with one warning that names it."""
    warnings.warn(f"TorchVK cache file {path} is {problem}; deleted it, it will be rebuilt "
                  "(nothing to do, unless this keeps happening: then check the disk, or clear TVK_CACHE_DIR)",
                  CacheWarning, stacklevel=3)
    try:
        path.unlink(missing_ok=True)
    except OSError:  # a read-only cache: the entry is still ignored, just not deleted
        pass


def _problem(blob: bytes, key: str, payload: bytes) -> str | None:
    if len(blob) < _HEADER.size or not blob.startswith(FORMAT):
        return f"not a TorchVK cache entry ({len(blob)} bytes, no valid header)"
    _, key_hash, size, payload_hash = _HEADER.unpack_from(blob)
    if key_hash != _sha256(key.encode()):
        return "an entry written for another key (a renamed or copied file)"
    if len(payload) != size:
        return f"{'truncated' if len(payload) < size else 'longer than written'} ({len(payload)} of {size} payload bytes)"
    if payload_hash != _sha256(payload):
        return "corrupt (its content does not match its hash)"
    return None


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()
