"""A Redis response cache for triton-core: ``--cache-config redis,host=<host>,port=<port>``."""

from __future__ import annotations

from triton_core_redis_cache.cache import RedisCache
from triton_core_redis_cache.settings import RedisSettings, parse_settings

__all__ = ["RedisCache", "RedisSettings", "parse_settings"]
