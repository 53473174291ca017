"""Large request messages joined in buffers kept for reuse.

``--grpc-infer-allocation-pool-size`` sizes the gRPC endpoint's pool.

A message of many MiB arrives in frames of a few KiB, joined once it is whole. A fresh buffer
for it costs a page fault per page on first touch, and in a virtual machine often the host's
faults too: more than the copy into it, and now and then tens of milliseconds. A buffer
kept from an earlier message is mapped already. Triton keeps up to N freed call states (and
the request messages in them) for reuse in the same way; here what is worth keeping is the
message buffers.

A kept buffer is handed out again only once nothing refers to it: every view of it (a
request's tensors, an answer that echoes an input, a cached response) holds a reference to
it, exactly what would otherwise keep it from being freed. At most ``count`` buffers and
``max_bytes`` in all are kept, and a buffer idle for ``idle_seconds`` is let go (by a timer
on the event loop, so that an idle server gives the memory back).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Final

import numpy as np

#: messages at least this large are gathered in numpy's memory, which numpy asks the system
#: to back with transparent huge pages (glibc serves blocks over 32 MiB with fresh mmaps)
LARGE_MESSAGE: Final = 1 << 22
#: Triton's default of --grpc-infer-allocation-pool-size
DEFAULT_COUNT: Final = 8
#: bytes of kept buffers at most, whatever the count
DEFAULT_MAX_BYTES: Final = 1 << 30
#: a kept buffer unused this long is let go (when the pool is next used)
DEFAULT_IDLE_SECONDS: Final = 60.0
#: buffers are sized in whole MiB, so that messages of one tensor shape share them
_GRAIN: Final = 1 << 20


def _references_when_free() -> int:
    """What ``sys.getrefcount`` says of a kept buffer nobody else refers to, read where
    :meth:`BufferPool._free_index` reads it (a list entry, enumerate's pair, a loop
    variable, the argument)."""
    kept = [np.empty(1, np.uint8)]
    for _index, buffer in enumerate(kept):
        return sys.getrefcount(buffer)
    raise AssertionError("unreachable")


_FREE_REFERENCES: Final = _references_when_free()


class BufferPool:
    """Buffers for large messages, reused once nothing refers to them. Event-loop only."""

    def __init__(
        self,
        count: int = DEFAULT_COUNT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
    ) -> None:
        if count < 0 or max_bytes < 0:
            raise ValueError("a buffer pool's count and bytes must not be negative")
        self.count = count
        self.max_bytes = max_bytes
        self.idle_seconds = idle_seconds
        self._buffers: list[np.ndarray] = []
        self._last_used: list[float] = []
        self.kept_bytes = 0
        #: how many messages a kept buffer took (for tests and the curious)
        self.reused = 0
        #: lets idle buffers go while no message comes (armed while any is kept)
        self._trim_timer: asyncio.TimerHandle | None = None

    def take(self, size: int) -> np.ndarray:
        """A writable flat uint8 array of ``size`` bytes: a kept buffer's first bytes when
        one is free and large enough, else fresh memory (kept when there is room)."""
        now = time.monotonic()
        self._let_idle_go(now)
        index = self._free_index(size)
        if index is not None:
            self._last_used[index] = now
            self.reused += 1
            return self._buffers[index][:size]
        capacity = -(-size // _GRAIN) * _GRAIN
        fresh = np.empty(capacity, np.uint8)
        if self._make_room(capacity):
            self._buffers.append(fresh)
            self._last_used.append(now)
            self.kept_bytes += capacity
            self._arm_trim(now)
        return fresh[:size]

    def close(self) -> None:
        """Let every kept buffer go (those in use are freed by their last user)."""
        if self._trim_timer is not None:
            self._trim_timer.cancel()
            self._trim_timer = None
        while self._buffers:
            self._drop(len(self._buffers) - 1)

    def _free_index(self, size: int) -> int | None:
        """The smallest free kept buffer of at least ``size`` bytes."""
        best: int | None = None
        for index, buffer in enumerate(self._buffers):
            if (
                buffer.nbytes >= size
                and sys.getrefcount(buffer) <= _FREE_REFERENCES
                and (best is None or buffer.nbytes < self._buffers[best].nbytes)
            ):
                best = index
        return best

    def _make_room(self, capacity: int) -> bool:
        """Whether a buffer of ``capacity`` bytes may be kept, letting free ones go for it."""
        if capacity > self.max_bytes or self.count == 0:
            return False
        while len(self._buffers) >= self.count or self.kept_bytes + capacity > self.max_bytes:
            index = self._free_index(0)
            if index is None:
                return False  # every kept buffer is in use: this one is not kept
            self._drop(index)
        return True

    def _arm_trim(self, now: float) -> None:
        """Trim when the least recently used buffer turns idle (no timer outside a loop:
        then the next ``take`` trims)."""
        if self._trim_timer is not None or not self._last_used:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        delay = max(min(self._last_used) + self.idle_seconds - now, 0.0) + 0.001
        self._trim_timer = loop.call_later(delay, self._trim)

    def _trim(self) -> None:
        self._trim_timer = None
        now = time.monotonic()
        self._let_idle_go(now)
        self._arm_trim(now)

    def _let_idle_go(self, now: float) -> None:
        for index in range(len(self._buffers) - 1, -1, -1):
            if now - self._last_used[index] > self.idle_seconds:
                self._drop(index)  # one still in use is freed by its last user

    def _drop(self, index: int) -> None:
        self.kept_bytes -= self._buffers[index].nbytes
        del self._buffers[index]
        del self._last_used[index]

    def __len__(self) -> int:
        return len(self._buffers)


def join_into(parts: list[bytes], size: int, pool: BufferPool | None) -> memoryview:
    """``parts`` (``size`` bytes in all) copied into one buffer, as a read-only view."""
    target = pool.take(size) if pool is not None else np.empty(size, np.uint8)
    view = target.data  # a memoryview: its slice assignment costs half of numpy's per part
    position = 0
    for part in parts:
        end = position + len(part)
        view[position:end] = part
        position = end
    return view.toreadonly()
