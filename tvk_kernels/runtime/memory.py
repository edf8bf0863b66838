"""Device memory: large blocks from the driver, sub-allocated, cached, capped and counted.

Buffers are addressed by device address (bufferDeviceAddress), so a sub-allocation is
just (block, offset): kernels receive `block.address + offset` in push constants and
need no descriptor sets.

Caching: a freed range goes to a per-size free list and is handed out again for the
same rounded size without touching the block (training allocates the same sizes every
step). When no cached range and no block has room, the cache is returned to the blocks
(coalescing neighbours) before a new block is requested. The cap (TVK_MEMORY_LIMIT,
set_memory_limit) bounds both the bytes in live buffers and the bytes reserved from the
driver, like the VRAM of a smaller card would.

Threads: every entry holds the runtime lock (lock.py). A buffer may be freed by the garbage
collector on any thread, one the lock holder may be waiting for (a pipeline build thread):
a free that cannot take the lock at once is queued and done by the next allocation.
"""
from __future__ import annotations

import bisect
import os
import re
import weakref
from decimal import Decimal

from .lock import runtime_lock
from .vk import NULL, check, ffi, lib, new
from ..errors import FreedBufferError, OutOfMemoryError, TVKError

ALIGNMENT = 256  # covers minStorageBufferOffsetAlignment and 16-byte vector loads everywhere we know of
BLOCK_SIZE = 32 << 20
STAGING_BLOCK_SIZE = 16 << 20
# AMD's proprietary driver refuses single allocations over 2 GiB even where it reports more
_TWO_GIB_DRIVERS = {"AMD_PROPRIETARY", "AMD_OPEN_SOURCE"}

_USAGE = (lib.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | lib.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
          | lib.VK_BUFFER_USAGE_TRANSFER_DST_BIT | lib.VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT)


def parse_bytes(text: str) -> int:
    """'512M', '6GB', '1.5GiB', '1048576' -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b?)\s*", str(text).lower())
    if not m:
        raise ValueError(f"cannot read {text!r} as a size; use bytes or a suffix like 512M, 6G")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2)]
    return int(Decimal(m.group(1)) * scale)  # exact: a float of many digits would be inf


def _round(n: int, a: int = ALIGNMENT) -> int:
    return (max(n, 1) + a - 1) // a * a


class Block:
    """One VkDeviceMemory bound to one VkBuffer, carved into ranges."""

    __slots__ = ("memory", "buffer", "size", "address", "free_ranges", "live", "mapped")

    def __init__(self, memory, buffer, size, address, mapped):
        self.memory, self.buffer, self.size, self.address, self.mapped = memory, buffer, size, address, mapped
        self.free_ranges = [(0, size)]  # sorted (offset, size), coalesced
        self.live = 0

    def take(self, size: int):
        for i, (off, sz) in enumerate(self.free_ranges):
            if sz >= size:
                if sz == size:
                    del self.free_ranges[i]
                else:
                    self.free_ranges[i] = (off + size, sz - size)
                return off
        return None

    def give_back(self, off: int, size: int):
        ranges = self.free_ranges
        i = bisect.bisect_left(ranges, (off, 0))
        if i < len(ranges) and off + size == ranges[i][0]:  # merge with next
            size += ranges[i][1]
            del ranges[i]
        if i > 0 and ranges[i - 1][0] + ranges[i - 1][1] == off:  # merge with previous
            off, size = ranges[i - 1][0], ranges[i - 1][1] + size
            del ranges[i - 1]
            i -= 1
        ranges.insert(i, (off, size))


class DeviceBuffer:
    """A range of device memory. `address` goes into kernels; `freed` guards use-after-free."""

    __slots__ = ("allocator", "block", "offset", "size", "nbytes", "address", "freed", "borrowed", "__weakref__")

    def __init__(self, allocator, block, offset, size, nbytes, borrowed=None):
        self.allocator, self.block, self.offset, self.size, self.nbytes = allocator, block, offset, size, nbytes
        self.address = block.address + offset
        self.freed = False
        self.borrowed = borrowed  # the Capture that lent it another graph's scratch range, or None

    def check_alive(self):
        if self.freed:
            raise FreedBufferError("this device buffer was freed; the tensor that owned it can no longer be used")

    def host_view(self):
        """A writable memoryview of a mapped (staging) buffer."""
        self.check_alive()
        if self.block.mapped is None:
            raise TVKError("host_view() is only for host-visible staging buffers")
        return ffi.buffer(self.block.mapped + self.offset, self.nbytes)

    def free(self):
        if not self.freed:
            self.freed = True
            self.allocator.release(self)

    def __del__(self):
        try:
            self.free()
        except Exception:  # interpreter shutdown: the device goes away with the process
            pass

    def __repr__(self):
        return f"<DeviceBuffer {self.nbytes} B at 0x{self.address:x}{' freed' if self.freed else ''}>"


def freed_ordinals(refs) -> frozenset:
    """Positions in `refs` (weak references to buffers, in allocation order) of the buffers freed
    since: a program's temporaries, which graphs may share (runtime/graph.py)."""
    return frozenset(i for i, ref in enumerate(refs) if (b := ref()) is None or b.freed)


