"""The HTTP/1.1 protocol: corked writes (one per loop turn, nothing lost), the infer cycle
answered from the parser's callbacks, keep-alive, pipelining and stop."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import numpy as np
import pytest

from triton_core.frontends.http.wire import CorkedTransport


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_writes_of_one_turn_leave_in_one_write() -> None:
    fake = FakeTransport()
    corked = CorkedTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
    corked.write(b"")
    corked.write(b"body")
    assert fake.writes == [] and corked.get_write_buffer_size() == 23
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert fake.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    corked.write(b"next")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert fake.writes[-1] == b"next"


async def test_close_sends_what_is_pending_first_and_abort_drops_it() -> None:
    fake = FakeTransport()
    corked = CorkedTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"last words")
    corked.close()
    assert fake.writes == [b"last words"] and fake.closed
    await asyncio.sleep(0)
    assert fake.writes == [b"last words"]  # the scheduled flush finds nothing more

    other = FakeTransport()
    corked = CorkedTransport(other, asyncio.get_running_loop())  # type: ignore[arg-type]
    corked.write(b"never")
    corked.abort()
    await asyncio.sleep(0)
    assert other.writes == [] and other.aborted


async def test_everything_else_is_the_transport_s() -> None:
    fake = FakeTransport()
    corked = CorkedTransport(fake, asyncio.get_running_loop())  # type: ignore[arg-type]
    assert corked.get_extra_info("peername") == "info:peername"
    assert corked.is_closing() is False


@pytest.mark.parametrize("pipelined", [1, 3])
def test_served_answers_arrive_whole(pipelined: int) -> None:
    """The real server stack: keep-alive and pipelined requests get complete answers."""
    from triton_core.frontends.http.server import HttpServer

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await receive()
        body = scope["path"].encode()
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def scenario() -> None:
        server = HttpServer(app)
        sock = listening_socket()
        await server.start(sock)
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        for round_ in range(3):
            paths = [f"/r{round_}/{i}" for i in range(pipelined)]
            writer.write(b"".join(f"GET {p} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for p in paths))
            for path in paths:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                assert head.startswith(b"HTTP/1.1 200 OK")
                assert await asyncio.wait_for(reader.readexactly(len(path)), 5) == path.encode()
        writer.close()
        await server.stop(10)

    asyncio.run(scenario())


def listening_socket() -> socket.socket:
    """A listening socket on 127.0.0.1, its port chosen by the system."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


# ------------------------------------------------------------------------------------------
# plain infer answered by the protocol itself


class Served:
    """:class:`~triton_core.frontends.http.server.HttpServer` serving the frontend app over a
    StubServer, on a port the system chooses."""

    def __init__(
        self,
        keep_alive: float = 75,
        restrictions: dict | None = None,
        limits: Any = None,
        **app_options: Any,
    ) -> None:
        from tests.unit.test_http_app import StubServer

        self.stub = StubServer()
        self.asgi_calls = 0
        self.keep_alive = keep_alive
        self.restrictions = restrictions
        self.limits = limits  # an HttpLimits, or None for the defaults
        self.app_options = app_options

    async def __aenter__(self) -> Served:
        from triton_core.frontends.http.fast_path import create_asgi_app
        from triton_core.frontends.http.server import HttpServer

        app = create_asgi_app(  # type: ignore[arg-type]
            self.stub, restrictions=self.restrictions, **self.app_options
        )
        inner = app.app

        async def counting(scope, receive, send):  # type: ignore[no-untyped-def]
            self.asgi_calls += 1
            await inner(scope, receive, send)

        app.app = counting  # type: ignore[assignment]
        sock = listening_socket()
        self.port = sock.getsockname()[1]
        self.server = HttpServer(app, self.limits, keep_alive_timeout=self.keep_alive)
        await self.server.start(sock)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.wait_for(self.server.stop(5), 10)

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection("127.0.0.1", self.port)

    def connections(self) -> set[Any]:
        """The protocols of the connections the server holds."""
        return self.server.connections


def infer_request(body: bytes, path: str = "/v2/models/simple/infer", **headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body)}"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status_line, *header_lines = head.decode().split("\r\n")[:-2]
    headers = dict(line.split(": ", 1) for line in header_lines)
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 5)
    return int(status_line.split()[1]), headers, body


def json_infer(values: list[float], **extra: object) -> bytes:
    doc = {"inputs": [{"name": "INPUT0", "shape": [len(values)], "datatype": "FP32",
                       "data": values}], **extra}  # fmt: skip
    return json.dumps(doc).encode()


