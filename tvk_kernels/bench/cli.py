"""`tvk-bench`: the experiments, each writing JSON + a markdown table under --out."""
from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import TVKError
from ..runtime import get_device
from ..tune.cli import parse_dims

EXPERIMENTS = ["roofline", "vector-add", "matmul", "mnist", "cifar10", "low-vram", "ablations", "kernels", "zoo",
               "models"]
MODULES = {"models": "model_bench"}  # torchvk/experiments/models.py holds the MNIST and CIFAR-10 models
# not in "all": a recording, not a measurement (its files are the tuner's and the kernel benchmark's inputs)
RECORDINGS = ["shapes"]



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tvk-bench", description=__doc__)
    ap.add_argument("experiment", choices=EXPERIMENTS + RECORDINGS + ["all"])
    ap.add_argument("--device", type=int, default=None, help="Vulkan device index (default TVK_DEVICE or 0)")
    ap.add_argument("--out", default="benchmarks/results/local", help="output folder")
    ap.add_argument("--sizes", default=None, help="comma-separated sizes (vector-add: elements; matmul: square sizes)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for CI and smoke tests")
    ap.add_argument("--cifar10", default=None, help="folder with the CIFAR-10 python batches (else TVK_CIFAR10; "
                                                    "without either, a labelled stand-in is used)")
    ap.add_argument("--epochs", type=int, default=None, help="training epochs (mnist, cifar10)")
    shapes = ap.add_argument_group("shapes", "record one training step of your model (default: the zoo's "
                                             "third-party models at bench size, or tiny with --quick)")
    shapes.add_argument("--model", default=None, metavar="MODULE:FACTORY",
                        help="pkg.module:factory, a callable returning an nn.Module")
    shapes.add_argument("--input-shape", default=None, metavar="DIMS", help="its random input, e.g. 8,3,224,224")
    shapes.add_argument("--input-int", type=int, default=None, metavar="HIGH",
                        help="integer inputs below HIGH (token ids) instead of normal floats")
    shapes.add_argument("--loss", default="cross_entropy", choices=["cross_entropy", "token_cross_entropy", "mse"],
                        help="cross_entropy: classes along the output's dim 1; token_cross_entropy: along its last "
                             "dim (a language model); mse: against zeros")
    shapes.add_argument("--target-shape", default=None, metavar="DIMS", help="the loss target's shape")
    shapes.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd", "none"])
    ap.add_argument("--only", default=None, metavar="NAMES",
                    help="models: these zoo models only (comma-separated), merged into an existing models.json "
                         "in --out (its other models kept)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        input_shape, target_shape = (parse_dims("--input-shape", args.input_shape),
                                     parse_dims("--target-shape", args.target_shape))
    except ValueError as e:
        ap.error(str(e))
    if args.experiment != "shapes" and (args.model or input_shape or args.input_int is not None):
        ap.error("--model, --input-shape and --input-int go with `tvk-bench shapes`")
    if args.only and args.experiment != "models":
        ap.error("--only goes with `tvk-bench models`")
    if args.model and not input_shape:
        ap.error("--model needs --input-shape, e.g. --input-shape 8,3,224,224")
    try:
        device = get_device(args.device)
        todo = EXPERIMENTS if args.experiment == "all" else [args.experiment]
        sizes = [int(float(s)) for s in args.sizes.split(",")] if args.sizes else None
        for name in todo:
            if name == "roofline":
                from . import roofline  # lazy: only the experiments asked for are imported

                roofline.run(device, args.out, quick=args.quick, progress=not args.no_progress)
            elif name == "vector-add":
                from . import vector_add  # lazy: only the experiments asked for are imported

                vsizes = sizes if args.experiment == "vector-add" else None
                vector_add.run(device, args.out, vsizes or ([1_000, 100_000] if args.quick else None),
                               progress=not args.no_progress)
            elif name == "matmul":
                from . import matmul  # lazy: only the experiments asked for are imported

                msizes = sizes if args.experiment == "matmul" else None
                matmul.run(device, args.out, msizes or ([64, 128] if args.quick else None), progress=not args.no_progress)
            else:  # the training experiments need torch and the tvk device
                # lazy: torch and torchvk only for the training experiments: the kernel ones run without torch
                import torchvk  # noqa: F401  (registers the device)

                module = importlib.import_module(f"torchvk.experiments.{MODULES.get(name, name.replace('-', '_'))}")
                kwargs = {"quick": args.quick, "progress": not args.no_progress}
                if name == "cifar10":
                    kwargs["cifar_path"] = args.cifar10
                if name in ("mnist", "cifar10") and args.epochs:
                    kwargs["epochs"] = args.epochs
                if name == "models" and args.only:
                    kwargs["names"] = args.only.split(",")
                if name == "shapes":
                    kwargs.update(model=args.model, input_shape=input_shape, input_high=args.input_int, loss=args.loss,
                                  target_shape=target_shape, optimizer=args.optimizer)
                module.run(device, args.out, **kwargs)
            print(f"tvk-bench {name}: results in {args.out}")
    except (TVKError, FileNotFoundError) as e:
        print(f"tvk-bench: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
