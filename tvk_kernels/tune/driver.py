"""The tuning loop: one Optuna study per (device key, kernel family, shape bucket).

Each trial: sample parameters from the family's space -> reject those that break a
constraint (pruned, reason recorded) -> compile (failures pruned, reason recorded) ->
check against the reference on a fresh input set (a wrong result is rejected and never
timed) -> time with Vulkan timestamps on rotated inputs. The default goes first, then the
family's `seeds` (data in its tuning file), then the sampler's picks. The objective is the geometric
mean over the bucket's shapes of tuned time / default time (lower is better); a trial
that is already 3x slower than the default on its first shape is pruned as hopeless.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import time
from pathlib import Path

from .. import __version__
from ..config import SCHEMA_VERSION, default_params, device_key, device_key_name, reload, search_space, user_config_dir
from ..errors import InvalidConfigError, ShaderCompileError, VulkanError
from ..runtime.compiler import template_checksum
from .measure import time_candidate
from .space import bucket_of, param_values, violations


class _Rejected(Exception):
    pass


def default_storage() -> str:
    from ..paths import cache_dir

    return f"sqlite:///{cache_dir() / 'tuning.sqlite3'}"


def evaluate_params(device, target, cases, params, default_times=None, hopeless=3.0):
    """Check then time `params` on every case; returns (geomean ratio or seconds, per-case times)."""
    space = search_space(target.family)
    bad = violations(space, params, device.facts)
    if bad:
        raise _Rejected("constraint: " + "; ".join(bad))
    times = []
    for k, case in enumerate(cases):
        try:
            ok, err = case.check(params)
        except (InvalidConfigError, ShaderCompileError, VulkanError) as e:
            raise _Rejected(f"{type(e).__name__}: {str(e).splitlines()[0]}") from None
        if not ok:
            raise _Rejected(f"wrong result (max abs error {err:.3g}) on shape {case.shape}")
        t = time_candidate(device, lambda i, c=case: c.run(params, i), n_inputs=3)
        times.append(t)
        if default_times and t > hopeless * default_times[k]:
            raise _Rejected(f"hopeless: {t / default_times[k]:.1f}x the default on {case.shape}")
    if default_times:
        ratio = math.exp(sum(math.log(t / d) for t, d in zip(times, default_times)) / len(times))
        return ratio, times
    return None, times


def tune_bucket(device, target, bucket, shapes, trials, timeout, storage, resume, progress=True):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    key = device_key_name(device.facts)
    study_name = f"{key}:{target.family}:{bucket}"
    if not resume:
        try:
            optuna.delete_study(study_name=study_name, storage=storage)
        except KeyError:
            pass
    study = optuna.create_study(study_name=study_name, storage=storage, direction="minimize", load_if_exists=True,
                                sampler=optuna.samplers.TPESampler(seed=0, multivariate=True))
    cases = [target.prepare(device, s) for s in shapes]
    defaults = default_params(target.family, device.facts, bucket)
    try:
        _, default_times = evaluate_params(device, target, cases, defaults)
        values = param_values(search_space(target.family))
        # start from the default, then the family's known-good seeds (where their values lie in the
        # space; host heuristics may not)
        for start in [defaults, *search_space(target.family).get("seeds", [])]:
            study.enqueue_trial({k: v for k, v in start.items() if k in values and v in values[k]}, skip_if_exists=True)
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=trials, desc=f"{target.family}/{bucket}", unit="trial")

        def objective(trial):
            params = {**defaults, **{name: trial.suggest_categorical(name, vals) for name, vals in values.items()}}
            try:
                ratio, times = evaluate_params(device, target, cases, params, default_times)
            except _Rejected as e:
                trial.set_user_attr("rejected", str(e))
                raise optuna.TrialPruned(str(e))
            trial.set_user_attr("times", times)
            return ratio

        def on_trial(study, trial):
            if bar is not None:
                bar.update(1)
                try:
                    bar.set_postfix(best=f"{study.best_value:.3f}x", speedup=f"{1 / study.best_value:.2f}")
                except ValueError:
                    pass

        try:
            study.optimize(objective, n_trials=trials, timeout=timeout, callbacks=[on_trial], catch=(RuntimeError,))
        except KeyboardInterrupt:  # keep what was found
            pass
        if bar is not None:
            bar.close()
        # the default again, now that clocks and caches are warm: a winner must beat the better
        # of its two measurements by 3%, so noise never ships as a "tuned" config
        _, again = evaluate_params(device, target, cases, defaults)
        default_times = [min(a, b) for a, b in zip(default_times, again)]
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("times")]
        geo = lambda ts: math.exp(sum(math.log(t / d) for t, d in zip(ts, default_times)) / len(ts))  # noqa: E731
        best = min(complete, key=lambda t: geo(t.user_attrs["times"])) if complete else None
        if best is not None and geo(best.user_attrs["times"]) < 0.97:
            params, tuned_times = {**defaults, **best.params}, best.user_attrs["times"]
        else:
            params, tuned_times = defaults, default_times
        rejected = [t.user_attrs.get("rejected") for t in study.trials if t.user_attrs.get("rejected")]
        return {
            "params": params,
            "provenance": {
                "default_seconds": default_times, "tuned_seconds": tuned_times,
                "speedup": math.exp(sum(math.log(d / t) for d, t in zip(default_times, tuned_times)) / len(default_times)),
                "trials": len(study.trials), "rejected": len(rejected), "rejected_examples": rejected[:5],
                "shapes": shapes, "study": study_name,
            },
        }
    finally:
        for c in cases:
            c.free()


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
    stamp = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "torchvk_version": __version__}
    for family, (template, buckets) in results.items():
        entry = fams.get(family, {})
        checksum = template_checksum(template)
        if entry.get("template_checksum") != checksum:
            entry = {"template_checksum": checksum, "buckets": {}}
        for bucket, res in buckets.items():
            res["provenance"].update(stamp)
            entry["buckets"][bucket] = res
        fams[family] = entry
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=float) + "\n")
    tmp.replace(path)
    reload()
    return path


def tune(device, families, suite="suite", trials=30, time_budget=None, storage=None, resume=False, out_dir=None,
         progress=True) -> Path:
    from .targets import TARGETS

    storage = storage or default_storage()
    out_dir = Path(out_dir) if out_dir else user_config_dir()
    jobs = []
    for family in families:
        if family not in TARGETS:
            raise ValueError(f"no tuner target for {family!r}; choose from {sorted(TARGETS)}")
        target = TARGETS[family]
        shapes = target.suites[suite] if isinstance(suite, str) else suite
        by_bucket: dict = {}
        for s in shapes:
            by_bucket.setdefault(bucket_of(family, s), []).append(s)
        jobs += [(target, b, ss) for b, ss in by_bucket.items()]
    per_job = (time_budget / len(jobs)) if time_budget and jobs else None
    results: dict = {}
    t0 = time.perf_counter()
    for target, bucket, shapes in jobs:
        t_job = time.perf_counter()
        res = tune_bucket(device, target, bucket, shapes, trials, per_job, storage, resume, progress)
        res["provenance"]["tune_seconds"] = round(time.perf_counter() - t_job, 2)  # whole study, compile included
        results.setdefault(target.family, (target.template, {}))[1][bucket] = res
        # write after every bucket: an interrupted run keeps what it found
        path = write_config(out_dir, device.facts, "measured", {target.family: results[target.family]})
    if progress:
        print(f"tvk-tune: {len(jobs)} studies in {time.perf_counter() - t0:.1f} s -> {path}")
    return path
