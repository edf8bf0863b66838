"""Kernel parameters as data: search spaces from `tuning/`, winners from `tuned_configs/`.

Lookup order for (device, family, shape bucket):
  1. TVK_CONFIG_DIR (user-tuned), then the shipped tuned_configs/
  2. within those: exact device + driver, then architecture family, then vendor
  3. the family's default for the device class in tuning/<family>.json
A config tuned for another version of a template (checksum differs) is stale and is
ignored; a file that cannot be read is ignored. Each gets one warning saying what to do.
"""
from __future__ import annotations

import json
import os
import re
import warnings
from functools import lru_cache
from pathlib import Path

from .paths import data_dir

SCHEMA_VERSION = 1
_warned: set = set()


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


# -------------------------------------------------------------- search spaces
@lru_cache(maxsize=None)
def search_space(family: str) -> dict:
    path = data_dir("tuning") / f"{family}.json"
    with open(path) as f:
        return json.load(f)


def default_params(family: str, facts, bucket: str = "*") -> dict:
    """Defaults for the device class (generic, then vendor, then arch), then per-bucket overrides."""
    space = search_space(family)
    keys = ("generic", facts.vendor.lower(), arch_family(facts))
    params = {}
    for key in keys:
        params.update(space["defaults"].get(key, {}))
    for key in keys:
        params.update(space.get("bucket_defaults", {}).get(key, {}).get(bucket, {}))
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


def _read_config(path: Path):
    try:
        with open(path) as f:
            data = json.load(f)
        if data.get("schema") != SCHEMA_VERSION or not isinstance(data.get("families"), dict):
            raise ValueError(f"schema {data.get('schema')!r}, expected {SCHEMA_VERSION}")
        return data
    except Exception as e:  # corrupt, truncated, wrong schema: skip it, say so once
        _warn_once(f"corrupt:{path}", f"TorchVK ignores the config file {path}: {e}. Delete it or re-run "
                                       f"`tvk-tune --device N` to write a fresh one; defaults are used meanwhile.")
        return None


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

    def lookup(self, family: str, bucket: str, checksum: str | None) -> tuple[dict | None, str]:
        for _, level, data, path in self.candidates:
            fam = data["families"].get(family)
            if not fam:
                continue
            if checksum is not None and fam.get("template_checksum") != checksum:
                _warn_once(f"stale:{path}:{family}",
                           f"TorchVK ignores the {family} entries of {path}: they were tuned for another version of "
                           f"the kernel template. Re-run `tvk-tune --device N --ops {family}`; defaults are used meanwhile.")
                continue
            buckets = fam.get("buckets", {})
            entry = buckets.get(bucket) or buckets.get("*")
            if entry and isinstance(entry.get("params"), dict):
                source = data.get("source", "measured")
                return dict(entry["params"]), f"{source}:{path.name}"
        return None, "default"


@lru_cache(maxsize=None)
def _store(device_index: int, facts_id: int):
    from .runtime.device import Device

    return ConfigStore(Device.get(device_index).facts)


def params_for(device, family: str, bucket: str = "*", checksum: str | None = None) -> tuple[dict, str]:
    """The parameters to run `family` with on `device` for this shape bucket, and where they came from."""
    tuned, source = _store(device.index, id(device.facts)).lookup(family, bucket, checksum)
    params = default_params(family, device.facts, bucket)
    if tuned:
        params.update(tuned)
    return params, source


def reload():
    """Forget loaded configs (after tvk-tune wrote new ones)."""
    _store.cache_clear()
    search_space.cache_clear()
