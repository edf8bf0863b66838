"""The autotuner: a real (tiny) tuning run, wrong candidates rejected, configs looked up safely."""
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from tvk_kernels import config
from tvk_kernels.kernels import elementwise
from tvk_kernels import search_space as space
from tvk_kernels.tune import driver, targets
from tvk_kernels.tune.targets import Case
from tvk_kernels.tune.targets.elementwise import ElementwiseTarget


def test_every_target_module_is_found_by_its_family_name():
    """tvk-tune finds a target as tune/targets/<family>.py (no list to keep), named after the family its
    tuned configs are keyed by."""
    modules = {p.stem for p in Path(targets.__file__).parent.glob("*.py")} - {"__init__"}
    assert set(targets.load_targets()) == modules
    assert all(t.family == name for name, t in targets.load_targets().items())


def test_a_target_module_that_fails_to_import_is_an_error(tmp_path, monkeypatch):
    """Never a family silently left out: a device that cannot run a target says so through its
    `unavailable`; a module that cannot be imported, or is misnamed, fails the load."""
    monkeypatch.setattr(targets, "__path__", [str(tmp_path)])
    monkeypatch.setattr(targets, "TARGETS", {})
    (tmp_path / "broken.py").write_text("import tvk_kernels.no_such_module\n")
    with pytest.raises(ImportError):
        targets.load_targets.__wrapped__()
    (tmp_path / "broken.py").unlink()
    (tmp_path / "misnamed.py").write_text("class Target:\n    family = 'softmax'\n\n\nTARGET = Target()\n")
    try:
        with pytest.raises(ValueError, match="name the module after its family"):
            targets.load_targets.__wrapped__()
    finally:  # the misnamed module imported: forget it
        sys.modules.pop(f"{targets.__name__}.misnamed", None)
        vars(targets).pop("misnamed", None)


def test_search_space_constraints_hold(device):
    cands = space.candidates("elementwise", device.facts)
    assert cands and all(c["WG"] <= device.facts.max_workgroup_invocations for c in cands)
    assert space.violations(space.search_space("elementwise"), {"WG": 4096, "VEC": 4, "ITEMS": 1}, device.facts)


def test_tiny_tuning_run_writes_a_config_the_runtime_uses(device, config_dir, tmp_path):
    path = driver.tune(device, ["elementwise"], suite="tiny", trials=4, storage=f"sqlite:///{tmp_path}/t.db",
                       out_dir=config_dir, progress=False)
    data = json.loads(path.read_text())
    assert data["schema"] == config.SCHEMA_VERSION and data["source"] == "measured"
    fam = data["families"]["elementwise"]
    assert fam["template_checksum"] == elementwise.family(device, elementwise.Binary).checksum
    for bucket, entry in fam["buckets"].items():
        prov = entry["provenance"]
        assert prov["trials"] >= 1 and prov["speedup"] >= 1.0 - 1e-9
        assert all(t > 0 for t in prov["default_seconds"])
    # the runtime now picks these parameters, from the user config
    params, source = config.lookup(device, "elementwise", "large", fam["template_checksum"])
    assert source.startswith("measured:") and params == {**params, **fam["buckets"]["large"]["params"]}
    # and the kernel still computes the right thing with them
    a = np.arange(70_000, dtype=np.float32)
    A, C = device.upload(a), device.allocator.alloc(a.nbytes)
    elementwise.add(device, A, A, C, a.size)
    np.testing.assert_array_equal(device.download(C, np.float32, a.shape), a + a)


def test_seeds_are_tried_right_after_the_default(device, config_dir, tmp_path, monkeypatch):
    base = config.search_space("elementwise")
    seed = {"WG": 64, "VEC": 1, "ITEMS": 2}
    assert seed != {k: v for k, v in config.default_params("elementwise", device.facts, "large").items() if k in seed}
    monkeypatch.setattr(driver, "search_space", lambda family: {**base, "seeds": [seed]} if family == "elementwise"
                        else config.search_space(family))
    storage = f"sqlite:///{tmp_path}/s.db"
    path = driver.tune(device, ["elementwise"], suite="tiny", trials=3, storage=storage, out_dir=config_dir,
                       progress=False)
    import optuna

    study_name = json.loads(path.read_text())["families"]["elementwise"]["buckets"]["large"]["provenance"]["study"]
    trials = optuna.load_study(study_name=study_name, storage=storage).trials
    assert {k: trials[1].params[k] for k in seed} == seed


