"""tvk-tune on a PostgreSQL study storage, as several machines share one: workers that tune one
study at once, a --resume after them, a worker killed mid-trial, and the errors a user sees.
The server is a throwaway one (tests/postgres_server.py)."""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import optuna
import pytest
from optuna.trial import TrialState

from postgres_server import PostgresServer, server_bin_dir
from tvk_kernels import config
from tvk_kernels.search_space import candidates, search_space
from tvk_kernels.tune import cli, driver
from tvk_kernels.tune.storage import StorageError, open_storage

pytestmark = pytest.mark.xdist_group("postgres")  # one server for the module

CLI = [sys.executable, "-m", "tvk_kernels.tune.cli", "--no-progress", "--ops", "elementwise"]
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def unavailable(reason: str):
    """CI installs PostgreSQL and the driver (make setup): there, their absence is a failure."""
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def postgres():
    bin_dir = server_bin_dir()
    if bin_dir is None:
        unavailable("no PostgreSQL server (initdb, pg_ctl): apt-get install postgresql, as make setup does")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        unavailable("no PostgreSQL driver: pip install -e '.[test]' (psycopg[binary])")
    server = PostgresServer(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(postgres):
    """A new empty database for the test."""
    return postgres.create_database()


@pytest.fixture
def one_study(tmp_path):
    """--shapes for a single study: elementwise on n=1000 (bucket "small")."""
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({"elementwise": [{"n": 1000}]}))
    return ["--shapes", str(path)]


def study_name(device) -> str:
    return f"{config.device_key_name(device.facts)}:elementwise:small"


def trials_of(storage, name) -> list:
    return optuna.load_study(study_name=name, storage=storage).get_trials()


def finished(trials) -> dict:
    """number -> (state, params, value) of the finished trials."""
    return {t.number: (t.state, t.params, t.value) for t in trials if t.state in FINISHED}


def written(out) -> dict:
    return json.loads(next(out.glob("*.json")).read_text())["families"]["elementwise"]["buckets"]["small"]