class Allocator:
    # what running out of memory raises: a framework layer may put a subclass here (torchvk makes it
    # also a torch.OutOfMemoryError, whatever the import order of torch and tvk_kernels)
    oom_error = OutOfMemoryError

    def __init__(self, device, host_visible: bool = False):
        self.device = device
        self.host_visible = host_visible
        facts = device.facts
        cap = facts.max_memory_allocation or (1 << 62)
        if facts.driver_label in _TWO_GIB_DRIVERS:
            cap = min(cap, 2 << 30)
        self.max_allocation = cap
        self.block_size = min(STAGING_BLOCK_SIZE if host_visible else BLOCK_SIZE, cap)
        self.blocks: list[Block] = []
        self.cache: dict[int, list] = {}  # rounded size -> [(block, offset)]
        self.allocated = self.peak_allocated = 0
        self.reserved = self.peak_reserved = 0
        self.limit: int | None = None
        setting = os.environ.get("TVK_MEMORY_LIMIT", "")
        if not host_visible and setting.strip():
            try:
                self.limit = parse_bytes(setting)
            except ValueError as e:
                raise ValueError(f"TVK_MEMORY_LIMIT={setting!r}: {e}, or leave it unset for no cap") from None
        self._memory_type = None
        self.capture = None  # a graph.Capture while a graph is recorded: what it allocates and frees
        # scratch ranges of recorded graphs: (id(block), offset) -> [block, offset, size, graphs holding it]
        self.graph_scratch: dict = {}
        self.tracker: list | None = None  # weakrefs to every buffer allocated while a list is set here
        self.later: list = []  # (method, argument): frees from threads that could not take the lock
        self.call_capture = None  # kernels/kept_calls.py learning a call: it sees the call's allocations

    # ------------------------------------------------------------------ public
    def alloc(self, nbytes: int) -> DeviceBuffer:
        with runtime_lock:
            if self.later:
                self._run_later()
            size = _round(nbytes)
            cap = self.capture
            if cap is not None and len(cap.allocated) in cap.temps:
                buf = self._borrow(cap, size, nbytes)
                if buf is not None:
                    return buf
            if size > self.max_allocation:
                raise self.oom_error(nbytes, self.allocated, self.reserved, self.limit,
                                       f"One buffer may not exceed {self.max_allocation} bytes on this driver "
                                       "(maxMemoryAllocationSize); split the tensor. ")
            cached = self.cache.get(size)
            if not cached and cap is not None:
                size, cached = self._best_cached(size)
            if self.limit is not None and self.allocated + size > self.limit:
                raise self.oom_error(nbytes, self.allocated, self.reserved, self.limit)
            if cached:
                block, off = cached.pop()
            else:
                block, off = self._find(size)
            block.live += 1
            self.allocated += size
            if self.allocated > self.peak_allocated:
                self.peak_allocated = self.allocated
            buf = DeviceBuffer(self, block, off, size, nbytes)
            if self.call_capture is not None:
                self.call_capture.allocated(buf)
            if cap is not None:
                cap.allocated.append(weakref.ref(buf))
            elif self.tracker is not None:
                self.tracker.append(weakref.ref(buf))
            return buf

    def release(self, buf: DeviceBuffer):
        """Back to the cache (DeviceBuffer.free). _now_or_later, inlined: every op frees buffers."""
        if runtime_lock.acquire(blocking=False):
            try:
                self._release(buf)
            finally:
                runtime_lock.release()
        else:
            self.later.append((self._release, buf))

    def _release(self, buf: DeviceBuffer):
        if buf.borrowed is not None:  # another graph's scratch: back to the lending capture, if still open
            if buf.borrowed is self.capture:
                self.capture.lendable.append((buf.size, buf.block, buf.offset))
            return
        self.allocated -= buf.size
        buf.block.live -= 1
        self.cache.setdefault(buf.size, []).append((buf.block, buf.offset))
        if self.capture is not None:  # reusable inside the capture (kernels run in order), not after it
            self.capture.released.append((buf.block, buf.offset, buf.size))

    def keep_for_graph(self, capture) -> tuple[list, list, bool]:
        """End of a capture: the buffers allocated in it that are still alive (the graph holds them);
        the scratch ranges it used: those freed in it, taken out of the cache so nothing else gets
        them while the graph lives, and those it borrowed from other graphs; and whether a borrowed
        range is still in use (the plan was wrong: the recording must not be replayed)."""
        live = [b for b in (ref() for ref in capture.allocated) if b is not None and not b.freed]
        broken = any(b.borrowed is capture for b in live)
        reserved = []
        for block, off, size in capture.released:
            cached = self.cache.get(size)
            if cached and (block, off) in cached:
                cached.remove((block, off))
                block.live += 1  # a reserved range keeps its block, like a live buffer
                self.allocated += size
                key = (id(block), off)
                self.graph_scratch[key] = [block, off, size, 1]
                reserved.append(key)
        for key in capture.borrowed:
            entry = self.graph_scratch.get(key)
            if entry is not None:
                entry[3] += 1
                reserved.append(key)
        return live, reserved, broken

    def release_graph_ranges(self, reserved: list):
        """A graph is gone: its scratch ranges go back to the cache once no other graph holds them."""
        self._now_or_later(self._release_graph_ranges, reserved)

    def _release_graph_ranges(self, reserved: list):
        for key in reserved:
            entry = self.graph_scratch.get(key)
            if entry is None:
                continue
            entry[3] -= 1
            if entry[3] == 0:
                block, off, size, _ = self.graph_scratch.pop(key)
                block.live -= 1
                self.allocated -= size
                self.cache.setdefault(size, []).append((block, off))

    def _best_cached(self, size: int):
        """During a capture, a freed range up to twice the size serves a smaller request: a capture
        keeps every range it frees for its graph, so exact-size reuse alone left the backward of a
        small CNN holding 1.5x its peak."""
        best = None
        for rsize, entries in self.cache.items():
            if entries and size < rsize <= 2 * size and (best is None or rsize < best):
                best = rsize
        return (best, self.cache[best]) if best is not None else (size, None)

    def _borrow(self, cap, size: int, nbytes: int):
        """A temporary of the capture placed in another graph's scratch range (the smallest that
        fits, at most twice its size: a small temporary does not pin a large range). Graphs run one
        after another on the queue, so their temporaries can share memory."""
        best = None
        for i, (rsize, _block, _off) in enumerate(cap.lendable):
            if size <= rsize <= 2 * size and (best is None or rsize < cap.lendable[best][0]):
                best = i
        if best is None:
            return None
        rsize, block, off = cap.lendable.pop(best)
        cap.borrowed.add((id(block), off))
        buf = DeviceBuffer(self, block, off, rsize, nbytes, borrowed=cap)
        cap.allocated.append(weakref.ref(buf))
        return buf

    def set_limit(self, nbytes: int | None):
        self.limit = None if nbytes is None else int(nbytes)

    def empty_cache(self):
        """Return cached ranges to their blocks and give empty blocks back to the driver."""
        with runtime_lock:
            self._run_later()
            self.device.stream.synchronize()  # nothing in flight may still use a block we free
            self._flush_cache()
            for block in [b for b in self.blocks if b.live == 0]:
                self._destroy(block)

    def stats(self) -> dict:
        with runtime_lock:
            self._run_later()
        return {"allocated": self.allocated, "peak_allocated": self.peak_allocated, "reserved": self.reserved,
                "peak_reserved": self.peak_reserved, "limit": self.limit, "blocks": len(self.blocks)}

    def reset_peak(self):
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

    # ----------------------------------------------------------------- private
    def _now_or_later(self, method, arg):
        """method(arg) holding the lock; if another thread holds it, queued for the next alloc:
        the garbage collector may free a buffer on a thread the lock holder waits for."""
        if runtime_lock.acquire(blocking=False):
            try:
                method(arg)
            finally:
                runtime_lock.release()
        else:
            self.later.append((method, arg))  # list.append is atomic: no lock needed

    def _run_later(self):
        while self.later:
            method, arg = self.later.pop(0)
            method(arg)

    def _find(self, size: int):
        for block in self.blocks:
            off = block.take(size)
            if off is not None:
                return block, off
        if any(self.cache.values()) and self.capture is None:  # during a capture cached ranges may be the graph's
            self._flush_cache()
            for block in self.blocks:
                off = block.take(size)
                if off is not None:
                    return block, off
        block_size = max(self.block_size, _round(size, 1 << 16))
        if self.limit is not None and self.reserved + block_size > self.limit:
            # under a cap: drop empty blocks, then ask for no more than what is needed
            self.empty_cache()
            block_size = _round(size, 1 << 16) if self.reserved + block_size > self.limit else block_size
            if self.reserved + block_size > self.limit:
                raise self.oom_error(size, self.allocated, self.reserved, self.limit)
        block = self._create(block_size, size)
        off = block.take(size)
        return block, off

    def _flush_cache(self):
        for size, entries in self.cache.items():
            for block, off in entries:
                block.give_back(off, size)
        self.cache.clear()

    def _pick_type(self, type_bits: int) -> int:
        L, V, C, H = (lib.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, lib.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                      lib.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, lib.VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
        types = [t for t in self.device.facts.memory_types if type_bits & (1 << t["index"])]
        if self.host_visible:
            prefs = [lambda f: f & (V | C | H) == (V | C | H), lambda f: f & (V | C) == (V | C)]
        else:
            prefs = [lambda f: f & L and not f & V, lambda f: f & L, lambda f: True]
        for pref in prefs:
            for t in types:
                if pref(t["flags"]):
                    return t["index"]
        raise TVKError("no suitable Vulkan memory type" + (" (host-visible)" if self.host_visible else ""))

    def _create(self, block_size: int, needed: int) -> Block:
        dev = self.device.handle
        keep: list = []
        binfo = new("VkBufferCreateInfo", keep, size=block_size, usage=_USAGE, sharingMode=lib.VK_SHARING_MODE_EXCLUSIVE)
        bout = ffi.new("VkBuffer*")
        check(lib.vkCreateBuffer(dev, binfo, NULL, bout), "vkCreateBuffer")
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(dev, bout[0], req)
        if self._memory_type is None:
            self._memory_type = self._pick_type(req.memoryTypeBits)
        flags = new("VkMemoryAllocateFlagsInfo", keep, flags=lib.VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT)
        ainfo = new("VkMemoryAllocateInfo", keep, pNext=flags, allocationSize=req.size, memoryTypeIndex=self._memory_type)
        mout = ffi.new("VkDeviceMemory*")
        res = lib.vkAllocateMemory(dev, ainfo, NULL, mout)
        if res < 0:
            lib.vkDestroyBuffer(dev, bout[0], NULL)
            if res in (lib.VK_ERROR_OUT_OF_DEVICE_MEMORY, lib.VK_ERROR_OUT_OF_HOST_MEMORY):
                raise self.oom_error(needed, self.allocated, self.reserved, self.limit,
                                       f"The driver refused a {block_size}-byte block. ")
            check(res, "vkAllocateMemory")
        check(lib.vkBindBufferMemory(dev, bout[0], mout[0], 0), "vkBindBufferMemory")
        ainfo2 = new("VkBufferDeviceAddressInfo", keep, buffer=bout[0])
        address = int(lib.vkGetBufferDeviceAddress(dev, ainfo2))
        mapped = None
        if self.host_visible:
            ptr = ffi.new("void**")
            check(lib.vkMapMemory(dev, mout[0], 0, req.size, 0, ptr), "vkMapMemory")
            mapped = ffi.cast("char*", ptr[0])
        block = Block(mout[0], bout[0], block_size, address, mapped)
        self.blocks.append(block)
        self.reserved += block_size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        return block

    def _destroy(self, block: Block):
        dev = self.device.handle
        lib.vkDestroyBuffer(dev, block.buffer, NULL)
        lib.vkFreeMemory(dev, block.memory, NULL)
        self.blocks.remove(block)
        self.reserved -= block.size
