"""Wheel build hook: compile shipped/kernels.json into the wheel (tvk_kernels/shipped/spirv), so an
installed torchvk trains without a GLSL compiler (tvk_kernels/shipped_kernels.py).

Building a wheel therefore needs glslc (or TVK_GLSLC). An editable install ships nothing: a
checkout compiles its kernels at run time."""
from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).resolve().parent


def _shipped_kernels():
    """tvk_kernels.shipped_kernels from this checkout without running the package's __init__ (it
    imports the Vulkan runtime, whose dependencies the isolated build environment lacks)."""
    for name in ("tvk_kernels", "tvk_kernels.runtime"):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(ROOT / name.replace(".", "/"))]
            sys.modules[name] = package
    return importlib.import_module("tvk_kernels.shipped_kernels")


class ShippedKernelsHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if self.target_name != "wheel" or version == "editable":
            return
        out = Path(self.directory) / "shipped-spirv"
        count = _shipped_kernels().build(out)
        print(f"torchvk: {count} precompiled kernel modules in the wheel")
        build_data["force_include"][str(out)] = "tvk_kernels/shipped/spirv"
