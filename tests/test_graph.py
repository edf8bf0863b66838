"""Captured command buffers replayed with new inputs (runtime/graph.py)."""
import numpy as np
import pytest

from tvk_kernels.kernels.elementwise import add
from tvk_kernels.kernels.matmul import matmul
from tvk_kernels.runtime.graph import capture
from tvk_kernels.runtime.transfer import upload


def test_replay_recomputes_with_new_inputs(device, rng):
    n = 33
    a_host = rng.standard_normal((n, n), dtype=np.float32)
    b_host = rng.standard_normal((n, n), dtype=np.float32)
    A, B = device.upload(a_host), device.upload(b_host)
    device.synchronize()
    with capture(device) as graph:
        T = device.allocator.alloc(4 * n * n)  # an intermediate: the graph keeps it
        matmul(device, A.address, B.address, T.address, n, n, n)
        C = device.allocator.alloc(4 * n * n)
        add(device, T, A, C, n * n)  # C = A @ B + A
    assert graph.dispatches >= 2 and T in graph.buffers
    # nothing ran yet: the capture only recorded
    for step in range(3):
        a_host = rng.standard_normal((n, n), dtype=np.float32)
        upload(device, a_host, out=A)  # rebind: new data into the captured input buffer
        graph.replay()
        got = device.download(C, np.float32, (n, n))
        np.testing.assert_allclose(got, a_host @ b_host + a_host, rtol=1e-4, atol=1e-4)
    assert graph.replays == 3


def test_many_kernels_replay_in_order(device):
    """40 dependent kernels in one graph (each doubles the last one's output), replayed twice."""
    x = device.upload(np.full(64, 1.0, np.float32))
    y = device.upload(np.zeros(64, np.float32))
    with capture(device) as graph:
        add(device, x, x, y, 64)
        for _ in range(39):
            add(device, y, y, y, 64)  # in place, each kernel reads the previous one's output
    assert graph.dispatches == 40
    for _ in range(2):
        graph.replay()
    np.testing.assert_array_equal(device.download(y, np.float32, (64,)), np.full(64, 2.0 ** 40, np.float32))


def test_sync_inside_capture_is_an_error_and_the_stream_recovers(device):
    x = device.upload(np.arange(8, dtype=np.float32))
    y = device.allocator.alloc(32)
    with pytest.raises(RuntimeError, match="inside a graph capture"):
        with capture(device):
            add(device, x, x, y, 8)
            device.download(y, np.float32, (8,))
    add(device, x, x, y, 8)
    np.testing.assert_array_equal(device.download(y, np.float32, (8,)), np.arange(8, dtype=np.float32) * 2)
