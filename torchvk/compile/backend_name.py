"""The name "tvk" for torch.compile(backend="tvk"), without the installed entry point.

An installed TorchVK declares the backend through the `torch_dynamo_backends` entry point
(pyproject.toml); a source checkout on sys.path has none. `import torchvk` adds the same
entry to Dynamo's registry, without importing Dynamo (about 1 s): if Dynamo's backend registry
is not loaded yet, the entry is added right after it loads. As with an entry point,
backend.py (and with it AOTAutograd) is imported only when the name is looked up.
"""
from __future__ import annotations

import importlib.machinery
import sys
from importlib.metadata import EntryPoint

REGISTRY = "torch._dynamo.backends.registry"
ENTRY = EntryPoint(name="tvk", value="torchvk.compile.backend:tvk_backend", group="torch_dynamo_backends")


def register_lazily():
    registry = sys.modules.get(REGISTRY)
    if registry is not None:
        _add_name(registry)
    elif not any(isinstance(f, _AfterRegistryLoads) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterRegistryLoads())


def _add_name(registry):
    # what Dynamo's own entry-point discovery stores; its lookup_backend loads and registers it
    registry._BACKENDS.setdefault(ENTRY.name, ENTRY)


class _AfterRegistryLoads:
    """Import hook: finds Dynamo's registry module as usual and adds the name once it has run."""

    def find_spec(self, name, path, target=None):
        if name != REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def run_then_add_name(module):
            run_module(module)
            _add_name(module)

        spec.loader.exec_module = run_then_add_name
        return spec
