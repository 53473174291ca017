"""``--cache-config redis,<key>=<value>`` settings: Triton's Redis cache options, checked.

Triton's options keep their names and units (milliseconds). Where Triton waits forever by
default (``connect_timeout``, ``socket_timeout`` of 0) this cache refuses 0 and waits a short,
bounded time instead: a slow Redis must cost a request a miss, never a hang.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Triton's environment variables for the credentials (the settings win over them)
USERNAME_ENV = "TRITONCACHE_REDIS_USERNAME"
PASSWORD_ENV = "TRITONCACHE_REDIS_PASSWORD"

#: Redis refuses strings over 512 MiB
_MAX_ENTRY_LIMIT = 512 * 1024 * 1024

_TLS_FILES = ("cert", "key", "cacert", "cacert_dir", "sni")
KNOWN = frozenset(
    {
        "host",
        "port",
        "user",
        "password",
        "db",
        "connect_timeout",
        "socket_timeout",
        "pool_size",
        "wait_timeout",
        "tls_enabled",
        *_TLS_FILES,
        "key_prefix",
        "ttl",
        "max_entry_bytes",
        "retry_interval",
    }
)


@dataclass(frozen=True, slots=True)
class RedisSettings:
    host: str
    port: int
    user: str | None = None
    password: str | None = None
    db: int = 0
    #: milliseconds
    connect_timeout: int = 1000
    socket_timeout: int = 200
    pool_size: int = 8
    wait_timeout: int = 200
    tls_enabled: bool = False
    cert: str | None = None
    key: str | None = None
    cacert: str | None = None
    cacert_dir: str | None = None
    sni: str | None = None
    #: beyond Triton's options: every key starts with it (several deployments, one Redis)
    key_prefix: str = "triton-core:"
    #: seconds an entry lives; 0: until Redis evicts it (Triton's behaviour)
    ttl: int = 0
    #: larger responses are not cached, larger values read back are misses
    max_entry_bytes: int = 4 * 1024 * 1024
    #: milliseconds: after a connection failure, requests miss at once for this long
    retry_interval: int = 1000


def _integer(settings: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    text = settings.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"--cache-config redis,{name} must be an integer, got '{text}'") from None
    if not low <= value <= high:
        raise ValueError(f"--cache-config redis,{name} must be in [{low}, {high}], got {value}")
    return value


def _boolean(settings: dict[str, str], name: str) -> bool:
    text = settings.get(name, "false")
    if text not in ("true", "false"):
        raise ValueError(f"--cache-config redis,{name} must be 'true' or 'false', got '{text}'")
    return text == "true"


def _address(settings: dict[str, str]) -> tuple[str, int]:
    if "host" not in settings or "port" not in settings:
        # Triton's words
        raise ValueError(
            "Failed to initialize RedisCache, didn't specify address. Must at a minimum specify "
            "'host' and 'port' in the configuration - e.g. tritonserver --cache-config "
            "redis,host=redis --cache-config redis,port=6379 --model-repository=/models ..."
        )
    if not settings["host"]:
        raise ValueError("--cache-config redis,host must not be empty")
    return settings["host"], _integer(settings, "port", 0, 1, 65535)


def _tls_files(settings: dict[str, str], enabled: bool) -> dict[str, str | None]:
    given = {name: settings.get(name) or None for name in _TLS_FILES}
    if not enabled:
        named = sorted(name for name, value in given.items() if value)
        if named:
            raise ValueError(f"--cache-config redis,{named[0]} needs redis,tls_enabled=true")
    for name in ("cert", "key", "cacert"):
        path = given[name]
        if path and not os.path.isfile(path):
            raise ValueError(f"--cache-config redis,{name}: no such file '{path}'")
    if given["cacert_dir"] and not os.path.isdir(given["cacert_dir"] or ""):
        raise ValueError(f"--cache-config redis,cacert_dir: no such folder '{given['cacert_dir']}'")
    if bool(given["cert"]) != bool(given["key"]):
        raise ValueError("--cache-config redis,cert and redis,key must be given together")
    return given


def parse_settings(settings: dict[str, str]) -> RedisSettings:
    """Checked settings; ``ValueError`` names the first setting that is wrong."""
    unknown = sorted(set(settings) - KNOWN)
    if unknown:
        raise ValueError(f"--cache-config redis: unknown setting(s) {unknown}")
    host, port = _address(settings)
    tls_enabled = _boolean(settings, "tls_enabled")
    return RedisSettings(
        host=host,
        port=port,
        user=settings.get("user") or os.environ.get(USERNAME_ENV) or None,
        password=settings.get("password") or os.environ.get(PASSWORD_ENV) or None,
        db=_integer(settings, "db", 0, 0, 1 << 31),
        connect_timeout=_integer(settings, "connect_timeout", 1000, 1, 60_000),
        socket_timeout=_integer(settings, "socket_timeout", 200, 1, 60_000),
        pool_size=_integer(settings, "pool_size", 8, 1, 1024),
        wait_timeout=_integer(settings, "wait_timeout", 200, 1, 60_000),
        tls_enabled=tls_enabled,
        **_tls_files(settings, tls_enabled),
        key_prefix=settings.get("key_prefix", "triton-core:"),
        ttl=_integer(settings, "ttl", 0, 0, 1 << 31),
        max_entry_bytes=_integer(settings, "max_entry_bytes", 4 << 20, 1024, _MAX_ENTRY_LIMIT),
        retry_interval=_integer(settings, "retry_interval", 1000, 0, 600_000),
    )
