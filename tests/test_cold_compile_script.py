"""benchmarks/cold_compile.py (issue 30 item 7): each model x variant's first step in a fresh process with
empty caches, timed and written as JSON and markdown; a bad model name is refused with the choices."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "cold_compile.py"
# the children's validation layer off: three cold processes on lavapipe are slow enough without it
ENV = dict(os.environ, TVK_VALIDATION="0")


def test_each_variant_times_a_first_step_in_its_own_cold_process(tmp_path):
    variants = ["eager_serial", "eager", "dynamo_only", "tvk"]
    done = subprocess.run([sys.executable, str(SCRIPT), "--models", "mlp", "--size", "tiny", "--variants",
                           ",".join(variants), "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    payload = json.loads((tmp_path / "cold_compile.json").read_text())
    assert payload["size"] == "tiny" and list(payload["models"]) == ["mlp"]
    results = payload["models"]["mlp"]["variants"]
    assert list(results) == variants
    for variant, result in results.items():
        assert "error" not in result, f"{variant}: {result['error']}"
        assert result["first_step_s"] > 0 and result["warm_step_s"] > 0, (variant, result)
    assert results["tvk"]["trace_s"] > 0  # the tvk backend's compiled graphs were reached
    assert payload["models"]["mlp"]["split"]["dynamo_s"] is not None
    markdown = (tmp_path / "cold_compile.md").read_text()
    assert "| mlp |" in markdown and "tvk first s" in markdown


def test_a_bad_model_name_is_refused_with_the_choices(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--models", "mlp,no_such_model", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=120)
    assert done.returncode == 2
    assert "no_such_model" in done.stderr and "choose from" in done.stderr and "hf_gpt2" in done.stderr
    assert not (tmp_path / "cold_compile.json").exists()
