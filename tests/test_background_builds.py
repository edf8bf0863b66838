"""Background pipeline builds: a kernel launch hands a missing pipeline to the build pool and the
stream holds its dispatch, and every command after it, until the build is done (runtime/stream.py,
runtime/pipeline.py). Order, results, errors and the switch TVK_BACKGROUND_BUILDS."""
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tvk_kernels.errors import ShaderCompileError
from tvk_kernels.kernels.elementwise import _PUSH

TEMPLATE = "elementwise_binary.comp"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _throwaway_kernels_unrecorded(monkeypatch):
    """This file's kernels (random constants) are test-only: kept out of shipped/kernels.json's record."""
    monkeypatch.delenv("TVK_RECORD_KERNELS", raising=False)


@pytest.fixture
def slow_builds(device, monkeypatch):
    """Every build takes at least 0.3 s, so a dispatch surely meets its pipeline unbuilt."""
    cache = device.pipelines
    build = cache._build

    def slow(*args):
        time.sleep(0.3)
        return build(*args)

    monkeypatch.setattr(cache, "_build", slow)
    monkeypatch.setattr(cache, "background", True)
    return cache


def _fresh_op() -> tuple[dict, int]:
    k = random.randrange(2, 1 << 20)
    return {"OP(x,y)": f"((x) * {k}.0 + (y))", "VEC": 1, "ITEMS": 1}, k


def _get(device, defines):
    return device.pipelines.get(TEMPLATE, defines, local_size=(64, 1, 1), push_size=_PUSH.size, background=True)


def _launch(device, pipe, a, b, c, n):
    device.stream.dispatch(pipe, ((n + 63) // 64, 1, 1), _PUSH.pack(a.address, b.address, c.address, n, 1.0))


def test_held_commands_run_in_issue_order(device, rng, slow_builds):
    stream, n = device.stream, 1000
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    A, B = device.upload(a), device.upload(b)
    C, D, E = (device.allocator.alloc(4 * n) for _ in range(3))
    (d1, k1), (d2, k2) = _fresh_op(), _fresh_op()
    holds = stream.holds
    first = _get(device, d1)
    assert first.handle is None  # still building: get() returned at once
    _launch(device, first, A, B, C, n)         # C = a * k1 + b            (held)
    stream.copy(C, D, 4 * n)                   # D = C                     (held behind it)
    second = _get(device, d2)
    _launch(device, second, D, A, E, n)        # E = D * k2 + a            (held)
    stream.fill(C, 0)                          # C = 0, after E read D     (held)
    assert stream.holds == holds + 1
    e = device.download(E, np.float32, (n,))
    c = device.download(C, np.float32, (n,))
    expected = (a * np.float32(k1) + b) * np.float32(k2) + a
    np.testing.assert_allclose(e, expected, rtol=1e-5)
    assert not c.any()
    assert first.handle is not None and second.handle is not None


def test_a_failed_background_build_is_raised_at_the_sync_point_and_the_stream_stays_usable(device, rng,
                                                                                          slow_builds):
    n = 256
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    A, B, C = device.upload(a), device.upload(b), device.allocator.alloc(4 * n)
    bad = {"OP(x,y)": "((x) +* (y))", "VEC": 1, "ITEMS": random.randrange(1 << 20) + 2}
    broken = _get(device, bad)
    _launch(device, broken, A, B, C, n)
    with pytest.raises(ShaderCompileError, match="elementwise_binary.comp"):
        device.stream.synchronize()
    good, k = _fresh_op()
    _launch(device, _get(device, good), A, B, C, n)
    np.testing.assert_allclose(device.download(C, np.float32, (n,)), a * np.float32(k) + b, rtol=1e-6)


_EAGER_STEP = r"""
import json, torch, torchvk
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.LayerNorm(40), torch.nn.GELU(), torch.nn.Linear(40, 5))
x, y = torch.randn(12, 24), torch.randint(0, 5, (12,))
loss = torch.nn.functional.cross_entropy(model(x), y)
loss.backward()
reference = [loss.item()] + [p.grad.abs().sum().item() for p in model.parameters()]
model.zero_grad()
model.to("tvk")
loss = torch.nn.functional.cross_entropy(model(x.to("tvk")), y.to("tvk"))
loss.backward()
got = [loss.item()] + [p.grad.abs().sum().item() for p in model.parameters()]
from tvk_kernels import get_device
stream = get_device(0).stream
print(json.dumps({"reference": reference, "got": got, "holds": stream.holds}))
"""


@pytest.mark.parametrize("setting", ["default", "off", "blocking"])
def test_an_eager_training_step_with_empty_caches(tmp_path, setting):
    """A fresh process with empty caches builds every pipeline of an eager step in the pool (default),
    or one at a time (TVK_BACKGROUND_BUILDS=0; blocking mode waits for each): the same gradients."""
    env = dict(os.environ, TVK_CACHE_DIR=str(tmp_path))
    env.pop("TVK_RECORD_KERNELS", None)
    if setting == "off":
        env["TVK_BACKGROUND_BUILDS"] = "0"
    elif setting == "blocking":
        env["TVK_LAUNCH_BLOCKING"] = "1"
    run = subprocess.run([sys.executable, "-c", _EAGER_STEP], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(out["got"], out["reference"], rtol=2e-4)
    assert (out["holds"] > 0) == (setting == "default")
