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


def test_temporaries_are_reused_inside_a_capture_and_kept_from_others(device, rng):
    """Liveness: a temporary that dies inside the capture gives its memory to later kernels of the
    same capture; after the capture that memory belongs to the graph, not to new allocations."""
    n = 4096
    x_host = rng.standard_normal(n, dtype=np.float32)
    X = device.upload(x_host)
    out = device.allocator.alloc(4 * n)
    # ranges earlier tests left cached may serve a temporary at up to twice its size (_best_cached):
    # start from an empty cache so the bound below measures reuse, not what ran before
    device.allocator.empty_cache()
    before = device.allocator.allocated
    with capture(device) as graph:
        cur = X
        for _ in range(20):  # y = x * 2**20, through 20 temporaries of which at most two live at once
            nxt = device.allocator.alloc(4 * n)
            add(device, cur, cur, nxt, n)
            cur = nxt
        add(device, cur, X, out, n)  # out = x * 2**20 + x
        del cur, nxt
    held = device.allocator.allocated - before
    assert held <= 3 * 4 * n, f"the graph holds {held} bytes for 20 temporaries of {4 * n}"
    # new allocations after the capture must not land on the graph's memory
    others = [device.upload(np.full(n, 7.0, np.float32)) for _ in range(4)]
    graph.replay()
    np.testing.assert_allclose(device.download(out, np.float32, (n,)), x_host * 2.0 ** 20 + x_host, rtol=1e-6)
    for o in others:
        np.testing.assert_array_equal(device.download(o, np.float32, (n,)), np.full(n, 7.0, np.float32))
    del graph  # its ranges go back to the allocator
    assert device.allocator.allocated <= before + sum(o.size for o in others)


def test_a_later_graph_puts_its_temporaries_in_an_earlier_graphs_scratch(device, rng):
    """Graphs run one after another, so a capture told which allocations are temporaries places
    them in other graphs' scratch ranges; both graphs still compute the right thing."""
    n = 4096
    alloc = device.allocator
    x_host = rng.standard_normal(n, dtype=np.float32)
    X = device.upload(x_host)
    out1, out2 = alloc.alloc(4 * n), alloc.alloc(4 * n)
    device.synchronize()

    def chain(out):  # out = x * 16 + x, through 4 temporaries
        cur = X
        for _ in range(4):
            nxt = alloc.alloc(4 * n)
            add(device, cur, cur, nxt, n)
            cur = nxt
        add(device, cur, X, out, n)

    with capture(device) as g1:
        chain(out1)
    assert g1.temps == {0, 1, 2, 3} and not g1.broken
    before = alloc.allocated
    with capture(device, temps=g1.temps) as g2:
        chain(out2)
    assert not g2.broken and alloc.allocated == before, "the second graph took new memory for its temporaries"
    assert set(g2.reserved) <= set(g1.reserved)
    g2.replay()
    g1.replay()
    want = x_host * 16 + x_host
    for out in (out1, out2):
        np.testing.assert_allclose(device.download(out, np.float32, (n,)), want, rtol=1e-6)
    del g1  # the shared ranges stay with g2 while it lives
    g2.replay()
    np.testing.assert_allclose(device.download(out2, np.float32, (n,)), want, rtol=1e-6)


def test_a_wrong_plan_of_temporaries_marks_the_graph_broken(device):
    n = 1024
    alloc = device.allocator
    X = device.upload(np.ones(n, np.float32))
    with capture(device) as g1:
        t = alloc.alloc(4 * n)
        add(device, X, X, t, n)
        del t
    with capture(device, temps={0}) as g2:  # allocation 0 is kept past the capture: not a temporary
        kept = alloc.alloc(4 * n)
        add(device, X, X, kept, n)
    assert kept.borrowed is not None and g2.broken
    del g2, kept
    assert not g1.broken
