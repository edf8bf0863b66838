"""`tvk-bench`: the experiments, each writing JSON + a markdown table under --out."""
from __future__ import annotations

import argparse
import importlib
import sys

from ..errors import TVKError
from ..runtime import get_device

EXPERIMENTS = ["roofline", "vector-add", "matmul", "mnist", "cifar10", "low-vram", "ablations", "kernels", "zoo"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="tvk-bench", description=__doc__)
    ap.add_argument("experiment", choices=EXPERIMENTS + ["all"])
    ap.add_argument("--device", type=int, default=None, help="Vulkan device index (default TVK_DEVICE or 0)")
    ap.add_argument("--out", default="benchmarks/results/local", help="output folder")
    ap.add_argument("--sizes", default=None, help="comma-separated sizes (vector-add: elements; matmul: square sizes)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for CI and smoke tests")
    ap.add_argument("--cifar10", default=None, help="folder with the CIFAR-10 python batches (else TVK_CIFAR10; "
                                                    "without either, a labelled stand-in is used)")
    ap.add_argument("--epochs", type=int, default=None, help="training epochs (mnist, cifar10)")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
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

                module = importlib.import_module(f"torchvk.experiments.{name.replace('-', '_')}")
                kwargs = {"quick": args.quick, "progress": not args.no_progress}
                if name == "cifar10":
                    kwargs["cifar_path"] = args.cifar10
                if name in ("mnist", "cifar10") and args.epochs:
                    kwargs["epochs"] = args.epochs
                module.run(device, args.out, **kwargs)
            print(f"tvk-bench {name}: results in {args.out}")
    except (TVKError, FileNotFoundError) as e:
        print(f"tvk-bench: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
