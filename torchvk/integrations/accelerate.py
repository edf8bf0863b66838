"""accelerate.Accelerator() and HF transformers.Trainer train on tvk, as they train on cuda.

accelerate picks its device in `PartialState.default_device`, which knows cuda, xpu, mps, npu, ...
by name and answers cpu for any other device: it does not ask torch.accelerator. The hook keeps
its answer, except that where it would answer cpu and torch's current accelerator is tvk, the
answer is tvk. It is the default only: `Accelerator(cpu=True)`, `ACCELERATE_USE_CPU=1` and
`TrainingArguments(use_cpu=True)` still give the CPU (accelerate asks default_device only when the
user asked for no device), and `ACCELERATE_TORCH_DEVICE` still decides when set.
(Setting ACCELERATE_TORCH_DEVICE=tvk instead would not do: accelerate lets it override cpu=True.)

transformers' TrainingArguments does not take accelerate's device as it is in a single process:
it names cuda, xpu, mps, ... again, and answers cpu for any other, so the Trainer would put the
model on the CPU and accelerate the batches on tvk. The hook gives it accelerate's tvk instead.

Both hooks are idempotent by design: a second install sees its own wrapper and returns.
"""
from __future__ import annotations

import functools

import torch

from .default_device import tvk_is_torch_accelerator


def install_partial_state(partial_state):
    """Makes accelerate's PartialState (and with it Accelerator) default to tvk where it would default to cpu."""
    current = partial_state.__dict__.get("default_device")
    if not isinstance(current, property):
        raise TypeError(f"accelerate's PartialState.default_device is {current!r}, not the property TorchVK hooks")
    if getattr(current.fget, "torchvk_hook", False):
        return
    accelerate_default = current.fget

    @functools.wraps(accelerate_default)
    def default_device(self):
        device = accelerate_default(self)
        if device.type == "cpu" and tvk_is_torch_accelerator():
            return torch.device("tvk")  # index-less, as accelerate's torch.device("cuda"): the current tvk device
        return device

    default_device.torchvk_hook = True
    partial_state.default_device = property(default_device, doc=current.__doc__)


def install_training_arguments(training_arguments):
    """Makes transformers' TrainingArguments.device the tvk device accelerate chose."""
    current = training_arguments.__dict__.get("_setup_devices")
    if not isinstance(current, functools.cached_property):
        raise TypeError(f"transformers' TrainingArguments._setup_devices is {current!r}, "
                        "not the cached_property TorchVK hooks")
    if getattr(current.func, "torchvk_hook", False):
        return
    transformers_setup = current.func

    @functools.wraps(transformers_setup)
    def _setup_devices(self):
        device = transformers_setup(self)
        state = getattr(self, "distributed_state", None)  # accelerate's PartialState, which the Trainer's Accelerator uses
        if device.type == "cpu" and not self.use_cpu and state is not None and state.device.type == "tvk":
            self._n_gpu = 1  # one device, as for xpu or mps: no DataParallel
            return state.device
        return device

    _setup_devices.torchvk_hook = True
    hooked = functools.cached_property(_setup_devices)
    hooked.__set_name__(training_arguments, "_setup_devices")  # what a class body does for it
    training_arguments._setup_devices = hooked
