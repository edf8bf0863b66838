"""Kernel parameters as data: search spaces from `tuning/`, winners from `tuned_configs/`.

Lookup order for (device, family, shape bucket):
  1. TVK_CONFIG_DIR (user-tuned), then the shipped tuned_configs/
  2. within those: exact device + driver, then architecture family, then vendor
  3. the family's default for the device class in tuning/<family>.json
A config tuned for another version of a template (checksum differs) is stale and is
ignored; a file that cannot be read is ignored; an entry whose parameters are of the wrong
type, outside the search space, or break a constraint or a device limit is skipped and the
next level is used. Each gets one warning naming the file (and family, bucket) and what to do.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import re
import warnings
from functools import lru_cache
from pathlib import Path

from .errors import InvalidConfigError
from .paths import data_dir
from .runtime.device import Device
from .search_space import bucket_of, search_space, violations

SCHEMA_VERSION = 1
_warned: set = set()
_generation = 0  # bumped by reload(): families drop the parameters they looked up


def _warn_once(key: str, message: str):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


# ---------------------------------------------------------------- device keys
_NAVI10_IDS = set(range(0x7310, 0x7320))


def arch_family(facts) -> str:
    name = facts.name.upper()
    if facts.vendor_id == 0x1002:
        if facts.device_id in _NAVI10_IDS or "NAVI10" in name or "5600" in name or "5700" in name:
            return "rdna1"
        return "amd"
    if facts.vendor_id == 0x10DE:
        if re.search(r"\bH(100|200|800)\b", name) or "GH100" in name:
            return "hopper"
        return "nvidia"
    if "LLVMPIPE" in name:
        return "llvmpipe"
    return facts.vendor.lower().replace(" ", "_")


def device_key(facts) -> dict:
    """What identifies a device for tuning: what changes performance."""
    return {
        "vendor_id": facts.vendor_id, "device_id": facts.device_id, "name": facts.name,
        "arch": arch_family(facts), "driver_id": facts.driver_id, "driver": facts.driver_label,
        "driver_version": facts.driver_version, "driver_info": facts.driver_info,
        "max_shared_memory": facts.max_shared_memory,
        "subgroup_sizes": [facts.min_subgroup_size, facts.max_subgroup_size],
    }


def device_key_name(facts) -> str:
    arch = arch_family(facts)
    driver = facts.driver_label.lower()
    slug = re.sub(r"[^a-z0-9]+", "-", facts.name.lower()).strip("-")[:40]
    return f"{arch}--{driver}--{slug}"


def device_classes(facts) -> tuple[str, ...]:
    """Keys of per-device-class tables, weakest first: generic, vendor, architecture."""
    return ("generic", facts.vendor.lower(), arch_family(facts))


def by_class(table, facts, fallback):
    """A per-device-class value from a {generic, vendor, arch} table (or a plain value)."""
    if not isinstance(table, dict):
        return fallback if table is None else table
    value = fallback
    for key in device_classes(facts):
        value = table.get(key, value)
    return value


# -------------------------------------------------------------- search spaces
def default_params(family: str, facts, bucket: str = "*") -> dict:
    """Defaults for the device class (generic, then vendor, then arch), then per-bucket overrides."""
    space = search_space(family)
    keys = device_classes(facts)
    params = {}
    for key in keys:
        params.update(space["defaults"].get(key, {}))
    size = bucket.split(".")[0]  # a layout bucket ("batched.nt") starts from its size bucket's defaults
    for key in keys:
        by_bucket = space.get("bucket_defaults", {}).get(key, {})
        params.update(by_bucket.get(size, {}))
        params.update(by_bucket.get(bucket, {}))
    return params


# -------------------------------------------------------------- tuned configs
def user_config_dir() -> Path:
    """Where `tvk-tune` writes by default: TVK_CONFIG_DIR, else the user's config folder."""
    if os.environ.get("TVK_CONFIG_DIR"):
        return Path(os.environ["TVK_CONFIG_DIR"])
    base = os.environ.get("APPDATA") if os.name == "nt" else os.environ.get("XDG_CONFIG_HOME", str(Path.home() / ".config"))
    return Path(base) / "torchvk" / "configs"


def config_dirs() -> list[Path]:
    dirs = [user_config_dir()]
    try:
        dirs.append(data_dir("tuned_configs"))
    except FileNotFoundError:  # an install without shipped configs runs on defaults
        pass
    return dirs


