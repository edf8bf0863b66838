"""Device limits: every launch inside them, on a device that reports only Vulkan's minimums too.

TVK_DEVICE_LIMITS=minimum (tvk_kernels/runtime/device_limits.py) lowers the limits the runtime
believes to Vulkan's required minimums; tests/device_limits_worker.py runs big tensors of every
op class under it in a process of its own and compares each with the CPU. Every dispatch is
checked against maxComputeWorkGroupCount, so a launch plan that assumes more raises
DeviceLimitError there rather than being clipped by the driver.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torchvk  # noqa: F401
from tvk_kernels import config
from tvk_kernels.errors import DeviceLimitError, InvalidConfigError
from tvk_kernels.kernels.launch import loop_budget_params
from tvk_kernels.runtime.device import get_device
from tvk_kernels.runtime.device_limits import MINIMUM_LIMITS, apply_profile

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import device_limits_worker  # noqa: E402

WORKER_CASES = list(device_limits_worker.CASES)


@pytest.fixture(scope="module")
def minimum_profile_results():
    env = {k: v for k, v in os.environ.items() if k not in ("TVK_RECORD_KERNELS", "TVK_SHIPPED_KERNELS")}
    env["TVK_DEVICE_LIMITS"] = "minimum"  # its kernels (128-thread workgroups) are not shipped ones
    run = subprocess.run([sys.executable, str(HERE / "device_limits_worker.py")], env=env, capture_output=True,
                         text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.xdist_group("device_limits")
def test_the_worker_ran_under_the_minimums(minimum_profile_results):
    limits = minimum_profile_results["_limits"]
    assert limits["count"] == [65535, 65535, 65535]
    assert limits["invocations"] <= 128 and limits["shared"] <= 16384


@pytest.mark.xdist_group("device_limits")
@pytest.mark.parametrize("case", WORKER_CASES)
def test_big_tensors_under_minimum_limits(minimum_profile_results, case):
    assert minimum_profile_results[case] == "ok"


def test_the_profile_lowers_every_limit(monkeypatch):
    facts = get_device().facts
    roomy = dataclasses.replace(facts, max_workgroup_count=(1 << 31, 65535, 1 << 20), max_workgroup_invocations=1024,
                                max_shared_memory=65536, max_memory_allocation=1 << 40)
    monkeypatch.setenv("TVK_DEVICE_LIMITS", "minimum")
    low = apply_profile(roomy)
    for name, minimum in MINIMUM_LIMITS.items():
        assert getattr(low, name) == minimum, name
    tiny = dataclasses.replace(facts, max_push_constants=64)  # a limit already below the minimum stays
    assert apply_profile(tiny).max_push_constants == 64
    monkeypatch.setenv("TVK_DEVICE_LIMITS", "device")
    assert apply_profile(roomy) is roomy


def test_an_unknown_profile_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TVK_DEVICE_LIMITS", "small")
    with pytest.raises(ValueError, match="TVK_DEVICE_LIMITS='small': use one of device, minimum"):
        apply_profile(get_device().facts)


def test_a_grid_past_the_device_limit_is_refused_and_the_runtime_stays_usable():
    from tvk_kernels.kernels.dim_index import DimIndex, _PUSH
    from tvk_kernels.kernels.launch import family

    device = get_device()
    pipe = family(device, DimIndex).variant({"MODE": 1, "ELEM_BYTES": 4}, 128, _PUSH.size)
    too_many = device.facts.max_workgroup_count[0] + 1
    for grid in ((too_many, 1, 1), (1, device.facts.max_workgroup_count[1] + 1, 1), (1, 1, 1 << 20)):
        with pytest.raises(DeviceLimitError, match="maxComputeWorkGroupCount"):
            device.stream.dispatch(pipe, grid, bytes(_PUSH.size), "too wide")
    x = torch.arange(10.0, device="tvk")
    torch.testing.assert_close((x * 2).flip(0).cpu(), (torch.arange(10.0) * 2).flip(0))


class _Budgeted:
    """The device, with facts of one that has a loop budget and a workgroup limit."""

    def __init__(self, device, budget, invocations=1024):
        self._device = device
        self.facts = dataclasses.replace(device.facts, max_loop_iterations=budget, max_workgroup_invocations=invocations,
                                         max_workgroup_size=(invocations, invocations, 64))

    def __getattr__(self, name):
        return getattr(self._device, name)


def test_long_rows_get_more_threads_where_loops_are_budgeted():
    from tvk_kernels.kernels.softmax import Softmax

    device = get_device()
    fam = Softmax(_Budgeted(device, 65535))
    prm = fam.resolve({"n": 1 << 23}, {"WG": 64, "ITEMS": 4})
    wide = loop_budget_params(fam, {"n": 1 << 23}, prm, 1 << 23, passes=2)
    assert wide["WG"] > 64 and wide["WG"] * wide["ITEMS"] * (65535 - 256) >= 2 * (1 << 23)
    assert loop_budget_params(fam, {"n": 1000}, prm, 1000, passes=2) is prm  # short rows keep the tuned WG
    assert loop_budget_params(Softmax(_Budgeted(device, 0)), {"n": 1 << 23}, prm, 1 << 23, passes=2) is prm
    small = Softmax(_Budgeted(device, 65535, invocations=128))
    with pytest.raises(DeviceLimitError, match="split the row"):
        loop_budget_params(small, {"n": 1 << 27}, prm, 1 << 27, passes=2)


def test_defaults_that_break_a_small_devices_limits_give_the_nearest_fit():
    facts = get_device().facts
    small = dataclasses.replace(facts, max_shared_memory=32768, max_workgroup_invocations=128,
                                max_workgroup_size=(128, 128, 64))
    wide = {"BR": 64, "BC": 16, "TPR": 4, "BBR": 16, "BBC": 8, "BTPR": 4}  # 256 threads
    assert config.constraint_problems("attention", wide, small)
    near = config.nearest_fitting("attention", wide, small)
    assert not config.constraint_problems("attention", near, small)
    assert near == {**wide, "BR": 32}  # one change, the smallest
    tiny = dataclasses.replace(small, max_shared_memory=16384)
    with pytest.raises(InvalidConfigError, match="no attention parameters"):  # backward needs > 16 KiB at head 128
        config.nearest_fitting("attention", wide, tiny)
    matmul = config.default_params("matmul", facts)
    little = dataclasses.replace(small, max_shared_memory=4096)
    assert config.constraint_problems("matmul", matmul, little)
    assert not config.constraint_problems("matmul", config.nearest_fitting("matmul", matmul, little), little)


def test_attention_past_the_fused_kernels_reach_takes_the_math_path():
    """A call whose grid the fused kernels cannot cover runs torch's decomposition, matching the CPU."""
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    got = torch.nn.functional.scaled_dot_product_attention(q.to("tvk"), k.to("tvk"), v.to("tvk"))
    torch.testing.assert_close(got.cpu(), torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-5,
                               rtol=1e-5)
    from tvk_kernels.kernels import attention

    assert attention.fits(get_device(), 2, 3, 5, 8)
    assert not attention.fits(get_device(), get_device().facts.max_workgroup_count[2] + 1, 3, 5, 8)
