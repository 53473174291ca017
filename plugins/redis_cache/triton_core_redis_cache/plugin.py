"""The ``triton_core`` entry point: registers the cache named ``redis``."""

from __future__ import annotations

from triton_core import CacheRegistry, hookimpl
from triton_core_redis_cache.cache import RedisCache


@hookimpl
def triton_register_caches(registry: CacheRegistry) -> None:
    registry.add("redis", RedisCache)
