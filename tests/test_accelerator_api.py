"""torch.accelerator on tvk behaves as on CUDA (torchvk/accelerator.py puts TorchVK's versions there).

Asserted per entry point: the current device index is tvk's, set_device_index and the device_index
block switch it and restore it (two devices: lavapipe beside Mesa's null Navi 10, in a process of
their own); get_device_capability lists dtypes tvk tensors can have; synchronize and the current
stream's synchronize wait for recorded kernels, and query says whether they ran; memory_allocated
and the peaks follow tensors by their bytes, empty_cache gives an emptied block back to the driver,
get_memory_info counts it, empty_host_cache gives staging blocks back; Graph (torch 2.13) replays a
capture with the values eager gives for new inputs copied into the captured one, and the stream's
is_capturing says when a capture is on. Names this torch lacks (torch 2.11 has no Graph, no
empty_host_cache, no Stream.is_capturing) are skipped.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
import torch

import torchvk
from torchvk._storage import get_device, supported_dtypes

accelerator = torch.accelerator
MIB = 1 << 20


def needs(name: str):
    return pytest.mark.skipif(not hasattr(accelerator, name), reason=f"torch {torch.__version__} has no "
                              f"torch.accelerator.{name}")


def test_tvk_is_the_accelerator_with_its_devices():
    assert accelerator.current_accelerator() == torch.device("tvk")
    assert accelerator.current_accelerator(check_available=True) == torch.device("tvk")
    assert accelerator.is_available()
    assert accelerator.device_count() == torchvk.device_count() >= 1


# Run with two Vulkan devices (lavapipe and the null Navi 10 of Mesa's RADV, which compiles but runs
# nothing): switching devices needs a second one, and a process of its own (the devices are listed once).
DEVICE_SWITCHING = """
import warnings
import torch, torchvk
accelerator = torch.accelerator
assert accelerator.device_count() == 2
start = accelerator.current_device_index()
assert start == torch.tvk.current_device()
other = 1 - start

accelerator.set_device_index(other)
assert torch.tvk.current_device() == accelerator.current_device_index() == other
with accelerator.device_index(start):
    assert torch.tvk.current_device() == accelerator.current_device_index() == start
assert accelerator.current_device_index() == other  # restored
with accelerator.device_index(None):  # None: no switch
    assert accelerator.current_device_index() == other

accelerator.set_device_index(f"tvk:{start}")
assert accelerator.current_device_index() == start
assert accelerator.current_stream().device_index == start
assert accelerator.current_stream(other).device_index == other
accelerator.set_stream(torch.tvk.Stream(other))  # a stream's device becomes current
assert accelerator.current_device_index() == other

try:
    accelerator.set_device_index(2)
    raise AssertionError("set_device_index(2) accepted with two devices")
except IndexError:
    pass
assert accelerator.current_device_index() == other  # unchanged by the refused switch

if hasattr(accelerator, "current_device_idx"):  # deprecated names: the same, with a FutureWarning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for index in (start, other):
            accelerator.set_device_idx(index)
            assert accelerator.current_device_idx() == torch.tvk.current_device() == index
    assert {type(w.message) for w in caught} == {FutureWarning}
