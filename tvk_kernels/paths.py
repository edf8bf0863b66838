"""Where shipped data (templates, search spaces, tuned configs) and the user's cache live."""
from __future__ import annotations

import os
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """`templates`, `tuning` or `tuned_configs`: inside the wheel, or at the repo root in a checkout."""
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"TorchVK data folder {name!r} is missing from the installation; reinstall torchvk")


def cache_dir() -> Path:
    root = os.environ.get("TVK_CACHE_DIR")
    if root:
        path = Path(root)
    elif os.name == "nt":
        path = Path(os.environ.get("LOCALAPPDATA", Path.home())) / "torchvk" / "cache"
    else:
        path = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torchvk"
    path.mkdir(parents=True, exist_ok=True)
    return path
