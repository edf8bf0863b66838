"""benchmarks/bandwidth_rows.py --quick: the kernels experiment's bandwidth section alone, every row checked
and timed, written with the copy peak (the timings on lavapipe say nothing of a GPU)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_section_runs_and_writes_every_row(tmp_path):
    done = subprocess.run([sys.executable, "benchmarks/bandwidth_rows.py", "--quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "bandwidth_rows.json").read_text())
    ops = [row["op"] for row in result["rows"]]
    assert "sum (all)" in ops and any(op.startswith("embedding backward") for op in ops)
    assert any(op.startswith("layer norm backward") for op in ops)
    for row in result["rows"]:
        assert row["tvk_s"] > 0 and row["tvk_of_peak"] > 0
        assert row.get("max_rel_err", 0) < 1e-4, row
    assert result["copy_peak_gbps"] > 0
