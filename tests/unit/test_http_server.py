"""The HTTP server's ASGI cycle and its graceful stop, over real sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from tests.support import wait_until_async
from tests.unit.test_http_protocol import listening_socket
from triton_core.frontends.http.asgi_cycle import HIGH_WATER
from triton_core.frontends.http.server import HttpServer

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


@contextlib.asynccontextmanager
async def serving(app: App, stop_timeout: float = 5.0) -> AsyncIterator[tuple[HttpServer, int]]:
    server = HttpServer(app)
    sock = listening_socket()
    await server.start(sock)
    try:
        yield server, sock.getsockname()[1]
    finally:
        await asyncio.wait_for(server.stop(stop_timeout), stop_timeout + 5)


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status_line, *lines = head.decode().split("\r\n")[:-2]
    return int(status_line.split()[1]), dict(line.split(": ", 1) for line in lines)


async def read_chunked(reader: asyncio.StreamReader) -> list[bytes]:
    """The chunks of a chunked body, up to its last (empty) one."""
    chunks = []
    while True:
        size = int(await asyncio.wait_for(reader.readuntil(b"\r\n"), 5), 16)
        data = await asyncio.wait_for(reader.readexactly(size + 2), 5)
        assert data.endswith(b"\r\n")
        if not size:
            return chunks
        chunks.append(data[:-2])


def answering(body: bytes, *chunks: bytes, length: bool = True) -> App:
    """An app that reads the request and answers ``body`` (then ``chunks``, streamed)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        headers = [(b"content-length", b"%d" % len(body))] if length else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for part in (body, *chunks):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


GET = b"GET /thing HTTP/1.1\r\nHost: x\r\n\r\n"
HEAD = b"HEAD /thing HTTP/1.1\r\nHost: x\r\n\r\n"


# ------------------------------------------------------------------------------------------
# the ASGI cycle


async def test_the_scope_carries_what_an_asgi_app_needs() -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await answering(b"ok")(scope, receive, send)

    async with serving(app) as (_, port):
        reader, writer = await connect(port)
        writer.write(b"GET /a%20b/c?x=1&y=%20 HTTP/1.0\r\nHost: x\r\nX-Thing: Yes\r\n\r\n")
        assert (await read_head(reader))[0] == 200
        client_port = writer.get_extra_info("sockname")[1]
        writer.close()
    (scope,) = scopes
    assert scope["type"] == "http" and scope["asgi"]["version"] == "3.0"
    assert scope["http_version"] == "1.0" and scope["method"] == "GET"
    assert scope["scheme"] == "http" and scope["root_path"] == ""
    assert scope["path"] == "/a b/c" and scope["raw_path"] == b"/a%20b/c"
    assert scope["query_string"] == b"x=1&y=%20"
    assert scope["headers"] == [(b"host", b"x"), (b"x-thing", b"Yes")]
    assert scope["client"] == ("127.0.0.1", client_port)
    assert scope["server"] == ("127.0.0.1", port)


async def test_an_answer_without_length_is_chunked_and_the_connection_goes_on() -> None:
    async with serving(answering(b"one", b"two", b"", b"three", length=False)) as (_, port):
        reader, writer = await connect(port)
        for _ in range(2):
            writer.write(GET)
            status, headers = await read_head(reader)
            assert status == 200 and headers["transfer-encoding"] == "chunked"
            assert "content-length" not in headers
            assert await read_chunked(reader) == [b"one", b"two", b"three"]
        writer.close()


async def test_a_head_answer_has_no_body() -> None:
    async with serving(answering(b"hello")) as (_, port):
        reader, writer = await connect(port)
        writer.write(HEAD + GET)
        status, headers = await read_head(reader)
        assert status == 200 and headers["content-length"] == "5"
        status, headers = await read_head(reader)  # the next answer follows at once
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
        writer.close()


@pytest.mark.parametrize("when", ["before", "instead"])
async def test_an_app_that_fails_before_it_answers_gets_a_500_sent(when: str) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        if when == "before":
            raise ValueError("broken")

    async with serving(app) as (_, port):
        reader, writer = await connect(port)
        writer.write(GET)
        status, headers = await read_head(reader)
        assert status == 500 and headers["connection"] == "close"
        body = await asyncio.wait_for(reader.read(), 5)
        assert body == b"Internal Server Error"  # and then the end of the stream
        writer.close()


