"""The foundation: devices, memory, transfers, compiler, stream, the add kernel."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tvk_kernels
from tvk_kernels.errors import (CompilerNotFoundError, DeviceNotFoundError, FreedBufferError, OutOfMemoryError,
                                ShaderCompileError)
from tvk_kernels.kernels.elementwise import add
from tvk_kernels.runtime import compiler
from tvk_kernels.runtime.memory import parse_bytes


def test_list_devices_reports_what_matters():
    devices = tvk_kernels.list_devices()
    assert devices, "at least one Vulkan device (lavapipe on CI)"
    f = devices[0]
    assert f.index == 0 and f.name
    assert f.max_shared_memory >= 16384
    assert f.max_workgroup_invocations >= 128
    assert f.min_subgroup_size <= f.subgroup_size <= f.max_subgroup_size
    assert f.features["buffer_device_address"]
    assert f.heaps and f.heaps[0]["size"] > 0


def test_tvk_info_cli_lists_device():
    out = subprocess.run([sys.executable, "-m", "tvk_kernels.info"], capture_output=True, text=True, check=True)
    name = tvk_kernels.list_devices()[0].name
    assert f"[0] {name}" in out.stdout
    for word in ("subgroup size", "shared memory", "cooperative matrix", "timestamps", "heap 0", "driver"):
        assert word in out.stdout


def test_missing_device_index_is_a_clear_error():
    with pytest.raises(DeviceNotFoundError, match="does not exist.*tvk-info"):
        tvk_kernels.get_device(99)


@pytest.mark.parametrize("n", [0, 1, 3, 7, 255, 257, 1001, 65537])
def test_upload_download_round_trip_odd_sizes(device, n, rng):
    for dtype in (np.float32, np.int64, np.uint8, np.float16):
        a = (rng.standard_normal(n) * 100).astype(dtype)
        buf = device.upload(a)
        np.testing.assert_array_equal(device.download(buf, dtype, (n,)), a)
        buf.free()


@pytest.mark.parametrize("n", [1, 7, 1000, 1_000_000])
def test_add_matches_numpy(device, n, rng):
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    A, B, C = device.upload(a), device.upload(b), device.allocator.alloc(4 * n)
    add(device, A, B, C, n)
    np.testing.assert_array_equal(device.download(C, np.float32, (n,)), a + b)


def test_add_unaligned_view_uses_scalar_path(device, rng):
    """A view starting 4 bytes into a buffer cannot use 16-byte vector loads."""
    n = 37
    a = rng.standard_normal(n + 1, dtype=np.float32)
    b = rng.standard_normal(n + 1, dtype=np.float32)
    A, B, C = device.upload(a), device.upload(b), device.allocator.alloc(4 * (n + 1))

    class View:  # anything with an address is a kernel operand
        def __init__(self, buf, off):
            self.address = buf.address + off

    add(device, View(A, 4), View(B, 4), View(C, 4), n)
    out = device.download(C, np.float32, (n + 1,))
    np.testing.assert_array_equal(out[1:], a[1:] + b[1:])


def test_deferred_until_sync(device, rng):
    """Ops are recorded, not run, until a sync point."""
    n = 1000
    a = rng.standard_normal(n, dtype=np.float32)
    A, C = device.upload(a), device.allocator.alloc(4 * n)
    device.synchronize()
    submits = device.stream.submits
    for _ in range(5):
        add(device, A, A, C, n)
    assert device.stream.recording and device.stream.submits == submits
    np.testing.assert_array_equal(device.download(C, np.float32, (n,)), a + a)
    assert device.stream.submits == submits + 1


def test_timestamps_measure_each_dispatch(device):
    n = 4096
    A, C = device.upload(np.ones(n, np.float32)), device.allocator.alloc(4 * n)
    with device.stream.profiling() as records:
        for _ in range(3):
            add(device, A, A, C, n)
    assert len(records) == 3
    assert all(label == "add" and t > 0 for label, t in records)


def test_memory_cap_raises_and_runtime_recovers(device, rng):
    alloc = device.allocator
    alloc.empty_cache()
    limit = alloc.reserved + (8 << 20)
    alloc.set_limit(limit)
    try:
        with pytest.raises(OutOfMemoryError) as err:
            alloc.alloc(64 << 20)
        msg = str(err.value)
        assert "tried to allocate" in msg and "cap" in msg and "still usable" in msg
        assert err.value.limit == limit and err.value.requested == 64 << 20
        # still usable: a small allocation and a kernel work under the same cap
        n = 1000
        a = rng.standard_normal(n, dtype=np.float32)
        A, C = device.upload(a), alloc.alloc(4 * n)
        add(device, A, A, C, n)
        np.testing.assert_array_equal(device.download(C, np.float32, (n,)), a + a)
    finally:
        alloc.set_limit(None)


def test_memory_accounting_and_reuse(device):
    alloc = device.allocator
    before = alloc.allocated
    buf = alloc.alloc(1000)
    assert alloc.allocated == before + 1024  # rounded to 256 B
    assert alloc.peak_allocated >= alloc.allocated
    addr = buf.address
    buf.free()
    assert alloc.allocated == before
    again = alloc.alloc(1000)  # the cached range comes back
    assert again.address == addr
    again.free()


def test_use_after_free_is_an_error(device):
    buf = device.upload(np.ones(4, np.float32))
    buf.free()
    with pytest.raises(FreedBufferError):
        device.download(buf, np.float32, (4,))


def test_parse_bytes():
    assert parse_bytes("512M") == 512 << 20
    assert parse_bytes("6GB") == 6 << 30
    assert parse_bytes("1.5GiB") == 3 << 29
    assert parse_bytes("4096") == 4096
    with pytest.raises(ValueError):
        parse_bytes("lots")


def test_shader_compile_error_names_file_and_line(tmp_path):
    bad = tmp_path / "broken.comp"
    bad.write_text("#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n  undefined_thing = 1;\n}\n")
    with pytest.raises(ShaderCompileError) as err:
        compiler.compile_file(bad)
    assert "broken.comp:4" in str(err.value)


def test_missing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("VULKAN_SDK", raising=False)
    monkeypatch.delenv("TVK_GLSLC", raising=False)
    monkeypatch.setenv("TVK_CACHE_DIR", str(tmp_path / "cache"))  # nothing cached: must compile
    src = tmp_path / "ok.comp"
    src.write_text("#version 450\nlayout(local_size_x = 1) in;\nvoid main() {}\n")
    with pytest.raises(CompilerNotFoundError, match="apt-get install glslc"):
        compiler.compile_file(src)


def test_spirv_cache_hit_needs_no_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("TVK_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "ok.comp"
    src.write_text("#version 450\nlayout(local_size_x = 1) in;\nvoid main() {}\n")
    first = compiler.compile_file(src, {"X": 1})
    compiler._memo.clear()
    monkeypatch.setenv("PATH", str(tmp_path))
    assert compiler.compile_file(src, {"X": 1}) == first
    assert first[:4] == b"\x03\x02\x23\x07"  # SPIR-V magic


def test_a_template_names_its_spirv_target(tmp_path, monkeypatch):
    """A template line `// target-env: vulkan1.3` compiles it to SPIR-V 1.6 (extensions such as
    GL_NV_cooperative_matrix2 need it); without one, Vulkan 1.2's SPIR-V 1.5. The cache keeps them apart."""
    monkeypatch.setenv("TVK_CACHE_DIR", str(tmp_path / "cache"))
    body = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {}\n"
    plain, newer = tmp_path / "plain.comp", tmp_path / "newer.comp"
    plain.write_text(body)
    newer.write_text("// target-env: vulkan1.3\n" + body)
    assert compiler.target_env(plain) == "vulkan1.2" and compiler.target_env(newer) == "vulkan1.3"
    assert compiler.compile_file(plain)[4:8] == b"\x00\x05\x01\x00"  # SPIR-V version 1.5
    assert compiler.compile_file(newer)[4:8] == b"\x00\x06\x01\x00"  # 1.6


