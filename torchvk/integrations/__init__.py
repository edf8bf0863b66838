"""The trainers people use pick tvk as they pick cuda, with no line beyond `import torchvk`.

  accelerate.Accelerator and HF transformers.Trainer: accelerate.py
  Lightning's Trainer(accelerator="tvk"):             lightning.py
  Lightning Fabric's Fabric(accelerator="tvk"):       lightning_fabric.py

`import torchvk` calls install(), which imports none of these libraries (seconds each): each
integration runs right after its library's module has loaded, or at once if it is loaded already.
Every integration is idempotent by design (a second install finds its own hook and does nothing);
one that finds "tvk" already taken by something else raises.
"""
from __future__ import annotations

import importlib.util
import sys
import warnings


def _accelerate_state(module):
    from . import accelerate  # lazy: imports accelerate, loaded only once the user's code loaded it

    accelerate.install_partial_state(module.PartialState)


def _transformers_training_args(module):
    from . import accelerate  # lazy: imports accelerate, loaded only once the user's code loaded it

    accelerate.install_training_arguments(module.TrainingArguments)


def _lightning_connector(module):
    from . import lightning  # lazy: imports lightning, loaded only once the user's code loaded it

    lightning.install(module._AcceleratorConnector)


def _lightning_fabric_connector(module):
    from . import lightning_fabric  # lazy: imports lightning.fabric, loaded only once the user's code loaded it

    lightning_fabric.install(module._Connector)


# {module: what runs once it has loaded}. Lightning's accelerator connector imports everything
# lightning.py needs (the registry, the strategies, the precision plugins), and `import lightning`
# loads it, so the registry has "tvk" before any user code sees it. Fabric's connector does the same
# for Fabric's registry, and `import lightning.fabric` (which `import lightning.pytorch` runs first) loads it.
HOOKS = {
    "accelerate.state": _accelerate_state,
    "transformers.training_args": _transformers_training_args,
    "lightning.pytorch.trainer.connectors.accelerator_connector": _lightning_connector,
    "lightning.fabric.connector": _lightning_fabric_connector,
}


def install():
    for name, integrate in HOOKS.items():
        module = sys.modules.get(name)
        if module is not None:
            _run(integrate, module)
        elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(name, integrate))


def _run(integrate, module):
    # a library version these hooks do not fit must not break the user's `import accelerate`:
    # it trains as it would without TorchVK (on the CPU), and says why
    try:
        integrate(module)
    except Exception as error:
        warnings.warn(f"torchvk could not make {module.__name__.partition('.')[0]} pick the tvk device, "
                      f"which it will not use unless told to: {error}", RuntimeWarning, stacklevel=2)


class _AfterImport:
    """Import hook: finds one module as the other finders would, and runs the integration right after it."""

    def __init__(self, name, integrate):
        self.name = name
        self.integrate = integrate

    def find_spec(self, name, path, target=None):
        if name != self.name:
            return None
        sys.meta_path.remove(self)  # once: the search below then goes to the other finders
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def run_then_integrate(module):
            run_module(module)
            _run(self.integrate, module)

        spec.loader.exec_module = run_then_integrate
        return spec