@pytest.mark.parametrize(
    ("length", "more_body", "sent"),
    [(100, True, b"part"), (2, False, b"")],
    ids=["app-raises", "body-longer-than-length"],
)
async def test_an_app_that_fails_after_it_started_ends_the_connection(
    length: int, more_body: bool, sent: bytes
) -> None:
    """What was sent stays sent, and the connection closes: the client sees the answer cut."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        headers = [(b"content-length", b"%d" % length)]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"part", "more_body": more_body})
        raise ValueError("broken")

    async with serving(app) as (_, port):
        reader, writer = await connect(port)
        writer.write(GET)
        status, headers = await read_head(reader)
        assert status == 200 and headers["content-length"] == str(length)
        assert await asyncio.wait_for(reader.read(), 5) == sent
        writer.close()


async def test_a_body_streams_to_the_app_in_chunks_and_reading_waits_for_it() -> None:
    """Past HIGH_WATER bytes not taken by the app, the connection reads no more; once the
    app reads, the rest arrives, in order."""
    go = asyncio.Event()
    received: list[bytes] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await go.wait()
        while True:
            message = await receive()
            received.append(message["body"])
            if not message["more_body"]:
                break
        body = b"%d" % sum(map(len, received))
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    payload = bytes(range(256)) * (16 * HIGH_WATER // 256)
    async with serving(app) as (server, port):
        reader, writer = await connect(port)
        writer.write(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        for start in range(0, len(payload), 8192):
            piece = payload[start : start + 8192]
            writer.write(b"%x\r\n%b\r\n" % (len(piece), piece))
        writer.write(b"0\r\n\r\n")
        (connection,) = await wait_until_async(lambda: list(server.connections), 5)
        await wait_until_async(lambda: connection.flow.read_paused, 5, what="reading paused")
        go.set()
        status, headers = await read_head(reader)
        assert status == 200
        assert await reader.readexactly(int(headers["content-length"])) == b"%d" % len(payload)
        assert b"".join(received) == payload and len(received) > 1
        writer.close()


async def test_the_app_sees_the_client_leave() -> None:
    read_body = asyncio.Event()
    seen: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        first = await receive()
        assert first == {"type": "http.request", "body": b"", "more_body": False}
        read_body.set()
        seen.set_result((await receive())["type"])  # nothing more: waits for the end

    async with serving(app) as (_, port):
        _, writer = await connect(port)
        writer.write(GET)
        await asyncio.wait_for(read_body.wait(), 5)
        assert not seen.done()
        writer.close()
        assert await asyncio.wait_for(seen, 5) == "http.disconnect"


async def test_expect_100_continue_is_answered_when_the_app_reads() -> None:
    async with serving(answering(b"done")) as (_, port):
        reader, writer = await connect(port)
        writer.write(b"POST /upload HTTP/1.1\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(b"body")
        assert (await read_head(reader))[0] == 200
        assert await reader.readexactly(4) == b"done"
        writer.close()


async def test_an_upgrade_is_answered_as_http_and_the_connection_closes() -> None:
    async with serving(answering(b"plain")) as (_, port):
        reader, writer = await connect(port)
        writer.write(
            b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
            b"\x81\x05hello"  # a WebSocket frame: not HTTP, dropped
        )
        status, headers = await read_head(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), 5) == b"plain"
        writer.close()


async def test_a_connection_answered_before_its_body_arrived_then_goes_idle() -> None:
    """An app may answer without reading the body (a refusal); the rest of the body is
    dropped, and the connection is then held to the keep-alive timeout like any other."""

    async def refusing(scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 403, "headers": headers})
        await send({"type": "http.response.body", "body": b"no"})

    server = HttpServer(refusing, keep_alive_timeout=0.2)
    sock = listening_socket()
    await server.start(sock)
    reader, writer = await connect(sock.getsockname()[1])
    writer.write(b"POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345")
    assert (await read_head(reader))[0] == 403 and await reader.readexactly(2) == b"no"
    writer.write(b"67890" + GET)  # the rest of the body, and a next request
    assert (await read_head(reader))[0] == 403 and await reader.readexactly(2) == b"no"
    writer.write(b"POST /x HTTP/1.1\r\nContent-Length: 4\r\n\r\n")
    assert (await read_head(reader))[0] == 403 and await reader.readexactly(2) == b"no"
    writer.write(b"body")  # and then nothing: closed after the keep-alive timeout
    assert await asyncio.wait_for(reader.read(), 5) == b""
    await server.stop(1)
    writer.close()


# ------------------------------------------------------------------------------------------
# graceful stop


def held_app() -> tuple[App, asyncio.Event, asyncio.Event, list[BaseException]]:
    """An app that answers once ``release`` is set; ``started`` once a request reached it."""
    started, release = asyncio.Event(), asyncio.Event()
    errors: list[BaseException] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        started.set()
        try:
            await release.wait()
        except BaseException as exc:
            errors.append(exc)
            raise
        await answering(b"late")(scope, receive, send)

    return app, started, release, errors


async def test_stop_lets_a_request_in_flight_finish_and_closes_idle_connections() -> None:
    app, started, release, _ = held_app()
    server = HttpServer(app)
    sock = listening_socket()
    await server.start(sock)
    port = sock.getsockname()[1]
    idle_reader, idle_writer = await connect(port)
    release.set()
    idle_writer.write(GET)
    assert (await read_head(idle_reader))[0] == 200
    await idle_reader.readexactly(4)
    started.clear()
    release.clear()
    busy_reader, busy_writer = await connect(port)
    busy_writer.write(GET)
    await asyncio.wait_for(started.wait(), 5)

    stopping = asyncio.create_task(server.stop(10))
    assert await asyncio.wait_for(idle_reader.read(), 5) == b""  # idle: closed at once
    with pytest.raises(OSError):
        await connect(port)  # no new connections
    assert not stopping.done()
    release.set()
    status, headers = await read_head(busy_reader)
    assert status == 200 and headers["connection"] == "close"
    assert await asyncio.wait_for(busy_reader.read(), 5) == b"late"
    await asyncio.wait_for(stopping, 5)
    assert not server.connections
    idle_writer.close()
    busy_writer.close()


async def test_stop_aborts_what_is_still_running_at_its_deadline() -> None:
    app, started, _, errors = held_app()
    server = HttpServer(app)
    sock = listening_socket()
    await server.start(sock)
    reader, writer = await connect(sock.getsockname()[1])
    writer.write(GET)
    await asyncio.wait_for(started.wait(), 5)
    loop = asyncio.get_running_loop()
    begun = loop.time()
    await asyncio.wait_for(server.stop(0.3), 5)
    assert 0.3 <= loop.time() - begun < 3
    assert [type(error) for error in errors] == [asyncio.CancelledError]
    with contextlib.suppress(ConnectionError):
        assert await asyncio.wait_for(reader.read(), 5) == b""  # no answer
    assert not server.connections and not server.listener.tasks
    writer.close()
