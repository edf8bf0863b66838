"""torchvk.profiler: per-kernel GPU times (Vulkan timestamps) with the aten op that launched each kernel,
in eager and compiled mode, without changing results and with profiling off afterwards."""
import json

import pytest
import torch
import torch.nn as nn

import torchvk
from torchvk import profiler
from torchvk._storage import get_device


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to("tvk")


def _x():
    return torch.randn(5, 8, generator=torch.Generator().manual_seed(1)).to("tvk")


def _step(run, model, x):
    """One forward and backward; the loss and the gradients, on the CPU."""
    for p in model.parameters():
        p.grad = None
    loss = run(x).square().sum()
    loss.backward()
    return [loss.cpu()] + [p.grad.cpu() for p in model.parameters()]


def _rows(prof, kind):
    return [r for r in prof.key_averages() if r.kind == kind]


def test_an_mlp_step_gets_gpu_times_per_kernel_and_per_aten_op():
    model, x = _mlp(), _x()
    expected = _step(model, model, x)
    stream = get_device().stream
    launched = stream.total_dispatches
    with profiler.profile() as prof:
        got = _step(model, model, x)
    launched = stream.total_dispatches - launched
    assert all(torch.equal(a, b) for a, b in zip(got, expected))  # profiling changes no result

    ops = {r.key: r for r in _rows(prof, "op")}
    kernels = _rows(prof, "kernel")
    assert len(prof.kernels) == sum(r.count for r in kernels) == launched > 0
    assert ops["aten::addmm"].count == 2 and ops["aten::mm"].count == 3  # forward; weight and input grads
    for name in ("aten::addmm", "aten::mm"):
        assert ops[name].kernels > 0 and ops[name].gpu_time_total > 0 and ops[name].host_time_total > 0
    for op in ops.values():  # an op's kernels are the kernel rows it launched
        mine = [r for r in kernels if r.launched_by == op.key]
        assert op.kernels == sum(r.count for r in mine)
        assert op.gpu_time_total == pytest.approx(sum(r.gpu_time_total for r in mine))
    assert sum(r.gpu_time_total for r in kernels) == pytest.approx(sum(k.duration_us for k in prof.kernels))

    table = prof.key_averages().table(sort_by="gpu_time_total", row_limit=4).splitlines()
    assert table[1].split()[:3] == ["Name", "Launched", "by"] and "GPU total" in table[1]
    top = sorted(prof.key_averages(), key=lambda r: r.gpu_time_total, reverse=True)[:4]
    assert [line.split()[0] for line in table[3:7]] == [r.key.split()[0] for r in top]
    assert table[7].startswith("---") and f"({launched} kernels)" in table[9]
    with pytest.raises(ValueError, match="gpu_time_total"):
        prof.key_averages().table(sort_by="flops")


def test_the_chrome_trace_has_a_host_track_and_a_gpu_track(tmp_path):
    model, x = _mlp(), _x()
    _step(model, model, x)
    with profiler.profile() as prof:
        _step(model, model, x)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    host = [e for e in events if e["ph"] == "X" and e["pid"] == 0]
    gpu = [e for e in events if e["ph"] == "X" and e["pid"] == 1]
    assert {"aten::addmm", "aten::mm"} <= {e["name"] for e in host}
    assert all(0 <= e["ts"] and e["ts"] + e["dur"] <= prof.host_time_total + 1e-3 for e in host)
    assert len(gpu) == len(prof.kernels) > 0 and all(e["dur"] > 0 for e in gpu)
    starts = [e["ts"] for e in gpu]
    assert starts == sorted(starts)
    assert {e["args"]["op"] for e in gpu} <= {e["name"] for e in host}
    # arrows from each op to its kernels: no kernel is drawn before the op that launched it
    flows = {}
    for e in events:
        if e["ph"] in "sf":
            flows.setdefault(e["id"], {})[e["ph"]] = e["ts"]
    assert len(flows) == len(gpu) and all(f["f"] >= f["s"] for f in flows.values())


def test_profiling_is_off_after_an_exception_in_the_block():
    x = _x()
    stream = get_device().stream
    modes = torch._C._len_torch_dispatch_stack()
    with pytest.raises(RuntimeError):
        with profiler.profile() as prof:
            x * 2
            torch.mm(x, x)  # 5x8 @ 5x8: torch's shape error, raised inside the op
    assert stream.profile_records is None and torch._C._len_torch_dispatch_stack() == modes
    assert list(prof.key_averages()) == [] and prof.kernels == []
    with pytest.raises(RuntimeError, match="one block"):
        with prof:
            pass
    assert torch.equal((x * 3).cpu(), x.cpu() * 3)
    with profiler.profile() as again:
        x * 3
    assert [k.op for k in again.kernels] == ["aten::mul"]


def test_nested_profiles_a_region_and_a_profile_without_tvk_work():
    x = _x()
    with profiler.profile() as outer:
        x + 1
        with profiler.profile() as inner:
            with profiler.record_function("my region"):
                x * 2
        x - 1
    assert get_device().stream.profile_records is None
    assert [k.op for k in inner.kernels] == ["aten::mul"]
    assert [k.op for k in outer.kernels] == ["aten::add", "aten::mul", "aten::sub"]
    region = next(r for r in outer.key_averages() if r.key == "my region")
    assert region.kind == "region" and region.count == 1 and region.kernels == 1
    assert region.gpu_time_total == pytest.approx(inner.key_averages().gpu_time_total)

    with profiler.profile() as empty:
        torch.ones(3) + 1  # CPU work is not a tvk op
    assert list(empty.key_averages()) == [] and empty.kernels == []
    assert "GPU time total: 0.000us (0 kernels)" in empty.key_averages().table()


def _compiled_rows(prof):
    rows = {r.key: r for r in _rows(prof, "region")}
    return rows.get("compiled forward graph"), rows.get("compiled backward graph")


def test_a_replayed_compiled_step_is_profiled_kernel_by_kernel_and_replays_after():
    model, x = _mlp(), _x()
    cmodel = torchvk.compile(model)
    for _ in range(3):  # call 2 records the graphs, call 3 replays them
        expected = _step(cmodel, model, x)
    replays = cmodel.compile_stats()[0]["forward"]["replays"]
    assert replays > 0
    with profiler.profile() as prof:
        got = _step(cmodel, model, x)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    forward, backward = _compiled_rows(prof)
    for graph in (forward, backward):
        charged = [k for k in prof.kernels if k.op == graph.key]
        assert graph.kernels == len(charged) > 0 and graph.gpu_time_total > 0
    assert not [r for r in _rows(prof, "op") if r.key in ("aten::addmm", "aten::mm")]
    _step(cmodel, model, x)
    assert cmodel.compile_stats()[0]["forward"]["replays"] == replays + 1  # replaying again


def test_torch_compile_compiles_inside_the_profiler():
    model, x = _mlp(), _x()
    eager = _step(model, model, x)
    cmodel = torch.compile(model, backend="tvk")
    with profiler.profile() as prof:  # its first call: Dynamo traces under the profiler's dispatch mode
        got = _step(cmodel, model, x)
    for a, b in zip(got, eager):
        torch.testing.assert_close(a, b)
    forward, backward = _compiled_rows(prof)
    assert forward.kernels > 0 and backward.kernels > 0
    assert not [r for r in _rows(prof, "op") if r.key in ("aten::addmm", "aten::mm")]  # not run eagerly
