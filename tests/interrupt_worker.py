"""Interrupt short trainings on tvk at many chosen points, in a process of its own (a crash must fail
the test, not pytest), and print one JSON line: {"scenarios": [{"name", "problems", "losses"}],
"cpu_backward_interrupt": what plain torch on the CPU raises for a Ctrl-C inside backward}.
tests/test_interrupts.py judges it; `python tests/interrupt_worker.py GROUP` runs one group:

  eager     an MLP and a small CNN, SGD with momentum. One step is first run counting the calls of
            each runtime entry (stream, allocator, waits, Vulkan calls) and in which phase of the
            step each came (forward, backward, optimizer step, readback); then a step is interrupted
            at the first call of every entry in every phase: KeyboardInterrupt raised at the call
            (as if Ctrl-C came just before it), or SIGINT sent just after it returns (a real Ctrl-C
            there: after a vkQueueSubmit, a fence wait, a recorded dispatch), or sent from a tensor
            hook inside backward. And a Ctrl-C pending on the main thread, beside another thread's op.
  runtime   tvk_kernels' own API (no torch): uploads, adds and a readback, interrupted at up to four
            calls of every runtime entry it makes (the last frees run as work() returns).
  compiled  torchvk.compile and torch.compile(backend="tvk") models interrupted while their graphs
            are recorded and replayed (forward and backward), and in the eager optimizer step.
  timers    SIGINT at random times during eager training (a timer's signal, handled as Ctrl-C);
            one during a wait for long GPU work: it must stop the wait while the GPU still runs,
            and the next readback and upload must be right; one in time.sleep: raised at once.

Every interrupted step must raise KeyboardInterrupt to this script. Then: no runtime lock held, the
stream idle after a synchronize with no submitted command buffer left unwaited, no validation
message, grad mode on. The interrupted step may have updated part of the model and optimizer (as on
the CPU), so both are reloaded from the CPU reference's state of before it; tvk and the CPU then
train on for two steps, whose losses must agree.
"""
import copy
import json
import os
import random
import signal
import sys
import threading
import time

# deterministic call counts: no early submit (it depends on GPU timing), a short batch so that steps
# submit in the middle and command buffers are begun and retired mid-step
os.environ.setdefault("TVK_EARLY_SUBMIT", "0")
os.environ.setdefault("TVK_BATCH", "8")
sys.setrecursionlimit(10000)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def cpu_backward_interrupt() -> str:
    """What plain torch (torchvk not imported yet) raises for a Ctrl-C inside a CPU backward."""
    m = nn.Linear(4, 3)
    m.weight.register_hook(lambda g: signal.raise_signal(signal.SIGINT))
    try:
        m(torch.randn(2, 4)).sum().backward()
    except BaseException as e:  # noqa: BLE001  (the type is the answer)
        return type(e).__name__
    return "nothing"


CPU_BACKWARD = cpu_backward_interrupt()

import torchvk  # noqa: E402,F401
from tvk_kernels import get_device  # noqa: E402
from tvk_kernels.runtime import stream as stream_module  # noqa: E402
from tvk_kernels.runtime import graph as graph_module  # noqa: E402
from tvk_kernels.runtime import interrupts  # noqa: E402
from tvk_kernels.runtime.instance import Instance  # noqa: E402
from tvk_kernels.runtime.lock import runtime_lock  # noqa: E402
from tvk_kernels.runtime.memory import Allocator, DeviceBuffer  # noqa: E402
from tvk_kernels.runtime.stream import Stream  # noqa: E402
from tvk_kernels.runtime.vk import lib  # noqa: E402

DEVICE = get_device()
GEN = torch.Generator().manual_seed(0)


def mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 3))


def batches(shape, n=64):
    return [(torch.randn(4, *shape, generator=GEN), torch.randint(0, 3, (4,), generator=GEN)) for _ in range(n)]


# ------------------------------------------------------------------ a model trained on tvk and on the CPU
phase = ["idle"]  # which part of a step runs: the counting pass files each call under it


