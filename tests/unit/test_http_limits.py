"""HTTP/1.1 limits and deadlines of the served protocol, on the fast path and the ASGI path."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import pytest

from tests.support import wait_until_async
from tests.unit.test_http_protocol import Served, infer_request, json_infer, read_answer
from triton_core.frontends.http import protocol
from triton_core.frontends.http.protocol import HttpLimits

LIMITS = HttpLimits(
    header_timeout=0.5,
    body_timeout=0.5,
    max_header_size=2048,
    max_header_count=20,
    max_connections=8,
    max_body_size=4096,
)


async def refusal(reader: asyncio.StreamReader) -> tuple[int, str]:
    """The status and error message of an answer that closes the connection."""
    status, headers, body = await read_answer(reader)
    assert headers["connection"] == "close" and headers["content-type"] == "application/json"
    assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
    return status, json.loads(body)["error"]


async def drip(writer: asyncio.StreamWriter, data: bytes, pause: float) -> None:
    """Send ``data`` a byte at a time until it is sent or the server closes."""
    try:
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(pause)
    except ConnectionError:
        pass


async def test_a_connection_that_sends_nothing_gets_408() -> None:
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        loop = asyncio.get_running_loop()
        started = loop.time()
        status, message = await refusal(reader)
        assert status == 408 and "--http-header-timeout-secs" in message
        assert loop.time() - started >= 0.45  # not before its deadline
        writer.close()


async def test_headers_sent_a_byte_at_a_time_get_408_at_the_deadline() -> None:
    """Bytes that keep arriving do not move the deadline of the headers (slowloris)."""
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        head = b"POST /v2/models/simple/infer HTTP/1.1\r\n" + b"X-Slow: " + b"a" * 60
        sending = asyncio.create_task(drip(writer, head, 0.02))
        status, message = await refusal(reader)
        assert status == 408 and "0.5 s" in message
        assert not sending.done()  # refused while the client was still sending
        await sending
        writer.close()


@pytest.mark.parametrize("path", ["/v2/models/simple/infer", "/v2/repository/index"])
async def test_a_stalled_body_gets_408_on_both_paths(path: str) -> None:
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        request = infer_request(json_infer([1, 2, 3]), path)
        writer.write(request[:-10])  # the headers and most of the body
        status, message = await refusal(reader)
        assert status == 408 and "--http-body-timeout-secs" in message
        writer.close()
        assert served.asgi_calls == (0 if path.endswith("infer") else 1)


async def test_a_slow_body_that_keeps_coming_is_not_timed_out() -> None:
    """The body timeout is inactivity: bytes every 0.1 s keep a 0.5 s deadline away."""
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        request = infer_request(json_infer([1.0] * 4, id="slow"))
        head, body = request.split(b"\r\n\r\n", 1)
        writer.write(head + b"\r\n\r\n")
        await drip(writer, body[:12], 0.1)  # 1.2 s in all
        writer.write(body[12:])
        status, _, answer = await read_answer(reader)
        assert status == 200 and json.loads(answer)["id"] == "slow"
        writer.close()


async def test_line_breaks_between_requests_do_not_hold_a_connection_open() -> None:
    """The parser skips line breaks before a request: they start the header deadline."""
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        writer.write(infer_request(json_infer([1])))
        assert (await read_answer(reader))[0] == 200
        sending = asyncio.create_task(drip(writer, b"\r\n" * 100, 0.05))  # 5 s of them
        status, message = await refusal(reader)
        assert status == 408 and "--http-header-timeout-secs" in message
        assert not sending.done()
        await sending
        writer.close()


async def test_an_idle_keep_alive_connection_is_not_held_to_the_header_deadline() -> None:
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        for round_ in range(2):
            writer.write(infer_request(json_infer([1], id=f"r{round_}")))
            status, _, answer = await read_answer(reader)
            assert status == 200 and json.loads(answer)["id"] == f"r{round_}"
            await asyncio.sleep(1.0)  # idle for twice the header timeout: keep-alive applies
        writer.close()


async def test_slow_answers_are_not_timed_out_even_when_pipelined() -> None:
    async with Served(limits=LIMITS) as served:
        echo = served.stub.handler

        async def slow(request):  # type: ignore[no-untyped-def]
            await asyncio.sleep(1.0)
            return await echo(request)

        served.stub.handler = slow
        reader, writer = await served.connect()
        writer.write(
            infer_request(json_infer([1], id="a")) + infer_request(json_infer([2], id="b"))
        )
        ids = [json.loads((await read_answer(reader))[2])["id"] for _ in range(2)]
        assert ids == ["a", "b"]
        writer.close()


async def test_a_long_url_gets_414_and_many_or_large_headers_431() -> None:
    async with Served(limits=LIMITS) as served:
        cases: list[tuple[bytes, int, str]] = [
            (b"GET /v2/" + b"a" * 3000 + b" HTTP/1.1\r\n\r\n", 414, "--http-max-header-size"),
            (
                b"GET /v2 HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(21)) + b"\r\n",
                431,
                "--http-max-header-count",
            ),
            (
                b"GET /v2 HTTP/1.1\r\n"
                + b"".join(b"X-%d: %s\r\n" % (i, b"v" * 200) for i in range(12))
                + b"\r\n",
                431,
                "--http-max-header-size",
            ),
        ]  # fmt: skip
        for request, expected, flag in cases:
            reader, writer = await served.connect()
            writer.write(request)
            status, message = await refusal(reader)
            assert (status, flag in message) == (expected, True), message
            writer.close()
        # at the limits: served
        reader, writer = await served.connect()
        headers = b"".join(b"X-%d: %s\r\n" % (i, b"v" * 50) for i in range(20))
        writer.write(b"GET /v2/health/live HTTP/1.1\r\n" + headers + b"\r\n")
        assert (await read_answer(reader))[0] == 200
        writer.close()


async def test_a_header_that_never_ends_is_refused_while_it_arrives() -> None:
    """httptools buffers an unfinished header: it is counted before it is complete."""
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        writer.write(b"POST /v2/models/simple/infer HTTP/1.1\r\nX-Huge: ")

        answered = asyncio.Event()

        async def send_until_answered() -> int:
            sent = 0
            for _ in range(1000):  # at most 1 MiB
                if answered.is_set():
                    break
                writer.write(b"h" * 1024)
                await writer.drain()
                sent += 1024
                await asyncio.sleep(0.001)
            return sent

        sending = asyncio.create_task(send_until_answered())
        status, message = await refusal(reader)
        answered.set()
        assert status == 431 and "--http-max-header-size" in message
        assert await sending < 1000 * 1024  # answered long before the end
        writer.close()


@pytest.mark.parametrize("path", ["/v2/models/simple/infer", "/v2/repository/index"])
async def test_an_over_limit_content_length_gets_413_without_100_continue(path: str) -> None:
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n"
            "Expect: 100-continue\r\n\r\n".encode()
        )
        status, message = await refusal(reader)  # the first answer, not 100 Continue
        assert status == 413 and "1000000000 bytes" in message and "4096" in message
        writer.close()
        assert served.asgi_calls == 0  # refused before any app saw it


async def test_a_client_that_sends_its_whole_over_limit_body_still_reads_the_413() -> None:
    """The refused connection drops what still arrives for a while instead of closing at
    once: closing with unread bytes would reset the connection and lose the answer."""
    async with Served(limits=LIMITS) as served:
        for _ in range(5):
            reader, writer = await served.connect()
            writer.write(infer_request(b"x" * 200_000))  # all of it, then read
            await writer.drain()
            status, message = await refusal(reader)
            assert status == 413 and "200000 bytes" in message
            writer.close()


async def test_a_chunked_body_over_the_limit_gets_413() -> None:
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        writer.write(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"x" * 1024
        try:
            for _ in range(8):
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
        except ConnectionError:
            pass
        status, message = await refusal(reader)
        assert status == 413 and "--http-max-input-size" in message
        writer.close()


LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_at_the_cap_the_connection_idle_longest_makes_room() -> None:
    """A flood of idle connections must not lock clients out: the one idle the longest (a
    keep-alive connection between requests, or one that has sent nothing yet) is closed."""
    limits = HttpLimits(header_timeout=30, max_connections=5)
    async with Served(limits=limits) as served:
        silent = await served.connect()  # idle since it connected, before the others
        held = []
        for _ in range(limits.max_connections - 1):
            reader, writer = await served.connect()
            writer.write(LIVE)
            assert (await read_answer(reader))[0] == 200
            held.append((reader, writer))
        await wait_until_async(lambda: len(served.connections()) == limits.max_connections)
        for expected_closed in [silent, held[0], held[1]]:
            reader, writer = await served.connect()
            writer.write(LIVE)
            assert (await read_answer(reader))[0] == 200
            assert await asyncio.wait_for(expected_closed[0].read(), 5) == b""
            held.append((reader, writer))
        for reader, writer in held[2:]:  # the rest were kept, and serve
            writer.write(LIVE)
            assert (await read_answer(reader))[0] == 200
            writer.close()


async def test_at_the_cap_with_every_connection_busy_a_new_one_gets_503() -> None:
    limits = HttpLimits(header_timeout=30, max_connections=4)
    async with Served(limits=limits) as served:
        held = []
        for _ in range(limits.max_connections):
            reader, writer = await served.connect()
            writer.write(LIVE[:20])  # a request begun: the connection is busy
            held.append((reader, writer))
        await wait_until_async(
            lambda: (
                len(served.connections()) == limits.max_connections
                and not any(connection.idle for connection in served.connections())
            )
        )
        reader, writer = await served.connect()
        status, message = await refusal(reader)
        assert status == 503 and "none of them idle" in message
        assert "--http-max-connections" in message
        writer.close()
        for reader, writer in held:  # the busy ones were kept: they finish their requests
            writer.write(LIVE[20:])
            assert (await read_answer(reader))[0] == 200
            writer.close()


async def test_the_url_cache_is_keyed_by_path_and_bounded() -> None:
    protocol._TARGETS.clear()
    async with Served(limits=LIMITS) as served:
        reader, writer = await served.connect()
        for i in range(50):
            path = f"/v2/models/simple/infer?q={i}{'x' * 500}"
            writer.write(infer_request(json_infer([1]), path))
            assert (await read_answer(reader))[0] == 200
        long_name = "m" * 300
        writer.write(infer_request(json_infer([1]), f"/v2/models/{long_name}/infer"))
        assert (await read_answer(reader))[0] == 400  # unknown model, answered all the same
        writer.close()
    assert list(protocol._TARGETS) == [b"/v2/models/simple/infer"]


def test_the_limits_a_listener_carries() -> None:
    from triton_core.frontends.http.server import HttpServer

    async def app(scope: Any, receive: Any, send: Any) -> None:
        pass

    limited = HttpServer(app, LIMITS).listener
    assert limited.limits is LIMITS and limited.body_size_digits == 4
    assert HttpServer(app).listener.limits == HttpLimits()


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzipped"])
async def test_a_large_json_body_is_decoded_off_the_loop(
    monkeypatch: pytest.MonkeyPatch, gzipped: bool
) -> None:
    """Small bodies are decoded on the loop; large ones in a decoding thread, with what they
    need of the server (the model's inputs) read before, on the loop."""
    import threading

    from triton_core.frontends.http import decoding

    decoded_in: list[str] = []
    asked_in: list[str] = []
    decode = decoding.decode_request

    def recording_decode(*args: Any) -> Any:
        decoded_in.append(threading.current_thread().name)
        return decode(*args)

    monkeypatch.setattr(decoding, "decode_request", recording_decode)
    async with Served(limits=HttpLimits()) as served:
        metadata = served.stub.model_metadata

        def recording_metadata(name: str, version: int = -1) -> Any:
            asked_in.append(threading.current_thread().name)
            return metadata(name, version)

        served.stub.model_metadata = recording_metadata  # type: ignore[method-assign]
        reader, writer = await served.connect()
        for values in ([1.0] * 4, [1.0] * 40000):
            payload = json_infer(values)
            if gzipped:
                writer.write(infer_request(gzip.compress(payload), CONTENT_ENCODING="gzip"))
            else:
                writer.write(infer_request(payload))
            status, _, body = await read_answer(reader)
            assert status == 200 and len(json.loads(body)["outputs"][0]["data"]) == len(values)
        writer.close()
        assert served.asgi_calls == 0  # compressed or not, infer is the protocol's
    loop_thread = threading.current_thread().name
    assert decoded_in[0] == loop_thread and decoded_in[1].startswith("http-decode")
    assert asked_in == [loop_thread]  # only for the large one, and on the loop


def test_the_flags_reach_the_limits_and_bad_values_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from triton_core.cli import build_parser

    parser = build_parser()
    flags = {
        "--http-header-timeout-secs": "2.5",
        "--http-body-timeout-secs": "4",
        "--http-keepalive-timeout-secs": "9",
        "--http-max-header-size": "1000",
        "--http-max-header-count": "7",
        "--http-max-connections": "3",
        "--http-max-json-elements": "50",
        "--http-max-json-depth": "5",
        "--http-max-buffered-input": "5000",
    }
    args = parser.parse_args(
        ["serve", "--model-repository", "r", *[x for item in flags.items() for x in item]]
    )
    assert (args.http_header_timeout_secs, args.http_body_timeout_secs) == (2.5, 4.0)
    assert args.http_keepalive_timeout_secs == 9.0
    assert (args.http_max_header_size, args.http_max_header_count) == (1000, 7)
    assert (args.http_max_connections, args.http_max_json_elements) == (3, 50)
    assert args.http_max_json_depth == 5
    assert args.http_max_buffered_input == 5000
    from triton_core.flags.converters import HTTP_LIMITS

    limits = HTTP_LIMITS.build(args)["frontends.http_limits"]
    assert (limits.max_buffered_input, limits.max_connections) == (5000, 3)
    for flag, value in [
        ("--http-header-timeout-secs", "0"),
        ("--http-body-timeout-secs", "nan"),
        ("--http-keepalive-timeout-secs", "inf"),
        ("--http-max-connections", "-1"),
        ("--http-max-json-depth", "1000"),
        ("--http-max-header-size", "big"),
        ("--http-max-buffered-input", "0"),
    ]:
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--model-repository", "r", flag, value])
        assert flag in capsys.readouterr().err


def test_the_open_files_limit_is_raised_to_the_hard_limit() -> None:
    import resource
    import subprocess
    import sys

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    script = (
        "import logging, resource\n"
        "from triton_core.frontends.runner import raise_open_files_limit\n"
        "logging.basicConfig(level=logging.INFO)\n"
        "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
        "raise_open_files_limit(100)\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    expected = hard if hard != resource.RLIM_INFINITY else 1 << 20
    assert int(done.stdout) == expected
    assert "raised the open files limit (RLIMIT_NOFILE) from 64" in done.stderr
    if expected >= 100 + 256:
        assert "too low" not in done.stderr
    low = script.replace("(64, hard)", "(64, 64)")  # nothing to raise: too few for 100
    done = subprocess.run(
        [sys.executable, "-c", low], capture_output=True, text=True, timeout=60, check=True
    )
    assert int(done.stdout) == 64
    assert "too low for --http-max-connections 100" in done.stderr


async def test_a_client_that_takes_no_answers_is_read_no_more_then_closed() -> None:
    """Answers waiting for a client that does not read stay bounded: the server stops
    reading its requests, and closes the connection once the answers stall a body timeout."""
    import dataclasses
    import socket

    limits = dataclasses.replace(LIMITS, body_timeout=1.0, max_body_size=1 << 20)
    async with Served(limits=limits) as served:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", served.port))
        sock.setblocking(False)
        _, writer = await asyncio.open_connection(sock=sock)
        request = infer_request(json_infer([1.5] * 2000))  # about 10 KB, and its answer too

        async def flood() -> int:
            sent = 0
            try:
                for _ in range(2000):  # 20 MB of requests, 20 MB of answers
                    if writer.transport.is_closing():
                        break
                    writer.write(request)
                    await writer.drain()
                    sent += 1
            except ConnectionError:
                pass
            return sent

        sending = asyncio.create_task(flood())
        connection = await wait_until_async(lambda: next(iter(served.connections()), None), 10)
        await wait_until_async(
            lambda: connection.flow.write_paused and connection.flow.read_paused, 10
        )
        assert connection.transport.get_write_buffer_size() < 1 << 20
        assert len(connection.pipeline) < 100  # requests read ahead: about a read's worth
        await wait_until_async(lambda: not served.connections(), 10)  # closed, unread
        assert served.server.listener.total_requests < 1000  # the rest were never read
        await asyncio.wait_for(sending, 10)
        writer.close()


async def test_bodies_held_over_all_connections_are_bounded_and_released() -> None:
    limits = HttpLimits(max_body_size=4096, max_buffered_input=6000)
    async with Served(limits=limits) as served:
        listener = served.server.listener

        async def until_held(count: int) -> None:
            await wait_until_async(
                lambda: listener.held_input == count, 5, what=f"{count} bytes held"
            )

        big = json_infer([1, 2, 3]).ljust(4000)  # JSON may end in spaces
        first_reader, first = await served.connect()
        first.write(infer_request(big)[:-500])  # all but the last 500 bytes of the body
        await until_held(3500)
        reader, writer = await served.connect()
        writer.write(infer_request(json_infer([1]).ljust(3000)))
        status, message = await refusal(reader)
        assert status == 503 and "--http-max-buffered-input" in message
        writer.close()
        first.write(infer_request(big)[-500:])
        assert (await read_answer(first_reader))[0] == 200
        await until_held(0)  # released with its answer
        first.write(infer_request(json_infer([1]).ljust(3000)))  # fits now
        assert (await read_answer(first_reader))[0] == 200
        first.close()
        await until_held(0)