def _json_type(value) -> str:
    """The JSON name of a value's type: config files are edited by hand."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array"}.get(type(value), "object")


def _not_an_object(what: str, container: dict, key: str) -> str | None:
    """None if container[key] is an object, else what is wrong with it."""
    if key not in container:
        return f"{what} is missing"
    if not isinstance(container[key], dict):
        return f"{what} is a JSON {_json_type(container[key])}, not an object"
    return None


def _file_problem(data) -> str | None:
    """What makes a whole config file unusable (see tuned_configs/README.md), or None."""
    if not isinstance(data, dict):
        return f"it holds a JSON {_json_type(data)}, not an object"
    if data.get("schema") != SCHEMA_VERSION:
        return f"it has schema {data.get('schema')!r}; this TorchVK reads schema {SCHEMA_VERSION}"
    problem = _not_an_object("its 'device'", data, "device") or _not_an_object("its 'families'", data, "families")
    if problem:
        return problem
    match = data["device"].get("match", "device")
    if match not in ("device", "arch", "vendor"):
        return f"its device 'match' is {match!r}, not 'device', 'arch' or 'vendor'"
    return None


def _read_config(path: Path):
    try:
        with open(path) as f:
            data = json.load(f)
        problem = _file_problem(data)
    except (OSError, ValueError, RecursionError) as e:  # unreadable, corrupt, truncated
        problem = f"it cannot be read as JSON ({e})"
    if problem:  # skip it, say so once
        _warn_once(f"corrupt:{path}", f"TorchVK ignores the config file {path}: {problem}. Delete it or re-run "
                                       f"`tvk-tune --device N` to write a fresh one; the other configs and the "
                                       f"defaults are used meanwhile.")
        return None
    return data


def _match_level(cfg_device: dict, facts) -> int | None:
    """3 exact device+driver, 2 architecture, 1 vendor; None if it does not apply."""
    if cfg_device.get("vendor_id") != facts.vendor_id:
        return None
    match = cfg_device.get("match", "device")
    if match == "vendor":
        return 1
    if cfg_device.get("arch") != arch_family(facts):
        return None
    if match == "arch":  # an arch config may be specific to one driver (AMD Windows vs RADV)
        return 2 if cfg_device.get("driver_id") in (None, facts.driver_id) else None
    if cfg_device.get("device_id") == facts.device_id and cfg_device.get("driver_id") == facts.driver_id \
            and cfg_device.get("name") == facts.name:
        return 3
    return None


class ConfigStore:
    """All configs that apply to one device, best match first."""

    def __init__(self, facts):
        self.facts = facts
        self.candidates = []  # (dir rank, match level, data, path)
        for rank, d in enumerate(config_dirs()):
            if not d.is_dir():
                continue
            for path in sorted(d.glob("*.json")):
                data = _read_config(path)
                if data is None:
                    continue
                level = _match_level(data.get("device", {}), facts)
                if level is not None:
                    self.candidates.append((-rank, level, data, path))
        # user dir before shipped, then best match level
        self.candidates.sort(key=lambda c: (c[0], c[1]), reverse=True)

    def entries(self, family: str, bucket: str, checksum: str | None):
        """(path, bucket key, params, source, problem) of each entry for this family and bucket, best
        match first; params is None where `problem` says why the entry cannot be used."""
        for _, _, data, path in self.candidates:
            fam = data["families"].get(family)
            if fam is None:
                continue
            source = data.get("source", "measured")
            problem = _not_an_object(f"the {family!r} entry", data["families"], family)
            if problem is None and "template_checksum" not in fam:
                problem = "it has no 'template_checksum' (which template version it was tuned for)"
            if problem is None and checksum is not None and fam["template_checksum"] != checksum:
                _warn_once(f"stale:{path}:{family}",
                           f"TorchVK ignores the {family} entries of {path}: they were tuned for another version of "
                           f"the kernel template. Re-run `tvk-tune --device N --ops {family}`; defaults are used meanwhile.")
                continue
            problem = problem or _not_an_object("its 'buckets'", fam, "buckets")
            if problem:
                yield path, bucket, None, source, problem
                continue
            for key in dict.fromkeys((bucket, "*")):  # the bucket's own entry, then the file's catch-all
                if key in fam["buckets"]:
                    entry = fam["buckets"][key]
                    problem = (_not_an_object("the entry", fam["buckets"], key)
                               or _not_an_object("its 'params'", entry, "params"))
                    yield path, key, None if problem else entry["params"], source, problem


@lru_cache(maxsize=None)
def allowed_values(family: str) -> dict:
    """Parameter name -> the values a tuned config may give it: those of the search space (its
    variants' too) and the defaults of every device class (host heuristics may lie outside the space)."""
    space = search_space(family)
    allowed: dict = {}
    for part in (space, *space.get("variants", {}).values()):
        for name, spec in part.get("params", {}).items():
            allowed.setdefault(name, set()).update(spec["values"] if isinstance(spec, dict) else spec)
    tables = [*space.get("defaults", {}).values()]
    tables += [t for by_bucket in space.get("bucket_defaults", {}).values() for t in by_bucket.values()]
    for table in tables:
        for name, value in table.items():
            allowed.setdefault(name, set()).add(value)
    return allowed


def _param_problems(family: str, params: dict) -> list[str]:
    """Names unknown to the family's space, values that are not integers or not in the space."""
    allowed = allowed_values(family)
    out = []
    for name, value in params.items():
        if name not in allowed:
            out.append(f"{name} is not a parameter of {family} (tuning/{family}.json has {', '.join(allowed)})")
        elif type(value) is not int:  # bool and float too: a define or a local size is an integer
            out.append(f"{name}={value!r} is not an integer")
        elif value not in allowed[name]:
            out.append(f"{name}={value} is not one of the values tuning/{family}.json allows "
                       f"({', '.join(map(str, sorted(allowed[name])))})")
    return out


def constraint_problems(family: str, params: dict, facts) -> list[str]:
    """Constraints of tuning/<family>.json (variants' too) that `params` break on this device,
    and local sizes over the device's workgroup limits."""
    space = search_space(family)
    out = []
    try:
        for part in (space, *space.get("variants", {}).values()):
            out += [f"it breaks `{c}`" for c in violations(part, params, facts)]
    except ArithmeticError as e:  # a derived value dividing by a zero parameter
        out.append(f"its derived values cannot be computed ({e})")
    most = min(facts.max_workgroup_invocations, facts.max_workgroup_size[0])
    for part in (space, *space.get("variants", {}).values()):
        for name, spec in part.get("params", {}).items():
            if isinstance(spec, dict) and spec.get("kind") == "local_size_x" and params.get(name, 0) > most:
                out.append(f"{name}={params[name]} is over the device's workgroup limit of {most} invocations")
    return out


@lru_cache(maxsize=None)
def _store(device_index: int, facts_id: int):
    return ConfigStore(Device.get(device_index).facts)


def lookup(device, family: str, shape: dict | str = "*", checksum: str | None = None, check=None) -> tuple[dict, str]:
    """The parameters to run `family` with on `device` for a shape (a dict of the names its
    tuning/<family>.json buckets use) or a bucket name, and where they came from.

    A tuned entry is used only if its parameters are integers from the search space that keep its
    constraints and the device's limits, and `check(params)` (a family's own rules: raises
    InvalidConfigError, returns the parameters completed) accepts them; otherwise it is skipped with
    one warning and the next entry (arch, vendor, shipped config), at last the default, is used.
    """
    facts = device.facts
    bucket = shape if isinstance(shape, str) else bucket_of(family, shape)
    defaults = default_params(family, facts, bucket)
    for path, key, tuned, source, problem in _store(device.index, id(facts)).entries(family, bucket, checksum):
        problems = [problem] if problem else _param_problems(family, tuned)
        params = {**defaults, **(tuned or {})}
        problems = problems or constraint_problems(family, params, facts)
        if not problems and check is not None:
            try:
                params = check(params)
            except InvalidConfigError as e:
                problems = [str(e)]
        if not problems:
            return params, f"{source}:{path.name}"
        _warn_once(f"bad:{path}:{family}:{key}",
                   f"TorchVK ignores the {family} config for bucket {key!r} in {path}: {'; '.join(problems)}. Fix or "
                   f"delete that entry, or re-run `tvk-tune --device N --ops {family}`; the next matching config "
                   f"(else the default) is used meanwhile.")
    if constraint_problems(family, defaults, facts):  # a small device (Vulkan's minimum limits): the nearest fit
        defaults = nearest_fitting(family, defaults, facts, check)
    return (check(defaults) if check is not None else defaults), "default"


def nearest_fitting(family: str, params: dict, facts, check=None, depth: int = 3) -> dict:
    """The parameters nearest `params` that keep the family's constraints on this device: one,
    then two, then `depth` parameters changed to other values of the search space, the fewest
    and smallest changes first (log2 steps). Raises InvalidConfigError naming the device's
    limits when none within `depth` changes fits."""
    space = search_space(family)
    choices = {name: sorted(set(spec["values"] if isinstance(spec, dict) else spec))
               for name, spec in space.get("params", {}).items() if name in params}

    def distance(name, value):
        return abs(math.log2(max(value, 1)) - math.log2(max(params[name], 1)))

    def fits(candidate):
        if constraint_problems(family, candidate, facts):
            return False
        try:
            check is None or check(candidate)
        except InvalidConfigError:
            return False
        return True

    for changed in range(1, depth + 1):
        options = []
        for names in itertools.combinations(choices, changed):
            for values in itertools.product(*[[v for v in choices[n] if v != params[n]] for n in names]):
                options.append((sum(distance(n, v) for n, v in zip(names, values)), names, values))
        for _, names, values in sorted(options):
            candidate = {**params, **dict(zip(names, values))}
            if fits(candidate):
                return candidate
    raise InvalidConfigError(f"no {family} parameters within {depth} changes of {params} fit {facts.name} "
                             f"(shared memory {facts.max_shared_memory} B, {facts.max_workgroup_invocations} "
                             f"invocations a workgroup); pass parameters that fit")


def generation() -> int:
    """Changes on every reload(): a family holding looked-up parameters looks them up again."""
    return _generation


def reload():
    """Forget loaded configs and their warnings (after tvk-tune wrote new ones, or TVK_CONFIG_DIR changed)."""
    global _generation
    _generation += 1
    _store.cache_clear()
    search_space.cache_clear()
    allowed_values.cache_clear()
    _warned.clear()