def test_wrong_candidate_is_rejected_never_timed(device):
    target = ElementwiseTarget()
    real = target.prepare(device, {"n": 1000})
    timed = []

    def wrong_check(params):  # a "fast" candidate that computes the wrong thing when VEC == 2
        ok, err = real.check(params)
        return (ok and params["VEC"] != 2), (err if params["VEC"] != 2 else 1.0)

    def run(params, i):
        timed.append(params)
        real.run(params, i)

    case = Case(device, {"n": 1000}, run, wrong_check, real.buffers)
    with pytest.raises(driver._Rejected, match="wrong result"):
        driver.evaluate_params(device, target, [case], {"WG": 64, "VEC": 2, "ITEMS": 1})
    assert not timed
    ratio, times = driver.evaluate_params(device, target, [case], {"WG": 64, "VEC": 4, "ITEMS": 1})
    assert times[0] > 0 and timed
    case.free()


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)


def test_corrupt_config_is_ignored_with_one_warning(device, config_dir):
    _write(config_dir / "broken.json", "{ not json")
    config._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        params, source = config.lookup(device, "elementwise", "large")
        config.lookup(device, "elementwise", "small")
    assert source == "default" and params == config.default_params("elementwise", device.facts, "large")
    msgs = [str(w.message) for w in caught if "broken.json" in str(w.message)]
    assert len(msgs) == 1 and "tvk-tune" in msgs[0]


def test_stale_config_is_ignored_with_a_warning(device, config_dir):
    key = config.device_key(device.facts)
    _write(config_dir / "stale.json", {"schema": 1, "source": "measured", "device": {**key, "match": "device"},
                                       "families": {"elementwise": {"template_checksum": "0000000000000000",
                                                                    "buckets": {"*": {"params": {"WG": 1024}}}}}})
    config._warned.clear()
    checksum = elementwise.family(device, elementwise.Binary).checksum
    with pytest.warns(RuntimeWarning, match="another version of the kernel template"):
        params, source = config.lookup(device, "elementwise", "large", checksum)
    assert source == "default"


def test_config_for_another_device_does_not_apply(device, config_dir):
    key = dict(config.device_key(device.facts), vendor_id=0x1002, arch="rdna1")
    checksum = elementwise.family(device, elementwise.Binary).checksum
    _write(config_dir / "amd.json", {"schema": 1, "device": {**key, "match": "arch"},
                                     "families": {"elementwise": {"template_checksum": checksum,
                                                                  "buckets": {"*": {"params": {"WG": 512}}}}}})
    _, source = config.lookup(device, "elementwise", "large", checksum)
    assert source == "default"


def test_rdna1_static_path_compiles_on_null_navi10(tmp_path):
    """The RDNA1 configs come from the real RDNA1 compiler: no spills, fits 32 KiB, occupancy reported."""
    from tvk_kernels.tune import rdna1

    if rdna1.radv_icd() is None:
        pytest.skip("Mesa RADV driver not installed")
    out = subprocess.run([sys.executable, "-m", "tvk_kernels.tune.cli", "--target", "rdna1", "--ops", "elementwise",
                          "--trials", "4", "--out", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for name, limit in (("rdna1--amd-proprietary.json", 32768), ("rdna1--radv.json", 65536)):
        data = json.loads((tmp_path / name).read_text())
        assert data["source"] == "static-model" and data["device"]["match"] == "arch"
        for entry in data["families"]["elementwise"]["buckets"].values():
            stats = entry["provenance"]["compiler_stats"]
            assert stats["Spilled VGPRs"] == 0 and stats["Spilled SGPRs"] == 0
            assert stats["LDS size"] <= min(limit, 32768 if "proprietary" in name else limit)
            assert stats["VGPRs"] > 0 and entry["provenance"]["occupancy_waves_per_simd"] >= 1
