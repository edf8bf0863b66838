"""benchmarks/kernel_profile.py --quick on one tiny zoo model: the result's structure, and totals
and ratios that are what their parts say."""
import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_profile.py"


@pytest.fixture(scope="module")
def kernel_profile():
    spec = importlib.util.spec_from_file_location("kernel_profile_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_profile_of_a_zoo_model(kernel_profile, tmp_path, monkeypatch):
    from tvk_kernels import benchmark_mode

    monkeypatch.setenv("TVK_BENCHMARK_CANDIDATES", "2")  # each candidate is a compile: keep it short
    cache_dir = benchmark_mode.cache_dir
    result = kernel_profile.profile(["mlp"], ("eager", "benchmark"), quick=True, out_dir=tmp_path,
                                    progress=lambda text: None)
    assert benchmark_mode.cache_dir is cache_dir and not benchmark_mode.enabled()  # both put back
    assert json.loads((tmp_path / "kernel_profile.json").read_text())["workloads"][0]["model"] == "mlp"
    assert "| mlp | 4 |" in (tmp_path / "kernel_profile.md").read_text()
    [w] = result["workloads"]
    assert w["source"] == "zoo" and w["batch"] == 4
    for mode in ("eager", "benchmark"):
        run = w["tvk"][mode]
        assert "error" not in run, run
        assert run["optimizer"] == "torch.optim.SGD"  # the zoo's optimizer for the MLP
        assert run["kernels_ms"] and all(ms > 0 for ms in run["kernels_ms"].values())
        assert math.isclose(w["tvk_total_ms"][mode], sum(run["kernels_ms"].values()))
        assert any("matmul" in label for label in run["kernels_ms"])  # the Linear layers ran on the GPU
    bench = w["tvk"]["benchmark"]
    assert bench["benchmark_shapes"] >= 0 and bench["benchmark_s"] >= 0 and bench["benchmark_reused_from_disk"] == 0
    if torch.cuda.is_available():
        assert w["ratio"]["eager"] == pytest.approx(w["tvk_total_ms"]["eager"] / w["cuda_total_ms"])
    else:
        assert w["cuda"] is None and w["cuda_total_ms"] is None and w["ratio"] == {"eager": None, "benchmark": None}
        assert result["summary"]["eager"]["models"] == 0 and result["summary"]["eager"]["geomean_ratio"] is None


def test_unknown_model_is_named(kernel_profile):
    with pytest.raises(SystemExit, match="unknown model.*'resnett'.*resnet"):
        kernel_profile.profile(["resnett"], quick=True)
