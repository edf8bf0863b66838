"""What every benchmark result carries: where, when, on what, from which commit."""
from __future__ import annotations

import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
from importlib import metadata
from pathlib import Path

from .. import __version__
from ..config import ConfigStore, arch_family
from ..paths import data_dir
from .plots import plot


def git_commit() -> str:
    try:
        root = Path(__file__).resolve().parents[2]
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                               text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else os.environ.get("TVK_COMMIT", "unknown")
    except Exception:
        return os.environ.get("TVK_COMMIT", "unknown")


def environment(device) -> dict:
    f = device.facts
    env = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": os.environ.get("TVK_COMMIT") or git_commit(),
        "torchvk_version": __version__,
        "device": f.name, "device_index": f.index, "vendor_id": f.vendor_id, "device_id": f.device_id,
        "arch": arch_family(f), "driver": f.driver_label, "driver_info": f.driver_info, "driver_version": f.driver_version,
        "vulkan_api": f.api_version, "host": platform.node(), "python": platform.python_version(),
    }
    env["gpu_clocks"] = gpu_clocks()
    env["config_source"] = config_source(device)
    try:
        import torch  # lazy: torch is optional: without it the torch baselines are left out

        env["torch_version"] = torch.__version__
        if torch.cuda.is_available():
            env["cuda_device"] = torch.cuda.get_device_name(0)
    except Exception:
        env["torch_version"] = None
    return env


def config_source(device) -> list[str]:
    """Which tuned-config files apply to this device (best first), each with its source
    (measured / static-model); empty: every kernel runs its defaults from tuning/."""
    return [f"{data.get('source', 'measured')}:{path.name}" for _, _, data, path in ConfigStore(device.facts).candidates]


def gpu_clocks() -> str | None:
    """SM clock, P-state and throttle reasons where nvidia-smi exists. Seen on the H200: after a
    host-bound phase the driver sits at its 345 MHz idle clock and Vulkan kernels run ~5x slower,
    so every result records the clock it was written under."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,pstate,clocks_throttle_reasons.active",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or None
    except Exception:
        return None


def installed_size() -> dict:
    """Bytes TorchVK puts on disk (its two packages and shipped data, no caches) and the
    bytes of its non-torch dependencies, as installed here."""
    pkg = Path(__file__).resolve().parents[1]
    roots = [pkg, pkg.parent / "torchvk"] + [data_dir(d) for d in ("templates", "tuning", "tuned_configs")]
    seen, own = set(), 0
    for root in roots:
        for f in root.rglob("*"):
            if f.is_file() and "__pycache__" not in f.parts and f.resolve() not in seen:
                seen.add(f.resolve())
                own += f.stat().st_size
    deps = {}
    for name in ("numpy", "vulkan", "cffi", "pycparser", "tqdm"):
        try:
            dist = metadata.distribution(name)
            deps[name] = sum((dist.locate_file(f).stat().st_size for f in dist.files or []
                              if dist.locate_file(f).is_file()), 0)
        except Exception:
            deps[name] = None
    return {"torchvk_bytes": own, "dependency_bytes": deps,
            "total_without_torch_bytes": own + sum(v for v in deps.values() if v)}


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:48]


def write_result(out_dir: str | Path, experiment: str, payload: dict, table_md: str) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{experiment}.json").write_text(json.dumps(payload, indent=2, default=float) + "\n")
    env = payload["environment"]
    header = (f"# {experiment}\n\n{env['device']} ({env['driver']} {env['driver_info']}), torch {env.get('torch_version')}, "
              f"commit {env['commit']}, {env['date']}\n\n")
    (out / f"{experiment}.md").write_text(header + table_md + "\n")
    plot(payload, out)
    return out / f"{experiment}.json"


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def md_table(headers: list[str], rows: list[list]) -> str:
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)
