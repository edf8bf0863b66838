"""The device's error word: how a kernel reports bad input (an index out of range) to the host.

Kernels run asynchronously, so they cannot raise. A kernel that finds bad input sets this
word instead, and the stream reads it at every sync point (`Stream.synchronize`, which every
readback, `.item()` and graph wait goes through): one read of a mapped flag, so checking
costs the host nothing while all is well. When the flag is set, the word is cleared and the
error it describes is raised; the runtime stays usable.

Layout (32 bytes of host-visible, host-coherent memory): uint32 flag, uint32 site,
int64 value, int64 bound. The first kernel invocation to swap the flag from 0 to 1 fills in
the rest (templates/index_check.comp). A site is an id that a kernel family registers under a key
(say, the op and dimension) with a function that turns (key, value, bound) into the exception
to raise: the runtime itself knows nothing of ops.
"""
from __future__ import annotations

from .vk import ffi
from ..errors import TVKError

_SIZE = 32


class ErrorWord:
    def __init__(self, device):
        self._buffer = device.staging.alloc(_SIZE)  # host-visible, coherent: kernels write it, the host reads it
        raw = ffi.cast("char*", self._buffer.block.mapped) + self._buffer.offset
        self.flag = ffi.cast("uint32_t*", raw)
        self._words = ffi.cast("int64_t*", raw)
        self.address = self._buffer.address
        ffi.memmove(raw, bytes(_SIZE), _SIZE)
        self._registered: list = []  # site -> (key, function (key, value, bound) -> exception)
        self._sites: dict = {}  # key -> site

    def site(self, key, explain) -> int:
        """The id kernels write for `key`; `explain(key, value, bound)` builds its exception."""
        s = self._sites.get(key)
        if s is None:
            s = self._sites[key] = len(self._registered)
            self._registered.append((key, explain))
        return s

    def check(self):
        """Raise the error a kernel reported since the last check, if any (call after a wait)."""
        if self.flag[0]:
            self._raise()

    def _raise(self):
        site, value, bound = self.flag[1], self._words[1], self._words[2]
        self._words[0] = self._words[1] = self._words[2] = 0  # cleared first: the next sync starts clean
        if site < len(self._registered):
            key, explain = self._registered[site]
            raise explain(key, value, bound)
        raise TVKError(f"a kernel reported bad input (site {site}, value {value}, bound {bound}) that no kernel "
                       "family registered; this is a TorchVK bug, please report it")