async def test_infer_is_answered_without_the_asgi_app_and_as_falcon_answers() -> None:
    import falcon.testing

    from tests.unit.test_http_app import StubServer, binary_infer_body
    from triton_core.frontends.http import create_app

    body, headers = binary_infer_body(np.arange(4, dtype=np.float32).reshape(1, 4))
    cases = [
        ("/v2/models/simple/infer", json_infer([1, 2], id="r1"), {}),
        ("/v2/models/simple/infer", body, headers),
        ("/v2/models/nope/infer", json_infer([1]), {}),
        ("/v2/models/streamer/infer", json_infer([1]), {}),
        ("/v2/models/simple/infer", b"{not json", {}),
    ]
    falcon_app = create_app(StubServer())  # type: ignore[arg-type]
    async with Served() as served, falcon.testing.ASGIConductor(falcon_app) as falcon_client:
        reader, writer = await served.connect()
        for path, payload, extra in cases:  # one keep-alive connection
            writer.write(infer_request(payload, path, **extra))
            status, got_headers, got = await read_answer(reader)
            expected = await falcon_client.simulate_request(
                "POST", path, body=payload, headers=extra
            )
            assert (status, got) == (expected.status_code, expected.content), path
            for name in ("content-type", "inference-header-content-length"):
                assert got_headers.get(name) == expected.headers.get(name), (path, name)
        writer.close()
        assert served.asgi_calls == 0


async def test_pipelined_requests_are_answered_in_order() -> None:
    """A slow infer, a falcon route and a fast infer in one write: answers keep that order."""
    from triton_core.types import InferenceResponse

    async with Served() as served:
        echo = served.stub.handler

        async def slow_first(request):  # type: ignore[no-untyped-def]
            if request.id == "slow":
                await asyncio.sleep(0.2)  # slow work: the later request's answer is ready first
            response: InferenceResponse = await echo(request)
            return response

        served.stub.handler = slow_first
        reader, writer = await served.connect()
        writer.write(
            infer_request(json_infer([1], id="slow"))
            + b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n"
            + infer_request(json_infer([2], id="fast"))
        )
        first, second, third = [await read_answer(reader) for _ in range(3)]
        assert json.loads(first[2])["id"] == "slow"
        assert second[0] == 200 and second[2] == b""
        assert json.loads(third[2])["id"] == "fast"
        writer.close()


async def test_a_body_in_pieces_and_expect_100_continue() -> None:
    async with Served() as served:
        reader, writer = await served.connect()
        request = infer_request(json_infer([1, 2, 3], id="pieces"))
        for start in range(0, len(request), 7):
            writer.write(request[start : start + 7])
            await writer.drain()
            await asyncio.sleep(0.001)
        status, _, body = await read_answer(reader)
        assert status == 200 and json.loads(body)["id"] == "pieces"

        request = infer_request(json_infer([4], id="continued"), Expect="100-continue")
        head, payload = request.split(b"\r\n\r\n", 1)
        writer.write(head + b"\r\n\r\n")
        interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        writer.write(payload)
        status, _, body = await read_answer(reader)
        assert status == 200 and json.loads(body)["id"] == "continued"
        writer.close()
        assert served.asgi_calls == 0


async def test_every_infer_is_answered_by_the_protocol_other_routes_by_the_app() -> None:
    """Compressed and chunked bodies and compressed answers take the one infer path like
    any infer; other routes reach the ASGI app."""
    import gzip

    payload = json_infer([1, 2], id="z")
    chunked = (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(payload):x}\r\n".encode() + payload + b"\r\n0\r\n\r\n"
    )  # fmt: skip
    requests = [
        infer_request(gzip.compress(payload), CONTENT_ENCODING="gzip"),
        infer_request(payload, accept_encoding="gzip"),
        chunked,
        b"GET /v2/models/simple/config HTTP/1.1\r\nHost: x\r\nX-Extra: 1\r\n\r\n",
    ]
    async with Served() as served:
        reader, writer = await served.connect()
        answers = []
        for request in requests:
            writer.write(request)
            answers.append(await read_answer(reader))
        writer.close()
        assert served.asgi_calls == 1
    for status, headers, body in answers[:3]:
        if headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        assert status == 200 and json.loads(body)["id"] == "z"
    assert answers[1][1]["content-encoding"] == "gzip"
    assert answers[3][0] == 200 and json.loads(answers[3][2])["name"] == "simple"