print("switched")
"""


def _two_device_env() -> dict:
    icds = [found[0] for pattern in ("lvp_icd*.json", "radeon_icd*.json")
            if (found := glob.glob(f"/usr/share/vulkan/icd.d/{pattern}"))]
    if len(icds) < 2:
        pytest.skip("needs Mesa's lavapipe and RADV drivers (mesa-vulkan-drivers)")
    env = dict(os.environ, VK_ICD_FILENAMES=":".join(icds), VK_DRIVER_FILES=":".join(icds),
               RADV_FORCE_FAMILY="navi10")
    env.pop("TVK_VALIDATION", None)  # the null device runs nothing to validate
    env.pop("TVK_DEVICE", None)
    return env


def test_device_index_switches_and_restores_between_two_devices():
    run = subprocess.run([sys.executable, "-c", DEVICE_SWITCHING], env=_two_device_env(), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0 and "switched" in run.stdout, run.stderr[-3000:]


def test_get_device_capability_lists_the_dtypes_tvk_tensors_can_have():
    dtypes = accelerator.get_device_capability()["supported_dtypes"]
    assert dtypes == set(supported_dtypes()) and torch.float32 in dtypes
    assert accelerator.get_device_capability("tvk:0") == accelerator.get_device_capability(0)
    for dtype in dtypes:
        assert torch.equal(torch.ones(3, dtype=dtype, device="tvk").cpu(), torch.ones(3, dtype=dtype))


def test_synchronize_waits_for_recorded_kernels():
    stream = get_device().stream
    x = torch.arange(16, dtype=torch.float32, device="tvk")
    y = x * 2 + 1
    assert stream.recording  # recorded, not yet submitted
    accelerator.synchronize()
    assert not stream.recording and not any(slot.in_flight for slot in stream.slots)
    accelerator.synchronize("tvk:0")
    assert torch.equal(y.cpu(), torch.arange(16, dtype=torch.float32) * 2 + 1)


def test_current_stream_synchronizes_and_reports_pending_work():
    stream = accelerator.current_stream()
    assert stream.device == torch.device("tvk", 0) and stream == torch.Stream(device="tvk")
    y = torch.full((8,), 3.0, device="tvk") * 2
    assert not stream.query()  # torch's stream for a Python backend said True whatever was pending
    stream.synchronize()
    assert stream.query()
    accelerator.set_stream(stream)
    with stream:  # as a context manager, as torch.Stream is
        z = y + 1
    assert torch.equal(z.cpu(), torch.full((8,), 7.0))


def test_memory_allocated_counts_a_tensors_bytes_until_it_is_freed():
    before = accelerator.memory_allocated()
    x = torch.empty(MIB // 4, device="tvk")  # 1 MiB: a multiple of the allocator's alignment
    assert accelerator.memory_allocated() == before + MIB == accelerator.memory_allocated("tvk:0")
    assert accelerator.memory_stats()["allocated_bytes.all.current"] == before + MIB
    assert accelerator.memory.memory_allocated(0) == before + MIB
    del x
    assert accelerator.memory_allocated() == before


def test_peak_memory_holds_the_high_mark_until_reset():
    accelerator.reset_peak_memory_stats()
    current = accelerator.memory_allocated()
    assert accelerator.max_memory_allocated() == current
    x = torch.empty(MIB // 4, device="tvk")
    del x
    assert accelerator.max_memory_allocated() == current + MIB
    assert accelerator.memory_stats()["allocated_bytes.all.peak"] == current + MIB
    accelerator.reset_accumulated_memory_stats()  # tvk keeps no running totals: current and peak stay
    assert accelerator.max_memory_allocated() == current + MIB
    accelerator.reset_peak_memory_stats()
    assert accelerator.max_memory_allocated() == current


def test_empty_cache_gives_an_emptied_block_back_and_get_memory_info_counts_it():
    accelerator.empty_cache()
    reserved = accelerator.memory_reserved()
    free, total = accelerator.get_memory_info()
    heap_sizes = {heap["size"] for heap in get_device().facts.heaps}
    assert total in heap_sizes and 0 < free <= total
    x = torch.empty(33 * MIB // 4, device="tvk")  # past a 32 MiB block: a block of its own
    assert accelerator.memory_reserved() >= reserved + 33 * MIB
    assert accelerator.max_memory_reserved() >= accelerator.memory_reserved()
    budget_known = "VK_EXT_memory_budget" in get_device().extensions
    if not budget_known:  # lavapipe: free is the heap less what TorchVK holds
        assert accelerator.get_memory_info() == (total - accelerator.memory_reserved(), total)
    del x
    assert accelerator.memory_reserved() >= reserved + 33 * MIB  # cached, not given back yet
    accelerator.empty_cache()
    assert accelerator.memory_reserved() <= reserved
    if not budget_known:
        assert accelerator.get_memory_info()[0] >= free


@needs("empty_host_cache")
def test_empty_host_cache_gives_staging_blocks_back():
    staging = get_device().staging
    accelerator.empty_host_cache()
    reserved = staging.stats()["reserved"]
    on_device = torch.zeros(17 * MIB // 4).to("tvk")  # its upload passes through a 17 MiB staging buffer
    accelerator.synchronize()  # the upload has run: its staging buffer is back in the cache
    assert staging.stats()["reserved"] >= reserved + 17 * MIB
    accelerator.empty_host_cache()
    assert staging.stats()["reserved"] == reserved
    assert on_device.sum().item() == 0.0


def _step(x):
    return torch.relu(x * 3 - 4).sum(dim=1)


@needs("Graph")
@pytest.mark.parametrize("how", ["context manager", "capture_begin and capture_end"])
def test_graph_replay_gives_eager_values_for_new_inputs(how):
    inputs = [torch.randn(4, 5, generator=torch.Generator().manual_seed(seed)) for seed in range(3)]
    static_input = torch.zeros(4, 5, device="tvk")
    _step(static_input)  # one eager run first, as before a CUDA graph capture
    graph = accelerator.Graph()
    if how == "context manager":
        with accelerator.current_stream(), graph:  # torch's documented form
            static_output = _step(static_input)
    else:
        graph.capture_begin()
        static_output = _step(static_input)
        graph.capture_end()
    for inp in inputs:
        static_input.copy_(inp.to("tvk"))
        graph.replay()
        assert torch.allclose(static_output.cpu(), _step(inp), atol=1e-6)
    assert graph.recording.replays == len(inputs)
    if hasattr(torch.Stream, "is_capturing"):  # torch 2.13's
        assert not accelerator.current_stream().is_capturing()
        graph.capture_begin()
        capturing = accelerator.current_stream().is_capturing()
        graph.capture_end()
        assert capturing
    graph.reset()
    with pytest.raises(RuntimeError, match="no recording"):
        graph.replay()


@needs("Graph")
def test_graph_capture_with_a_sync_point_raises_and_keeps_nothing():
    x = torch.ones(4, device="tvk")
    graph = accelerator.Graph()
    with pytest.raises(RuntimeError, match="inside a graph capture"):
        with graph:
            (x * 2).sum().item()
    assert graph.recording is None
    assert torch.equal((x + 1).cpu(), torch.full((4,), 2.0))  # eager work runs again
    shared = accelerator.Graph(pool=graph.pool())
    assert shared.pool() == graph.pool() != accelerator.Graph().pool()


@pytest.mark.parametrize("entry_point", ["synchronize", "current_stream", "memory_allocated", "get_memory_info"])
def test_a_device_of_another_type_is_refused(entry_point):
    with pytest.raises(ValueError, match="doesn't match the current accelerator"):
        getattr(accelerator, entry_point)("cpu")

