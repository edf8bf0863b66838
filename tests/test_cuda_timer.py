"""The shared GPU-only timer of the torch CUDA peer (tvk_kernels/bench/cuda_timer.py), without CUDA:
its pure parts directly, the CUDA parts against a fake torch.cuda whose GPU clock advances by
kernel time plus a launch gap per eager call, so a timer that measured launches would be caught."""
from __future__ import annotations

import json
import re
import sys
import types
from contextlib import contextmanager
from pathlib import Path

import pytest

from tvk_kernels.bench import cuda_timer

ROOT = Path(__file__).resolve().parents[1]


def test_calls_per_graph_fills_the_budget_and_stays_in_bounds():
    assert cuda_timer.calls_per_graph(1e-6) == cuda_timer.GRAPH_CALLS
    assert cuda_timer.calls_per_graph(0.0) == cuda_timer.GRAPH_CALLS
    assert cuda_timer.calls_per_graph(0.01, max_calls=10, budget=0.05) == 5
    assert cuda_timer.calls_per_graph(2.0) == 1


def test_median():
    assert cuda_timer.median([3.0, 1.0, 2.0]) == 2.0
    assert cuda_timer.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        cuda_timer.median([])


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_spin_up_runs_for_the_time_asked_in_growing_rounds():
    clock, waits = FakeClock(), []

    def run():
        clock.now += 1e-5  # a 10 us kernel

    calls = cuda_timer.spin_up(run, lambda: waits.append(clock.now), seconds=0.3, clock=clock)
    assert 0.3 <= clock.now < 0.3 + 2 * cuda_timer.SPIN_ROUND_SECONDS + 1e-3
    assert calls == round(clock.now / 1e-5)
    assert len(waits) < calls / 100  # rounds grew: not a wait per tiny kernel


def test_spin_up_makes_one_call_when_one_call_outlasts_it():
    clock = FakeClock()

    def run():
        clock.now += 5.0

    assert cuda_timer.spin_up(run, lambda: None, seconds=0.3, clock=clock) == 1
    assert clock.now == 5.0


def profiler_event(us, device="CUDA"):
    """A torch.profiler event as the timer reads it: its device and its duration."""
    return types.SimpleNamespace(device_type=types.SimpleNamespace(name=device),
                                 time_range=types.SimpleNamespace(elapsed_us=lambda: us))


def test_device_seconds_counts_only_device_events():
    events = [profiler_event(30.0), profiler_event(1000.0, "CPU"), profiler_event(12.0)]
    assert cuda_timer.device_seconds(events) == pytest.approx(42e-6)


class FakeCuda:
    """torch.cuda, as far as the timer uses it. GPU time in ms: an eager call costs its kernel plus
    a launch gap; a graph replay costs its kernels only."""

    def __init__(self, kernel_ms=0.002, launch_ms=0.01, capture_fails=False):
        self.kernel_ms, self.launch_ms, self.capture_fails = kernel_ms, launch_ms, capture_fails
        self.gpu_ms, self.capturing, self.replays = 0.0, None, 0
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                self.at = None

            def record(self):
                self.at = fake.gpu_ms

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return other.at - self.at

        class CUDAGraph:
            def __init__(self):
                self.calls = 0

            def replay(self):
                fake.replays += 1
                fake.gpu_ms += self.calls * fake.kernel_ms

        class Stream:
            def wait_stream(self, other):
                pass

        self.Event, self.CUDAGraph, self.Stream = Event, CUDAGraph, Stream

    def call(self):  # the fn under test
        if self.capturing is not None:
            if self.capture_fails:
                raise RuntimeError("operation not permitted when stream is capturing")
            self.capturing.calls += 1
        else:
            self.gpu_ms += self.launch_ms + self.kernel_ms

    def current_stream(self):
        return self.Stream()

    @contextmanager
    def stream(self, s):
        yield

    @contextmanager
    def graph(self, g):
        self.capturing = g
        try:
            yield
        finally:
            self.capturing = None

    def synchronize(self):
        pass


@pytest.fixture
def fake_torch(monkeypatch):
    def install(cuda, events=()):
        profiler = types.ModuleType("torch.profiler")
        profiler.ProfilerActivity = types.SimpleNamespace(CUDA="cuda")

        @contextmanager
        def profile(activities):
            yield types.SimpleNamespace(events=lambda: list(events))

        profiler.profile = profile
        torch = types.ModuleType("torch")
        torch.cuda, torch.profiler = cuda, profiler
        monkeypatch.setitem(sys.modules, "torch", torch)
        monkeypatch.setitem(sys.modules, "torch.profiler", profiler)
        return cuda

    return install


