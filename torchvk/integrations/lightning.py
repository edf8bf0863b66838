"""Lightning's `Trainer(accelerator="tvk", devices=1)`: TVKAccelerator, in Lightning's AcceleratorRegistry.

Lightning finds accelerators in its registry only (it has no entry point group for them), so
`import torchvk` registers this one when Lightning loads (torchvk/integrations/__init__.py).

Three of Lightning's choices name tpu, cuda and mps and give any other accelerator something else,
so the hook on its accelerator connector corrects them for tvk:
  * accelerator="auto" (the default): Lightning's "cpu" becomes "tvk" where torch's accelerator is
    tvk (default_device.py); where it finds cuda, mps or a TPU, its choice stands;
  * one device: Lightning's SingleDeviceStrategy gets device "cpu" (the model would train there);
    it gets the tvk device;
  * precision "16-mixed" / "bf16-mixed": Lightning's MixedPrecision gets device "cuda" (autocast
    and a GradScaler for cuda, which do nothing to tvk tensors); it gets "tvk": torch.autocast("tvk")
    and torch.amp.GradScaler("tvk"), which TorchVK supports.
Other precisions ("32-true", "16-true", "bf16-true", "64-true") name no device and work as they are.

Fabric (lightning.fabric) has its own registry and connector: lightning_fabric.py, whose TVKAccelerator
this one subclasses.

Registration is idempotent by design: registering TVKAccelerator again does nothing; "tvk" taken
by another accelerator class raises.
"""
from __future__ import annotations

import functools

from lightning.pytorch.accelerators import Accelerator, AcceleratorRegistry
from lightning.pytorch.plugins.precision import MixedPrecision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from ..memory import memory_stats
from .lightning_fabric import TVKAccelerator as FabricTVKAccelerator
from .lightning_fabric import tvk_for_auto


class TVKAccelerator(FabricTVKAccelerator, Accelerator):
    """Accelerator for TorchVK's tvk devices (any GPU with a Vulkan driver)."""

    # Fabric's (lightning_fabric.py) parses devices, sets them up and registers; the Trainer adds device stats
    entry_point = "Trainer"

    def get_device_stats(self, device) -> dict:
        return memory_stats(device)


def install(accelerator_connector):
    """Registers TVKAccelerator, and corrects Lightning's accelerator, strategy and mixed-precision device for it."""
    TVKAccelerator.register_accelerators(AcceleratorRegistry)
    if getattr(accelerator_connector._choose_strategy, "torchvk_hook", False):
        return
    lightning_strategy = accelerator_connector._choose_strategy
    lightning_precision = accelerator_connector._check_and_init_precision

    @functools.wraps(lightning_strategy)
    def _choose_strategy(self):
        strategy = lightning_strategy(self)
        if isinstance(self.accelerator, TVKAccelerator) and type(strategy) is SingleDeviceStrategy:
            return SingleDeviceStrategy(device=self._parallel_devices[0])  # not Lightning's "cpu"
        return strategy

    @functools.wraps(lightning_precision)
    def _check_and_init_precision(self):
        if (isinstance(self.accelerator, TVKAccelerator) and self._precision_plugin_flag is None
                and self._precision_flag in ("16-mixed", "bf16-mixed")
                and type(self.strategy) in (SingleDeviceStrategy, DDPStrategy)):
            self._validate_precision_choice()
            return MixedPrecision(self._precision_flag, device="tvk")  # not Lightning's "cuda"
        return lightning_precision(self)

    _choose_strategy.torchvk_hook = True
    accelerator_connector._choose_auto_accelerator = tvk_for_auto(accelerator_connector._choose_auto_accelerator)
    accelerator_connector._choose_strategy = _choose_strategy
    accelerator_connector._check_and_init_precision = _check_and_init_precision
