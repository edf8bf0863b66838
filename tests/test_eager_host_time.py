"""benchmarks/eager_host_time.py: its quick run times every op of the mix beside the no-op floor,
counts the aten ops each dispatches, and writes the result files the README's Results read;
benchmarks/eager_step_ab.py runs a model's eager steps in both trees in turn and writes every run."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_run_writes_every_op_with_its_floor_and_op_count(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eager_host_time.py"), "--quick", "--out",
                        str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    result = json.loads((tmp_path / "eager_host_time.json").read_text())
    tvk = result["runs"]["tvk"]
    assert set(result["mix"]) <= set(tvk) and tvk["floor"] > 0
    for op in result["mix"]:
        assert tvk[op] > 0 and tvk["ops per call"][op] >= 1
    assert tvk["ops per call"]["linear+layer_norm fwd+bwd"] > 10  # forward and backward ops, each counted
    table = (tmp_path / "eager_host_time.md").read_text()
    assert "no-op dispatch floor" in table and "tvk / floor" in table

    from tvk_kernels.bench.report import eager_host_time
    lines = eager_host_time(result)
    assert len(lines) == 4 + len(result["mix"])  # a paragraph, a blank line, the table's head and rows


def test_step_ab_runs_both_trees_in_turn_and_writes_each_run(tmp_path):
    tree = tmp_path / "tree"  # an earlier tree as a directory (this checkout's own files stand in), named by REVISION
    tree.mkdir()
    for part in ("torchvk", "tvk_kernels", "templates", "tuning", "tuned_configs", "shipped"):
        shutil.copytree(ROOT / part, tree / part, ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "REVISION").write_text("earlier\n")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eager_step_ab.py"), "--compare", str(tree),
                        "--models", "mlp", "--rounds", "2", "--steps", "5", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    result = json.loads((tmp_path / "eager_step_ab.json").read_text())
    assert result["trees"] == ["tvk", "tvk at earlier"]
    for tree_runs in result["runs"].values():
        assert len(tree_runs["mlp"]) == 2 and all(r["median_ms"] > 0 for r in tree_runs["mlp"])
    # the same model, init and batches in both trees: the same loss
    assert result["runs"]["tvk"]["mlp"][0]["loss"] == result["runs"]["tvk at earlier"]["mlp"][0]["loss"]
    assert "median tvk / tvk at earlier" in (tmp_path / "eager_step_ab.md").read_text()

    from tvk_kernels.bench.report import eager_step_ab
    lines = eager_step_ab(result)
    assert len(lines) == 4 + 1 and lines[-1].startswith("| mlp |")  # a paragraph, a blank line, the head, a row


def test_stages_quick_run_splits_each_case_into_its_layers(tmp_path):
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "eager_host_stages.py"), "--quick", "--out",
                        str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    result = json.loads((tmp_path / "eager_host_stages.json").read_text())["result"]
    assert set(result["cases"]) == set(json.loads((tmp_path / "eager_host_stages.json").read_text())["mix"])
    for case in result["cases"].values():
        assert case["aten calls"] >= 1 and case["with a repeat"] <= case["aten calls"]
        assert all(case[k] > 0 for k in case if k.startswith(("torch", "our")))
    assert result["cases"]["linear+layer_norm fwd+bwd"]["aten calls"] > 10  # autograd's backward calls collected
    assert result["cases"]["a + b"]["with a repeat"] == 1
    assert set(result["a + b by early-submit interval"]) == {"0", "4", "16", "64"}
    assert "Vulkan recording and submits" in (tmp_path / "eager_host_stages.md").read_text()

    from tvk_kernels.bench.report import eager_host_stages
    lines = eager_host_stages(json.loads((tmp_path / "eager_host_stages.json").read_text()))
    assert len(lines) == 4 + len(result["cases"])  # a paragraph, a blank line, the table's head and rows
    assert "vkCmdPipelineBarrier" in lines[0]
