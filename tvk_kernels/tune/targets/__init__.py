"""What the tuner can tune: per kernel family, its shape suites, how to run one candidate,
how to check it against a reference, and the work it does (for the static RDNA1 model).

A target is one module of this package, `<family>.py`, named after the family it tunes and
defining `TARGET` (or `TARGETS`, a tuple, where one module tunes several families). It lives
apart from its kernel module, as CLBlast keeps its tuners apart from its kernels: the kernels
never import the tuner, and a new target is a new file here, found by name (`load_targets`).

A target has `family` and `template` (the tuned config's keys: its family name and the
template's checksum) and `suites` ({"suite": [shape, ...], "tiny": [...]}). Its
`prepare(device, shape)` returns a Case holding several input sets (rotated while timing) and a
reference computed on the host. `Case.run(params, i)` records the candidate on input set i;
`Case.check(params)` runs it on a fresh input set and compares. Optional: `work(shape, params)`
(the static model's counts), `static_defines(params)` (what the static model compiles),
`kernel_defines(params)` (tune/carry_over.py: every kernel one parameter set builds), and
`unavailable(device)`: why this device cannot run it (None: it can); tvk-tune then skips it
and says why.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil

from .. import model_suites

TARGETS: dict = {}  # family -> target, filled by load_targets()
MODEL_SHAPES = 6  # per family, the heaviest shapes of the recorded real-model suites (model_suites.py) tuned by default


class Case:
    def __init__(self, device, shape, run, check, buffers):
        """buffers: the DeviceBuffers the case allocated, nested in tuples/lists as convenient."""
        self.device, self.shape = device, shape
        self.run, self.check, self.buffers = run, check, buffers

    def free(self):
        def walk(x):
            if isinstance(x, (list, tuple)):
                for y in x:
                    walk(y)
            else:
                x.free()

        walk(self.buffers)


@functools.cache
def load_targets() -> dict:
    """TARGETS, filled once from every module of this package. A module that fails to import is an
    error, not a family left out: a target that cannot run somewhere says so through `unavailable`."""
    for module in pkgutil.iter_modules(__path__):
        found = importlib.import_module(f"{__name__}.{module.name}")
        several = getattr(found, "TARGETS", None)
        if several is None and found.TARGET.family != module.name:  # tuned configs are keyed by the family
            raise ValueError(f"{found.__name__} tunes {found.TARGET.family!r}: name the module after its family")
        for target in several or (found.TARGET,):
            TARGETS[target.family] = target
    recorded_suites = model_suites.load()  # read once: the files hold every family's launches
    for target in TARGETS.values():  # the default suite: the hand-picked shapes and real models' heaviest
        suite = target.suites["suite"]
        recorded = [s for s in model_suites.heaviest(target.family, MODEL_SHAPES, recorded_suites) if s not in suite]
        target.suites = {**target.suites, "suite": suite + recorded}  # the instance's: the class keeps its own
    return TARGETS


load_optional_targets = load_targets  # the name torchvk/experiments and benchmarks/ call it by


def unavailable(target, device) -> str | None:
    """Why `device` cannot run `target` (None: it can)."""
    check = getattr(target, "unavailable", None)
    return check(device) if check is not None else None
