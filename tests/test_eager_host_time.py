"""benchmarks/eager_host_time.py: its quick run times every op of the mix beside the no-op floor,
counts the aten ops each dispatches, and writes the result files the README's Results read."""
import json
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
