"""`tvk-bench models` (issue 31, item 3): real third-party models' training steps on tvk in every
mode beside torch in its own process; here two tiny ones against torch CPU (--quick, as CI runs it)."""
import json

import pytest
import torch

from torchvk.experiments import model_bench, zoo_models


def test_models_quick_runs_two_tiny_models_in_every_mode_beside_the_peer(tmp_path, device):
    payload = model_bench.run(device, tmp_path, quick=True, progress=False)
    assert json.loads((tmp_path / "models.json").read_text())["tvk"] == json.loads(json.dumps(payload["tvk"]))
    assert (tmp_path / "models.md").read_text().startswith("# models")
    assert (tmp_path / "models.png").stat().st_size > 0
    assert payload["peer"] == "torch CPU" and set(payload["tvk"]) == {"hf_gpt2", "timm_convnext"}
    for name, modes in payload["tvk"].items():
        assert modes["cpu_ops"] == 0, name
        peer = payload["peer_results"][name]["eager"]
        assert "error" not in peer, peer
        for mode in model_bench.MODES:
            r = modes[mode]
            assert "error" not in r, (name, mode, r.get("error"))
            # the same init and batch as the peer: the same step-0 loss (AMP: float16 rounding)
            assert r["losses"][0] == pytest.approx(peer["losses"][0], rel=1e-2 if mode == "amp" else 1e-4)
            assert r["step_ms"] > 0 and r["gpu_ms"] > 0 and r["kernels"] > 0
            assert r["vs"]["wall_ratio"] == pytest.approx(r["step_ms"] / peer["step_ms"])
            top = r["top_kernels"]
            assert 0 < len(top) <= model_bench.TOP_KERNELS
            assert [t["gpu_ms"] for t in top] == sorted((t["gpu_ms"] for t in top), reverse=True)
            assert sum(t["gpu_ms"] for t in top) <= r["gpu_ms"] * (1 + 1e-9)


def test_the_gpu_time_of_a_step_is_its_kernels_timestamps():
    # the tvk timer: one step under torchvk.profiler; its GPU time is the sum of its kernels', each counted
    model, step = model_bench.zoo.trainer("mlp", "tvk", "eager", "tiny")
    x, y = (t.to("tvk") for t in zoo_models.batches("mlp", 1, "tiny")[0])
    step(x, y)
    timed = model_bench._gpu_step_tvk(step, x, y)
    assert timed["kernels"] == sum(t["count"] for t in timed["top_kernels"]) or len(timed["top_kernels"]) == 5
    assert timed["gpu_ms"] > 0
    assert timed["gpu_ms"] >= sum(t["gpu_ms"] for t in timed["top_kernels"]) * (1 - 1e-9)


def test_every_case_spins_the_gpu_up_before_its_timed_steps():
    # a short spin-up still runs 3 steps (trace, record, replay); a longer one runs steps until it has passed
    short = model_bench.measure("mlp", "tvk", "eager", "tiny", steps=2, spin_up=0.0)
    assert short["spin_up_steps"] == 3 and len(short["losses"]) == 3
    first = short["first_step_ms"] / 1e3
    long = model_bench.measure("mlp", "tvk", "eager", "tiny", steps=2, spin_up=max(0.2, 3 * first))
    assert long["spin_up_steps"] > 3


def test_a_failing_case_is_recorded_and_the_next_runs(monkeypatch):
    def no_kernel(name, device, mode, size, steps, spin_up):
        if mode == "amp":
            raise NotImplementedError("TorchVK has no Vulkan implementation of aten.example.default")
        return {"step_ms": 1.0}

    monkeypatch.setattr(model_bench, "measure", no_kernel)
    out = model_bench._measure_all("tvk", ["mlp"], model_bench.MODES, "tiny", 1, 0.0)
    assert out["mlp"]["amp"] == {"error": "NotImplementedError: TorchVK has no Vulkan implementation of "
                                          "aten.example.default"}
    assert out["mlp"]["eager"] == {"step_ms": 1.0}


def test_the_benchmark_covers_at_least_eight_third_party_architectures():
    libraries = {e.library for e in zoo_models.ZOO.values() if e.library}
    assert libraries == {"transformers", "timm", "torchvision", "diffusers"}
    assert sum(1 for e in zoo_models.ZOO.values() if e.library) >= 8


def test_only_measures_some_models_and_keeps_the_others_of_models_json(tmp_path, device, monkeypatch):
    def fake(name, device, mode, size, steps, spin_up):
        return {"losses": [1.0], "step_ms": 2.0 if device.startswith("tvk") else 1.0, "gpu_ms": 1.0, "kernels": 1,
                "top_kernels": []}

    monkeypatch.setattr(model_bench, "measure", fake)
    monkeypatch.setattr(model_bench, "run_peer", lambda dev, names, modes, *a: model_bench._measure_all(
        dev, names, modes, *a))
    model_bench.run(device, tmp_path, quick=True, progress=False, names=["hf_gpt2"])
    payload = model_bench.run(device, tmp_path, quick=True, progress=False, names=["tv_resnet18"])
    assert list(payload["tvk"]) == ["hf_gpt2", "tv_resnet18"]  # the zoo's order
    assert payload["tvk"]["hf_gpt2"]["eager"]["vs"]["wall_ratio"] == 2.0
    assert set(payload["measured_at"]) == {"hf_gpt2", "tv_resnet18"}
    with pytest.raises(ValueError, match="no third-party zoo model"):
        model_bench.run(device, tmp_path, quick=True, progress=False, names=["mlp"])


def test_each_profiled_step_follows_gpu_load_and_the_least_is_kept(monkeypatch):
    # eager steps are host-bound, so the GPU idles at sinking clocks: each profiled step comes right after
    # GPU-bound load, and the least GPU time of PROFILED_STEPS steps is kept (on the CUDA peer too)
    events, times = [], iter([5.0, 3.0, 4.0])
    monkeypatch.setattr(model_bench, "_gpu_load", lambda device, seconds, n: events.append(("load", seconds, n)))

    def profiled(step, x, y):
        events.append("profile")
        return {"gpu_ms": next(times), "kernels": 1, "top_kernels": []}

    monkeypatch.setattr(model_bench, "_gpu_step_tvk", profiled)
    best = model_bench._least_gpu_step(None, None, None, "tvk:0", "tiny", 0.25)
    assert best["gpu_ms"] == 3.0
    assert events == [("load", 0.25, 64), "profile"] * model_bench.PROFILED_STEPS
    events.clear()
    times = iter([7.0])
    assert model_bench._least_gpu_step(None, None, None, "tvk:0", "tiny", 0.0)["gpu_ms"] == 7.0  # quick: one, no load
    assert events == ["profile"]


def test_the_gpu_load_runs_matmuls_on_the_device_for_its_time():
    import time

    import torchvk.profiler

    start = time.perf_counter()
    with torchvk.profiler.profile() as prof:
        model_bench._gpu_load("tvk", 0.05, 16)
    assert time.perf_counter() - start >= 0.05
    matmuls = [k for k in prof.kernels if "matmul" in k.name or "gemm" in k.name]
    assert len(matmuls) >= 4, sorted({k.name for k in prof.kernels})  # at least one batch of four, on the GPU
