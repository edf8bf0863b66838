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
    """The cache folder: TVK_CACHE_DIR, else the user's cache folder. Not created here: writers
    create what they write (runtime/cache_file.py), and a folder that cannot be written costs
    only rebuild time."""
    root = os.environ.get("TVK_CACHE_DIR")
    if root:
        return Path(root)
    if os.name == "nt":
        return Path(os.environ.get("LOCALAPPDATA", Path.home())) / "torchvk" / "cache"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torchvk"