class Pair:
    """A CPU reference model and its tvk copy, each with its SGD optimizer."""

    def __init__(self, make, shape, compile_with=None):
        torch.manual_seed(0)
        self.cpu = make()
        self.tvk = copy.deepcopy(self.cpu).to("tvk")
        self.cpu_opt = torch.optim.SGD(self.cpu.parameters(), lr=0.05, momentum=0.9)
        self.tvk_opt = torch.optim.SGD(self.tvk.parameters(), lr=0.05, momentum=0.9)
        self.run = compile_with(self.tvk) if compile_with else self.tvk
        self.data = batches(shape)
        self.k = 0

    def batch(self):
        self.k = (self.k + 1) % len(self.data)
        return self.data[self.k]

    def tvk_step(self, x, y) -> float:
        phase[0] = "forward"
        self.tvk_opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.run(x.to("tvk")), y.to("tvk"))
        phase[0] = "backward"
        loss.backward()
        phase[0] = "optimizer"
        self.tvk_opt.step()
        phase[0] = "readback"
        value = loss.item()
        phase[0] = "idle"
        return value

    def cpu_step(self, x, y) -> float:
        self.cpu_opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.cpu(x), y)
        loss.backward()
        self.cpu_opt.step()
        return loss.item()

    def resync(self):
        """The tvk model and optimizer take the CPU reference's state (an interrupted step may have
        updated part of them)."""
        self.tvk_opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            self.tvk.load_state_dict(self.cpu.state_dict())
        self.tvk_opt.load_state_dict(self.cpu_opt.state_dict())

    def train_on(self, steps=2):
        """[tvk losses, cpu losses] of the next steps, from the same state and batches."""
        self.resync()
        tvk, cpu = [], []
        for _ in range(steps):
            x, y = self.batch()
            tvk.append(self.tvk_step(x, y))
            cpu.append(self.cpu_step(x, y))
        return [tvk, cpu]


# ------------------------------------------------------------------ injection points
class Point:
    """The n-th call of owner.name raises KeyboardInterrupt at its start ("raise"), or sends SIGINT
    just after it returns ("signal"): Ctrl-C before the call, or right after it."""

    def __init__(self, owner, name, mode, n=0):
        self.owner, self.name, self.mode, self.n = owner, name, mode, n
        self.calls: list = []  # the phase of each call, while counting
        self.fired = False  # whether the n-th call came (a step may make fewer calls than the counted one)

    @property
    def label(self):
        owner = getattr(self.owner, "__name__", str(self.owner)).split(".")[-1]
        return f"{owner}.{self.name} {self.mode} #{self.n}"

    def __enter__(self):
        self.original = original = getattr(self.owner, self.name)
        count = [0]

        def hooked(*args, **kwargs):
            count[0] += 1
            if self.n == 0:
                self.calls.append(phase[0])
            elif count[0] == self.n and self.mode == "raise":
                self.fired = True
                raise KeyboardInterrupt
            result = original(*args, **kwargs)
            if count[0] == self.n and self.mode == "signal":
                self.fired = True
                signal.raise_signal(signal.SIGINT)
            return result

        setattr(self.owner, self.name, hooked)
        return self

    def __exit__(self, *exc):
        setattr(self.owner, self.name, self.original)


def entry_points():
    """(owner, name, mode) of what a step calls in the runtime."""
    raising = [(Stream, n) for n in ("dispatch", "copy", "fill", "keep_alive", "submit", "synchronize", "_begin",
                                     "_retire")]
    raising += [(Allocator, "alloc"), (stream_module, "wait_for_fence")]
    signalling = [(stream_module, "check"), (stream_module, "_vkCmdDispatch"), (stream_module, "wait_for_fence"),
                  (Stream, "submit"), (Allocator, "alloc"), (DeviceBuffer, "free")]
    return [(o, n, "raise") for o, n in raising] + [(o, n, "signal") for o, n in signalling]


def chosen_points(pair, graph=False):
    """The first call of every entry in every phase of a step (counted on one step)."""
    owners = entry_points() + ([(graph_module.Graph, "replay", "raise"), (graph_module, "check", "signal")]
                               if graph else [])
    counters = [Point(o, n, mode) for o, n, mode in owners if hasattr(o, n)]
    x, y = pair.batch()
    for c in counters:
        c.__enter__()
    try:
        pair.tvk_step(x, y)
    finally:
        for c in reversed(counters):
            c.__exit__()
    points = []
    for c in counters:
        seen = set()
        for i, ph in enumerate(c.calls):
            if ph not in seen and ph != "idle":
                seen.add(ph)
                points.append(Point(c.owner, c.name, c.mode, i + 1))
    missing = [f"{getattr(o, '__name__', o)}.{n}" for o, n, _ in owners if not hasattr(o, n)]
    return points, missing


