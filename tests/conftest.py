"""Every test runs on the first Vulkan device (lavapipe on CI) with the Khronos validation
layer on, and fails if the layer reports anything."""
import os
import tempfile

os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
os.environ.setdefault("TVK_VALIDATION", "1")
os.environ.setdefault("TVK_CACHE_DIR", os.path.join(tempfile.gettempdir(), "tvk-test-cache"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402


def _declare_torchvision_ops():
    """The tests' torchvision is PyPI's, built against CUDA torch; under the CPU torch they run on, it (and
    transformers, which imports it) would not import without this (zoo_models.declare_torchvision_ops).
    zoo_models is loaded by path, as the torch peers load it: importing torchvk here would start the
    runtime before any test asked for it."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "torchvk" / "experiments" / "zoo_models.py"
    spec = importlib.util.spec_from_file_location("tvk_conftest_zoo_models", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    module.declare_torchvision_ops()


_declare_torchvision_ops()


@pytest.fixture(scope="session")
def device():
    from tvk_kernels import get_device

    return get_device(0)


@pytest.fixture(autouse=True)
def no_validation_messages(request):
    """Fail the test on any validation-layer message emitted while it ran."""
    from tvk_kernels.runtime.instance import Instance

    inst = Instance._singleton
    if inst is not None:
        inst.log.take()
    yield
    inst = Instance._singleton
    if inst is not None:
        messages = inst.log.take()
        assert not messages, "Vulkan validation messages:\n" + "\n".join(messages)


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def as_gpu(device, monkeypatch, request):
    """This device treated as a GPU without cooperative matrices, as RDNA1 is: fp16 GEMMs routed to the
    packed-fp16 kernel once its check passed, fp16 convolutions (TVK_PACKED_CONV=1) and fused attention (its
    default there) on packed arithmetic.
    GEMM plans and kept launches made before are dropped, and those made under it go with it. Returns the
    matmul family (its plans)."""
    from tvk_kernels import config
    from tvk_kernels.kernels import matmul as matmul_kernels, matmul_packed_f16

    plans = matmul_kernels.family(device, matmul_kernels.Matmul)
    monkeypatch.setattr(matmul_packed_f16.PackedMatmul, "routed", lambda self: True)
    monkeypatch.setattr(plans, "packed", None)
    monkeypatch.setenv("TVK_COOPMAT", "0")
    monkeypatch.setenv("TVK_PACKED_CONV", "1")
    monkeypatch.delenv("TVK_PACKED_ATTENTION", raising=False)
    plans.forget_plans()
    config.reload()
    request.addfinalizer(config.reload)
    request.addfinalizer(plans.forget_plans)
    return plans


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    """A user config folder of the test's own, and no shipped configs: lookups see only what the test
    writes (families forget the parameters they looked up, before and after)."""
    from tvk_kernels import config
    from tvk_kernels.kernels.launch import _families

    monkeypatch.setenv("TVK_CONFIG_DIR", str(tmp_path / "configs"))
    monkeypatch.setattr(config, "config_dirs", lambda: [tmp_path / "configs"])
    config.reload()
    _families.clear()
    yield tmp_path / "configs"
    config.reload()
    _families.clear()



# ------------------------------------------------------------------ shipped kernels
# With TVK_SHIPPED_KERNELS=check (make test: the whole suite), every template module the run compiles
# is recorded (TVK_RECORD_KERNELS, inherited by workers and subprocesses), and the run fails if the
# wheel's precompiled list (shipped/kernels.json) lacks one: an installed wheel would need glslc for
# it. TVK_SHIPPED_KERNELS=update (make shipped-kernels) writes the list from the run instead.
def pytest_configure(config):
    if os.environ.get("TVK_SHIPPED_KERNELS") not in ("check", "update"):
        return  # a partial run
    # the same kernels every run: Hypothesis draws shapes and ops, so a random draw could compile a module
    # (an N-d elementwise kernel of another rank) that the last `make shipped-kernels` never saw
    from hypothesis import settings

    settings.register_profile("tvk-deterministic", derandomize=True)
    settings.load_profile("tvk-deterministic")
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller set the folder
    folder = tempfile.mkdtemp(prefix="tvk-kernel-records-")
    os.environ["TVK_RECORD_KERNELS"] = folder
    config._tvk_kernel_records = folder


def pytest_sessionfinish(session, exitstatus):
    folder = getattr(session.config, "_tvk_kernel_records", None)
    if folder is None:
        return
    import shutil

    from tvk_kernels import shipped_kernels

    records = shipped_kernels.read_records(folder)
    shutil.rmtree(folder, ignore_errors=True)
    if os.environ["TVK_SHIPPED_KERNELS"] == "update":
        if exitstatus != 0:  # a failed or cut-short run saw only part of the kernels
            print(f"\nshipped/kernels.json left as it was: the run did not pass (exit status {exitstatus})")
            return
        shipped_kernels.save(records)
        print(f"\nshipped/kernels.json: {len(records)} modules")
        return
    lacking = shipped_kernels.missing(records, shipped_kernels.load())
    if lacking:
        shown = "\n".join(f"  {e['template']} {e['defines']}" for e in lacking[:20])
        print(f"\n{len(lacking)} kernel module(s) compiled by this run are not in shipped/kernels.json, so an "
              f"installed wheel would need glslc for them:\n{shown}\nRun `make shipped-kernels` and commit the list.")
        session.exitstatus = 1