def test_graph_timing_reports_kernel_time_per_call_not_launches(fake_torch):
    cuda = fake_torch(FakeCuda(kernel_ms=0.002, launch_ms=0.01))
    seconds, method = cuda_timer.time_cuda(cuda.call, repeats=5, spin_seconds=0.0)
    assert method == cuda_timer.CUDA_GRAPH
    assert seconds == pytest.approx(0.002e-3)
    assert cuda.replays >= 5 + 1  # the timed replays, after at least one spin-up replay


def test_long_calls_get_a_graph_of_fewer_calls(fake_torch):
    cuda = fake_torch(FakeCuda(kernel_ms=20.0, launch_ms=0.0))
    graphs = []

    class RecordedGraph(cuda.CUDAGraph):
        def __init__(self):
            super().__init__()
            graphs.append(self)

    cuda.CUDAGraph = RecordedGraph
    seconds = cuda_timer.graph_seconds(cuda.call, repeats=3, spin_seconds=0.0)
    assert seconds == pytest.approx(20e-3)
    assert [g.calls for g in graphs] == [cuda_timer.calls_per_graph(20e-3)] == [2]


def test_capture_failure_falls_back_to_profiled_kernels(fake_torch):
    events = [profiler_event(6.0)] * cuda_timer.PROFILED_CALLS  # one 6 us kernel per profiled call
    cuda = fake_torch(FakeCuda(capture_fails=True), events)
    seconds, method = cuda_timer.time_cuda(cuda.call, repeats=5, spin_seconds=0.0)
    assert method == cuda_timer.PROFILER_KERNELS
    assert seconds == pytest.approx(6e-6)


def test_the_fallback_never_falls_back_to_launch_timing(fake_torch):
    cuda = fake_torch(FakeCuda(capture_fails=True), events=[])  # the profiler saw no kernels
    with pytest.raises(RuntimeError, match="no CUDA kernels"):
        cuda_timer.time_cuda(cuda.call, repeats=5, spin_seconds=0.0)


def test_sweep_peer_scripts_get_the_shared_timer_and_hand_back_its_methods():
    from torchvk.experiments.sweep_common import CUDA_TIMER, run_cuda_peer

    assert cuda_timer.source() in CUDA_TIMER
    script = """
def time_cuda(fn, repeats):  # stands in for the real one: this machine has no CUDA
    return 0.25 * repeats, "cuda_graph" if repeats == 2 else "profiler_kernels"
print(json.dumps([median_seconds(None, 2), median_seconds(None, 4)]))
"""
    assert run_cuda_peer(script, None, "test") == ([0.5, 1.0], ["cuda_graph", "profiler_kernels"])


def test_attention_peer_script_starts_with_the_shared_timer(monkeypatch):
    from torchvk.experiments import attention_bench

    seen = {}

    def fake_run(args, **kwargs):
        seen["code"] = args[-1]
        return types.SimpleNamespace(returncode=0, stdout=json.dumps({}) + "\n")

    monkeypatch.setattr(attention_bench.subprocess, "run", fake_run)
    attention_bench._cuda_sdpa(attention_bench.QUICK)
    assert seen["code"].startswith(cuda_timer.source())
    assert "time_cuda(fn)" in seen["code"]


BENCH_SOURCES = sorted({*ROOT.glob("tvk_kernels/bench/*.py"), *ROOT.glob("torchvk/experiments/*.py"),
                        *ROOT.glob("benchmarks/*.py")} - {ROOT / "tvk_kernels/bench/cuda_timer.py"})


def test_no_benchmark_times_cuda_with_its_own_events():
    """CUDA events around launches time the launch rate on small shapes: only the shared timer may use them."""
    assert ROOT / "tvk_kernels/bench/matmul.py" in BENCH_SOURCES
    offenders = [f"{path.relative_to(ROOT)}:{n}" for path in BENCH_SOURCES
                 for n, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"elapsed_time\(|cuda\.Event\(", line)]
    assert not offenders, f"time torch CUDA with tvk_kernels/bench/cuda_timer.py instead: {offenders}"
