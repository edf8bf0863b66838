"""Correct at every subgroup size (issue 29): the reductions, softmax and norms, and three short
trainings (MNIST MLP and CNN, a small transformer), on lavapipe at each subgroup size it offers
(LP_NATIVE_VECTOR_WIDTH 128..2048: 4..64, as RDNA1's wave64), match the CPU. Also with RDNA1's
shipped configs (their device entry pointed at lavapipe) at size 64: the kernels the card runs.

Each size runs tests/subgroup_worker.py in a process of its own: lavapipe fixes its subgroup size
when Vulkan starts.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tvk_kernels import get_device

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = {4: "128", 8: "256", 16: "512", 32: "1024", 64: "2048"}
OP_TOLERANCE = 2e-5  # relative to the CPU's largest value; a mixed-up row is off by O(1)
LOSS_TOLERANCE = 1e-4


def lavapipe() -> bool:
    return get_device(0).facts.name.startswith("llvmpipe")


def run_worker(width: str, config_dir: Path | None = None) -> dict:
    env = dict(os.environ, LP_NATIVE_VECTOR_WIDTH=width)
    if config_dir is not None:
        env["TVK_CONFIG_DIR"] = str(config_dir)
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "subgroup_worker.py")], capture_output=True,
                         text=True, env=env, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def check(result: dict, subgroup: int):
    assert result["subgroup"] == subgroup, result["device"]
    lanes = result["lanes"]  # the kernels' width is the lanes a subgroup op spans, whatever is reported
    assert lanes["reported"] == subgroup and lanes["width"] == lanes["spanned"] <= subgroup, lanes
    wrong = {name: err for name, err in result["ops"].items() if not err <= OP_TOLERANCE}
    assert not wrong, f"at subgroup size {subgroup}: {wrong}"
    for model, (tvk, cpu) in result["losses"].items():
        assert max(abs(a - b) for a, b in zip(tvk, cpu)) <= LOSS_TOLERANCE, (model, tvk, cpu)
    assert result["cpu_ops"] == {}


@pytest.mark.parametrize("subgroup", sorted(WIDTHS))
def test_ops_and_training_match_cpu_at_every_subgroup_size(subgroup):
    if not lavapipe():
        pytest.skip("the subgroup size is set through lavapipe's LP_NATIVE_VECTOR_WIDTH")
    check(run_worker(WIDTHS[subgroup]), subgroup)


def repointed_rdna1_config(driver: str, wave: int, tmp_path: Path) -> Path:
    """RDNA1's shipped config with its device entry re-pointed at lavapipe's device of subgroup size
    `wave`, and every entry that requires a subgroup size requiring `wave`: the kernels the card runs
    at that wave size (the other parameters are what differ from lavapipe's own configs)."""
    data = json.loads((ROOT / "tuned_configs" / f"rdna1--{driver}.json").read_text())
    data["device"] = {**data["device"], "vendor_id": 0x10005, "arch": "llvmpipe", "driver_id": None, "match": "arch",
                      "max_shared_memory": 32768, "subgroup_sizes": [wave, wave]}
    for fam in data["families"].values():
        for entry in fam["buckets"].values():
            for name in ("SUBGROUP", "SUBGROUP_SIZE"):  # sizes (matmul's SUBGROUP is one; the others' is 0 or 1)
                if entry["params"].get(name, 0) > 1:
                    entry["params"][name] = wave
    folder = tmp_path / "configs"
    folder.mkdir()
    (folder / f"rdna1-on-lavapipe--{driver}.json").write_text(json.dumps(data))
    return folder


@pytest.mark.parametrize("driver,wave", [("radv", 64), ("amd-proprietary", 64), ("radv", 32), ("amd-proprietary", 32)])
def test_rdna1_configs_at_both_wave_sizes(driver, wave, tmp_path):
    if not lavapipe():
        pytest.skip("the subgroup size is set through lavapipe's LP_NATIVE_VECTOR_WIDTH")
    result = run_worker(WIDTHS[wave], repointed_rdna1_config(driver, wave, tmp_path))
    for fam, buckets in result["config_sources"].items():  # the run used RDNA1's kernels, not lavapipe's
        assert all(source.endswith(f"rdna1-on-lavapipe--{driver}.json") for source in buckets.values()), (fam, buckets)
    check(result, wave)
