"""Search spaces (tuning/<family>.json) as data: load, evaluate, derive, constrain, enumerate, bucket.

The one expression evaluator: the tuner, the config lookup and every kernel family read
buckets, derived values and constraints through it."""
from __future__ import annotations

import itertools
import math
import json
from functools import lru_cache

from .paths import data_dir

@lru_cache(maxsize=None)
def search_space(family: str) -> dict:
    with open(data_dir("tuning") / f"{family}.json") as f:
        return json.load(f)


_SAFE = {"min": min, "max": max, "abs": abs, "math": math, "True": True, "False": False}


def limits(facts) -> dict:
    """Device limits that constraints may name."""
    return {
        "max_workgroup_invocations": facts.max_workgroup_invocations,
        "max_workgroup_size_x": facts.max_workgroup_size[0],
        "max_shared_memory": facts.max_shared_memory,
        "subgroup_size": facts.subgroup_size,
        "min_subgroup_size": facts.min_subgroup_size,
        "max_subgroup_size": facts.max_subgroup_size,
        "subgroup_size_control": facts.subgroup_size_control,
        "max_compute_workgroup_subgroups": facts.max_compute_workgroup_subgroups,
        "max_push_constants": facts.max_push_constants,
        "cooperative_matrix": facts.features.get("cooperative_matrix", False),
        "cooperative_matrix2": facts.features.get("cooperative_matrix2", False),
        "shader_float16": facts.features.get("shader_float16", False),
        "subgroup_arithmetic": facts.features.get("subgroup_arithmetic", False),
    }


@lru_cache(maxsize=None)
def _compiled(expr: str):
    return compile(expr, f"<constraint {expr}>", "eval")


def evaluate(expr: str, names: dict):
    return eval(_compiled(expr), {"__builtins__": {}}, {**_SAFE, **names})


def with_derived(space: dict, params: dict) -> dict:
    """params and the space's derived values. A parameter newer than `params` (a config tuned before it
    existed) enters the derived values at its generic default, the kernel as it was before it."""
    names = {**space.get("defaults", {}).get("generic", {}), **params}
    derived = {}
    for name, expr in space.get("derived", {}).items():
        derived[name] = names[name] = evaluate(expr, names)
    return {**params, **derived}


def violations(space: dict, params: dict, facts) -> list[str]:
    """The constraints `params` break on this device (empty: valid)."""
    names = {**limits(facts), **with_derived(space, params)}
    bad = []
    for expr in space.get("constraints", []):
        try:
            if not evaluate(expr, names):
                bad.append(expr)
        except Exception as e:  # a constraint naming something absent is a broken space file
            bad.append(f"{expr} ({e})")
    return bad


def param_values(space: dict, facts=None) -> dict:
    """Each parameter's values; with a device's facts, a required subgroup size (kind "subgroup_size")
    only where the device can give it (0, the driver's choice, always): the tuner spends no trial on
    a size the constraints would refuse."""
    values = {name: spec["values"] if isinstance(spec, dict) else list(spec) for name, spec in space["params"].items()}
    if facts is not None:
        for name, spec in space["params"].items():
            if isinstance(spec, dict) and spec.get("kind") == "subgroup_size":
                values[name] = [v for v in values[name] if v == 0 or facts.gives_subgroup_size(v)]
    return values


def candidates(family: str, facts, limit: int | None = None) -> list[dict]:
    """Every parameter set of the family's space that fits this device."""
    space = search_space(family)
    values = param_values(space)
    names = list(values)
    out = []
    for combo in itertools.product(*(values[n] for n in names)):
        params = dict(zip(names, combo))
        if not violations(space, params, facts):
            out.append(params)
            if limit and len(out) >= limit:
                break
    return out


def bucket_of(family: str, shape: dict) -> str:
    """First bucket whose expression holds for the shape (names: the shape's keys), then the
    space's "bucket_suffixes": ".value" for each named shape key whose value is not its default
    (matmul: the operand layout, "medium.tn")."""
    space = search_space(family)
    for name, expr in space.get("buckets", {}).items():
        try:
            if evaluate(expr, shape):
                return name + bucket_suffix(space, shape)
        except Exception:
            continue
    return "*"


def bucket_suffix(space: dict, shape: dict) -> str:
    return "".join(f".{shape[key]}" for key, default in space.get("bucket_suffixes", {}).items()
                   if shape.get(key, default) != default)
