"""TorchVK's torch layer: the `tvk` device, its aten op table, `torchvk.ops`, the memory API.

`import torchvk` registers PyTorch's PrivateUse1 backend under the name "tvk":
torch.device("tvk"), tensor.to("tvk"), module.to("tvk"), torch.tvk.*, and
torch.accelerator.current_accelerator() (where no other accelerator is present).
"""
from __future__ import annotations

import torch  # first: so tvk_kernels' OutOfMemoryError is also a torch.OutOfMemoryError
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

import tvk_kernels  # noqa: E402
from tvk_kernels.errors import ForkedDeviceError, FreedBufferError, TVKError  # noqa: E402
from tvk_kernels.runtime.memory import Allocator as _Allocator  # noqa: E402

from . import _autograd  # noqa: E402
from . import op_registry  # noqa: E402
from ._module import TVKModule, _Guard, _Hooks  # noqa: E402
from . import _serialization  # noqa: E402
from .compile import backend_name as _backend_name  # noqa: E402
from . import _storage  # noqa: E402,F401  (makes the allocator's OOM a torch.OutOfMemoryError)
from ._storage import torch_device  # noqa: E402

# the OOM class users catch: what every allocation raises, always a torch.OutOfMemoryError
OutOfMemoryError = _Allocator.oom_error


def _register_backend():
    if torch._C._get_privateuse1_backend_name() == "tvk" and hasattr(torch, "tvk"):
        return
    _setup_privateuseone_for_python_backend(rename="tvk", backend_module=TVKModule, hook=_Hooks(),
                                            device_guard=_Guard())


_register_backend()
_serialization.install()  # torch.load of tvk tensors (map_location too), DataLoader(pin_memory=True)
_backend_name.register_lazily()  # torch.compile(backend="tvk") from a source checkout too
from . import distributed as _distributed  # noqa: E402
_distributed.register()  # dist.init_process_group("cpu:gloo,tvk:tvk"), DistributedDataParallel
_autograd.install()  # every backward on the calling thread, errors in it raised there
from . import autocast as _autocast  # noqa: E402
_autocast.install()  # torch.autocast("tvk"): CUDA's op policy (torch has none for PrivateUse1)
from . import accelerator as _accelerator  # noqa: E402
_accelerator.install()  # torch.accelerator's C++-backed functions and Graph, done for tvk
from . import events as _events  # noqa: E402
_events.install()  # torch.Event: a tvk event where the device is tvk

from . import aten as _aten  # noqa: E402,F401  (fills the op table)
from .compile import fake as _fake  # noqa: E402,F401  (Dynamo's stand-in for a tvk tensor: TVKTensor's hook)
from ._dispatch import cpu_fallback_enabled, op_counts, reset_op_counts, set_cpu_fallback  # noqa: E402
from ._module import device_count, is_available  # noqa: E402
from ._tensor import TVKTensor  # noqa: E402
from .memory import (empty_cache, get_memory_limit, max_memory_allocated, max_memory_reserved,  # noqa: E402
                     memory_allocated, memory_reserved, memory_stats, reset_peak_memory_stats, set_memory_limit)
from . import ops  # noqa: E402,F401
from . import optim  # noqa: E402,F401
from . import profiler  # noqa: E402,F401
from . import backends  # noqa: E402,F401  (torchvk.backends.benchmark)
from .graphs import graph  # noqa: E402
from .compile import compile  # noqa: E402  (the function; the package stays importable as torchvk.compile)
from . import integrations as _integrations  # noqa: E402
_integrations.install()  # accelerate, HF Trainer and Lightning pick tvk (each hooked once it loads)


def synchronize(device=None):
    """Wait for every recorded kernel to finish."""
    torch.tvk.synchronize(device)


def manual_seed(seed: int):
    torch.tvk.manual_seed(seed)


def device(index: int | None = None) -> torch.device:
    """torch.device('tvk', index)."""
    return torch_device(index)


def supported_ops() -> list[str]:
    """Names of the aten overloads that run on tvk (from the op registry: torchvk/op_registry.py)."""
    return op_registry.supported_ops()


__all__ = ["TVKTensor", "OutOfMemoryError", "FreedBufferError", "ForkedDeviceError", "TVKError", "set_cpu_fallback",
           "cpu_fallback_enabled", "op_counts", "reset_op_counts", "set_memory_limit", "get_memory_limit",
           "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
           "reset_peak_memory_stats", "empty_cache", "memory_stats", "synchronize", "manual_seed", "device",
           "is_available", "device_count", "supported_ops", "ops", "optim", "profiler", "graph", "compile"]
__version__ = tvk_kernels.__version__
