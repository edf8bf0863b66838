"""The precompiled kernels a wheel ships, so training needs no GLSL compiler.

`shipped/kernels.json` lists the SPIR-V modules to ship: (template, defines) pairs. Tile and
workgroup parameters are specialization constants (runtime/compiler.py split_defines), so one
module serves every tuned config of every device: the list depends only on which kernel
variants (dtype, mode, activation, op) programs launch, not on the GPU.

    python -m tvk_kernels.shipped_kernels build --out DIR     # compile the list (the wheel's build hook does)
    make shipped-kernels                                      # the list := what a whole test-suite run compiles

The list is what the test suite compiles (every op, dtype and model the tests train), recorded
through TVK_RECORD_KERNELS; tests/conftest.py fails a run that compiles a template module the
list lacks, so the list keeps up with the code. A module outside the list (a fusion of a
compiled graph, a variant no test reaches) still needs glslc, and says so.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .paths import data_dir
from .runtime import cache_file
from .runtime.compiler import cache_key, compile_file, template_path

LIST = "kernels.json"
# cooperative-matrix modules take the device's matrix shapes and subgroup size as defines, and need
# glslang 13 (workgroup scope: 15): not shipped; without a compiler, matmul runs its tiled kernel
NOT_SHIPPED = {"matmul_coopmat.comp", "matmul_coopmat2.comp", "attention_coopmat.comp"}
NOT_SHIPPED_DEFINES = ("COOPMAT",)  # conv2d.comp's cooperative-matrix form (and its emulation), for the same reason


def shipped(entry: dict) -> bool:
    """Whether a recorded module belongs in the list (a shipped template, no cooperative-matrix form)."""
    return entry["template"] not in NOT_SHIPPED and not any(
        str(entry["defines"].get(name, "0")) != "0" for name in NOT_SHIPPED_DEFINES)


def list_path() -> Path:
    return data_dir("shipped") / LIST


def load(path: Path | None = None) -> list[dict]:
    """The shipped modules: [{"template": name, "defines": {name: value as a string}}, ...]."""
    return json.loads((path or list_path()).read_text())["modules"]


def read_records(folder: Path) -> list[dict]:
    """The modules recorded in a TVK_RECORD_KERNELS folder, each once, in a stable order."""
    seen = {}
    for path in sorted(Path(folder).glob("*.jsonl")):
        for line in Path(path).read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                if shipped(entry):
                    seen[json.dumps(entry, sort_keys=True)] = entry
    return [seen[k] for k in sorted(seen)]


def missing(records: list[dict], shipped: list[dict]) -> list[dict]:
    """Recorded modules the shipped list lacks."""
    have = {json.dumps(e, sort_keys=True) for e in shipped}
    return [e for e in records if json.dumps(e, sort_keys=True) not in have]


def build(out: Path, modules: list[dict] | None = None, threads: int = 8) -> int:
    """Compile the shipped modules into out/<cache key>.spv (checked cache files, like the user's
    cache); a module already in the user's SPIR-V cache is copied, not compiled. Returns the count."""
    modules = load() if modules is None else modules
    out.mkdir(parents=True, exist_ok=True)

    def one(entry):
        path = template_path(entry["template"])
        key = cache_key(path, entry["defines"])
        cache_file.write(out / f"{key}.spv", key, compile_file(path, entry["defines"]))

    with ThreadPoolExecutor(threads) as pool:  # glslc runs in subprocesses: threads overlap them
        list(pool.map(one, modules))
    return len(modules)


def save(modules: list[dict]) -> None:
    """Replace the shipped list (make shipped-kernels: tests/conftest.py, from a whole test run)."""
    list_path().write_text(json.dumps({"modules": modules}, indent=1) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tvk_kernels.shipped_kernels", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["build"], help="compile the shipped list into a folder")
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    print(f"shipped_kernels: {build(args.out)} modules compiled into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
