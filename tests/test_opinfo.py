"""PyTorch's own OpInfo samples on tvk against CPU: every float32 op of op_db, forward and
backward, each crash-isolated (tests/opinfo/). No op may crash, hang, mismatch or raise
where CPU does not, except the ones in tests/opinfo/known_failures.json, and that list can
only shrink; the missing ops must be the committed tests/opinfo/missing_ops.json, and
docs/op-coverage.md must be the one this run generates."""
import os
import tempfile
import time

import pytest
import torch

from opinfo import report, runner

ROWS_FILE = os.path.join(tempfile.gettempdir(), "torchvk-opinfo-rows.jsonl")
REGENERATE = f"python -m tests.opinfo.report --rows {ROWS_FILE} --write"


# its module fixture runs once: keep its tests on one pytest-xdist worker
pytestmark = pytest.mark.xdist_group("opinfo")

@pytest.fixture(scope="session")  # session: xdist may interleave other modules' tests
def rows():
    start = time.perf_counter()
    names = runner.all_op_names()
    out = runner.run(names, jobs=2)
    runner.write_rows(out, ROWS_FILE)
    print(f"\nOpInfo: {len(out)} ops in {time.perf_counter() - start:.0f} s; rows in {ROWS_FILE}")
    return out


def test_runner_catches_each_kind_of_failure():
    """Fake ops that misbehave on tvk on purpose (tests/opinfo/selftest_ops.py): each is
    classified as such, and an abort or a hang costs only its own op."""
    names = ["_selftest." + n for n in ("abort", "match", "wrong_value", "wrong_grad", "error", "same_error",
                                        "missing", "hang")]
    rows = runner.run(names, jobs=1, timeout=5)  # one worker: "match" runs in the one started after the abort
    got = {r["op"].split(".", 1)[1]: r["status"] for r in rows}
    assert got == {"abort": "crash", "match": "match", "wrong_value": "mismatch", "wrong_grad": "mismatch",
                   "error": "error", "same_error": "match", "missing": "missing", "hang": "timeout"}, rows
    by = {r["op"]: r for r in rows}
    assert by["_selftest.wrong_grad"]["phase"] == "backward"
    assert by["_selftest.missing"]["missing"] == "aten.special_zeta.default"
    assert "signal 6" in by["_selftest.abort"]["detail"]


def _line(r) -> str:
    text = f"{r['op']}: {r['status']} ({r.get('phase', '')}, sample {r.get('sample', '?')}) {r.get('detail', '')}"
    return text + (f"\n    stderr: {r['stderr_tail'][-300:]}" if r.get("stderr_tail") else "")


def test_every_op_has_a_row(rows):
    assert [r["op"] for r in rows] == runner.all_op_names()


def test_no_failures_beyond_the_known_ones(rows):
    known = report.known_failures()
    new = [r for r in rows if r["status"] in runner.FAILING and r["op"] not in known]
    assert not new, f"{len(new)} ops fail on tvk (fix them, or add them to tests/opinfo/known_failures.json " \
                    "with a reason and an issue):\n" + "\n".join(_line(r) for r in new)


def test_known_failures_still_fail(rows):
    """The allowlist only shrinks: an op that no longer fails must leave it."""
    known = report.known_failures()
    status = {r["op"]: r["status"] for r in rows}
    fixed = [f"{op}: now {status[op]}" for op in known if op in status and status[op] not in runner.FAILING]
    assert not fixed, "remove these from tests/opinfo/known_failures.json (then regenerate with " \
                      f"`{REGENERATE}`):\n" + "\n".join(fixed)


def _same_torch():
    committed = report.committed_missing()["torch"]
    if committed != torch.__version__:
        pytest.skip(f"missing_ops.json and docs/op-coverage.md were made with torch {committed}, "
                    f"this is {torch.__version__}")


def test_missing_ops_are_the_committed_list(rows):
    _same_torch()
    committed = report.committed_missing()["ops"]
    missing = {r["op"]: r.get("missing") for r in rows if r["status"] == "missing"}
    new = sorted(set(missing) - set(committed))
    assert not new, "these ops worked and now lack a kernel (a regression?):\n" + \
                    "\n".join(f"{op}: {missing[op]}" for op in new)
    done = sorted(set(committed) - set(missing))
    assert not done, f"these ops are no longer missing: regenerate with `{REGENERATE}`:\n" + "\n".join(done)


def test_coverage_doc_is_current(rows):
    _same_torch()
    text = report.render(rows, report.known_failures(), runner.random_ops())
    assert report.DOC.read_text() == text, f"docs/op-coverage.md is stale: `{REGENERATE}`"
