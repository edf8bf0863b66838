"""Keep tuned configs across a template edit that does not change the tuned kernels.

    python -m tvk_kernels.tune.carry_over conv2d.comp --since <git revision> [--configs tuned_configs]

A tuned config is stamped with its template's checksum, and any edit makes it stale
(defaults are used until the device is tuned again). An edit that only adds a variant behind
a new define (say, a fused activation) leaves every tuned kernel the same. This tool proves
that: it compiles each config's kernels in every stamped file from the template as it was at
`--since` and from the template now. Only if every SPIR-V binary is byte-identical does it
restamp those files with the new checksum. Otherwise it changes nothing and says which
kernel differs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from ..config import search_space
from ..runtime.compiler import _template_hash, compile_file, template_checksum, template_path
from .targets import load_optional_targets


def kernel_defines(family: str, params: dict) -> list[dict]:
    """The define sets a family builds from one tuned parameter set, from its tuner target."""
    target = load_optional_targets().get(family)
    if target is None or not hasattr(target, "kernel_defines"):
        raise SystemExit(f"carry_over: {family!r} does not list its kernels (give its tuner target kernel_defines)")
    return target.kernel_defines(params)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tvk_kernels.tune.carry_over", description=__doc__.split("\n\n")[0])
    ap.add_argument("template", help="file name under templates/, e.g. conv2d.comp")
    ap.add_argument("--since", required=True, help="git revision whose template the configs were tuned with")
    ap.add_argument("--configs", default="tuned_configs")
    args = ap.parse_args(argv)
    now = template_path(args.template)
    rel = Path("templates") / args.template  # where templates live in the repository
    old_text = subprocess.check_output(["git", "show", f"{args.since}:{rel}"])
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / now.name
        old.write_bytes(old_text)
        listing = subprocess.check_output(["git", "ls-tree", "--name-only", f"{args.since}:{rel.parent}"], text=True)
        for inc in (n for n in listing.split() if n.endswith(".glsl")):  # the includes as they were too
            (Path(tmp) / inc).write_bytes(subprocess.check_output(["git", "show", f"{args.since}:{rel.parent}/{inc}"]))
        old_sum = _template_hash(old)[:16]
        new_sum = template_checksum(args.template)
        files = []
        for path in sorted(Path(args.configs).glob("*.json")):
            data = json.loads(path.read_text())
            for family, entry in data.get("families", {}).items():
                if entry.get("template_checksum") == old_sum and search_space(family).get("template") == args.template:
                    files.append((path, data, family))
        checked = 0
        for path, data, family in files:
            for bucket, res in data["families"][family]["buckets"].items():
                for defines in kernel_defines(family, res["params"]):
                    if compile_file(old, defines) != compile_file(now, defines):
                        print(f"carry_over: {path.name} {family}/{bucket} {defines}: the SPIR-V differs; nothing changed")
                        return 1
                    checked += 1
        for path, data, family in files:
            data["families"][family]["template_checksum"] = new_sum
            path.write_text(json.dumps(data, indent=2, default=float) + "\n")
    print(f"carry_over: {checked} kernels identical; {len(files)} config entries restamped {old_sum} -> {new_sum}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
