"""tvk from several Python threads at once (the runtime lock, tvk_kernels/runtime/lock.py): the
same results as the same work done serially, no crash, no hang, and no Vulkan validation
message (the layer reports a command buffer or queue used from two threads at once)."""
import subprocess
import sys
import threading
import time

import pytest
import torch

import torchvk
from tvk_kernels.runtime.lock import runtime_lock

THREADS, OPS = 4, 500


def run_threads(targets, timeout=120):
    """Start one thread per function, wait for all; re-raise the first error a thread met."""
    errors, threads = [], []
    for fn in targets:
        def body(fn=fn):
            try:
                fn()
            except BaseException as e:  # noqa: BLE001  (handed to the test)
                errors.append(e)
        threads.append(threading.Thread(target=body, daemon=True))
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0))
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


def small_ops(seed: int, sync: bool) -> list:
    """OPS small ops (elementwise, matmul, reductions); with sync, .item() and .cpu() among them."""
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(8, 8, generator=g).to("tvk"), torch.randn(8, 8, generator=g).to("tvk")
    acc, seen = torch.zeros(8, 8, device="tvk"), []
    for i in range(OPS):
        step = i % 5
        if step == 0:
            acc = acc + a * 0.5
        elif step == 1:
            acc = acc - (a @ b) * 0.01
        elif step == 2:
            acc = torch.tanh(acc)
        elif step == 3:
            acc = acc + acc.sum(dim=1, keepdim=True) * 0.001
        elif sync:
            seen.append(acc.mean().item() if i % 10 == 4 else acc.amax(dim=0).cpu())
    return seen + [acc.cpu()]


def test_threads_give_the_serial_results():
    expected = [small_ops(s, sync=s % 2 == 0) for s in range(THREADS)]
    got = [None] * THREADS

    def worker(s):
        got[s] = small_ops(s, sync=s % 2 == 0)

    run_threads([lambda s=s: worker(s) for s in range(THREADS)])
    for s in range(THREADS):
        assert len(got[s]) == len(expected[s])
        for x, y in zip(got[s], expected[s]):
            torch.testing.assert_close(x, y)


def test_training_in_one_thread_while_another_reads_item():
    def train(steps=30):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to("tvk")
        opt = torchvk.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)  # fused: kernels without dispatch
        x, y = torch.randn(32, 6).to("tvk"), torch.randint(0, 3, (32,)).to("tvk")
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    expected = train()
    probe_cpu = torch.randn(64)
    probe = probe_cpu.to("tvk")
    trained, reads, done = [], [], threading.Event()

    def trainer():
        try:
            trained.extend(train())
        finally:
            done.set()

    def reader():
        while not done.is_set() or not reads:
            reads.append((probe * 2).sum().item())

    run_threads([trainer, reader])
    for p, e in zip(trained, expected):
        torch.testing.assert_close(p, e)
    assert len(trained) == len(expected)
    for value in reads:
        assert value == pytest.approx((probe_cpu * 2).sum().item(), rel=1e-5, abs=1e-5)


def test_other_threads_wait_for_a_graph_capture():
    """Work from another thread during a capture must run (later), not be recorded into the graph."""
    x = torch.arange(4, dtype=torch.float32).to("tvk")
    torch.tvk.synchronize()
    capturing, other_done = threading.Event(), threading.Event()
    other = {}

    def capture():
        with torchvk.graph() as g:
            y = x * 2
            capturing.set()
            other_done.wait(0.5)  # the other thread cannot finish while the capture lasts
        other["finished_during_capture"] = other_done.is_set()
        g.replay()
        other["captured"] = y.cpu()

    def outsider():
        capturing.wait(60)
        other["value"] = (torch.ones(4, device="tvk") + 1).cpu()
        other_done.set()

    run_threads([capture, outsider])
    assert other["finished_during_capture"] is False
    torch.testing.assert_close(other["value"], torch.full((4,), 2.0))
    torch.testing.assert_close(other["captured"], torch.arange(4, dtype=torch.float32) * 2)


def test_a_buffer_freed_on_a_thread_that_cannot_take_the_lock_is_released_later():
    """The garbage collector may free a tensor on a thread the lock holder waits for (a pipeline
    build thread): that free must not wait for the lock (a deadlock); it is done later."""
    holder = [torch.empty(1 << 16, device="tvk")]  # 256 KiB
    before = torchvk.memory_allocated()
    with runtime_lock:
        freer = threading.Thread(target=holder.clear)  # the last reference dies on that thread
        freer.start()
        freer.join(30)
        assert not freer.is_alive(), "freeing a buffer waited for the lock"
        allocator = torchvk.memory._alloc(None)
        assert allocator.allocated == before and allocator.later  # queued, not yet released
    assert torchvk.memory_allocated() < before - (1 << 17)  # done once the lock is free (memory stats do it)
    assert not allocator.later


_FIRST_USE = r"""
import threading, torch, torchvk
barrier, devices = threading.Barrier(4), []
def first_use():
    barrier.wait()
    devices.append(torch.ones(3, device="tvk")._tvk.device)
threads = [threading.Thread(target=first_use) for _ in range(4)]
[t.start() for t in threads]
[t.join(120) for t in threads]
print("devices opened:", len({id(d) for d in devices}), "of", len(devices))
"""


def test_threads_using_the_device_first_at_once_open_it_once():
    """A fresh process: four threads whose first tvk op starts at once share one device (each
    had opened its own, with its own stream and allocator)."""
    out = subprocess.run([sys.executable, "-c", _FIRST_USE], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "devices opened: 1 of 4" in out.stdout, out.stdout
