"""TLS to Redis with Triton's options: tls_enabled, cert, key, cacert, sni."""

from __future__ import annotations


def test_responses_are_cached_over_tls(tls_redis_server, cached_server, infer, cache_counts):
    redis_server, tls = tls_redis_server
    first = cached_server(redis_server, **tls)
    second = cached_server(redis_server, **tls)
    infer(first, [1, 2])
    infer(second, [1, 2])
    assert cache_counts(second) == {"hit": 1, "miss": 0, "executions": 0}


def test_the_server_name_is_checked(tls_redis_server, cached_server, infer, cache_counts):
    """The certificate names localhost, the address is 127.0.0.1: without sni it is refused."""
    redis_server, tls = tls_redis_server
    tls.pop("sni")
    server = cached_server(redis_server, **tls)
    infer(server, [1, 2])
    infer(server, [1, 2])
    assert cache_counts(server) == {"hit": 0, "miss": 2, "executions": 2}
    assert "certificate verify failed" in server.log()
