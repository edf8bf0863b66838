"""Parallel pipeline builds: PipelineCache.prefetching(), the dry first run of a compiled
program (torchvk/compile/program.py), and the glslc optimization switch TVK_SPIRV_OPT."""
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tvk_kernels.errors import ShaderCompileError
from tvk_kernels.kernels.elementwise import _PUSH
from tvk_kernels.runtime import compiler

TEMPLATE = "elementwise_binary.comp"


@pytest.fixture(autouse=True)
def _throwaway_kernels_unrecorded(monkeypatch):
    """This file's kernels (random constants) are test-only: kept out of shipped/kernels.json's record."""
    monkeypatch.delenv("TVK_RECORD_KERNELS", raising=False)


def _fresh_op() -> tuple[dict, int]:
    """Defines no earlier run has compiled (a random constant in OP): a real glslc run, never a cache hit."""
    k = random.randrange(2, 1 << 20)
    return {"OP(x,y)": f"((x) * {k}.0 + (y))", "VEC": 1, "ITEMS": 1}, k


def _run(device, pipe, a, b):
    n = a.size
    A, B, C = device.upload(a), device.upload(b), device.allocator.alloc(4 * n)
    device.stream.dispatch(pipe, ((n + 63) // 64, 1, 1), _PUSH.pack(A.address, B.address, C.address, n, 1.0))
    return device.download(C, np.float32, (n,))


def _get(device, defines):
    return device.pipelines.get(TEMPLATE, defines, local_size=(64, 1, 1), push_size=_PUSH.size)


def test_prefetch_builds_everything_before_the_block_ends(device, rng):
    cache = device.pipelines
    wall = cache.prefetch_wall_seconds
    ops = [_fresh_op() for _ in range(3)]
    with cache.prefetching():
        pipes = [_get(device, d) for d, _ in ops]
        assert [_get(device, d) for d, _ in ops] == pipes  # one object per key, pending or not
    assert all(p.handle is not None and p.layout is not None and p.compile_s > 0 for p in pipes)
    assert cache.prefetch_wall_seconds > wall
    assert cache.compile_seconds >= cache.spirv_seconds + cache.driver_seconds - 1e-9
    a, b = rng.standard_normal(100, dtype=np.float32), rng.standard_normal(100, dtype=np.float32)
    for p, (_, k) in zip(pipes, ops):
        np.testing.assert_allclose(_run(device, p, a, b), a * np.float32(k) + b, rtol=1e-6)


def test_a_pending_pipeline_dispatched_for_real_is_waited_for(device, rng):
    defines, k = _fresh_op()
    a, b = rng.standard_normal(70, dtype=np.float32), rng.standard_normal(70, dtype=np.float32)
    with device.pipelines.prefetching():
        pipe = _get(device, defines)
        out = _run(device, pipe, a, b)  # not a dry run: the stream waits for the build
    np.testing.assert_allclose(out, a * np.float32(k) + b, rtol=1e-6)


def test_build_error_is_raised_when_the_block_ends_and_the_cache_stays_usable(device, rng):
    cache = device.pipelines
    bad = {"OP(x,y)": "((x) +* (y)", "VEC": 1, "ITEMS": random.randrange(1 << 20) + 2}
    good, k = _fresh_op()
    with pytest.raises(ShaderCompileError, match="elementwise_binary.comp.*OP"):
        with cache.prefetching():
            broken = _get(device, bad)
            fine = _get(device, good)
    assert fine.handle is not None
    assert broken.handle is None
    with pytest.raises(ShaderCompileError):
        broken.wait()  # whoever kept the object gets the error again, not a null handle
    assert _get(device, good) is fine  # built ones stay cached; the failed one does not
    with pytest.raises(ShaderCompileError):
        _get(device, bad)  # tried again, outside prefetch: raised at once as before
    with cache.prefetching():  # and prefetching still works
        again, k2 = _fresh_op()
        p = _get(device, again)
    a, b = rng.standard_normal(10, dtype=np.float32), rng.standard_normal(10, dtype=np.float32)
    np.testing.assert_allclose(_run(device, p, a, b), a * np.float32(k2) + b, rtol=1e-6)


def test_spirv_opt_off_has_its_own_cache_key_and_same_results(device, rng, monkeypatch):
    defines, k = _fresh_op()
    path = compiler.template_path(TEMPLATE)
    optimized = compiler.cache_key(path, defines)
    monkeypatch.setenv("TVK_SPIRV_OPT", "0")
    plain = compiler.cache_key(path, defines)
    assert plain != optimized
    spirv = compiler.compile_template(TEMPLATE, defines)
    assert (Path(os.environ["TVK_CACHE_DIR"]) / "spirv" / f"{plain}.spv").is_file()
    pipe = _get(device, defines)
    monkeypatch.setenv("TVK_SPIRV_OPT", "1")
    assert compiler.compile_template(TEMPLATE, defines) != spirv  # glslc -O changed the module
    a, b = rng.standard_normal(300, dtype=np.float32), rng.standard_normal(300, dtype=np.float32)
    np.testing.assert_allclose(_run(device, pipe, a, b), a * np.float32(k) + b, rtol=1e-6)


# One cold process (empty caches) trains a small CNN: compiled with the dry first run, compiled
# without it, and eager; it reports losses, grads, which threads built pipelines, validation messages.
_COLD = r"""
import copy, json, os, sys, threading
import torch, torch.nn.functional as F
sys.path.insert(0, os.environ["TESTS_DIR"])
import torchvk
from test_torchvk_train import cnn
from tvk_kernels import get_device
from tvk_kernels.runtime import pipeline
from tvk_kernels.runtime.instance import Instance

builders = set()
build = pipeline.PipelineCache._build
def traced(self, *a):
    builders.add(threading.current_thread().name.split("_")[0])
    return build(self, *a)
pipeline.PipelineCache._build = traced

torch.manual_seed(0)
base = cnn().to("tvk")
g = torch.Generator().manual_seed(1)
batches = [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 4, (4,), generator=g)) for _ in range(3)]  # cnn() has 4 classes

def train(parallel=None, compiled=True):
    if parallel is not None:
        os.environ["TVK_PARALLEL_COMPILE"] = parallel
    model = copy.deepcopy(base)
    step = torchvk.compile(model, loss_fn=F.cross_entropy) if compiled else (lambda x, y: F.cross_entropy(model(x), y))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, grads = [], None
    for x, y in batches:
        opt.zero_grad(set_to_none=True)
        loss = step(x.to("tvk"), y.to("tvk"))
        loss.backward()
        grads = grads or [p.grad.cpu().flatten().tolist() for p in model.parameters()]
        opt.step()
        losses.append(loss.item())
    return {"losses": losses, "grads": grads}

d = get_device(0)
out = {"parallel": train("1")}
pc = d.pipelines
out["stats"] = {"prefetch_wall_s": pc.prefetch_wall_seconds, "pipelines": len(pc.pipelines),
                "spirv_s": pc.spirv_seconds, "driver_s": pc.driver_seconds, "builders": sorted(builders)}
out["serial"] = train("0")
out["eager"] = train(compiled=False)
inst = Instance._singleton
out["validation"] = inst.log.take() if inst is not None else []
print(json.dumps(out))
"""


def test_cold_compiled_training_with_parallel_builds_matches_serial_and_eager(tmp_path):
    env = dict(os.environ, TVK_CACHE_DIR=str(tmp_path), TESTS_DIR=str(Path(__file__).parent))
    env.pop("TVK_PARALLEL_COMPILE", None)
    p = subprocess.run([sys.executable, "-c", _COLD], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["validation"] == []
    s = r["stats"]
    assert s["prefetch_wall_s"] > 0 and s["pipelines"] > 5 and s["spirv_s"] > 0 and s["driver_s"] > 0
    assert "tvk-pipeline" in s["builders"]  # built by the pool, cold
    for other in ("serial", "eager"):
        assert r["parallel"]["losses"] == pytest.approx(r[other]["losses"], rel=1e-5, abs=1e-6)
        for gp, go in zip(r["parallel"]["grads"], r[other]["grads"]):
            np.testing.assert_allclose(gp, go, rtol=1e-4, atol=1e-6)
