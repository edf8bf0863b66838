"""TVK_* settings read from the environment take only clear values and say which variable is wrong.

On/off settings go through one parser (tvk_kernels/env_flags.py): 1/true/yes/on and 0/false/no/off
in any case, empty for the default; anything else (TVK_BENCHMARK=maybe) is refused naming the
variable, where it used to be taken silently as on (or off). TVK_MEMORY_LIMIT names itself too."""
import os
import subprocess
import sys

import pytest

from tvk_kernels import benchmark_mode
from tvk_kernels.runtime import compiler
from tvk_kernels.runtime.memory import Allocator

UNCLEAR = ["maybe", "2", "enabled", "tru"]


@pytest.fixture
def benchmark_setting(monkeypatch):
    """Sets TVK_BENCHMARK and returns what benchmark mode reads from it; benchmark mode is put back."""
    def read(value):
        monkeypatch.setenv("TVK_BENCHMARK", value)
        benchmark_mode.set_enabled(None)
        return benchmark_mode.enabled()

    yield read
    monkeypatch.delenv("TVK_BENCHMARK", raising=False)
    benchmark_mode.set_enabled(None)


# (what sets the variable and reads the setting back, its default)
def _spirv_opt(monkeypatch, value):
    monkeypatch.setenv("TVK_SPIRV_OPT", value)
    return compiler.spirv_optimized()


def _use_shipped(monkeypatch, value):
    monkeypatch.setenv("TVK_USE_SHIPPED_KERNELS", value)
    return compiler.shipped_spirv_file("0" * 64) is not None


CLEAR = {"1": True, "true": True, "TRUE": True, " Yes ": True, "on": True,
         "0": False, "false": False, "No": False, "OFF": False, " no ": False}


def test_clear_values_are_read_as_said_and_empty_is_the_default(benchmark_setting, monkeypatch):
    for value, on in CLEAR.items():
        assert benchmark_setting(value) is on, value  # TVK_BENCHMARK=off, =false, =no used to turn it on
        assert _spirv_opt(monkeypatch, value) is on, value  # TVK_SPIRV_OPT=false, =no, =off used to keep -O
        assert _use_shipped(monkeypatch, value) is on, value
    for value in ("", "  "):  # TVK_BENCHMARK="  " used to turn it on
        assert benchmark_setting(value) is False
        assert _spirv_opt(monkeypatch, value) is True
        assert _use_shipped(monkeypatch, value) is True


@pytest.mark.parametrize("value", UNCLEAR)
@pytest.mark.parametrize("name", ["TVK_BENCHMARK", "TVK_SPIRV_OPT", "TVK_USE_SHIPPED_KERNELS"])
def test_unclear_values_are_refused_naming_the_variable(benchmark_setting, monkeypatch, name, value):
    read = {"TVK_BENCHMARK": lambda: benchmark_setting(value), "TVK_SPIRV_OPT": lambda: _spirv_opt(monkeypatch, value),
            "TVK_USE_SHIPPED_KERNELS": lambda: _use_shipped(monkeypatch, value)}[name]
    with pytest.raises(ValueError) as e:
        read()
    assert f"{name}={value!r}" in str(e.value) and "1, true, yes, on" in str(e.value) and "0, false, no, off" in str(e.value)


@pytest.mark.parametrize("name", ["TVK_VALIDATION", "TVK_LAUNCH_BLOCKING", "TVK_CPU_FALLBACK"])
def test_settings_read_at_start_up_are_refused_too(name):
    """Read when torchvk is imported or the device opened: a fresh process, as a user's."""
    env = dict(os.environ, **{name: "maybe"})
    env.pop("TVK_RECORD_KERNELS", None)
    run = subprocess.run([sys.executable, "-c", "import torch, torchvk; print((torch.ones(3, device='tvk') + 1).cpu())"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode != 0, f"{name}=maybe was taken silently: {run.stdout}"
    assert f"ValueError: {name}='maybe' is not an on/off setting" in run.stderr, run.stderr[-2000:]


@pytest.mark.parametrize("value", ["lots", "1..2", "inf", "-1G", "12 parsecs"])
def test_an_unreadable_memory_limit_names_the_variable(device, monkeypatch, value):
    monkeypatch.setenv("TVK_MEMORY_LIMIT", value)
    with pytest.raises(ValueError) as e:
        Allocator(device)
    assert f"TVK_MEMORY_LIMIT={value!r}" in str(e.value) and "512M" in str(e.value) and "unset" in str(e.value)


def test_a_readable_memory_limit_is_the_cap(device, monkeypatch):
    monkeypatch.setenv("TVK_MEMORY_LIMIT", " 1.5G ")
    assert Allocator(device).limit == 3 << 29
    monkeypatch.setenv("TVK_MEMORY_LIMIT", "1" + "0" * 400)  # exact: a float of it would be inf
    assert Allocator(device).limit == 10 ** 400
