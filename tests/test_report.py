"""The README's Results section is generated from the committed result files."""
from pathlib import Path

from tvk_kernels.bench import report
from tvk_kernels.paths import data_dir

ROOT = Path(__file__).resolve().parents[1]


def test_report_covers_every_committed_experiment():
    text = report.build(ROOT / "benchmarks" / "results", data_dir("tuned_configs"))
    for title in ("1. Vector add", "2. Matmul", "3. MNIST classifier", "4. CIFAR-10 CNN", "5. Little GPU memory",
                  "6. Ablations"):
        assert title in text
    assert "STAND-IN" in text  # CIFAR-10 runs without the data set say so
    assert "RDNA1 (RX 5600 XT) configs shipped" in text


def test_readme_results_section_is_current(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text())
    report.main(["--results", str(ROOT / "benchmarks" / "results"), "--write", str(readme)])
    assert readme.read_text() == (ROOT / "README.md").read_text(), \
        "README results are stale: run `python -m tvk_kernels.bench.report --write README.md`"