class HookSignal:
    """SIGINT sent from a tensor hook on the model's n-th parameter: Ctrl-C inside backward."""

    def __init__(self, params, n):
        self.param, self.n = params[n], n
        self.label = f"backward hook on parameter {n} signal"

    def __enter__(self):
        self.handle = self.param.register_hook(lambda g: signal.raise_signal(signal.SIGINT))

    def __exit__(self, *exc):
        self.handle.remove()


# ------------------------------------------------------------------ what an interrupt must leave
def runtime_problems() -> list:
    problems = []
    if runtime_lock._is_owned():
        problems.append("the runtime lock is still held by this thread")
    got = []
    t = threading.Thread(target=lambda: got.append(runtime_lock.acquire(timeout=5) and runtime_lock.release() is None))
    t.start()
    t.join()
    if got != [True]:
        problems.append("another thread cannot take the runtime lock")
    try:
        torch.tvk.synchronize()
    except KeyboardInterrupt:
        problems.append("a KeyboardInterrupt raised late, by the next synchronize")
    st = DEVICE.stream
    if st.recording:
        problems.append("the stream is still recording after a synchronize")
    if st.graphs_in_flight:
        problems.append("graphs in flight after a synchronize")
    for i, slot in enumerate(st.slots):
        status = lib.vkGetFenceStatus(DEVICE.handle, slot.fence)
        if slot.in_flight or status == lib.VK_SUCCESS:
            problems.append(f"command buffer {i} was submitted and is not waited for (fence status {status})")
    if Instance._singleton is not None:
        problems += [f"validation: {m[:300]}" for m in Instance._singleton.log.take()]
    if not torch.is_grad_enabled():
        problems.append("grad mode left off")
    if interrupts.state.caught:
        problems.append("a Ctrl-C is still pending: it would be raised later, by some unrelated call")
        interrupts.state.caught = False  # dropped, so that the next scenarios are judged on their own
    if sys.getprofile() is not None:
        problems.append("the runtime's profile hook for a pending Ctrl-C is still set")
    return problems


def a_call():
    """Python raises a Ctrl-C that came as the step returned (freeing its buffers) at the next call."""


def interrupted(step, *args) -> list:
    """Problems of an interrupted step: it must raise KeyboardInterrupt."""
    try:
        step(*args)
        a_call()
    except KeyboardInterrupt:
        return []
    except BaseException as e:  # noqa: BLE001
        return [f"raised {type(e).__name__}: {str(e)[:300]}"]
    return ["no KeyboardInterrupt"]


def scenario(pair, injection, label=None) -> dict:
    pair.resync()
    x, y = pair.batch()
    with injection:
        problems = interrupted(pair.tvk_step, x, y)
    phase[0] = "idle"
    # a step may make fewer calls of an entry than the counted one did (the H200's compiled replays):
    # an injection that never came tests nothing and is reported as not reached
    reached = getattr(injection, "fired", True)
    if not reached:
        problems = [p for p in problems if p != "no KeyboardInterrupt"]
    problems += runtime_problems()
    losses = pair.train_on()
    problems += runtime_problems()
    return {"name": label or injection.label, "problems": problems, "losses": losses, "reached": reached}


# ------------------------------------------------------------------ groups
def eager() -> list:
    out = []
    for name, make, shape in (("mlp", mlp, (6,)), ("cnn", cnn, (1, 6, 6))):
        pair = Pair(make, shape)
        pair.train_on(1)  # pipelines built, optimizer state made
        points, missing = chosen_points(pair)
        out += [{"name": f"{name}: no runtime entry {m}", "problems": ["missing"], "losses": [[], []]} for m in missing]
        for p in points:
            out.append(scenario(pair, p, f"{name}: {p.label}"))
        params = list(pair.tvk.parameters())
        for n in (0, len(params) - 1):
            out.append(scenario(pair, HookSignal(params, n), f"{name}: {HookSignal(params, n).label}"))
    out.append(pending_on_main_thread())
    return out


