"""The aten op modules, one per op group, found by name: importing this package imports every
`torchvk/aten/<group>.py` (private helpers, `_*.py`, are imported by the modules that use them),
and their declarations fill the op registry (torchvk/op_registry.py).

A module that cannot be imported is an error, raised here: an op group that silently went
missing would turn into NotImplementedError far from its cause. What one module needs of another
it imports, so the order of this walk does not matter.
"""
import importlib
import pkgutil

GROUPS = tuple(sorted(info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")))

for _name in GROUPS:
    importlib.import_module(f"{__name__}.{_name}")
