"""Property-based fuzzing of the served HTTP/1.1 protocol with raw requests.

Whatever request line, headers and body a client sends, the server answers it without an
internal error (never 500) or ends the connection, and never leaves it hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.unit.test_http_protocol import Served, json_infer
from triton_core.frontends.http.protocol import HttpLimits

LIMITS = HttpLimits(
    header_timeout=0.5,
    body_timeout=0.5,
    max_header_size=8192,
    max_header_count=30,
    max_connections=64,
    max_body_size=1 << 18,
)
#: the longest an answer (or the end of the connection) may take: past every deadline
ANSWER_WITHIN = 5.0


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """One server on a loop of its own thread, for every example."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = Served(limits=LIMITS)
    asyncio.run_coroutine_threadsafe(server.__aenter__(), loop).result(10)
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.__aexit__(), loop).result(20)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


tokens = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_",
    min_size=1,
    max_size=12,
)
methods = st.one_of(st.sampled_from(["GET", "POST", "HEAD", "PUT", "OPTIONS", "DELETE"]), tokens)
#: routes the stand-in server serves (it has no repository, statistics or generate)
paths = st.one_of(
    st.sampled_from(
        [
            "/v2/models/simple/infer",
            "/v2/models/simple/versions/1/infer",
            "/v2/models/streamer/infer",
            "/v2/models/simple",
            "/v2/health/ready",
            "/v2/models/simple/ready",
            "/v2/models/simple/config",
            "/v2/models/%2E%2E/infer",
            "*",
        ]
    ),
    st.text(max_size=40).map(lambda text: "/" + text.replace(" ", "%20")),
)
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1x", ""])
header_values = st.one_of(
    st.integers(min_value=-5, max_value=2**70).map(str),
    st.sampled_from(
        ["chunked", "gzip", "deflate", "identity", "100-continue", "close", "keep-alive", "0", ""]
    ),
    st.text(max_size=30),
)
header_names = st.one_of(
    st.sampled_from(
        [
            "Content-Length",
            "Transfer-Encoding",
            "Expect",
            "Inference-Header-Content-Length",
            "Content-Encoding",
            "Accept-Encoding",
            "Connection",
            "Upgrade",
            "Host",
        ]
    ),
    tokens,
)
headers = st.lists(st.tuples(header_names, header_values), max_size=8)
bodies = st.one_of(
    st.binary(max_size=300),
    st.just(json_infer([1.0, 2.0])),
    # over 64 KiB: decoded in a thread
    st.integers(min_value=14_000, max_value=30_000).map(lambda n: json_infer([1.0] * n)),
)


def exchange(served: Served, raw: bytes) -> bytes:
    """Send ``raw``; what the server sends back until it answers once or closes."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=ANSWER_WITHIN) as sock:
        with contextlib.suppress(OSError):  # refused while still sending: read its answer
            sock.sendall(raw)
        received = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return received  # closed
                received += chunk
                if b"\r\n\r\n" in received and not received.startswith(b"HTTP/1.1 100"):
                    return received
                if received.startswith(b"HTTP/1.1 100") and received.count(b"\r\n\r\n") > 1:
                    return received
        except ConnectionResetError:
            return received
        except TimeoutError:
            raise AssertionError(f"neither answered nor closed: {received[:200]!r}") from None


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(method=methods, path=paths, version=versions, header_list=headers, body=bodies)
@example(
    method="POST",
    path="/v2/models/simple/infer",
    version="HTTP/1.1",
    header_list=[("Content-Length", "5"), ("Content-Length", "6")],
    body=b"abcdef",
)
@example(  # regression: a 5000-digit header length with a body over 64 KiB was a 500
    method="POST",
    path="/v2/models/simple/infer",
    version="HTTP/1.1",
    header_list=[("Inference-Header-Content-Length", "9" * 5000)],
    body=json_infer([1.0] * 20000),
)
@example(  # a Content-Length of 5000 digits, all but one zeros
    method="POST",
    path="/v2/models/simple/infer",
    version="HTTP/1.1",
    header_list=[("Content-Length", "0" * 4999 + "1")],
    body=b"{",
)
@example(  # regression: falcon refuses any HTTP version but 1.0 and 1.1 by raising (a 500)
    method="GET", path="/v2/models/simple/infer", version="HTTP/2.0", header_list=[], body=b""
)
@example(
    method="POST",
    path="/v2/models/simple/infer",
    version="HTTP/1.1",
    header_list=[("Inference-Header-Content-Length", "99999999999999999999")],
    body=json_infer([1.0]),
)
def test_any_request_is_answered_without_an_internal_error(
    served: Served,
    method: str,
    path: str,
    version: str,
    header_list: list[tuple[str, str]],
    body: bytes,
) -> None:
    lines = [f"{method} {path} {version}".rstrip()]
    if not any(name.lower() == "content-length" for name, _ in header_list):
        header_list = [*header_list, ("Content-Length", str(len(body)))]
    lines += [f"{name}: {value}" for name, value in header_list]
    raw = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape") + body
    received = exchange(served, raw)
    if received.startswith(b"HTTP/1.1 100"):
        received = received.split(b"\r\n\r\n", 1)[1]
    if received:
        status = int(received.split(b" ", 2)[1])
        assert status != 500, received[:500]
        assert 200 <= status < 600
