"""`tvk-tune`: search kernel parameters for a device and store the winners.

A user's mistake (a bad flag value, a --shapes file that cannot be read, a folder that cannot be
written, a storage that is no database, a device that is not there) ends in one line on stderr,
"tvk-tune: error: ...", never a traceback, and before any trial runs: exit code 2 for a bad
argument (argparse's usage errors), 1 for what the run found wrong.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from ..config import user_config_dir
from ..errors import TVKError
from ..runtime import get_device
from ..search_space import bucket_of
from .storage import HEARTBEAT_SECONDS, StorageError
from .targets import load_targets

INTERRUPTED = 130  # the shell's code for a run stopped by Ctrl-C (128 + SIGINT)


def _positive(kind):
    """An argparse type: a number of `kind` (int or float) greater than 0."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a{'n integer' if kind is int else ' number'}") from None
        if not value > 0:  # NaN too
            raise argparse.ArgumentTypeError(f"must be greater than 0, not {text}")
        return value

    return parse


def _error(message: str) -> int:
    print(f"tvk-tune: error: {message}", file=sys.stderr)
    return 1


def main(argv=None) -> int:
    started = time.perf_counter()  # --time-budget counts from here: imports and device set-up included
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="tvk-tune", description=__doc__)
    ap.add_argument("--device", type=int, default=None, help="Vulkan device index (default TVK_DEVICE or 0)")
    ap.add_argument("--ops", default=None, help="comma-separated kernel families (default: all with a tuner target)")
    ap.add_argument("--shapes", default="suite", help="'suite', 'tiny', or a JSON file: {family: [shape, ...]}")
    ap.add_argument("--trials", type=_positive(int), default=30, help="trials per (family, shape bucket)")
    ap.add_argument("--time-budget", type=_positive(float), default=None,
                    help="seconds for the whole run, split over studies; shapes too slow for it on this device are "
                         "skipped (and said so)")
    ap.add_argument("--storage", default=None,
                    help="Optuna storage URL (default: SQLite in the cache dir; postgresql+psycopg://user:pw@host/db "
                         "lets several machines tune one study: start each with --resume)")
    ap.add_argument("--resume", action="store_true",
                    help="continue existing studies (e.g. after Ctrl-C) instead of starting over, or join the "
                         "workers tuning them: each study runs until it has --trials finished trials in all")
    ap.add_argument("--heartbeat", type=_positive(int), default=HEARTBEAT_SECONDS, metavar="SECONDS",
                    help="seconds between this worker's heartbeats in the storage; a running trial whose worker "
                         "missed two (killed) is marked failed by the next worker (default %(default)s)")
    ap.add_argument("--write-partial", action="store_true",
                    help="on Ctrl-C, also write the best of the interrupted study's finished trials")
    ap.add_argument("--out", default=None, help="folder for <device-key>.json (default: TVK_CONFIG_DIR or ~/.config/torchvk/configs)")
    ap.add_argument("--target", choices=["rdna1"], default=None,
                    help="rdna1: tune statically for Navi 10 on Mesa's null RADV device (no card needed)")
    ap.add_argument("--model", default=None, metavar="MODULE:FACTORY",
                    help="tune the shapes one training step (forward, loss, backward) of this model launches: "
                         "pkg.module:factory, a callable returning an nn.Module (needs torch). Recorded: matmul, "
                         "conv2d, softmax (last dim or outermost), norm (layer/batch norm), reduce (contiguous 2-d "
                         "views), attention, elementwise (contiguous)")
    ap.add_argument("--input-shape", default=None, metavar="N,C,H,W", help="the model's random input (with --model)")
    ap.add_argument("--loss", default="cross_entropy", choices=["cross_entropy", "mse"],
                    help="cross_entropy: random class targets (classes: the output's dim 1); mse: against zeros")
    ap.add_argument("--target-shape", default=None, metavar="DIMS",
                    help="the loss target's shape (default: from the model's output)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        args.input_shape, args.target_shape = (parse_dims("--input-shape", args.input_shape),
                                               parse_dims("--target-shape", args.target_shape))
    except ValueError as e:
        ap.error(str(e))
    if args.model is not None:
        if args.input_shape is None:
            ap.error("--model needs --input-shape, e.g. --input-shape 64,3,32,32")
        if args.shapes != "suite" or args.target is not None:
            ap.error("--model tunes the model's own shapes: leave out --shapes and --target")
    elif args.input_shape is not None or args.target_shape is not None:
        ap.error("--input-shape and --target-shape go with --model")

    # lazy: imports read TVK_* settings (tune/measure.py): inside main's try, a bad one is a one-line error
    from .driver import TuneInterrupted

    try:  # the runtime reads its settings (TVK_*) on import and on device set-up: their errors are one line too
        return _run(ap, args, argv, started)
    except TuneInterrupted as e:
        again = [a for a in argv if a != "--resume"] + ["--resume"]
        print(f"tvk-tune: {e}\nto continue: tvk-tune {shlex.join(again)}", file=sys.stderr)
        return INTERRUPTED
    except KeyboardInterrupt:  # outside a measured run's studies (device set-up, --target rdna1)
        print("tvk-tune: interrupted", file=sys.stderr)
        return INTERRUPTED
    except (TVKError, ValueError, StorageError, OSError) as e:
        return _error(str(e))


