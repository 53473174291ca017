"""The redis cache in real ``triton-core serve`` processes, against a real redis-server."""

from __future__ import annotations

import time
import urllib.request

import pytest

from triton_core.testing import ServerProcess


def keys(server, pattern: str = "*") -> list[bytes]:  # type: ignore[no-untyped-def]
    client = server.client()
    try:
        return sorted(client.scan_iter(match=pattern, count=1000))
    finally:
        client.close()


def test_a_response_cached_through_one_server_is_a_hit_on_another(
    redis_server, cached_server, infer, cache_counts
):
    first = cached_server(redis_server)
    second = cached_server(redis_server)

    infer(first, [1, 2, 3])
    assert cache_counts(first) == {"hit": 0, "miss": 1, "executions": 1}
    infer(second, [1, 2, 3])
    assert cache_counts(second) == {"hit": 1, "miss": 0, "executions": 0}
    # another input is another key: a miss on both
    infer(second, [4, 5])
    infer(first, [4, 5])
    assert cache_counts(first) == {"hit": 1, "miss": 1, "executions": 1}
    assert len(keys(redis_server, "triton-core:*")) == 2
    # the server-wide cache families, as the local cache reports them
    with urllib.request.urlopen(second.metrics_url, timeout=10) as reply:
        metrics = reply.read().decode()
    values = dict(
        line.split(" ") for line in metrics.splitlines() if line.startswith("nv_cache_num")
    )
    assert {
        name: float(values[name]) for name in ("nv_cache_num_lookups", "nv_cache_num_hits")
    } == {
        "nv_cache_num_lookups": 2,
        "nv_cache_num_hits": 1,
    }


def test_a_response_cached_through_one_worker_is_a_hit_on_the_other(
    redis_server, cached_server, infer, cache_counts
):
    server = cached_server(redis_server, serve_flags=("--workers", "2"))
    # every infer opens a new connection, which the kernel hands to either worker; with a
    # cache per worker, each worker would execute the request once
    for _ in range(20):
        infer(server, [1, 2, 3])
    assert cache_counts(server) == {"hit": 19, "miss": 1, "executions": 1}


def test_entries_expire_after_ttl_seconds(redis_server, cached_server, infer, cache_counts):
    server = cached_server(redis_server, ttl=1)
    infer(server, [7])
    [key] = keys(redis_server)
    client = redis_server.client()
    assert 0 < client.pttl(key) <= 1000
    deadline = time.monotonic() + 10
    while client.exists(key) and time.monotonic() < deadline:
        time.sleep(0.1)
    client.close()
    assert not keys(redis_server), "the entry outlived its ttl"
    infer(server, [7])
    assert cache_counts(server) == {"hit": 0, "miss": 2, "executions": 2}


def test_key_prefixes_keep_deployments_apart(redis_server, cached_server, infer, cache_counts):
    blue = cached_server(redis_server, key_prefix="blue:")
    green = cached_server(redis_server, key_prefix="green:")
    infer(blue, [1])
    infer(green, [1])
    assert cache_counts(green) == {"hit": 0, "miss": 1, "executions": 1}
    assert [key[:5] for key in keys(redis_server)] == [b"blue:", b"green"]
    infer(blue, [1])
    assert cache_counts(blue)["hit"] == 1


def test_credentials_are_used_and_wrong_ones_only_cost_misses(
    redis_server, cached_server, infer, cache_counts
):
    admin = redis_server.client()
    admin.acl_setuser(
        "cacher", enabled=True, passwords=["+s3cret"], keys=["tc:*"],
        commands=["+getrange", "+set", "+ping", "+hello", "+auth"],
    )  # fmt: skip
    admin.acl_setuser("default", enabled=False)
    admin.close()

    allowed = cached_server(redis_server, user="cacher", password="s3cret", key_prefix="tc:")
    infer(allowed, [3])
    infer(allowed, [3])
    assert cache_counts(allowed) == {"hit": 1, "miss": 1, "executions": 1}

    refused = cached_server(redis_server, user="cacher", password="wrong", key_prefix="tc:")
    infer(refused, [3])
    assert cache_counts(refused) == {"hit": 0, "miss": 1, "executions": 1}
    assert "WRONGPASS" in refused.log() or "invalid username-password" in refused.log()


def test_redis_killed_mid_run_gives_misses_and_a_warning(
    redis_server, cached_server, infer, cache_counts
):
    server = cached_server(redis_server)
    infer(server, [1])
    infer(server, [1])
    redis_server.stop()
    for _ in range(5):
        infer(server, [1])
    assert cache_counts(server) == {"hit": 1, "miss": 6, "executions": 6}
    log = server.log()
    assert f"Redis at 127.0.0.1:{redis_server.port} failed" in log
    # one warning per method (lookup, insert); the repeats are only counted
    assert log.count("(logged once; repeats are counted)") == 2


def test_a_paused_redis_costs_bounded_latency(redis_server, cached_server, infer, cache_counts):
    server = cached_server(redis_server, socket_timeout=100, wait_timeout=100, retry_interval=0)
    infer(server, [2])
    redis_server.pause()
    try:
        for _ in range(3):
            started = time.monotonic()
            infer(server, [2])
            # the deadline is connect + socket + wait timeouts (1.2 s); generous for CI
            assert time.monotonic() - started < 10
    finally:
        redis_server.resume()
    assert cache_counts(server) == {"hit": 0, "miss": 4, "executions": 4}
    assert f"Redis at 127.0.0.1:{redis_server.port} failed" in server.log()
    infer(server, [2])  # answered again once Redis is back
    assert cache_counts(server)["hit"] == 1


def test_a_corrupt_entry_is_a_miss_and_is_replaced(
    redis_server, cached_server, infer, cache_counts
):
    server = cached_server(redis_server)
    infer(server, [5, 6])
    [key] = keys(redis_server)
    client = redis_server.client()
    good = client.get(key)
    for garbage in (b"not a response", good[:-1], good[:4] + b"\x02" + good[5:]):
        client.set(key, garbage)
        infer(server, [5, 6])
        assert client.get(key) == good, "the miss must store a good entry again"
    client.close()
    assert cache_counts(server) == {"hit": 0, "miss": 4, "executions": 4}
    assert "is not a cached response" in server.log()


def test_an_oversized_response_is_not_cached(redis_server, cached_server, infer, cache_counts):
    server = cached_server(redis_server, max_entry_bytes=1024)
    infer(server, [1.0] * 512)  # 2 KiB of output
    assert keys(redis_server) == []
    infer(server, [1.0] * 8)
    assert len(keys(redis_server)) == 1
    assert cache_counts(server)["miss"] == 2


def test_db_selects_the_redis_database(redis_server, cached_server, infer, cache_counts):
    server = cached_server(redis_server, db=3)
    infer(server, [9])
    assert keys(redis_server) == []
    client = redis_server.client(db=3)
    assert len(list(client.scan_iter())) == 1
    client.close()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["redis,host=127.0.0.1"], "Must at a minimum specify 'host' and 'port'"),
        (["redis,host=127.0.0.1", "redis,port=1", "redis,socket_timeout=0"],
         "redis,socket_timeout must be in [1, 60000]"),
    ],
)  # fmt: skip
def test_a_wrong_setting_stops_the_server_naming_it(cached_repository, tmp_path, settings, message):
    flags = [flag for setting in settings for flag in ("--cache-config", setting)]
    process = ServerProcess(
        [cached_repository], *flags, plugins=["triton_core_redis_cache.plugin"],
        workdir=tmp_path / "refused",
    )  # fmt: skip
    assert process.process.wait(60) != 0
    process.stop()
    assert message in process.log()
