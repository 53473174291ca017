"""The corked transport under uvicorn's protocol: one write per loop turn, nothing lost."""

from __future__ import annotations

import asyncio
import socket

import pytest

from triton_core.frontends.http.protocol import CorkedTransport


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
    import uvicorn

    from triton_core.frontends.http.protocol import CorkedHttpToolsProtocol

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await receive()
        body = scope["path"].encode()
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def scenario() -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, http=CorkedHttpToolsProtocol, lifespan="off",
            log_level="error", loop="none",
        )  # fmt: skip
        server = uvicorn.Server(config)
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for round_ in range(3):
            paths = [f"/r{round_}/{i}" for i in range(pipelined)]
            writer.write(b"".join(f"GET {p} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for p in paths))
            for path in paths:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                assert head.startswith(b"HTTP/1.1 200 OK")
                assert await asyncio.wait_for(reader.readexactly(len(path)), 5) == path.encode()
        writer.close()
        server.should_exit = True
        await task

    asyncio.run(scenario())