async def test_every_answer_has_a_date_and_the_server_s_name() -> None:
    from email.utils import parsedate_to_datetime

    async with Served() as served:
        reader, writer = await served.connect()
        for request in (infer_request(json_infer([1])), b"GET /v2/health/live HTTP/1.1\r\n\r\n"):
            writer.write(request)
            _, headers, _ = await read_answer(reader)
            assert headers["server"] == "triton-core"
            assert parsedate_to_datetime(headers["date"]).tzname() == "UTC"
        writer.close()


async def test_header_names_are_matched_in_any_case() -> None:
    from tests.unit.test_http_app import binary_infer_body

    body, headers = binary_infer_body(np.arange(4, dtype=np.float32).reshape(1, 4))
    length = headers["Inference-Header-Content-Length"]
    async with Served() as served:
        reader, writer = await served.connect()
        writer.write(infer_request(body, INFERENCE_HEADER_CONTENT_LENGTH=length))
        status, answer_headers, _ = await read_answer(reader)
        writer.close()
        assert status == 200 and "inference-header-content-length" in answer_headers
        assert served.asgi_calls == 0


async def test_http_1_0_and_connection_close_end_the_connection_after_the_answer() -> None:
    async with Served() as served:
        for request in (
            infer_request(json_infer([1])).replace(b"HTTP/1.1", b"HTTP/1.0", 1),
            # an HTTP/1.0 connection ends even when the client asks to keep it
            infer_request(json_infer([1]), Connection="keep-alive").replace(
                b"HTTP/1.1", b"HTTP/1.0", 1
            ),
            infer_request(json_infer([1]), Connection="close"),
        ):
            reader, writer = await served.connect()
            writer.write(request)
            status, headers, _ = await read_answer(reader)
            assert status == 200 and headers["connection"] == "close"
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
            writer.close()


async def test_a_client_that_leaves_cancels_its_request() -> None:
    async with Served() as served:
        started, cancelled = asyncio.Event(), asyncio.Event()

        async def never(request):  # type: ignore[no-untyped-def]
            started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                cancelled.set()
                raise

        served.stub.handler = never
        reader, writer = await served.connect()
        writer.write(infer_request(json_infer([1])))
        await asyncio.wait_for(started.wait(), 5)
        writer.close()
        await asyncio.wait_for(cancelled.wait(), 5)

        served.stub.handler = served.stub.__class__().handler  # echo again: still serving
        reader, writer = await served.connect()
        writer.write(infer_request(json_infer([1], id="after")))
        assert json.loads((await read_answer(reader))[2])["id"] == "after"
        writer.close()


async def test_shutdown_answers_the_request_in_flight_then_closes() -> None:
    served = Served()
    await served.__aenter__()
    echo = served.stub.handler
    started = asyncio.Event()

    async def slow(request):  # type: ignore[no-untyped-def]
        started.set()
        await asyncio.sleep(0.3)
        return await echo(request)

    served.stub.handler = slow
    reader, writer = await served.connect()
    writer.write(infer_request(json_infer([1], id="last")))
    await asyncio.wait_for(started.wait(), 5)
    stopping = asyncio.create_task(served.__aexit__())
    status, headers, body = await read_answer(reader)
    assert status == 200 and json.loads(body)["id"] == "last"
    assert headers["connection"] == "close"
    assert await asyncio.wait_for(reader.read(), 5) == b""
    await stopping
    writer.close()


async def test_keep_alive_closes_idle_connections_only() -> None:
    async with Served(keep_alive=0.4) as served:
        idle_reader, idle_writer = await served.connect()
        idle_writer.write(infer_request(json_infer([1])))
        await read_answer(idle_reader)
        busy_reader, busy_writer = await served.connect()
        loop = asyncio.get_running_loop()
        started = loop.time()
        while loop.time() - started < 1.0:  # a request every 0.15 s: never idle for 0.4 s
            busy_writer.write(infer_request(json_infer([1], id="busy")))
            assert json.loads((await read_answer(busy_reader))[2])["id"] == "busy"
            await asyncio.sleep(0.15)
        assert await asyncio.wait_for(idle_reader.read(), 1) == b""  # closed after 0.4 s idle
        busy_writer.write(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await read_answer(busy_reader))[0] == 200
        await asyncio.sleep(0.6)
        assert await asyncio.wait_for(busy_reader.read(), 1) == b""
        idle_writer.close()
        busy_writer.close()
