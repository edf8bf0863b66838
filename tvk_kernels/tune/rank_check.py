"""Does the static cost model order candidates as a GPU does? Checked where we can measure.

`tvk-tune --target rdna1` ships RDNA1 configs ranked by a model (cost_model.py), never timed. This
runs the same method on a GPU at hand and times what it ranked: per family and bucket of the suite,
the candidates rdna1.rank compiles (the default, then a seeded sample of the search space; those
that spill or overflow shared memory dropped), each predicted from the family's work counts, this
driver's compiler statistics (where it reports them) and this GPU's numbers (tuning/machines.json,
with its measured fp32 FMA rate and copy bandwidth in place of the data sheet's), then checked and
timed on every shape of the bucket as the tuner times them. Reported per bucket:
  - Spearman's rho between predicted and measured geometric-mean seconds (1: the same order);
  - regret: measured seconds of the model's pick over the measured best (1: it picked the best);
  - the default's measured seconds over the best.

    python -m tvk_kernels.tune.rank_check [--families norm,reduce] [--trials 16] [--suite suite]
                                          [--machine h200] [--out DIR] [--quick]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from .. import get_device
from ..bench.common import environment, md_table, write_result
from ..bench.roofline import copy_bandwidth, fma_rate
from ..errors import TVKError
from ..search_space import bucket_of
from .cost_model import machine, machine_for
from .driver import _prepare, _Rejected, evaluate_params
from .rdna1 import rank
from .targets import load_targets, unavailable

FAMILIES = ("elementwise", "reduce", "softmax", "norm", "matmul", "conv2d", "pool", "attention")


def ranks(values) -> list[float]:
    """Each value's rank (1 = smallest), ties given their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs, ys) -> float | None:
    """Spearman's rank correlation of two equal-length sequences (None: fewer than 3 pairs, or one
    sequence constant)."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman: {len(xs)} values against {len(ys)}")
    if len(xs) < 3:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx, syy = sum((a - mx) ** 2 for a in rx), sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx and syy else None


def check_bucket(device, target, bucket: str, shapes, trials: int, machine, seed: int = 0) -> dict:
    """Rank, measure and compare the candidates of one bucket; see the module docstring."""
    scored, rejected, default = rank(device, target, shapes, trials, device.facts.max_shared_memory, seed=seed,
                                     machine=machine, wave=device.facts.subgroup_size)
    cases = [_prepare(device, target, s) for s in shapes]
    rows, wrong = [], []
    try:
        for predicted, params, stats, preds in scored:
            try:
                _, times = evaluate_params(device, target, cases, params)
            except _Rejected as e:  # a wrong result or a constraint the model's compile did not see
                wrong.append({"params": params, "why": str(e)})
                continue
            rows.append({"params": params, "predicted_s": predicted, "measured_s": statistics.geometric_mean(times),
                         "measured_per_shape_s": times, "bound": [p["bound"] for p in preds],
                         "stats": {k: v for k, v in stats.items() if isinstance(v, (int, float))},
                         "is_default": params == default})
    finally:
        for case in cases:
            case.free()
    result = {"family": target.family, "bucket": bucket, "shapes": shapes, "candidates_compiled": len(scored) + len(rejected),
              "rejected_by_compile": len(rejected), "rejected_by_check": wrong, "measured": len(rows), "rows": rows,
              "rho": None, "regret": None, "default_over_best": None, "model_pick": None, "measured_best": None}
    if rows:
        best = min(rows, key=lambda r: r["measured_s"])
        pick = min(rows, key=lambda r: r["predicted_s"])
        default_row = next((r for r in rows if r["is_default"]), None)
        result.update(rho=spearman([r["predicted_s"] for r in rows], [r["measured_s"] for r in rows]),
                      regret=pick["measured_s"] / best["measured_s"], model_pick=pick["params"],
                      measured_best=best["params"],
                      default_over_best=default_row["measured_s"] / best["measured_s"] if default_row else None)
    return result


def run(device, families, trials: int, suite: str, machine, seed: int = 0, progress: bool = True,
        budget_s: float | None = None, on_bucket=None) -> list[dict]:
    """Check every bucket of each family in turn; `on_bucket(results)` after each (a run cut short keeps what it
    finished); past `budget_s` seconds no further bucket starts."""
    targets = load_targets()
    results = []
    started_run = time.perf_counter()
    for family in families:
        target = targets.get(family)
        if target is None:
            raise ValueError(f"rank_check: no tuning target {family!r}; choose from {', '.join(sorted(targets))}")
        if not hasattr(target, "work") or not hasattr(target, "static_defines"):
            raise ValueError(f"rank_check: the {family} target has no cost-model counts (work, static_defines)")
        why = unavailable(target, device)
        if why:
            print(f"rank_check: {family} skipped: {why}", file=sys.stderr)
            continue
        by_bucket: dict = {}
        for shape in target.suites[suite]:
            by_bucket.setdefault(bucket_of(family, shape), []).append(shape)
        for bucket, shapes in by_bucket.items():
            if budget_s is not None and time.perf_counter() - started_run > budget_s:
                print(f"rank_check: time budget of {budget_s:.0f} s spent; {family}/{bucket} and later buckets "
                      "not checked", file=sys.stderr)
                return results
            started = time.perf_counter()
            result = check_bucket(device, target, bucket, shapes, trials, machine, seed)
            result["seconds"] = time.perf_counter() - started
            results.append(result)
            if on_bucket is not None:
                on_bucket(results)
            if progress:
                print(f"{family}/{bucket}: {result['measured']} measured, rho {_fmt(result['rho'])}, "
                      f"regret {_fmt(result['regret'])}, default/best {_fmt(result['default_over_best'])} "
                      f"({result['seconds']:.0f} s)", file=sys.stderr, flush=True)
    return results


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def markdown(results: list[dict]) -> list[list]:
    return [[r["family"], r["bucket"], r["measured"], r["rejected_by_compile"], len(r["rejected_by_check"]), r["rho"],
             r["regret"], r["default_over_best"]] for r in results]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tvk_kernels.tune.rank_check", description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--trials", type=int, default=16, help="candidates ranked per bucket, the default included")
    ap.add_argument("--suite", default="suite", help="the targets' shape suite: suite (tuned shapes) or tiny")
    ap.add_argument("--machine", default=None,
                    help="the cost model's GPU (a name in tuning/machines.json); default: the one matching this device")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a short roofline probe (lavapipe, CI)")
    ap.add_argument("--out", default=None, help="write rank_check.json and .md here (again after every bucket)")
    ap.add_argument("--time-budget", type=float, default=None, help="start no bucket after this many seconds")
    args = ap.parse_args(argv)
    device = get_device(0)
    found = machine(args.machine) if args.machine else machine_for(device.facts.name)
    if found is None:
        print(f"rank_check: tuning/machines.json has no entry matching {device.facts.name!r}; add one, or "
              f"pass --machine NAME to use another GPU's numbers", file=sys.stderr)
        return 2
    flops = fma_rate(device, fp16=False, quick=args.quick)
    bandwidth, _ = copy_bandwidth(device, quick=args.quick)
    model = found.measured(flops, bandwidth)
    header = {"experiment": "rank_check", "environment": environment(device), "machine": vars(model) | {
        "peak_flops": model.peak_flops, "shared_bytes_per_s": model.shared_bytes_per_s}, "trials": args.trials,
        "suite": args.suite, "seed": args.seed}

    def write(results):
        table = md_table(["family", "bucket", "measured", "dropped by compile", "wrong or rejected", "Spearman rho",
                          "regret (model pick / best)", "default / best"], markdown(results))
        if args.out:
            write_result(args.out, "rank_check", header | {"results": results}, table)
        return table

    try:
        results = run(device, [f for f in args.families.split(",") if f], args.trials, args.suite, model, args.seed,
                      budget_s=args.time_budget, on_bucket=write)
    except (TVKError, ValueError) as e:
        print(f"rank_check: {e}", file=sys.stderr)
        return 2
    print(write(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
