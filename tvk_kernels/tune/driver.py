"""The tuning loop: one Optuna study per (device key, kernel family, shape bucket).

Each trial: sample parameters from the family's space -> reject those that break a
constraint (pruned, reason recorded) -> compile (failures pruned, reason recorded) ->
check against the reference on a fresh input set (a wrong result is rejected and never
timed) -> time with Vulkan timestamps on rotated inputs. The default goes first, then the
family's `seeds` (data in its tuning file), then the sampler's picks. The objective is the geometric
mean over the bucket's shapes of tuned time / default time (lower is better); a trial
that is already 3x slower than the default on its first shape is pruned as hopeless.

Time budget: the shapes are probed cheapest first (the default's check and one run, timed) and
what one measurement costs on this device is estimated from the probes, scaled by work; shapes
whose minimal measurements do not fit their study's share are skipped (and said so). The shares
follow the clock: a study that ends early leaves its time to the next. Each measurement is
bounded by its study's deadline.

Ctrl-C stops the run: finished trials stay in the study storage (--resume continues them),
configs of finished studies stay written, the interrupted study writes nothing unless
`write_partial`, and TuneInterrupted says what was kept.

Several workers (processes or machines) can tune one study in a shared storage (PostgreSQL; see
storage.py): with `resume` each joins the study, and together they stop at `trials` finished
trials. Each trial records the host that measured it and the default's times there; a trial
from another host is compared by its ratio to that host's default, and re-timed here before it
is written as this device's winner.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import signal
import socket
import threading
import time
import warnings
from pathlib import Path

from tqdm import tqdm

from .. import __version__
from ..config import SCHEMA_VERSION, default_params, device_key, device_key_name, reload, search_space, user_config_dir
from ..errors import InvalidConfigError, ShaderCompileError, VulkanError
from ..runtime.compiler import template_checksum
from .cost_model import totals
from .measure import MIN_REPEATS, OutOfTime, time_candidate
from ..search_space import bucket_of, param_values, violations
from .storage import HEARTBEAT_SECONDS, default_storage, open_storage, shown
from .targets import load_targets, unavailable

# A shape is tuned only if this many of its minimal measurements fit its study's share of the
# budget: the default, one trial, the default again.
MIN_MEASUREMENTS = 3
# A minimal measurement: the correctness check and this many runs: two warm-up runs and room for
# the fewest timed ones (measure.py keeps a 2x margin).
MIN_RUNS = 2 + 2 * MIN_REPEATS


class _Rejected(Exception):
    pass


class TuneInterrupted(Exception):
    """Ctrl-C stopped the run; the message says what was kept."""

    def __init__(self, where: str, study: str | None, finished: int, storage: str, written: list, partial: bool):
        self.where, self.study, self.finished, self.storage = where, study, finished, storage
        self.written, self.partial = written, partial
        lines = [f"interrupted during {where}."]
        if study:
            lines.append(f"kept: {finished} finished trials of study {study!r} in {storage}")
        lines += [f"wrote: {job} -> {path}" for job, path in written] or ["wrote no config"]
        if study and not partial:
            lines.append(f"nothing was written for {where}: its study did not finish "
                         "(--write-partial writes the best trial so far)")
        super().__init__("\n".join(lines))


def evaluate_params(device, target, cases, params, default_times=None, hopeless=3.0, deadline=None, needs=None):
    """Check then time `params` on every case; returns (geomean ratio or seconds, per-case times).
    deadline: a time.perf_counter() value to end by; a case is not begun unless its `needs` (estimated
    seconds per case) fit before it (OutOfTime), and its timing is cut to fit."""
    space = search_space(target.family)
    bad = violations(space, params, device.facts)
    if bad:
        raise _Rejected("constraint: " + "; ".join(bad))
    times = []
    for k, case in enumerate(cases):
        if deadline is not None and time.perf_counter() + (needs[k] if needs else 0.0) > deadline:
            raise OutOfTime(f"no time left to measure shape {case.shape}")
        try:
            ok, err = case.check(params)
        except (InvalidConfigError, ShaderCompileError, VulkanError) as e:
            raise _Rejected(f"{type(e).__name__}: {str(e).splitlines()[0]}") from None
        if not ok:
            raise _Rejected(f"wrong result (max abs error {err:.3g}) on shape {case.shape}")
        t = time_candidate(device, lambda i, c=case: c.run(params, i), n_inputs=3, deadline=deadline)
        times.append(t)
        if default_times and t > hopeless * default_times[k]:
            raise _Rejected(f"hopeless: {t / default_times[k]:.1f}x the default on {case.shape}")
    if default_times:
        ratio = math.exp(sum(math.log(t / d) for t, d in zip(times, default_times)) / len(times))
        return ratio, times
    return None, times


class HeldCtrlC:
    """Ctrl-C raises KeyboardInterrupt at once only inside a trial's objective, outside its `held`
    blocks. Landing while Optuna saves a trial (its storage commit), it broke Optuna's own
    bookkeeping (an UnboundLocalError, exit 1); there it is held and raised when the next objective
    starts, or when the block ends."""

    def __init__(self):
        self.inside = False
        self.pending = False
        self._saved = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            self._saved = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, kind, value, tb):
        if self._saved is not None:
            signal.signal(signal.SIGINT, self._saved)
        if self.pending and kind is None:
            raise KeyboardInterrupt

    def _on_sigint(self, signum, frame):
        if self.inside:
            raise KeyboardInterrupt
        self.pending = True

    def objective(self, fn):
        """fn, run with Ctrl-C raising inside it (a held one raises before it starts)."""
        def run(trial):
            if self.pending:
                raise KeyboardInterrupt
            self.inside = True
            try:
                return fn(trial)
            finally:
                self.inside = False
        return run

    @contextlib.contextmanager
    def held(self):
        """Inside an objective: a block that Ctrl-C waits for (the objective's own storage writes);
        one that came during it is raised when it ends."""
        inside, self.inside = self.inside, False
        try:
            yield
        finally:
            self.inside = inside
        if inside and self.pending:
            raise KeyboardInterrupt


def finished_trials(study) -> int:
    """Trials that ran to the end (timed or rejected); one stopped by Ctrl-C or the budget is not,
    nor one that a killed worker left (RUNNING, then FAIL once its heartbeat is stale)."""
    return len(study.get_trials(deepcopy=False, states=finished_states()))


def finished_states() -> tuple:
    """The trial states that count toward --trials: timed, or rejected with a reason."""
    from optuna.trial import TrialState  # lazy: optuna, an optional dependency, loads only to tune

    return TrialState.COMPLETE, TrialState.PRUNED


def geomean_ratio(times, reference) -> float:
    return math.exp(sum(math.log(t / d) for t, d in zip(times, reference)) / len(times))


def best_trial(trials, default_times, here: str):
    """The timed trial with the lowest geometric-mean time ratio to the default, or None. A trial
    measured on this host (`here`) is compared with `default_times`, this host's default; one
    measured on another host with the default that host measured."""
    from optuna.trial import TrialState  # lazy: optuna, an optional dependency, loads only to tune

    def ratio(t):
        mine = t.user_attrs.get("host", here) == here  # trials from before hosts were recorded: here
        return geomean_ratio(t.user_attrs["times"], default_times if mine else t.user_attrs["default_seconds"])

    timed = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("times")]
    return min(timed, key=ratio, default=None)


def start_over(study_name: str, storage) -> None:
    """Delete the study, unless another worker is running one of its trials (its heartbeat is
    fresh): deleting would throw away what that worker finds, and make it fail."""
    # lazy: optuna, an optional dependency (pip install torchvk[tune]), loads only to tune
    import optuna

    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return
    with warnings.catch_warnings():  # optuna marks fail_stale_trials experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # trials of killed workers: FAIL
    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    if running:
        t = running[0]
        who = f"{t.user_attrs.get('host', '?')} (pid {t.user_attrs.get('pid', '?')})"
        grace = 2 * storage.heartbeat_interval
        raise ValueError(
            f"study {study_name!r} is being tuned: trial {t.number} runs on {who}, started "
            f"{t.datetime_start:%H:%M:%S}. "
            f"Pass --resume to join it, or stop that worker to start over (a killed worker's trial is taken as "
            f"failed {grace} s after its last heartbeat). To delete the study anyway: optuna delete-study "
            f"--study-name '{study_name}' --storage '{shown(storage.url)}'")
    optuna.delete_study(study_name=study_name, storage=storage)


def tune_bucket(device, target, bucket, shapes, trials, deadline, storage, resume, progress=True,
                write_partial=False, needs=None):
    """One study; returns its result, or None where the budget ran out before the default was measured.

    storage: an Optuna storage (see storage.open_storage). trials: the study's total of finished
    trials, from every worker (a resumed study runs what it lacks; workers that share it stop when
    it has them). deadline: a time.perf_counter() value the study ends by (None: no limit); needs:
    see evaluate_params. Ctrl-C propagates unless `write_partial`: then the best so far is
    returned, marked "interrupted" in its provenance."""
    # lazy: optuna, an optional dependency (pip install torchvk[tune]), loads only to tune
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a trial stopped by Ctrl-C is reported by tune()
    key = device_key_name(device.facts)
    study_name = f"{key}:{target.family}:{bucket}"
    if not resume:
        start_over(study_name, storage)
    # a fresh study samples reproducibly; a resumed one (or a worker joining others) must not
    # replay the draws of the run it continues (seed 0 again repeats them, trial for trial)
    study = optuna.create_study(study_name=study_name, storage=storage, direction="minimize", load_if_exists=True,
                                sampler=optuna.samplers.TPESampler(seed=None if resume else 0, multivariate=True))
    here = socket.gethostname()
    cases = []
    try:
        cases += [_prepare(device, target, s) for s in shapes]
        defaults = default_params(target.family, device.facts, bucket)
        started = time.perf_counter()
        try:
            _, default_times = evaluate_params(device, target, cases, defaults, deadline=deadline, needs=needs)
        except OutOfTime:
            return None
        reserve = time.perf_counter() - started  # kept for measuring the default again at the end
        study_deadline = None if deadline is None else deadline - reserve
        values = param_values(search_space(target.family), device.facts)
        # start from the default, then the family's known-good seeds (where their values lie in the
        # space; host heuristics may not)
        for start in [defaults, *search_space(target.family).get("seeds", [])]:
            study.enqueue_trial({k: v for k, v in start.items() if k in values and v in values[k]}, skip_if_exists=True)
        bar = None
        if progress:
            bar = tqdm(total=trials, initial=finished_trials(study), desc=f"{target.family}/{bucket}", unit="trial")

        ctrl_c = HeldCtrlC()

        def objective(trial):
            with ctrl_c.held():  # storage writes
                # who measures it, against which default: trials of other hosts are compared by their ratio
                trial.set_user_attr("host", here)
                trial.set_user_attr("pid", os.getpid())
                trial.set_user_attr("default_seconds", default_times)
                params = {**defaults, **{name: trial.suggest_categorical(name, vals) for name, vals in values.items()}}
            try:
                ratio, times = evaluate_params(device, target, cases, params, default_times, deadline=study_deadline,
                                               needs=needs)
            except (_Rejected, RuntimeError) as e:  # RuntimeError: e.g. the device gave no usable timestamps
                with ctrl_c.held():
                    trial.set_user_attr("rejected", str(e) if isinstance(e, _Rejected) else f"{type(e).__name__}: {e}")
                raise optuna.TrialPruned(str(e))
            with ctrl_c.held():
                trial.set_user_attr("times", times)
            return ratio

        def on_trial(study, trial):
            if bar is not None:
                bar.update(1)
                try:
                    bar.set_postfix(best=f"{study.best_value:.3f}x", speedup=f"{1 / study.best_value:.2f}")
                except ValueError:
                    pass

        interrupted = False
        timeout = None if study_deadline is None else max(study_deadline - time.perf_counter(), 0.0)
        try:
            left = trials - finished_trials(study)
            if left > 0:
                # n_trials: what the study lacked when this worker began; the callback stops it
                # sooner where other workers have finished the rest
                enough = optuna.study.MaxTrialsCallback(trials, states=finished_states())
                with ctrl_c:
                    study.optimize(ctrl_c.objective(objective), n_trials=left, timeout=timeout,
                                   callbacks=[on_trial, enough])
        except OutOfTime:  # the study's share of the budget is spent; its finished trials count
            pass
        except KeyboardInterrupt:
            if not write_partial:
                raise
            interrupted = True
        finally:
            if bar is not None:
                bar.close()
        # the default again, now that clocks and caches are warm: a winner must beat the better
        # of its two measurements by 3%, so noise never ships as a "tuned" config
        if not interrupted and (deadline is None or time.perf_counter() + reserve <= deadline):
            try:
                _, again = evaluate_params(device, target, cases, defaults, deadline=deadline, needs=needs)
                default_times = [min(a, b) for a, b in zip(default_times, again)]
            except OutOfTime:
                pass
        everyone = study.trials  # one snapshot (other workers add trials): the winner and the counts agree
        best = best_trial(everyone, default_times, here)
        tuned_times = best.user_attrs["times"] if best is not None else None
        if best is not None and best.user_attrs.get("host", here) != here:
            # found on another machine: its times are that machine's, so it is timed here before
            # it is written as this device's winner (where it cannot be, the default stays)
            try:
                _, tuned_times = evaluate_params(device, target, cases, {**defaults, **best.params},
                                                 deadline=deadline, needs=needs)
            except (_Rejected, OutOfTime, RuntimeError):
                best = None
        if best is not None and geomean_ratio(tuned_times, default_times) < 0.97:
            params = {**defaults, **best.params}
        else:
            params, tuned_times = defaults, default_times
        rejected = [t.user_attrs.get("rejected") for t in everyone if t.user_attrs.get("rejected")]
        provenance = {
            "default_seconds": default_times, "tuned_seconds": tuned_times,
            "speedup": math.exp(sum(math.log(d / t) for d, t in zip(default_times, tuned_times)) / len(default_times)),
            "trials": sum(t.state in finished_states() for t in everyone), "rejected": len(rejected),
            "rejected_examples": rejected[:5], "shapes": shapes, "study": study_name,
        }
        if interrupted:
            provenance["interrupted"] = True
        return {"params": params, "provenance": provenance}
    finally:
        for c in cases:
            c.free()


def _prepare(device, target, shape, **kw):
    """target.prepare(device, shape); a shape it cannot read (from a hand-written --shapes file)
    is a ValueError naming the shape, raised before any trial."""
    try:
        return target.prepare(device, shape, **kw)
    except (KeyError, TypeError) as e:
        raise _unreadable_shape(target, shape, e) from e


def _unreadable_shape(target, shape, e) -> ValueError:
    return ValueError(f"{target.family} shape {json.dumps(shape)} cannot be read ({type(e).__name__}: {e}); "
                      f"{target.family} shapes look like {json.dumps(target.suites['tiny'][0])}")


# ------------------------------------------------------------------ fitting the suite to the budget
def _work(device, target, shape) -> tuple:
    """(flops, bytes moved) of one run of the default on `shape`."""
    try:
        flops, moved = totals(target.work(shape, default_params(target.family, device.facts,
                                                                  bucket_of(target.family, shape))))
    except (KeyError, TypeError) as e:
        raise _unreadable_shape(target, shape, e) from e
    return flops or 0, moved or 0


def _probe(device, target, shape) -> tuple[float, float]:
    """(wall seconds of one minimal measurement of the default on `shape`: its check and MIN_RUNS
    runs, seconds its first run spent compiling)."""
    params = default_params(target.family, device.facts, bucket_of(target.family, shape))
    case = _prepare(device, target, shape, n_inputs=1)
    try:
        t = time.perf_counter()
        case.run(params, 0)
        device.stream.synchronize()
        first = time.perf_counter() - t
        t = time.perf_counter()
        case.check(params)
        t_check = time.perf_counter() - t
        t = time.perf_counter()
        case.run(params, 0)
        device.stream.synchronize()
        t_run = time.perf_counter() - t
        return t_check + MIN_RUNS * t_run, max(first - t_run, 0.0)
    finally:
        case.free()


def estimate_measurements(device, target, shapes, limit: float) -> tuple[list[float], float]:
    """(estimated wall seconds of one minimal measurement (see _probe) of each shape, the longest
    compile seen).

    Shapes are probed cheapest first. One whose estimate from the last probed shape, scaled by
    work (flops or bytes, whichever grows more), is over `limit` is not probed and keeps that
    estimate: an overestimate where bigger shapes use the device better, so it errs on the side
    of the budget (scaling from the cheapest shape alone overestimated a 1024^3 matmul 9x on lavapipe)."""
    work = [_work(device, target, s) for s in shapes]
    out, ref, compile_seconds = [0.0] * len(shapes), None, 0.0
    for i in sorted(range(len(shapes)), key=lambda i: work[i]):
        if ref is not None:
            out[i] = ref[1] * max([a / b for a, b in zip(work[i], ref[0]) if b] or [1.0])
            if out[i] > limit:
                continue
        out[i], compiling = _probe(device, target, shapes[i])
        compile_seconds = max(compile_seconds, compiling)
        ref = work[i], out[i]
    return out, compile_seconds


def plan_shapes(shapes, seconds: list, share: float, compile_seconds: float = 0.0) -> tuple[list, list]:
    """(kept, skipped) shapes of one study as (shape, seconds), cheapest first: a shape is kept while
    MIN_MEASUREMENTS measurements of it and those kept before (estimated `seconds` each), plus one
    compile (a trial's variant), fit `share`."""
    kept, skipped, total = [], [], compile_seconds
    for shape, t in sorted(zip(shapes, seconds), key=lambda x: x[1]):
        if total + MIN_MEASUREMENTS * t <= share:
            kept.append((shape, t))
            total += MIN_MEASUREMENTS * t
        else:
            skipped.append((shape, t))
    return kept, skipped


def fit_to_budget(device, jobs: list, deadline: float, say=print) -> list:
    """The jobs (target, bucket, shapes) whose shapes fit an equal share of the time left, as
    (target, bucket, kept shapes, seconds each needs: see evaluate_params). A study that ends
    early leaves its time to the next ones (see tune)."""
    share = (deadline - time.perf_counter()) / max(len(jobs), 1)
    estimates, compiles = {}, {}  # (family, bucket) -> seconds per shape; family -> compile seconds
    for target in {t.family: t for t, _, _ in jobs}.values():
        mine = [(b, ss) for t, b, ss in jobs if t is target]
        est, compiles[target.family] = estimate_measurements(device, target, [s for _, ss in mine for s in ss],
                                                             share / MIN_MEASUREMENTS)
        for b, ss in mine:
            estimates[target.family, b], est = est[:len(ss)], est[len(ss):]
    share = (deadline - time.perf_counter()) / max(len(jobs), 1)  # what is left after the probes
    out = []
    for target, bucket, shapes in jobs:
        compiling = compiles[target.family]
        kept, skipped = plan_shapes(shapes, estimates[target.family, bucket], share, compiling)
        for shape, t in skipped:
            say(f"tvk-tune: {target.family}/{bucket}: skipping shape {shape}: a measurement takes about {t:.2g} s "
                f"on this device and {MIN_MEASUREMENTS} do not fit the {share:.0f} s this study gets; "
                f"raise --time-budget to tune it")
        if kept:
            needs = [t for _, t in kept]
            needs[0] += compiling  # a trial compiles its variant on its first shape
            out.append((target, bucket, [s for s, _ in kept], needs))
        else:
            say(f"tvk-tune: {target.family}/{bucket}: nothing fits the time budget; not tuned")
    return out


def write_config(out_dir: Path, facts, source: str, results: dict, match: str = "device", name: str | None = None,
                 device_overrides: dict | None = None) -> Path:
    """Merge per-family results into <out_dir>/<device-key>.json (schema in tuned_configs/README.md)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name or device_key_name(facts)}.json"
    data = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except Exception:
            data = {}
    if data.get("schema") != SCHEMA_VERSION:
        data = {}
    dev = {**device_key(facts), "match": match, **(device_overrides or {})}
    data.update({"schema": SCHEMA_VERSION, "source": source, "device": dev})
    fams = data.setdefault("families", {})
    stamp = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "torchvk_version": __version__}
    for family, (template, buckets) in results.items():
        entry = fams.get(family, {})
        checksum = template_checksum(template)
        if entry.get("template_checksum") != checksum:
            entry = {"template_checksum": checksum, "buckets": {}}
        for bucket, res in buckets.items():
            res["provenance"].update(stamp)
            entry["buckets"][bucket] = res
        fams[family] = entry
    # one temporary file per process: workers on one machine may write the same config at once
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float) + "\n")
    tmp.replace(path)
    reload()
    return path


def tune(device, families, suite="suite", trials=30, time_budget=None, storage=None, resume=False, out_dir=None,
         progress=True, deadline=None, write_partial=False, say=print, heartbeat=HEARTBEAT_SECONDS) -> Path | None:
    """Tune every (family, shape bucket); returns the config written (None: nothing fitted the budget).

    storage: an Optuna storage URL (default: SQLite in the cache folder); heartbeat: see storage.py.
    time_budget: seconds for the whole run, from now; deadline: the same as a time.perf_counter()
    value (the CLI starts the clock at launch). Ctrl-C raises TuneInterrupted."""
    # lazy: optuna, an optional dependency (pip install torchvk[tune]), loads only to tune
    import optuna

    targets = load_targets()
    url = storage or default_storage()
    storage = open_storage(url, heartbeat)  # first: a bad URL or a server down is said before any work
    out_dir = Path(out_dir) if out_dir else user_config_dir()
    if deadline is None and time_budget:
        deadline = time.perf_counter() + time_budget
    jobs = []
    for family in families:
        if family not in targets:
            raise ValueError(f"no tuner target for {family!r}; choose from {sorted(targets)}")
        target = targets[family]
        why = unavailable(target, device)
        if why:
            say(f"tvk-tune: {family}: not tuned on {device.facts.name}: {why}")
            continue
        shapes = target.suites[suite] if isinstance(suite, str) else suite
        by_bucket: dict = {}
        for s in shapes:
            by_bucket.setdefault(bucket_of(family, s), []).append(s)
        jobs += [(target, b, ss, None) for b, ss in by_bucket.items()]
    results: dict = {}
    written: list = []
    path, where, study_name = None, "the probes of the shapes' run times", None
    t0 = time.perf_counter()
    try:
        if deadline is not None:
            jobs = fit_to_budget(device, [j[:3] for j in jobs], deadline, say)
        for k, (target, bucket, shapes, needs) in enumerate(jobs):
            where, study_name = f"{target.family}/{bucket}", f"{device_key_name(device.facts)}:{target.family}:{bucket}"
            t_job = time.perf_counter()
            job_deadline = None if deadline is None else t_job + (deadline - t_job) / (len(jobs) - k)
            res = tune_bucket(device, target, bucket, shapes, trials, job_deadline, storage, resume, progress,
                              write_partial, needs)
            if res is None:
                say(f"tvk-tune: {where}: the time budget ran out before the default was measured; not tuned")
                where, study_name = "the start of the next study", None
                continue
            res["provenance"]["tune_seconds"] = round(time.perf_counter() - t_job, 2)  # whole study, compile included
            results.setdefault(target.family, (target.template, {}))[1][bucket] = res
            # write after every bucket: an interrupted run keeps what it found
            path = write_config(out_dir, device.facts, "measured", {target.family: results[target.family]})
            if res["provenance"].get("interrupted"):  # --write-partial: the best so far is written, then stop
                written.append((f"{where} (best of its finished trials)", path))
                raise TuneInterrupted(where, study_name, res["provenance"]["trials"], shown(url), written, True)
            written.append((where, path))
            where, study_name = "the start of the next study", None
    except KeyboardInterrupt:
        finished = 0
        if study_name is not None:
            try:
                finished = finished_trials(optuna.load_study(study_name=study_name, storage=storage))
            except KeyError:  # Ctrl-C before the study was created
                pass
        raise TuneInterrupted(where, study_name, finished, shown(url), written, False) from None
    if progress:
        say(f"tvk-tune: {len(jobs)} studies in {time.perf_counter() - t0:.1f} s -> {path}")
    return path
