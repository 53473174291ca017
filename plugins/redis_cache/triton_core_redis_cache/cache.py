"""The ``redis`` response cache: responses shared by every server (worker or replica) that
points at the same Redis.

Every Redis call is awaited on the server's event loop (``redis.asyncio``) and bounded: a
connect, a reply and a wait for a pooled connection each have a timeout, and the whole call a
deadline of their sum. A call that fails raises, which the server turns into a miss (lookup)
or nothing kept (insert) with a rate-limited warning; after a connection failure or a timeout
the cache misses at once for ``retry_interval`` ms instead of making every request wait for
a Redis that is down.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from time import monotonic, monotonic_ns
from typing import Any, TypeVar

import redis.asyncio
from redis.asyncio.connection import SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError

from triton_core import CacheStatistics, InferenceResponse, ResponseCache
from triton_core_redis_cache.codec import CorruptEntry, decode, encode
from triton_core_redis_cache.settings import RedisSettings, parse_settings

T = TypeVar("T")

#: seconds close() waits for Redis to say goodbye
_CLOSE_SECONDS = 2.0


class RedisUnavailable(Exception):
    """Redis did not answer in time, refused the connection, or answered with an error."""


class _SniConnection(SSLConnection):
    """A TLS connection that sends ``sni`` as the server name (Triton's ``sni`` option)."""

    def __init__(self, *, sni: str, **kwargs: Any) -> None:
        self._sni = sni
        super().__init__(**kwargs)

    def _connection_arguments(self) -> Mapping[str, Any]:
        return {**super()._connection_arguments(), "server_hostname": self._sni}


def _connection_options(settings: RedisSettings) -> dict[str, Any]:
    options: dict[str, Any] = {
        "host": settings.host,
        "port": settings.port,
        "db": settings.db,
        "username": settings.user,
        "password": settings.password,
        "socket_connect_timeout": settings.connect_timeout / 1000,
        "socket_timeout": settings.socket_timeout / 1000,
        # one try: the deadline, not retries, decides how long a request waits
        "retry": Retry(NoBackoff(), 0),
    }
    if settings.tls_enabled:
        options.update(
            connection_class=_SniConnection if settings.sni else SSLConnection,
            ssl_certfile=settings.cert,
            ssl_keyfile=settings.key,
            ssl_ca_certs=settings.cacert,
            ssl_ca_path=settings.cacert_dir,
        )
        if settings.sni:
            options["sni"] = settings.sni
    return options


class RedisCache(ResponseCache):
    """Keys are the core's request keys (the same in every process) under ``key_prefix``."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.settings = parse_settings(settings)
        config = self.settings
        pool = redis.asyncio.BlockingConnectionPool(
            max_connections=config.pool_size,
            timeout=config.wait_timeout / 1000,
            **_connection_options(config),
        )
        self._client = redis.asyncio.Redis(connection_pool=pool)
        self._address = f"{config.host}:{config.port}"
        self._deadline = (
            config.connect_timeout + config.socket_timeout + config.wait_timeout
        ) / 1000
        self._prefix = config.key_prefix
        self._ttl = config.ttl or None
        self._down_until = 0.0
        self._stats = CacheStatistics()
        #: values over max_entry_bytes that were not sent to Redis
        self.oversized = 0

    def _name(self, key: bytes) -> str:
        return self._prefix + key.hex()

    async def lookup(self, key: bytes) -> InferenceResponse | None:
        started = monotonic_ns()
        stats = self._stats
        stats.lookups += 1
        response = None
        try:
            name = self._name(key)
            # at most max_entry_bytes + 1 bytes come back: more is too large to be ours
            limit = self.settings.max_entry_bytes
            value = await self._call(lambda: self._client.getrange(name, 0, limit))
            if isinstance(value, bytes) and value:  # decode_responses is off: bytes
                response = self._decoded(value, name)
        finally:
            if response is None:
                stats.misses += 1
            else:
                stats.hits += 1
            stats.lookup_ns += monotonic_ns() - started
        return response

    def _decoded(self, value: bytes, name: str) -> InferenceResponse:
        if len(value) > self.settings.max_entry_bytes:
            raise CorruptEntry(
                f"Redis entry '{name}' is larger than max_entry_bytes "
                f"({self.settings.max_entry_bytes}); it is a miss"
            )
        try:
            return decode(value)
        except CorruptEntry as exc:
            raise CorruptEntry(f"Redis entry '{name}' is not a cached response: {exc}") from None

    async def insert(self, key: bytes, response: InferenceResponse) -> None:
        started = monotonic_ns()
        try:
            if response.error is not None or self._surely_too_large(response):
                return
            value = encode(response)
            if len(value) > self.settings.max_entry_bytes:
                self.oversized += 1
                return
            name = self._name(key)
            await self._call(lambda: self._client.set(name, value, ex=self._ttl))
        finally:
            self._stats.insert_ns += monotonic_ns() - started

    def _surely_too_large(self, response: InferenceResponse) -> bool:
        """Skips encoding a response whose fixed-size tensors alone exceed the bound."""
        size = sum(tensor.data.nbytes for tensor in response.outputs if tensor.datatype != "BYTES")
        if size > self.settings.max_entry_bytes:
            self.oversized += 1
            return True
        return False

    async def _call(self, command: Callable[[], Awaitable[T]]) -> T:
        """``command()`` within the deadline; failures raise :class:`RedisUnavailable`."""
        if monotonic() < self._down_until:
            raise RedisUnavailable(
                f"Redis at {self._address} failed within the last "
                f"{self.settings.retry_interval} ms; not asked again yet"
            )
        try:
            async with asyncio.timeout(self._deadline):
                return await command()
        except ResponseError as exc:  # the server answered: nothing wrong with the connection
            raise RedisUnavailable(f"Redis at {self._address} answered: {exc}") from exc
        except (RedisError, OSError, TimeoutError) as exc:
            self._down_until = monotonic() + self.settings.retry_interval / 1000
            reason = str(exc) or type(exc).__name__
            raise RedisUnavailable(f"Redis at {self._address} failed: {reason}") from exc

    def statistics(self) -> CacheStatistics:
        """Lookups, hits, misses and durations of this process; entries and bytes live in
        Redis (its ``INFO``), so they stay 0 here."""
        return self._stats

    async def close(self) -> None:
        try:
            async with asyncio.timeout(_CLOSE_SECONDS):
                await self._client.aclose(close_connection_pool=True)
        except (RedisError, OSError, TimeoutError):
            pass  # stopping: a Redis that does not answer has nothing of ours to lose
