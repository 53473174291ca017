"""The local cache (built-in plugin): an in-process LRU bounded in bytes.

``--cache-config local,size=<bytes>`` turns it on, as Triton's local cache.
"""

from __future__ import annotations

from collections import OrderedDict
from time import monotonic_ns
from typing import TYPE_CHECKING

from triton_core.cache.base import CacheStatistics, ResponseCache, response_size
from triton_core.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from triton_core.plugins.registry import CacheRegistry
    from triton_core.types import InferenceResponse


class LocalCache(ResponseCache):
    """Least-recently-used entries are evicted first; an entry larger than the cache is skipped."""

    def __init__(self, settings: dict[str, str]) -> None:
        unknown = set(settings) - {"size"}
        if unknown:
            raise ValueError(f"--cache-config local: unknown setting(s) {sorted(unknown)}")
        try:
            capacity = int(settings.get("size", "0"))
        except ValueError:
            raise ValueError(
                f"--cache-config local,size must be a number of bytes, got '{settings['size']}'"
            ) from None
        if capacity <= 0:
            raise ValueError("--cache-config local needs size=<bytes> greater than 0")
        self._entries: OrderedDict[bytes, tuple[InferenceResponse, int]] = OrderedDict()
        self._stats = CacheStatistics(capacity_bytes=capacity)

    async def lookup(self, key: bytes) -> InferenceResponse | None:
        started = monotonic_ns()
        stats = self._stats
        stats.lookups += 1
        entry = self._entries.get(key)
        if entry is None:
            stats.misses += 1
            stats.lookup_ns += monotonic_ns() - started
            return None
        self._entries.move_to_end(key)
        stats.hits += 1
        stats.lookup_ns += monotonic_ns() - started
        return entry[0]

    async def insert(self, key: bytes, response: InferenceResponse) -> None:
        started = monotonic_ns()
        stats = self._stats
        size = response_size(response)
        if size > stats.capacity_bytes or key in self._entries:
            stats.insert_ns += monotonic_ns() - started
            return
        while stats.used_bytes + size > stats.capacity_bytes and self._entries:
            _, (_, evicted) = self._entries.popitem(last=False)
            stats.used_bytes -= evicted
            stats.evictions += 1
        self._entries[key] = (response, size)
        stats.used_bytes += size
        stats.insert_ns += monotonic_ns() - started

    def statistics(self) -> CacheStatistics:
        self._stats.entries = len(self._entries)
        return self._stats

    async def close(self) -> None:
        self._entries.clear()
        self._stats.used_bytes = 0


@hookimpl
def triton_register_caches(registry: CacheRegistry) -> None:
    registry.add("local", LocalCache)
