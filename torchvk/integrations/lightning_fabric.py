"""Lightning Fabric's `Fabric(accelerator="tvk", devices=1)`: TVKAccelerator, in Fabric's ACCELERATOR_REGISTRY.

Fabric has a registry and an accelerator connector of its own, apart from the Trainer's (lightning.py),
so `import torchvk` registers this accelerator there too, when lightning.fabric loads
(torchvk/integrations/__init__.py). The Trainer's TVKAccelerator subclasses this one: both parse
devices, set them up and register alike.

Fabric's connector makes the Trainer's three choices by name, so the hook on it corrects them for tvk:
  * accelerator="auto" (the default): Fabric's "cpu" becomes "tvk" where torch's accelerator is tvk
    (default_device.py); where it finds cuda, mps or a TPU, its choice stands;
  * one device: Fabric's SingleDeviceStrategy gets device "cpu" (the model would train there); it
    gets the tvk device;
  * precision "16-mixed" / "bf16-mixed": Fabric's MixedPrecision gets device "cuda" (autocast and a
    GradScaler for cuda, which do nothing to tvk tensors); it gets "tvk": torch.autocast("tvk") and
    torch.amp.GradScaler("tvk"), which TorchVK supports.
Other precisions ("32-true", "16-true", "bf16-true", "64-true") name no device and work as they are.

Registration is idempotent by design: registering TVKAccelerator again does nothing; "tvk" taken
by another accelerator class raises.
"""
from __future__ import annotations

import functools

import torch
# submodules only: this runs while lightning.fabric's own __init__ is still loading (it imports the connector)
from lightning.fabric.accelerators import ACCELERATOR_REGISTRY, Accelerator
from lightning.fabric.plugins.precision import MixedPrecision
from lightning.fabric.strategies import DDPStrategy, SingleDeviceStrategy
from lightning.fabric.utilities.exceptions import MisconfigurationException

from .._module import device_count, is_available
from ..memory import empty_cache
from .default_device import tvk_is_torch_accelerator


class TVKAccelerator(Accelerator):
    """Accelerator for TorchVK's tvk devices (any GPU with a Vulkan driver)."""

    # the call the user wrote, for parse_devices' error: the Trainer's subclass says "Trainer"
    entry_point = "Fabric"

    def setup_device(self, device: torch.device) -> None:
        if device.type != "tvk":
            raise MisconfigurationException(f"TVKAccelerator runs on tvk devices, got {device}")
        torch.tvk.set_device(device.index or 0)

    def teardown(self) -> None:
        empty_cache()  # as Lightning's CUDA accelerator: cached blocks go back to the driver

    @classmethod
    def parse_devices(cls, devices) -> list[int]:
        """The device indices `devices=...` asks for, in CUDA's forms: a count n (the first n),
        -1 (all), a list of indices, or a string of either ("2", "-1", "0,1")."""
        count = device_count()
        if isinstance(devices, str):
            text = devices.strip()
            devices = [int(part) for part in text.split(",") if part.strip()] if "," in text else int(text)
        if isinstance(devices, int):
            devices = list(range(count)) if devices == -1 else list(range(devices))
        indices = list(devices)
        missing = [index for index in indices if not 0 <= index < count]
        if not indices or missing:
            raise MisconfigurationException(
                f"{cls.entry_point}(accelerator='tvk') asked for tvk device(s) {indices}, but this machine has "
                f"{count} (torch.tvk.device_count()): pass devices=1 or a list of indices below {count}.")
        return indices

    @staticmethod
    def get_parallel_devices(devices: list[int]) -> list[torch.device]:
        return [torch.device("tvk", index) for index in devices]

    @staticmethod
    def auto_device_count() -> int:
        return device_count()

    @staticmethod
    def is_available() -> bool:
        return is_available()

    @staticmethod
    def name() -> str:
        return "tvk"

    @classmethod
    def register_accelerators(cls, accelerator_registry) -> None:
        entry = dict.get(accelerator_registry, cls.name())  # the registry's own get() builds an accelerator
        if entry is not None:
            if entry["accelerator"] is cls:
                return
            raise MisconfigurationException(
                f"Lightning's accelerator name {cls.name()!r} is taken by {entry['accelerator']!r}; "
                f"TorchVK's {cls.__qualname__} cannot register under it")
        accelerator_registry.register(cls.name(), cls, description=cls.__doc__)


def tvk_for_auto(lightning_auto):
    """Wraps a connector's _choose_auto_accelerator (the Trainer's or Fabric's): its "cpu" becomes "tvk"
    where torch's accelerator is tvk."""

    @functools.wraps(lightning_auto)
    def _choose_auto_accelerator():
        name = lightning_auto()
        return TVKAccelerator.name() if name == "cpu" and tvk_is_torch_accelerator() else name

    return staticmethod(_choose_auto_accelerator)


def install(connector):
    """Registers TVKAccelerator, and corrects Fabric's accelerator, strategy and mixed-precision device for it."""
    TVKAccelerator.register_accelerators(ACCELERATOR_REGISTRY)
    if getattr(connector._choose_strategy, "torchvk_hook", False):
        return
    lightning_strategy = connector._choose_strategy
    lightning_precision = connector._check_and_init_precision

    @functools.wraps(lightning_strategy)
    def _choose_strategy(self):
        strategy = lightning_strategy(self)
        if isinstance(self.accelerator, TVKAccelerator) and type(strategy) is SingleDeviceStrategy:
            return SingleDeviceStrategy(device=self._parallel_devices[0])  # not Fabric's "cpu"
        return strategy

    @functools.wraps(lightning_precision)
    def _check_and_init_precision(self):
        if (isinstance(self.accelerator, TVKAccelerator) and self._precision_instance is None
                and self._precision_input in ("16-mixed", "bf16-mixed")
                and type(self.strategy) in (SingleDeviceStrategy, DDPStrategy)):
            return MixedPrecision(self._precision_input, device="tvk")  # not Fabric's "cuda"
        return lightning_precision(self)

    _choose_strategy.torchvk_hook = True
    connector._choose_auto_accelerator = tvk_for_auto(connector._choose_auto_accelerator)
    connector._choose_strategy = _choose_strategy
    connector._check_and_init_precision = _check_and_init_precision
