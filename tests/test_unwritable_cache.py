"""A cache folder that cannot be written (TVK_CACHE_DIR read-only, under a file, or a file itself)
costs only rebuild time: kernels still compile and run, results match the CPU, and the process
gets exactly one CacheNotWritableWarning naming the folder and what to set. Each run is a fresh
process that compiles every module (TVK_USE_SHIPPED_KERNELS=0) with benchmark mode on, so the
SPIR-V cache, the benchmark cache and the driver's pipeline cache are all written to.

Root ignores mode bits, so as root the read-only cases run without CAP_DAC_OVERRIDE (dropped
from the capability bounding set before the interpreter is exec'd again), which makes the
kernel check mode bits for root too; the venv stays readable (root still owns it)."""
import json
import os
import subprocess
import sys

import pytest

# Runs torch ops on tvk and on the CPU; prints their largest difference, the cache warnings
# (the driver's pipeline cache saved inside the block too) and the validation messages.
_RUN = r"""
import json, sys, warnings
from pathlib import Path
try:
    (Path(sys.argv[1]) / "probe").mkdir(parents=True)
    refused = False
except OSError:
    refused = True
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    import torchvk
    from tvk_kernels import get_device
    from tvk_kernels.runtime.instance import Instance
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g)
    ops = [lambda a, b: a * 3.0 + 0.5, lambda a, b: a @ b, lambda a, b: a.sum(dim=1)]
    diffs = [float((op(a.to("tvk"), b.to("tvk")).cpu() - op(a, b)).abs().max()) for op in ops]
    get_device(0).pipelines.save()
from tvk_kernels import benchmark_mode
print(json.dumps({"refused": refused, "diffs": diffs, "benchmarked": benchmark_mode.stats()["decided"],
                  "warnings": [(type(w.message).__name__, str(w.message)) for w in caught
                               if "Cache" in type(w.message).__name__],
                  "validation": Instance._singleton.log.take()}))
"""

# As root: drop the capabilities that let root write where mode bits forbid it, then exec argv.
_WITHOUT_ROOTS_FILE_POWERS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
    if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
        sys.exit(f"cannot drop capability {cap}: {os.strerror(ctypes.get_errno())}")
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""


def _read_only(path):
    path.mkdir()
    path.chmod(0o555)
    return path


def _a_file(path):
    path.write_text("not a folder")
    return path


FOLDERS = {
    "an empty read-only folder": lambda tmp: _read_only(tmp / "ro"),
    "a folder under a read-only one": lambda tmp: _read_only(tmp / "ro") / "cache",
    "a folder under a file": lambda tmp: _a_file(tmp / "file") / "cache",
    "a file": lambda tmp: _a_file(tmp / "file"),
}


@pytest.mark.parametrize("kind", FOLDERS)
def test_kernels_run_with_one_warning_when_the_cache_cannot_be_written(tmp_path, kind):
    folder = FOLDERS[kind](tmp_path)
    env = dict(os.environ, TVK_CACHE_DIR=str(folder), TVK_USE_SHIPPED_KERNELS="0", TVK_BENCHMARK="1",
               TVK_BENCHMARK_CANDIDATES="2")
    env.pop("TVK_RECORD_KERNELS", None)  # nothing for shipped/kernels.json: every module is compiled here
    cmd = [sys.executable, "-c", _RUN, str(folder)]
    if os.geteuid() == 0:
        cmd = [sys.executable, "-c", _WITHOUT_ROOTS_FILE_POWERS, *cmd[1:]]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    finally:
        for ro in tmp_path.glob("ro"):
            ro.chmod(0o755)  # pytest can clean it up
    assert run.returncode == 0, run.stderr[-3000:]
    r = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["refused"], f"{folder} was writable in the test process: the test would prove nothing"
    assert r["validation"] == []
    assert max(r["diffs"]) <= 1e-5, r["diffs"]
    assert r["benchmarked"] >= 1  # benchmark mode timed the matmul and stored its winner
    assert len(r["warnings"]) == 1, r["warnings"]
    name, message = r["warnings"][0]
    assert name == "CacheNotWritableWarning"
    assert str(folder) in message and "TVK_CACHE_DIR" in message
    assert "CacheNotWritableWarning" not in run.stderr  # nor one more at exit