# ------------------------------------------------------------------ workers at once, then --resume
def test_two_workers_tune_one_study_together_and_resume_continues_it(device, pg_url, one_study, tmp_path):
    args = CLI + one_study + ["--storage", pg_url, "--resume"]
    workers = [subprocess.Popen(args + ["--trials", "12", "--out", str(tmp_path / f"out{k}")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for k in range(2)]
    for w in workers:
        _, err = w.communicate(timeout=120)
        assert w.returncode == 0, err
    trials = trials_of(pg_url, study_name(device))
    done = finished(trials)
    # together they stop at --trials (a trial in flight when the other worker reached it finishes too),
    # each worker's finished trials are in the study, and nothing else is
    assert 12 <= len(done) <= 13, [(t.number, t.state, t.user_attrs.get("pid")) for t in trials]
    per_worker = [sum(t.user_attrs["pid"] == w.pid for t in trials if t.state in FINISHED) for w in workers]
    assert all(per_worker) and sum(per_worker) == len(done), per_worker
    assert all(t.user_attrs["host"] == socket.gethostname() for t in trials if t.state in FINISHED)

    # the worker that ended last saw every trial; its winner is the best of the whole study
    last = max((written(tmp_path / f"out{k}") for k in range(2)), key=lambda w: w["provenance"]["trials"])
    prov = last["provenance"]
    assert prov["trials"] == len(done)
    timed = [t for t in trials if t.state == TrialState.COMPLETE]
    ratio = lambda t: driver.geomean_ratio(t.user_attrs["times"], prov["default_seconds"])  # noqa: E731
    best = min(timed, key=ratio)
    defaults = config.default_params("elementwise", device.facts, "small")
    if ratio(best) < 0.97:
        assert last["params"] == {**defaults, **best.params} and prov["tuned_seconds"] == best.user_attrs["times"]
    else:
        assert last["params"] == defaults

    # a third worker with --resume continues the study: every finished trial kept, 3 more
    more = len(done) + 3
    run = subprocess.run(args + ["--trials", str(more), "--out", str(tmp_path / "out2")], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    after = finished(trials_of(pg_url, study_name(device)))
    assert len(after) == more and {n: after[n] for n in done} == done


# ------------------------------------------------------------------ a worker killed mid-trial
def test_a_killed_worker_loses_no_finished_trial_and_resume_marks_its_trial_failed(device, pg_url, one_study,
                                                                                     tmp_path):
    """A SIGKILLed worker cannot end its running trial: Optuna leaves it RUNNING until a worker
    finds its heartbeat stale (2 missed beats), then marks it FAIL. FAIL does not count toward
    --trials, so --resume runs what is lacking."""
    storage = open_storage(pg_url)  # the tables exist before the worker starts: polling cannot race it
    name = study_name(device)
    args = CLI + one_study + ["--storage", pg_url, "--resume", "--out", str(tmp_path / "out")]
    for attempt in range(3):  # the kill may land between two trials (rarely): then again
        worker = subprocess.Popen(args + ["--trials", "500"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        killed = False
        try:
            end = time.monotonic() + 60
            while not killed and time.monotonic() < end and worker.poll() is None:
                try:
                    seen = trials_of(storage, name)
                except KeyError:  # no study yet
                    seen = []
                mine = [t for t in seen if t.user_attrs.get("pid") == worker.pid]
                if len(mine) >= 4 and mine[-1].state == TrialState.RUNNING:
                    worker.send_signal(signal.SIGKILL)
                    killed = True
                else:
                    time.sleep(0.05)
            assert killed, worker.communicate(timeout=30) if worker.poll() is not None else "no trial in 60 s"
            worker.wait(timeout=30)
            killed_at = time.monotonic()
        finally:
            if worker.poll() is None:
                worker.kill()
        after_kill = trials_of(storage, name)
        orphans = [t.number for t in after_kill if t.state == TrialState.RUNNING]  # only this worker ran trials
        if orphans:
            break
    assert orphans, "never caught the worker inside a trial"
    # every trial that finished before the kill is in the study as it was
    before = finished(seen)
    kept = finished(after_kill)
    assert {n: kept[n] for n in before} == before

    # --resume once the killed worker's heartbeat is stale (--heartbeat 1: after 2 s)
    time.sleep(max(0.0, killed_at + 2.0 - time.monotonic()))
    target = len(kept) + 2
    run = subprocess.run(args + ["--trials", str(target), "--heartbeat", "1"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    final = trials_of(storage, name)
    assert [final[n].state for n in orphans] == [TrialState.FAIL]
    done = finished(final)
    assert len(done) == target and {n: done[n] for n in kept} == kept
    assert not [t for t in final if t.state == TrialState.RUNNING]


def test_a_resumed_study_draws_new_candidates_not_the_first_runs_again(device, pg_url, tmp_path):
    """The sampler's seed was 0 in every run: a resumed run, or a worker joining another, drew the
    same candidates as the first, trial for trial, and measured them again."""
    kw = dict(suite=[{"n": 1000}], storage=pg_url, out_dir=tmp_path / "out", progress=False)
    driver.tune(device, ["elementwise"], trials=5, **kw)

    def drawn():  # the sampler's picks: not the enqueued default and seeds
        return [t.params for t in trials_of(pg_url, study_name(device)) if "fixed_params" not in t.system_attrs]

    first = drawn()
    driver.tune(device, ["elementwise"], trials=5 + len(first), resume=True, **kw)
    again = drawn()[len(first):]
    assert len(first) >= 2 and len(again) == len(first) and again != first, (first, again)


# ------------------------------------------------------------------ storage set-up and errors
def test_workers_opening_an_empty_database_together_all_succeed(pg_url):
    """Optuna creates its tables on first use; workers that start at once raced there (seen: an
    IntegrityError on pg_type for all but one)."""
    errors = []

    def open_it():
        try:
            open_storage(pg_url)
        except Exception as e:  # noqa: BLE001 - collected, asserted below
            errors.append(e)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.filterwarnings("ignore:Heartbeat of storage is supposed to be used with Study.optimize")
def test_starting_over_a_study_another_worker_is_tuning_is_refused(device, pg_url):
    storage = open_storage(pg_url)
    name = study_name(device)
    study = optuna.create_study(study_name=name, storage=storage)
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=1.0))
    trial = study.ask()  # a trial running in another worker, whose heartbeat is fresh
    storage.record_heartbeat(trial._trial_id)
    with pytest.raises(ValueError, match=f"trial {trial.number} runs on .*Pass --resume to join it"):
        driver.start_over(name, storage)
    assert len(trials_of(storage, name)) == 2  # nothing deleted
    study.tell(trial, 1.0)  # that worker is done: starting over deletes the study
    driver.start_over(name, storage)
    with pytest.raises(KeyError):
        optuna.load_study(study_name=name, storage=storage)


def test_a_winner_found_on_another_host_is_timed_here_before_it_is_written(device, tmp_path):
    """A trial's times are those of the machine that ran it: written as this device's winner, they
    would claim another machine's speed (here: a 1e9x speedup)."""
    storage = f"sqlite:///{tmp_path}/s.db"
    defaults = config.default_params("elementwise", device.facts, "small")
    values = {k: v["values"] for k, v in search_space("elementwise")["params"].items()}
    other = next(c for c in candidates("elementwise", device.facts) if any(c[k] != defaults[k] for k in values))
    study = optuna.create_study(study_name=study_name(device), storage=storage)
    study.add_trial(optuna.trial.create_trial(
        params=other, distributions={k: optuna.distributions.CategoricalDistribution(v) for k, v in values.items()},
        value=1e-9, user_attrs={"host": "elsewhere", "pid": 1, "times": [1e-9], "default_seconds": [1.0]}))
    out = tmp_path / "out"
    driver.tune(device, ["elementwise"], suite=[{"n": 1000}], trials=1, storage=storage, resume=True, out_dir=out,
                progress=False)
    prov = written(out)["provenance"]
    assert prov["trials"] == 1  # no trial ran here: the other host's is the study's best
    assert 1e-9 not in prov["tuned_seconds"] and prov["speedup"] < 100, prov


def test_storage_errors_say_what_to_do(device, pg_url, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # the driver not installed
    with pytest.raises(StorageError, match=r"needs the Python module 'psycopg'.*pip install 'psycopg\[binary\]'"):
        open_storage(pg_url)
    monkeypatch.delitem(sys.modules, "psycopg")

    # a server that is not there, with a password that must not be printed
    url = "postgresql+psycopg://tvk:hunter2@/tvk?host=/nonexistent-folder"
    assert cli.main(["--ops", "elementwise", "--no-progress", "--storage", url, "--resume"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("tvk-tune: error: cannot open study storage postgresql+psycopg://tvk:***@") and "hunter2" not in err
    assert "Check that the server runs" in err and "Traceback" not in err, err
