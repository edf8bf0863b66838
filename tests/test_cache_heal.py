"""The on-disk caches (TVK_CACHE_DIR) heal themselves: a corrupt, truncated or mismatched
SPIR-V entry, or a bad driver pipeline-cache blob, is dropped with one warning naming the file
and rebuilt, and results stay right; writes are atomic, so processes sharing a cache never read
half a file. Each run is a fresh process on its own cache folder, as a user's next session is."""
import json
import os
import random
import re
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from tvk_kernels.errors import ShaderCompileError, VulkanError
from tvk_kernels.kernels.elementwise import _PUSH
from tvk_kernels.runtime import compiler, pipeline

TEMPLATE = "elementwise_binary.comp"


@pytest.fixture(autouse=True)
def _throwaway_kernels_unrecorded(monkeypatch):
    """This file's kernels (random constants) are test-only: kept out of shipped/kernels.json's record."""
    monkeypatch.delenv("TVK_RECORD_KERNELS", raising=False)

# Computes x * k + y with one kernel per k (argv: a JSON list of k), in a new process; prints the
# largest error per k, the warnings and the validation messages.
_RUN = r"""
import json, sys, warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from tvk_kernels import get_device
    from tvk_kernels.kernels.elementwise import _PUSH
    from tvk_kernels.runtime.instance import Instance
    d = get_device(0)
    x, y = np.arange(100, dtype=np.float32), np.full(100, 0.5, np.float32)
    X, Y, Z = d.upload(x), d.upload(y), d.allocator.alloc(400)
    errors = []
    for k in json.loads(sys.argv[1]):
        defines = {"OP(x,y)": f"((x) * {k}.0 + (y))", "VEC": 1, "ITEMS": 1}
        pipe = d.pipelines.get("elementwise_binary.comp", defines, local_size=(64, 1, 1), push_size=_PUSH.size)
        d.stream.dispatch(pipe, (2, 1, 1), _PUSH.pack(X.address, Y.address, Z.address, 100, 1.0))
        errors.append(float(np.abs(d.download(Z, np.float32, (100,)) - (x * k + y)).max()))
print(json.dumps({"errors": errors, "warnings": [str(w.message) for w in caught],
                  "validation": Instance._singleton.log.take()}))
"""


def _defines(k: int) -> dict:
    return {"OP(x,y)": f"((x) * {k}.0 + (y))", "VEC": 1, "ITEMS": 1}


