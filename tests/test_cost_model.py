"""The static cost model (tune/cost_model.py) and its check against measured order (tune/rank_check.py)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tvk_kernels.tune import rank_check
from tvk_kernels.tune.cost_model import machine, machine_for, predict_seconds
from tvk_kernels.tune.rdna1 import RADV_COMPUTE_WAVE
from tvk_kernels.tune.targets import load_targets

ROOT = Path(__file__).resolve().parents[1]


def test_spearman_against_hand_worked_cases():
    assert rank_check.spearman([1, 2, 3, 4, 5], [10, 20, 30, 40, 50]) == pytest.approx(1.0)
    assert rank_check.spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    # d = (-1, 1, -1, 1, 0): 1 - 6 * 4 / (5 * 24)
    assert rank_check.spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # ties take their mean rank: y ranks (1.5, 1.5, 3.5, 3.5), Pearson on ranks = 4 / sqrt(5 * 4)
    assert rank_check.spearman([1, 2, 3, 4], [7, 7, 9, 9]) == pytest.approx(4 / math.sqrt(20))
    assert rank_check.spearman([1, 2], [2, 1]) is None  # too few to order
    assert rank_check.spearman([1, 2, 3], [4, 4, 4]) is None  # one side constant
    with pytest.raises(ValueError):
        rank_check.spearman([1, 2, 3], [1, 2])


def test_machines_from_the_data_file():
    navi = machine("rx5600xt")
    assert navi.peak_flops == pytest.approx(7.19e12, rel=1e-3)  # 2304 lanes x 2 x 1.56 GHz
    assert navi.shared_bytes_per_s == pytest.approx(36 * 128 * 1.56e9)
    assert machine_for("NVIDIA H200").name == "h200" and machine_for("NVIDIA H100 80GB HBM3").name == "h100"
    assert machine_for("llvmpipe (LLVM 15.0.6, 256 bits)") is None
    measured = navi.measured(5e12, 250e9)
    assert measured.peak_flops == 5e12 and measured.dram_bytes_per_s == 250e9 and navi.peak_flops != 5e12
    assert navi.measured(None, None).peak_flops == navi.peak_flops


def test_occupancy_from_whatever_the_compiler_reports():
    h200 = machine("h200")
    work = {"invocations": 256, "groups": 10560,  # 8 subgroups each: whole rounds at 4 or 16 a SIMD
             "flops": 1e9, "dram_bytes": 0, "lds_bytes": 0, "lds_per_group": 0}
    aco = predict_seconds(work, {"Subgroups per SIMD": 3}, h200, 32)
    registers = predict_seconds(work, {"Register Count": 128}, h200, 32)  # 16384 / (128 x 32) = 4
    nothing = predict_seconds(work, {}, h200, 32)
    assert (aco["occupancy_waves_per_simd"], registers["occupancy_waves_per_simd"],
            nothing["occupancy_waves_per_simd"]) == (3, 4, h200.max_waves)
    assert aco["seconds"] > registers["seconds"] == nothing["seconds"]  # below 4 resident waves latency shows


def test_shipped_rdna1_rankings_still_follow_the_model():
    """Every static-model entry shipped for RDNA1 was ranked by the model as it is now: its
    predicted seconds come back from its provenance (compiler statistics, shapes) and the target's
    work counts. A change to the model or to a target's counts fails here until the RDNA1
    configs are ranked again (`tvk-tune --target rdna1`)."""
    targets, navi, checked = load_targets(), machine("rx5600xt"), 0
    for path in sorted((ROOT / "tuned_configs").glob("rdna1--*.json")):
        for family, entry in json.loads(path.read_text())["families"].items():
            for bucket, config in entry["buckets"].items():
                provenance, params = config["provenance"], config["params"]
                if "predicted_seconds" not in provenance:
                    continue
                target = targets[family]
                _, _, subgroup = target.static_defines(params)
                stats = {k: v for k, v in provenance["compiler_stats"].items() if v is not None}
                got = [predict_seconds(target.work(s, params), stats, navi, subgroup or RADV_COMPUTE_WAVE)["seconds"]
                       for s in provenance["shapes"]]
                assert got == pytest.approx(provenance["predicted_seconds"], rel=1e-9), (path.name, family, bucket)
                checked += 1
    assert checked >= 40


def test_rank_check_measures_what_it_ranked(tmp_path):
    """On lavapipe with the H200's numbers (the order says nothing of a GPU here: this checks the run)."""
    done = subprocess.run([sys.executable, "-m", "tvk_kernels.tune.rank_check", "--families", "norm,softmax",
                           "--trials", "4", "--suite", "tiny", "--machine", "h200", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "rank_check.json").read_text())
    assert result["machine"]["name"] == "h200" and result["machine"]["peak_flops"] > 0
    assert [r["family"] for r in result["results"]] == ["norm", "softmax"]
    for r in result["results"]:
        assert r["measured"] >= 3 and len(r["rows"]) == r["measured"]
        assert all(row["measured_s"] > 0 and row["predicted_s"] > 0 for row in r["rows"])
        assert -1.0 <= r["rho"] <= 1.0 and r["regret"] >= 1.0
        assert sum(row["is_default"] for row in r["rows"]) == 1
    assert "Spearman rho" in (tmp_path / "rank_check.md").read_text()


def test_rank_check_says_which_machine_it_lacks():
    done = subprocess.run([sys.executable, "-m", "tvk_kernels.tune.rank_check", "--families", "norm", "--quick"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "tuning/machines.json has no entry matching" in done.stderr
    done = subprocess.run([sys.executable, "-m", "tvk_kernels.tune.rank_check", "--families", "nope", "--quick",
                           "--machine", "h200"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "no tuning target 'nope'" in done.stderr


def test_rank_check_starts_no_bucket_past_its_time_budget(tmp_path):
    done = subprocess.run([sys.executable, "-m", "tvk_kernels.tune.rank_check", "--families", "norm", "--trials", "3",
                           "--suite", "tiny", "--machine", "h200", "--quick", "--time-budget", "0",
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "time budget of 0 s spent; norm/" in done.stderr
    assert json.loads((tmp_path / "rank_check.json").read_text())["results"] == []
