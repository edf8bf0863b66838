"""Every test runs on the first Vulkan device (lavapipe on CI) with the Khronos validation
layer on, and fails if the layer reports anything."""
import os
import tempfile

os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
os.environ.setdefault("TVK_VALIDATION", "1")
os.environ.setdefault("TVK_CACHE_DIR", os.path.join(tempfile.gettempdir(), "tvk-test-cache"))

import numpy as np  # noqa: E402
import pytest  # noqa: E402


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

