"""tvk-tune never ends a user's mistake in a traceback: one line "tvk-tune: error: ..." naming the
problem, exit code 2 for a bad argument (argparse's usage errors) and 1 for what the run found
wrong, and all of it before any candidate is measured (measuring is made to fail the test)."""
import json
import os
import subprocess
import sys

import pytest

from tvk_kernels.tune import cli, driver


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """Configs and caches of the test's own; measuring a candidate (a trial, a budget probe) fails the test."""
    monkeypatch.setenv("TVK_CONFIG_DIR", str(tmp_path / "configs"))
    monkeypatch.setenv("TVK_CACHE_DIR", str(tmp_path / "cache"))

    def measured(*args, **kwargs):
        raise AssertionError("tvk-tune measured a candidate: the error came after tuning started")

    monkeypatch.setattr(driver, "evaluate_params", measured)
    monkeypatch.setattr(driver, "_probe", measured)


def _main(argv, capsys) -> tuple[int, str]:
    """cli.main(argv) as the shell sees it: (exit code, stderr)."""
    try:
        code = cli.main(argv)
    except SystemExit as e:  # argparse's usage errors
        code = e.code
    return code, capsys.readouterr().err


def _assert_one_clear_line(code, err, want_code, *words):
    assert "Traceback" not in err, err
    assert code == want_code, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("tvk-tune: error: "), err
    for word in words:
        assert word in last, (word, last)


def _file(tmp_path, name, content) -> str:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return str(path)


def test_a_storage_that_is_not_a_database(tmp_path, capsys):
    storage = _file(tmp_path, "random.sqlite3", os.urandom(4096))
    code, err = _main(["--ops", "elementwise", "--shapes", "tiny", "--storage", f"sqlite:///{storage}"], capsys)
    _assert_one_clear_line(code, err, 1, storage, "cannot be read as a database", "--storage")


def test_a_default_storage_whose_cache_folder_is_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TVK_CACHE_DIR", _file(tmp_path, "a-file", b""))
    code, err = _main(["--ops", "elementwise", "--shapes", "tiny"], capsys)
    _assert_one_clear_line(code, err, 1, str(tmp_path / "a-file"), "TVK_CACHE_DIR", "--storage")


@pytest.mark.parametrize("content, words", [
    (None, ["cannot read it", "No such file"]),
    (b"[1, 2", ["is not a JSON file"]),
    (b"\x89PNG\r\n\x1a\n\xff\xfe", ["is not a JSON file"]),
    ([{"n": 1000}], ["expected {family: [shape, ...]}"]),
    ({"elementwise": []}, ["at least one shape"]),
    ({"no_such_family": [{"n": 1}]}, ["no tuner for ['no_such_family']"]),
], ids=["missing", "not JSON", "not text", "a list", "no shapes", "unknown family"])
def test_a_shapes_file_that_cannot_be_used(tmp_path, capsys, content, words):
    shapes = str(tmp_path / "missing.json") if content is None else _file(tmp_path, "shapes.json", content)
    code, err = _main(["--ops", "elementwise", "--shapes", shapes], capsys)
    _assert_one_clear_line(code, err, 2, f"--shapes {shapes}", *words)


def test_a_shapes_file_without_the_families_of_ops(tmp_path, capsys):
    shapes = _file(tmp_path, "shapes.json", {"elementwise": [{"n": 1000}]})
    code, err = _main(["--ops", "elementwise,reduce", "--shapes", shapes], capsys)
    _assert_one_clear_line(code, err, 2, "no shapes for ['reduce']", "--ops")


@pytest.mark.parametrize("shape, words", [({"count": 1000}, ["KeyError", "'n'"]), ({"n": "big"}, ["TypeError"])],
                         ids=["a key missing", "a string for a size"])
def test_a_shape_the_family_cannot_read(tmp_path, capsys, shape, words):
    """Without --ops a shapes file names the families to tune (it used to be all of them: KeyError 'custom')."""
    shapes = _file(tmp_path, "shapes.json", {"elementwise": [shape]})
    code, err = _main(["--shapes", shapes, "--no-progress", "--storage", f"sqlite:///{tmp_path}/s.db"], capsys)
    _assert_one_clear_line(code, err, 1, f"elementwise shape {json.dumps(shape)}", "shapes look like", *words)


def test_a_config_folder_that_is_a_file(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TVK_CONFIG_DIR", _file(tmp_path, "a-file", b""))
    code, err = _main(["--ops", "elementwise", "--shapes", "tiny", "--storage", f"sqlite:///{tmp_path}/s.db"], capsys)
    _assert_one_clear_line(code, err, 1, str(tmp_path / "a-file"), "TVK_CONFIG_DIR", "--out")


@pytest.mark.parametrize("out", ["a-file", "a-file/configs"])
def test_an_out_folder_that_cannot_be_written(tmp_path, capsys, out):
    _file(tmp_path, "a-file", b"")
    code, err = _main(["--ops", "elementwise", "--shapes", "tiny", "--out", str(tmp_path / out),
                       "--storage", f"sqlite:///{tmp_path}/s.db"], capsys)
    _assert_one_clear_line(code, err, 2, f"--out {tmp_path / out}", "cannot write")


@pytest.mark.parametrize("flag, value", [("--time-budget", "0"), ("--time-budget", "-5"), ("--time-budget", "nan"),
                                         ("--trials", "0"), ("--heartbeat", "0")])
def test_counts_and_budgets_must_be_positive(tmp_path, capsys, flag, value):
    code, err = _main(["--ops", "elementwise", "--shapes", "tiny", flag, value,
                       "--storage", f"sqlite:///{tmp_path}/s.db"], capsys)
    _assert_one_clear_line(code, err, 2, flag, "greater than 0", value)


def test_an_unknown_family(capsys):
    code, err = _main(["--ops", "elementwise,bogus"], capsys)
    _assert_one_clear_line(code, err, 2, "--ops", "['bogus']", "choose from")


def test_a_device_that_is_not_there(tmp_path, capsys):
    code, err = _main(["--device", "99", "--ops", "elementwise", "--shapes", "tiny",
                       "--storage", f"sqlite:///{tmp_path}/s.db"], capsys)
    _assert_one_clear_line(code, err, 1, "device 99", "--device")


def test_an_unclear_setting_in_the_environment(tmp_path):
    """The runtime reads TVK_BENCHMARK on import: the CLI's own process, as the shell starts it."""
    env = dict(os.environ, TVK_BENCHMARK="maybe", TVK_CONFIG_DIR=str(tmp_path / "configs"),
               TVK_CACHE_DIR=str(tmp_path / "cache"))
    run = subprocess.run([sys.executable, "-m", "tvk_kernels.tune.cli", "--ops", "elementwise", "--shapes", "tiny",
                          "--trials", "1", "--no-progress", "--storage", f"sqlite:///{tmp_path}/s.db"],
                         capture_output=True, text=True, env=env, timeout=300)
    _assert_one_clear_line(run.returncode, run.stderr, 1, "TVK_BENCHMARK='maybe'", "on/off")
    assert not (tmp_path / "configs").exists() or not any((tmp_path / "configs").iterdir())
