"""`tvk-tune`: search kernel parameters for a device and store the winners."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time

from .storage import HEARTBEAT_SECONDS

INTERRUPTED = 130  # the shell's code for a run stopped by Ctrl-C (128 + SIGINT)


def main(argv=None) -> int:
    started = time.perf_counter()  # --time-budget counts from here: imports and device set-up included
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="tvk-tune", description=__doc__)
    ap.add_argument("--device", type=int, default=None, help="Vulkan device index (default TVK_DEVICE or 0)")
    ap.add_argument("--ops", default=None, help="comma-separated kernel families (default: all with a tuner target)")
    ap.add_argument("--shapes", default="suite", help="'suite', 'tiny', or a JSON file: {family: [shape, ...]}")
    ap.add_argument("--trials", type=int, default=30, help="trials per (family, shape bucket)")
    ap.add_argument("--time-budget", type=float, default=None,
                    help="seconds for the whole run, split over studies; shapes too slow for it on this device are "
                         "skipped (and said so)")
    ap.add_argument("--storage", default=None,
                    help="Optuna storage URL (default: SQLite in the cache dir; postgresql+psycopg://user:pw@host/db "
                         "lets several machines tune one study: start each with --resume)")
    ap.add_argument("--resume", action="store_true",
                    help="continue existing studies (e.g. after Ctrl-C) instead of starting over, or join the "
                         "workers tuning them: each study runs until it has --trials finished trials in all")
    ap.add_argument("--heartbeat", type=int, default=HEARTBEAT_SECONDS, metavar="SECONDS",
                    help="seconds between this worker's heartbeats in the storage; a running trial whose worker "
                         "missed two (killed) is marked failed by the next worker (default %(default)s)")
    ap.add_argument("--write-partial", action="store_true",
                    help="on Ctrl-C, also write the best of the interrupted study's finished trials")
    ap.add_argument("--out", default=None, help="folder for <device-key>.json (default: TVK_CONFIG_DIR or ~/.config/torchvk/configs)")
    ap.add_argument("--target", choices=["rdna1"], default=None,
                    help="rdna1: tune statically for Navi 10 on Mesa's null RADV device (no card needed)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)

    from ..errors import TVKError
    from ..runtime import get_device
    from .driver import TuneInterrupted, tune
    from .storage import StorageError
    from .targets import load_optional_targets

    TARGETS = load_optional_targets()
    families = args.ops.split(",") if args.ops else sorted(TARGETS)
    unknown = [f for f in families if f not in TARGETS]
    if unknown:
        print(f"tvk-tune: no tuner for {unknown}; choose from {sorted(TARGETS)}", file=sys.stderr)
        return 2
    suite = args.shapes
    if suite not in ("suite", "tiny"):
        with open(suite) as f:
            custom = json.load(f)
        for fam, shapes in custom.items():
            TARGETS[fam].suites["custom"] = shapes
        suite = "custom"
    try:
        if args.target == "rdna1":
            from . import rdna1

            device = get_device(0)
            if not rdna1.on_null_navi10(device):
                return rdna1.reexec_on_null_navi10(argv)
            out = args.out or "tuned_configs"
            for path in rdna1.static_tune(device, families, suite, args.trials, out):
                print(f"tvk-tune --target rdna1: wrote {path}")
            return 0
        device = get_device(args.device)
        # aim 5% early: the last study may overrun by a compile and a check, then the process exits
        deadline = None if args.time_budget is None else started + 0.95 * args.time_budget
        path = tune(device, families, suite, args.trials, None, args.storage, args.resume, args.out,
                    progress=not args.no_progress, deadline=deadline, write_partial=args.write_partial,
                    heartbeat=args.heartbeat)
    except TuneInterrupted as e:
        again = [a for a in argv if a != "--resume"] + ["--resume"]
        print(f"tvk-tune: {e}\nto continue: tvk-tune {shlex.join(again)}", file=sys.stderr)
        return INTERRUPTED
    except KeyboardInterrupt:  # outside a measured run's studies (device set-up, --target rdna1)
        print("tvk-tune: interrupted", file=sys.stderr)
        return INTERRUPTED
    except (TVKError, ValueError, StorageError) as e:
        print(f"tvk-tune: {e}", file=sys.stderr)
        return 1
    if path is None:  # only a time budget leaves every study out
        print(f"tvk-tune: nothing was tuned: no shape fits --time-budget {args.time_budget} s on {device.facts.name}; "
              "raise it", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