def _start(cache, ks):
    env = dict(os.environ, TVK_CACHE_DIR=str(cache))
    env.pop("TVK_RECORD_KERNELS", None)  # test-only kernels: not for shipped/kernels.json
    return subprocess.Popen([sys.executable, "-c", _RUN, json.dumps(ks)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _finish(proc, ks) -> list[str]:
    """Checks a run's results (exact: small integers) and returns its warnings."""
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    r = json.loads(out.strip().splitlines()[-1])
    assert r["validation"] == []
    assert r["errors"] == [0.0] * len(ks)
    return r["warnings"]


def _run(cache, ks) -> list[str]:
    return _finish(_start(cache, ks), ks)


def _spirv_file(cache, k):
    return cache / "spirv" / f"{compiler.cache_key(compiler.template_path(TEMPLATE), _defines(k))}.spv"


def _only_warning_names(warnings: list[str], path) -> None:
    assert len(warnings) == 1, warnings
    assert str(path) in warnings[0]


# its module fixture runs once: keep its tests on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("cache_heal")


@pytest.fixture(scope="session")  # session: xdist may interleave other modules' tests
def filled_cache(tmp_path_factory):
    """A cache filled by one run of kernels k=3 and k=5 (SPIR-V files and the pipeline-cache blob)."""
    cache = tmp_path_factory.mktemp("filled") / "cache"
    assert _run(cache, [3, 5]) == []
    return cache


@pytest.fixture
def cache(filled_cache, tmp_path):
    copy = tmp_path / "cache"
    shutil.copytree(filled_cache, copy)
    return copy


def _random_bytes(path, cache):
    path.write_bytes(os.urandom(path.stat().st_size))


def _truncated(path, cache):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _entry_of_another_kernel(path, cache):
    shutil.copyfile(_spirv_file(cache, 5), path)  # a whole, valid entry: the k=5 kernel


def _bare_spirv_of_another_kernel(path, cache):
    """Valid SPIR-V with no cache header (placed by hand, or by an old version)."""
    path.write_bytes(compiler.compile_template(TEMPLATE, _defines(5)))


@pytest.mark.parametrize("damage", [_random_bytes, _truncated, _entry_of_another_kernel, _bare_spirv_of_another_kernel])
def test_a_bad_spirv_entry_is_rebuilt_with_one_warning(cache, damage):
    path = _spirv_file(cache, 3)
    good = path.read_bytes()
    damage(path, cache)
    _only_warning_names(_run(cache, [3, 5]), path)  # and the k=3 results are right
    assert path.read_bytes() == good  # rebuilt from the template (glslc is deterministic)


def _blob_of_another_device(path, cache):
    """A whole entry with a right hash, whose Vulkan header names another vendor and device."""
    from tvk_kernels import get_device
    from tvk_kernels.runtime import cache_file

    key = get_device(0).pipelines._key
    blob = bytearray(cache_file.read(path, key))
    blob[8:16] = struct.pack("<II", 0xDEAD, 0xBEEF)  # vendorID, deviceID
    cache_file.write(path, key, bytes(blob))


@pytest.mark.parametrize("damage", [_random_bytes, _truncated, _blob_of_another_device])
def test_a_bad_pipeline_cache_blob_is_dropped_with_one_warning(cache, damage):
    (path,) = (cache / "pipelines").iterdir()
    damage(path, cache)
    _only_warning_names(_run(cache, [3]), path)
    assert path.is_file()  # saved again at exit...
    assert _run(cache, [3]) == []  # ...and read back without complaint


def test_two_processes_filling_one_fresh_cache_at_once(tmp_path):
    cache, ks = tmp_path / "cache", [7, 9, 11, 13, 15, 17]
    runs = [_start(cache, ks), _start(cache, ks[::-1])]
    assert [_finish(run, ks) for run in runs] == [[], []]
    left = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
    assert len(left) == len(ks) + 1, left  # one entry per kernel and the pipeline cache: no temporary file
    assert _run(cache, ks) == []  # every entry they left is whole


def _get(device, defines):
    return device.pipelines.get(TEMPLATE, defines, local_size=(64, 1, 1), push_size=_PUSH.size)


def _check_results(device, pipe, k):
    x, y = np.arange(70, dtype=np.float32), np.full(70, 0.25, np.float32)
    X, Y, Z = device.upload(x), device.upload(y), device.allocator.alloc(4 * 70)
    device.stream.dispatch(pipe, (2, 1, 1), _PUSH.pack(X.address, Y.address, Z.address, 70, 1.0))
    # a tolerance, not equality: a GPU may fuse x * k + y into one rounding (an FMA)
    np.testing.assert_allclose(device.download(Z, np.float32, (70,)), x * np.float32(k) + y, rtol=1e-6)


def _driver_rejects(monkeypatch, times: int):
    """The driver fails the first `times` pipeline builds (as VK_ERROR_UNKNOWN on a cached module)."""
    create, calls = pipeline.PipelineCache._create_pipeline, []

    def flaky(self, *args):
        calls.append(args[0])
        if len(calls) <= times:
            raise VulkanError("vkCreateComputePipelines", -13, "VK_ERROR_UNKNOWN")
        return create(self, *args)

    monkeypatch.setattr(pipeline.PipelineCache, "_create_pipeline", flaky)
    return calls


def test_a_cached_module_the_driver_rejects_is_recompiled_once(device, tmp_path, monkeypatch):
    from tvk_kernels.runtime.cache_file import CacheWarning

    monkeypatch.setenv("TVK_CACHE_DIR", str(tmp_path))
    k = random.randrange(2, 1 << 20)  # defines no earlier test has built
    compiler.compile_template(TEMPLATE, _defines(k))
    path = _spirv_file(tmp_path, k)
    compiler._memo.pop(path.stem)  # as in a new process: the module comes from the disk cache
    find_glslc, glslc_runs = compiler.find_glslc, []
    monkeypatch.setattr(compiler, "find_glslc", lambda: glslc_runs.append(1) or find_glslc())
    calls = _driver_rejects(monkeypatch, times=1)
    with pytest.warns(CacheWarning, match=re.escape(str(path))):
        pipe = _get(device, _defines(k))
    assert len(calls) == 2 and len(glslc_runs) == 1  # the rejected entry was compiled afresh, once
    assert path.is_file()
    _check_results(device, pipe, k)


def test_a_module_the_driver_rejects_twice_is_an_error_naming_it(device, tmp_path, monkeypatch):
    from tvk_kernels.runtime.cache_file import CacheWarning

    monkeypatch.setenv("TVK_CACHE_DIR", str(tmp_path))
    k = random.randrange(2, 1 << 20)
    path = _spirv_file(tmp_path, k)
    calls = _driver_rejects(monkeypatch, times=2)
    with pytest.warns(CacheWarning), pytest.raises(ShaderCompileError) as err:
        _get(device, _defines(k))
    message = str(err.value)
    assert TEMPLATE in message and f"OP(x,y)=((x) * {k}.0 + (y))" in message and str(path) in message
    assert "VK_ERROR_UNKNOWN" in message
    assert len(calls) == 2
    monkeypatch.undo()  # the driver works again: the same kernel builds and runs
    _check_results(device, _get(device, _defines(k)), k)