def pending_on_main_thread() -> dict:
    """A Ctrl-C kept pending on the main thread (it came in a __del__ or under torch's C++) is the main
    thread's: another thread's tvk op must not raise it, the main thread's next op must."""
    problems, raised = [], []
    x = torch.ones(3, device="tvk")
    interrupts.state.caught = True  # as on_sigint leaves it there

    def other_thread():
        try:
            (x + 1).cpu()
        except BaseException as e:  # noqa: BLE001
            raised.append(type(e).__name__)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    if raised:
        problems.append(f"another thread's tvk op raised {raised[0]}")
    try:
        (x + 1).cpu()
        problems.append("the main thread's next tvk op did not raise the pending Ctrl-C")
    except KeyboardInterrupt:
        pass
    problems += runtime_problems()
    return {"name": "eager: a pending Ctrl-C is raised on the main thread only", "problems": problems,
            "losses": [[], []]}


def runtime() -> list:
    """The runtime without torch (tvk_kernels' own API): here Ctrl-C is raised at once, between
    any two lines of the stream, so its critical sections must hold on their own."""
    import numpy as np
    from tvk_kernels.kernels.elementwise import add

    n = 1000
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    want = a.copy()
    for _ in range(12):
        want = (want + b) + b

    def work():
        phase[0] = "work"
        A, B, C = DEVICE.upload(a), DEVICE.upload(b), DEVICE.allocator.alloc(4 * n)
        for _ in range(12):
            add(DEVICE, A, B, C, n)
            add(DEVICE, C, B, A, n)
        out = DEVICE.download(A, np.float32, (n,))
        del A, B, C
        DEVICE.synchronize()  # a Ctrl-C in a buffer's __del__ is raised by the next runtime call
        phase[0] = "idle"
        return out

    work()
    counters = [Point(o, name, mode) for o, name, mode in entry_points() if hasattr(o, name)]
    for c in counters:
        c.__enter__()
    try:
        work()
    finally:
        for c in reversed(counters):
            c.__exit__()
    out = []
    for c in counters:
        calls = len(c.calls)
        if not calls:  # an entry work() does not call (fill)
            continue
        for k in sorted({1, (calls + 2) // 3, (2 * calls + 2) // 3, calls}):
            point = Point(c.owner, c.name, c.mode, k)
            with point:
                problems = interrupted(work)
            phase[0] = "idle"
            problems += runtime_problems()
            try:
                if not np.array_equal(work(), want):
                    problems.append("the next computation after the interrupt differs from numpy")
            except KeyboardInterrupt:
                problems.append("a KeyboardInterrupt raised late, by the next computation")
            out.append({"name": f"runtime: {point.label} of {calls}", "problems": problems, "losses": [[], []]})
    return out


def compiled() -> list:
    out = []
    makers = (("torchvk.compile", lambda m: torchvk.compile(m)),
              ("torch.compile", lambda m: torch.compile(m, backend="tvk")))
    for name, compile_with in makers:
        pair = Pair(mlp, (6,), compile_with)
        for _ in range(3):  # call 1 op by op, call 2 records, call 3 replays
            pair.train_on(1)
        points, missing = chosen_points(pair, graph=True)
        out += [{"name": f"{name}: no runtime entry {m}", "problems": ["missing"], "losses": [[], []]} for m in missing]
        wanted = [p for p in points if p.name in ("replay", "check", "dispatch", "submit", "wait_for_fence",
                                                   "_retire", "alloc")]
        for p in wanted:
            out.append(scenario(pair, p, f"{name}: {p.label}"))
        # interrupted while a graph is recorded: a new batch size records new graphs
        pair.data = [(x[:3], y[:3]) for x, y in batches((6,), 8)]
        pair.train_on(1)  # call 1 of the new graphs: op by op; call 2 records them
        out.append(scenario(pair, Point(Stream, "dispatch", "raise", 5), f"{name}: while recording a new graph"))
    return out


def timers() -> list:
    out = []
    pair = Pair(mlp, (6,))
    pair.train_on(2)
    x, y = pair.batch()
    t0 = time.perf_counter()
    pair.tvk_step(x, y)
    step_s = time.perf_counter() - t0
    rnd = random.Random(1)
    problems, raised = [], 0
    for _ in range(60):
        pair.resync()
        x, y = pair.batch()
        # a late timer fires in the sleep: that run counts as not interrupted in the step
        raised += ctrl_c_after(rnd.uniform(0, step_s), lambda: (pair.tvk_step(x, y), time.sleep(step_s)))
        phase[0] = "idle"
        torch.set_grad_enabled(True)  # a Ctrl-C inside torch.optim's own `finally` leaves it off, on the CPU too
        problems += runtime_problems()
    losses = pair.train_on(3)
    if raised < 50:
        problems.append(f"only {raised} of 60 timed interrupts raised KeyboardInterrupt")
    out.append({"name": "timers: 60 interrupts at random times", "problems": problems, "losses": losses})
    out.append(long_wait())
    out.append(plain_sleep())
    return out


def ctrl_c_after(seconds: float, work) -> bool:
    """Run work() with a Ctrl-C due after `seconds` (SIGALRM handled as SIGINT); whether
    KeyboardInterrupt came out of it."""
    signal.signal(signal.SIGALRM, signal.getsignal(signal.SIGINT))
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            work()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except KeyboardInterrupt:  # from work, or a timer due as it was being cancelled
        return True
    return False


def plain_sleep() -> dict:
    """Ctrl-C in plain Python (time.sleep) once the runtime is up: raised at once, as without it."""
    problems = []
    t0 = time.perf_counter()
    if not ctrl_c_after(0.1, lambda: time.sleep(3)):
        problems.append("no KeyboardInterrupt in time.sleep")
    slept = time.perf_counter() - t0
    if slept > 1.5:
        problems.append(f"KeyboardInterrupt came after {slept:.2f} s of a 3 s sleep, not at the Ctrl-C (0.1 s)")
    return {"name": "timers: Ctrl-C in time.sleep", "problems": problems, "losses": [[], []]}


def long_wait() -> dict:
    """Ctrl-C during a wait for seconds of GPU work stops the wait while the GPU still runs; the
    work completes, and a readback and an upload after it are right."""
    problems = []
    # matrices large enough that one link (a matmul and a scale) runs for 50 ms or more and the GPU
    # lags the recording: 512 on lavapipe, about 16384 on an H200 (the stream keeps only a few command
    # buffers in flight, so seconds of queued work need long kernels, not many)
    size = 512
    while True:
        a = torch.randn(size, size, generator=GEN)
        ta = a.to("tvk")

        def chain(n):
            out = ta
            for _ in range(n):
                out = (out @ ta) * (1.0 / size)
            return out

        chain(2).sum().item()  # pipelines built
        t0 = time.perf_counter()
        queued = chain(8)
        recorded = time.perf_counter() - t0
        queued.sum().item()
        per_link = (time.perf_counter() - t0) / 8
        if (per_link >= 0.05 and per_link * 8 > 3 * recorded) or size >= 16384:
            break
        size *= 2
    ref = (a.sum(0) @ a)[:5]  # (a @ a).sum(0)[:5] without a CPU matmul of the large size
    work = chain(int(3.0 / per_link) + 1)  # about three seconds of GPU work, queued
    first = (ta @ ta).sum(0)[:5]
    t0 = time.perf_counter()
    if not ctrl_c_after(0.2, lambda: work.sum().item()):
        problems.append("no KeyboardInterrupt during the wait")
    waited = time.perf_counter() - t0
    if not any(s.in_flight for s in DEVICE.stream.slots):
        problems.append(f"the GPU had finished when the wait was interrupted ({waited:.2f} s): the wait was not stopped")
    fresh = torch.randn(5, generator=GEN)
    if not torch.allclose(fresh.to("tvk").cpu(), fresh):
        problems.append("an upload and readback after the interrupted wait differ")
    if not torch.allclose(first.cpu(), ref, rtol=1e-4, atol=1e-3):
        problems.append("a result computed before the interrupted wait is wrong")
    problems += runtime_problems()
    return {"name": f"timers: Ctrl-C in a wait of {waited:.2f} s for long GPU work", "problems": problems,
            "losses": [[], []]}


if __name__ == "__main__":
    import faulthandler

    faulthandler.dump_traceback_later(240, exit=True)  # a hang fails the test with a traceback
    group = {"eager": eager, "runtime": runtime, "compiled": compiled, "timers": timers}[sys.argv[1]]
    print(json.dumps({"scenarios": group(), "cpu_backward_interrupt": CPU_BACKWARD}))