def _run(ap, args, argv, started) -> int:
    from .driver import tune  # lazy: see main: importing the driver reads TVK_* settings

    targets = load_targets()
    families = args.ops.split(",") if args.ops else sorted(targets)
    unknown = [f for f in families if f not in targets]
    if unknown:
        ap.error(f"--ops: no tuner for {unknown}; choose from {sorted(targets)}")
    suite = args.shapes
    if suite not in ("suite", "tiny"):
        try:
            custom = _custom_shapes(suite, targets)
        except ValueError as e:
            ap.error(str(e))
        lacking = [f for f in families if f not in custom]
        if args.ops and lacking:
            ap.error(f"--shapes {suite} has no shapes for {lacking}; add them, or leave them out of --ops")
        families = families if args.ops else sorted(custom)
        for fam, shapes in custom.items():
            targets[fam].suites["custom"] = shapes
        suite = "custom"
    out = Path(args.out) if args.out else Path("tuned_configs") if args.target == "rdna1" else user_config_dir()
    problem = _cannot_write(out)  # found now, not when the first study is done
    if problem and args.out:
        ap.error(f"--out {out}: cannot write tuned configs there ({problem}); pass a folder you can write to")
    if problem:
        where = "TVK_CONFIG_DIR" if os.environ.get("TVK_CONFIG_DIR") else "the default config folder"
        return _error(f"cannot write tuned configs to {out}, {where} ({problem}); set TVK_CONFIG_DIR to a "
                      "writable folder, or pass --out")
    if args.model is not None:
        from .model import record_training_step  # lazy: only --model records a model's shapes (it loads torch)

        try:
            recorded = record_training_step(args.model, args.input_shape, args.loss, args.target_shape, args.device).shapes
        except (RuntimeError, NotImplementedError, TypeError) as e:  # the model's own errors (TVKError: below)
            if isinstance(e, TVKError):
                raise
            return _error(f"the training step of {args.model} failed: {type(e).__name__}: {e}")
        families = _show_recorded(recorded, families)
        if not families:
            return _error(f"{args.model} launched no shapes of {args.ops or 'any tunable family'}; nothing to tune")
        for fam in families:
            targets[fam].suites["model"] = recorded[fam]
        suite = "model"
    if args.target == "rdna1":
        from . import rdna1  # lazy: only --target rdna1 needs the static model

        device = get_device(0)
        if not rdna1.on_null_navi10(device):
            return rdna1.reexec_on_null_navi10(argv)
        for path in rdna1.static_tune(device, families, suite, args.trials, out):
            print(f"tvk-tune --target rdna1: wrote {path}")
        return 0
    device = get_device(args.device)
    # aim 5% early: the last study may overrun by a compile and a check, then the process exits
    deadline = None if args.time_budget is None else started + 0.95 * args.time_budget
    path = tune(device, families, suite, args.trials, None, args.storage, args.resume, out,
                progress=not args.no_progress, deadline=deadline, write_partial=args.write_partial,
                heartbeat=args.heartbeat)
    if path is None:  # a time budget, or families this device cannot run (said above), left every study out
        why = (f"no shape fits --time-budget {args.time_budget} s on {device.facts.name}; raise it" if args.time_budget
               else f"{device.facts.name} cannot run the families asked for (see above)")
        return _error(f"nothing was tuned: {why}")
    return 0


def _cannot_write(folder: Path) -> str | None:
    """Why tuned configs cannot be written into folder (made here when missing), or None."""
    if folder.exists() and not folder.is_dir():
        return "it is a file, not a folder"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        return f"{e.strerror or e}: {e.filename}" if e.filename else str(e.strerror or e)
    return None


def _custom_shapes(path: str, targets: dict) -> dict:
    """{family: [shape, ...]} of a --shapes JSON file; a ValueError says what is wrong with it."""
    example = '{"matmul": [{"M": 512, "N": 512, "K": 512}]}'
    try:
        with open(path) as f:
            custom = json.load(f)
    except OSError as e:
        raise ValueError(f"--shapes {path}: cannot read it ({e.strerror or e}); pass 'suite', 'tiny' or a JSON "
                         f"file like {example}") from None
    except ValueError as e:  # not JSON, or not text
        raise ValueError(f"--shapes {path} is not a JSON file ({e}); write it like {example}") from None
    if not (isinstance(custom, dict) and custom and all(
            isinstance(shapes, list) and shapes and all(isinstance(s, dict) for s in shapes)
            for shapes in custom.values())):
        raise ValueError(f"--shapes {path}: expected {{family: [shape, ...]}}, each family with at least one shape "
                         f"and each shape a JSON object, e.g. {example}")
    unknown = sorted(set(custom) - set(targets))
    if unknown:
        raise ValueError(f"--shapes {path}: no tuner for {unknown}; choose from {sorted(targets)}")
    return custom


def parse_dims(flag: str, text):
    """"64,3,32,32" -> (64, 3, 32, 32); None stays None. ValueError naming the flag otherwise."""
    if text is None:
        return None
    try:
        dims = tuple(int(d) for d in text.split(","))
    except ValueError:
        dims = ()
    if not dims or any(d < 0 for d in dims):
        raise ValueError(f"{flag} {text!r}: expected comma-separated non-negative sizes, e.g. 64,3,32,32")
    return dims


def _show_recorded(recorded: dict, families: list) -> list:
    """Print the recorded shapes with their buckets; returns the families to tune (asked for, recorded)."""
    for fam, shapes in sorted(recorded.items()):
        note = "" if fam in families else "  (not tuned: not in --ops)"
        print(f"tvk-tune: recorded {len(shapes)} {fam} shapes{note}")
        for shape in shapes:
            print(f"  {bucket_of(fam, shape):<12} {json.dumps(shape)}")
    return [fam for fam in families if recorded.get(fam)]


if __name__ == "__main__":
    sys.exit(main())