def test_validation_layer_reports_misuse(device):
    """The layer is really on: a zero-size buffer is invalid usage and gets reported."""
    from tvk_kernels.runtime.vk import NULL, ffi, lib, new

    if not device.instance.validation:
        pytest.skip("validation layer not enabled (TVK_VALIDATION unset)")
    keep = []
    info = new("VkBufferCreateInfo", keep, size=0, usage=lib.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT)
    out = ffi.new("VkBuffer*")
    lib.vkCreateBuffer(device.handle, info, NULL, out)
    messages = device.instance.log.take()
    if out[0] != NULL:
        lib.vkDestroyBuffer(device.handle, out[0], NULL)
    assert any("size" in m for m in messages), messages


def test_launch_blocking_waits_per_dispatch():
    code = (
        "import numpy as np, tvk_kernels\n"
        "from tvk_kernels.kernels.elementwise import add\n"
        "d = tvk_kernels.get_device(0)\n"
        "A = d.upload(np.ones(8, np.float32)); C = d.allocator.alloc(32)\n"
        "s = d.stream.submits\n"
        "add(d, A, A, C, 8); add(d, A, A, C, 8)\n"
        "assert d.stream.submits >= s + 2 and not d.stream.recording, d.stream.submits\n"
        "print('ok')\n"
    )
    env = dict(os.environ, TVK_LAUNCH_BLOCKING="1")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
