"""`torch.tvk`: the device module torch looks up for the `tvk` backend, plus the hooks."""
from __future__ import annotations

import itertools

import torch

from tvk_kernels import list_devices

from . import memory as _memory
from . import _rng
from .events import Event
from ._storage import current_index, get_device, set_current_index, supported_dtypes


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return is_available()

    def has_primary_context(self, dev_id) -> bool:
        return True

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    # torch calls type_ from C++ functions that may not throw (the guards around every op and
    # autograd node): a Python function there would let a Ctrl-C raise at its first line, and
    # abort the process. A C callable returning the constant runs no bytecode: nothing raises.
    type_ = staticmethod(itertools.repeat(torch._C._autograd.DeviceType.PrivateUse1).__next__)


class Stream(torch.Stream):
    """torch.tvk.Stream: a device's queue. TorchVK records every kernel of a device in order on one
    Vulkan queue, so a device has one stream (id 0) and every Stream of it is that one. torch's own
    methods for a Python backend's stream neither wait nor look (synchronize returns at once, query
    says True, torch 2.13's is_capturing False); these ask the queue."""

    def __new__(cls, device=None, priority: int = 0):
        return super().__new__(cls, stream_id=0, device_index=_index(device),
                               device_type=int(torch._C._autograd.DeviceType.PrivateUse1))

    def synchronize(self) -> None:
        """Wait until every kernel recorded on the device so far has run."""
        get_device(self.device_index).stream.synchronize()

    def query(self) -> bool:
        """Whether every kernel recorded on the device so far has run (no wait)."""
        return get_device(self.device_index).stream.query()

    def is_capturing(self) -> bool:
        """Whether a graph capture (torchvk.graph, torch.accelerator.Graph) is recording the device's kernels."""
        return get_device(self.device_index).stream.capturing

    def record_event(self, event=None) -> Event:
        """Record `event` (a new one if None) after the kernels recorded so far, and return it."""
        event = Event(torch.device("tvk", self.device_index)) if event is None else event
        if type(event) is not Event:
            raise TypeError(f"record_event on a tvk stream takes a tvk torch.Event, got {event!r}")
        event.record(self)
        return event

    def wait_event(self, event) -> None:
        """Later work waits for the event: one queue runs in order, so nothing to do."""
        if type(event) is not Event:
            raise TypeError(f"wait_event on a tvk stream takes a tvk torch.Event, got {event!r}")
        event.wait(self)

    def wait_stream(self, stream) -> None:
        """Later work waits for the other stream's: a device has one stream, so nothing to do."""
        if stream.device.type != "tvk":
            raise ValueError(f"wait_stream: a tvk stream waiting for a stream of {stream.device}")


class TVKModule:
    """The object registered as `torch.tvk` (torch._register_device_module)."""

    # -- availability
    @staticmethod
    def is_available() -> bool:
        return is_available()

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def _is_in_bad_fork() -> bool:
        return False

    @staticmethod
    def device_count() -> int:
        return device_count()

    @staticmethod
    def current_device() -> int:
        return current_index()

    @staticmethod
    def set_device(device) -> None:
        idx = torch.device(device).index if isinstance(device, (str, torch.device)) else int(device)
        get_device(idx)
        set_current_index(idx)

    class device:
        """`with torch.tvk.device(i):` makes device i current inside the block, as torch.cuda.device."""

        def __init__(self, device):
            self.index = _index(device)
            self.previous = None

        def __enter__(self):
            self.previous = current_index()
            TVKModule.set_device(self.index)

        def __exit__(self, *exc):
            set_current_index(self.previous)
            return False

    @staticmethod
    def get_device_name(device=None) -> str:
        return get_device(_index(device)).facts.name

    @staticmethod
    def get_device_properties(device=None):
        return get_device(_index(device)).facts

    @staticmethod
    def synchronize(device=None) -> None:
        get_device(_index(device)).stream.synchronize()

    Stream = Stream
    Event = Event

    @staticmethod
    def current_stream(device=None) -> Stream:
        return Stream(device)

    # -- random numbers
    manual_seed = staticmethod(_rng.manual_seed)
    manual_seed_all = staticmethod(_rng.manual_seed)
    seed = staticmethod(_rng.seed)
    seed_all = staticmethod(_rng.seed)
    initial_seed = staticmethod(_rng.initial_seed)
    get_rng_state = staticmethod(_rng.get_rng_state)
    set_rng_state = staticmethod(_rng.set_rng_state)
    get_rng_state_all = staticmethod(lambda: [_rng.get_rng_state()])
    set_rng_state_all = staticmethod(lambda states: _rng.set_rng_state(states[0]))

    # -- memory
    memory_allocated = staticmethod(_memory.memory_allocated)
    max_memory_allocated = staticmethod(_memory.max_memory_allocated)
    memory_reserved = staticmethod(_memory.memory_reserved)
    max_memory_reserved = staticmethod(_memory.max_memory_reserved)
    reset_peak_memory_stats = staticmethod(_memory.reset_peak_memory_stats)
    reset_max_memory_allocated = staticmethod(_memory.reset_max_memory_allocated)
    empty_cache = staticmethod(_memory.empty_cache)
    memory_stats = staticmethod(_memory.memory_stats)
    set_memory_limit = staticmethod(_memory.set_memory_limit)
    mem_get_info = staticmethod(_memory.get_memory_info)
    empty_host_cache = staticmethod(_memory.empty_host_cache)

    # amp: torch.autocast("tvk") (torchvk/autocast.py) and torch.amp.GradScaler("tvk") (torchvk/aten/amp.py)
    @staticmethod
    def get_amp_supported_dtype():
        return [torch.float16, torch.bfloat16]

    @staticmethod
    def is_bf16_supported(including_emulation: bool = True) -> bool:
        """Whether bfloat16 tensors work on the current device. They are stored as 16-bit words
        and computed in float32, which needs only 16-bit storage (emulated arithmetic);
        `including_emulation=False` asks for native bfloat16 arithmetic in the kernels: the
        bf16 GEMM on cooperative matrices (kernels/matmul_coopmat2.py), once verified on the
        device; elsewhere False (as torch.cuda's on a GPU without it)."""
        if not including_emulation:
            from tvk_kernels.kernels import matmul_coopmat2  # lazy: its self-check runs on first use
            return is_available() and matmul_coopmat2.verified(get_device(current_index()), "bfloat16") is not None
        return is_available() and torch.bfloat16 in supported_dtypes()


def _index(device):
    if device is None:
        return current_index()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return d.index if d.index is not None else current_index()


_available = [None]


def is_available() -> bool:
    if _available[0] is None:
        try:
            get_device()
            _available[0] = True
        except Exception:
            _available[0] = False
    return _available[0]


def device_count() -> int:
    try:
        return len(list_devices())
    except Exception:
        return 0
