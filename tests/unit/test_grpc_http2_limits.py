"""The built-in HTTP/2 transport against hostile clients, one class of attack per test.

Each test drives a real server on a loopback port with raw frames (the client of
test_grpc_http2.py) and checks the RFC's answer: RST_STREAM on the stream, or GOAWAY with
its code and then the end of the connection. Limits are set small so that each attack is
short; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable

import numpy as np
import pytest

from tests.support import wait_until_async
from tests.unit.test_grpc_http2 import (
    INFER,
    LIVE,
    RawClient,
    delay_request,
    echo_request,
    message,
    status,
)
from tests.unit.test_grpc_servicer import StandInServer
from triton_core.frontends.grpc import frames as h2
from triton_core.frontends.grpc.hpack_codec import HeaderDecoder, encode_integer, encode_literal
from triton_core.frontends.grpc.limits import GrpcLimits
from triton_core.frontends.grpc.transport import GrpcServer


class Served:
    """A stand-in server behind the built-in transport, with the given limits."""

    def __init__(self, limits: GrpcLimits) -> None:
        from triton_core.frontends.grpc import create_grpc_server

        self.stand_in = StandInServer()
        self.limits = limits
        self.server = create_grpc_server(
            self.stand_in, "127.0.0.1", 0, transport="http2", limits=limits
        )
        assert isinstance(self.server, GrpcServer)

    async def connect(self, settings: dict[int, int] | None = None) -> RawClient:
        return await RawClient.connect(self.server.port, settings)


#: a call's headers but its path, as literals that leave the dynamic table alone
CALL_LITERALS = b"".join(
    encode_literal(name, value)
    for name, value in (
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "x"),
        ("content-type", "application/grpc"),
    )
)
Serve = Callable[..., Awaitable[Served]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start a server with the limits given as keywords; each is stopped after the test."""
    started: list[Served] = []

    async def start(**limits: object) -> Served:
        served = Served(GrpcLimits(**limits))  # type: ignore[arg-type]
        await served.server.start()
        started.append(served)
        return served

    yield start
    for served in started:
        await served.server.stop(None)


@contextlib.asynccontextmanager
async def connected(serve: Serve, **limits: object) -> AsyncIterator[tuple[Served, RawClient]]:
    """A server with ``limits`` and a raw client connected to it."""
    served = await serve(**limits)
    client = await served.connect()
    try:
        yield served, client
    finally:
        await client.close()


async def goaway(client: RawClient, timeout: float = 5.0) -> tuple[int, int, bytes]:
    """Frames until GOAWAY: its last stream id, code and debug data; then the end of it all."""
    while True:
        frame_type, _, _, payload = await client.read_frame(timeout)
        if frame_type == h2.GOAWAY:
            last, code = struct.unpack(">LL", payload[:8])
            break
    assert await asyncio.wait_for(client.reader.read(), timeout) == b""  # then it closes
    return last, code, payload[8:]


async def reset_of(client: RawClient, stream_id: int, timeout: float = 5.0) -> int:
    """The code of the RST_STREAM the server sends on ``stream_id``."""
    while True:
        frame_type, _, sid, payload = await client.read_frame(timeout)
        assert frame_type != h2.GOAWAY, payload
        if frame_type == h2.RST_STREAM and sid == stream_id:
            return struct.unpack(">L", payload)[0]


async def still_serves(served: Served) -> None:
    """A fresh connection is answered: the attack cost the server nothing lasting."""
    fresh = await served.connect()
    try:
        fresh.call(1, LIVE, message(b""))
        assert status(await fresh.answer(1)) == ("0", "")
    finally:
        await fresh.close()


def headers_frame(client: RawClient, stream_id: int, path: str = INFER, end: bool = False) -> bytes:
    flags = h2.END_HEADERS | (h2.END_STREAM if end else 0)
    return h2.frame(h2.HEADERS, flags, stream_id, client.headers_block(path))


# ---------------------------------------------------------------------------------------
# the three correctness bugs


async def test_second_header_block_on_a_half_closed_stream_does_not_rerun_the_call(
    serve: Serve,
) -> None:
    async with connected(serve) as (served, client):
        client.call(1, INFER, message(delay_request(0.5)))  # half-closed (remote) while it runs
        await asyncio.wait_for(served.stand_in.started.wait(), 5)
        trailers = client.encoder.encode([("grpc-status", "0")])
        again = h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 1, trailers)
        client.send(again)
        assert await reset_of(client, 1) == h2.STREAM_CLOSED  # a stream error, at first
        client.send(again * 20)  # now on a closed stream: a connection error, as Go's
        _, code, _ = await goaway(client)
        assert code == h2.PROTOCOL_ERROR
        assert len(served.stand_in.requests) == 1  # the model ran once
    await still_serves(served)


def indexed_path(path: str) -> bytes:
    """``:path`` as a literal that enters the dynamic table (RFC 7541 section 6.2.1)."""
    return b"\x44" + encode_integer(len(path), 7) + path.encode()


def test_header_cache_never_answers_for_a_table_that_changed() -> None:
    """A one-entry table, a block of two entries: the first evicts the old entry, whose
    memory the second reuses, so that the table looks as before to a cache keyed on id()."""
    decoder = HeaderDecoder()
    reference = b"\xbe"  # the first dynamic entry (index 62)
    for round_ in range(50):
        path = f"/svc/Method{round_ % 2}/" + "p" * 3000  # one such entry fills the table
        block = indexed_path("/junk/" + "j" * 3000) + indexed_path(path)
        assert decoder.decode(block)[-1] == (":path", path)
        assert decoder.decode(reference) == ((":path", path),)
        assert decoder.decode(reference) == ((":path", path),)  # from the cache, still right


async def method_confusions(client: RawClient, rounds: int) -> int:
    """Calls through a reference to a one-entry table that each block changes twice (the
    second entry evicts the first, whose memory it may reuse): how many got another method."""
    methods = ("ServerLive", "ServerMetadata")
    wrong = 0
    for round_ in range(rounds):
        path = f"/inference.GRPCInferenceService/{methods[round_ % 2]}"
        resize = encode_integer(100, 5, 0x20) if round_ == 0 else b""  # a 100-byte table
        block = resize + indexed_path("/junk") + indexed_path(path) + CALL_LITERALS
        stream_id = 4 * round_ + 1
        client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, stream_id, block))
        client.send_data(stream_id, message(b""))
        direct = await client.answer(stream_id)
        by_reference = b"\xbe" + CALL_LITERALS  # the first dynamic entry: this round's path
        client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, stream_id + 2, by_reference))
        client.send_data(stream_id + 2, message(b""))
        answer = await client.answer(stream_id + 2)
        assert status(direct) == status(answer) == ("0", "")
        wrong += answer["data"] != direct["data"]
    return wrong


async def test_header_confusion_between_calls_sharing_a_connection(serve: Serve) -> None:
    async with connected(serve) as (_, client):
        assert await method_confusions(client, 40) == 0


async def test_a_header_block_of_many_continuation_frames_is_refused(serve: Serve) -> None:
    async with connected(serve, max_continuation_frames=32) as (served, client):
        block = client.headers_block(LIVE)
        out = h2.frame(h2.HEADERS, 0, 1, block[:1])
        out += b"".join(h2.frame(h2.CONTINUATION, 0, 1, block[i : i + 1]) for i in range(1, 40))
        client.send(out + b"".join(h2.frame(h2.CONTINUATION, 0, 1, b"") for _ in range(15_000)))
        _, code, reason = await goaway(client)
        assert code == h2.ENHANCE_YOUR_CALM
        assert b"more than 32 frames" in reason
    await still_serves(served)


async def test_a_header_block_beyond_the_header_list_size_is_refused(serve: Serve) -> None:
    async with connected(serve) as (_, client):
        client.send(h2.frame(h2.HEADERS, 0, 1, b"\x00" * 10_000))
        client.send(h2.frame(h2.CONTINUATION, 0, 1, b"\x00" * 10_000))
        _, code, reason = await goaway(client)
        assert code == h2.ENHANCE_YOUR_CALM
        assert b"over 16384 bytes" in reason


async def test_hpack_bomb_is_refused_before_it_inflates(serve: Serve) -> None:
    """A 4 KB table entry, then a block of one-byte references to it: 800 KB decoded."""
    async with connected(serve) as (_, client):
        entry = b"\x40" + encode_integer(5, 7) + b"x-pad" + encode_integer(4000, 7)
        entry += b"v" * 4000
        rest = encode_literal(":path", LIVE) + encode_literal("content-type", "a/grpc")
        client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, entry + rest))
        client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, 3, rest + b"\xbe" * 200))
        _, code, reason = await goaway(client)
        assert code == h2.ENHANCE_YOUR_CALM
        assert b"header list over 16384 bytes" in reason


# ---------------------------------------------------------------------------------------
# SETTINGS


async def test_settings_with_too_many_entries_is_refused(serve: Serve) -> None:
    async with connected(serve, max_settings_entries=32) as (_, client):
        entries = struct.pack(">HL", h2.SETTINGS_INITIAL_WINDOW_SIZE, 70_000) * 33
        client.send(h2.frame(h2.SETTINGS, 0, 0, entries))
        _, code, reason = await goaway(client)
        assert code == h2.ENHANCE_YOUR_CALM
        assert b"33 entries" in reason


async def test_a_settings_flood_is_refused(serve: Serve) -> None:
    async with connected(serve, settings_budget=20) as (_, client):
        client.send(h2.frame(h2.SETTINGS, 0, 0, b"") * 200)
        _, code, reason = await goaway(client)
        assert code == h2.ENHANCE_YOUR_CALM
        assert b"SETTINGS frames" in reason


async def test_a_window_setting_repeated_in_one_frame_is_applied_once(serve: Serve) -> None:
    """The delta applies to every open stream once per frame, whatever the entries repeat."""
    async with connected(serve) as (_, client):
        client.call(1, INFER, message(delay_request(0.3)))
        entries = b"".join(
            struct.pack(">HL", h2.SETTINGS_INITIAL_WINDOW_SIZE, size) for size in (10, 2**31 - 1)
        )
        client.send(h2.frame(h2.SETTINGS, 0, 0, entries * 16))
        assert status(await client.answer(1)) == ("0", "")  # 2^31-1 is the last: no overflow


# ---------------------------------------------------------------------------------------
# streams and resets


async def test_streams_beyond_max_concurrent_streams_are_refused(serve: Serve) -> None:
    async with connected(serve, max_concurrent_streams=2) as (_, client):
        _, _, _, payload = await client.read_frame()
        settings = dict(struct.unpack_from(">HL", payload, i) for i in range(0, len(payload), 6))
        assert settings[h2.SETTINGS_MAX_CONCURRENT_STREAMS] == 2
        for stream_id in (1, 3, 5):
            client.call(stream_id, INFER, message(delay_request(0.3)))
        assert await reset_of(client, 5) == h2.REFUSED_STREAM
        assert status(await client.answer(1)) == ("0", "")
        assert status(await client.answer(3)) == ("0", "")
        client.call(7, LIVE, message(b""))  # room again
        assert status(await client.answer(7)) == ("0", "")


async def test_rapid_reset_is_refused(serve: Serve) -> None:
    async with connected(serve, reset_budget=20) as (served, client):
        cancel = struct.pack(">L", h2.CANCEL)
        out = b""
        for stream_id in range(1, 200, 2):
            out += headers_frame(client, stream_id, INFER)
            out += h2.frame(h2.DATA, h2.END_STREAM, stream_id, message(delay_request(5)))
            out += h2.frame(h2.RST_STREAM, 0, stream_id, cancel)
        client.send(out)
        _, code, reason = await goaway(client)
        assert code == h2.ENHANCE_YOUR_CALM
        assert b"reset or refused" in reason
    assert len(served.stand_in.requests) <= 21  # the model started at most once per budget


async def test_streams_refused_over_and_over_spend_the_reset_budget(serve: Serve) -> None:
    async with connected(serve, max_concurrent_streams=1, reset_budget=10) as (_, client):
        client.call(1, INFER, message(delay_request(2)))
        client.send(b"".join(headers_frame(client, i, LIVE, end=True) for i in range(3, 99, 2)))
        _, code, _ = await goaway(client)
        assert code == h2.ENHANCE_YOUR_CALM


async def test_at_the_maximum_the_connection_idle_longest_makes_room(serve: Serve) -> None:
    """A flood of idle connections must not lock clients out: the one with no call open for
    the longest is sent away (GOAWAY NO_ERROR; gRPC clients connect again)."""
    served = await serve(max_connections=2)
    first, second = await served.connect(), await served.connect()
    second.call(1, LIVE, message(b""))  # second was busy after first went idle
    assert status(await second.answer(1)) == ("0", "")
    await wait_until_async(lambda: len(served.server._connections) == 2)
    third = await served.connect()
    _, code, reason = await goaway(first)
    assert (code, reason) == (
        h2.NO_ERROR,
        b"idle connection closed to make room (--grpc-max-connections)",
    )
    for client, stream_id in ((third, 1), (second, 3)):  # both served
        client.call(stream_id, LIVE, message(b""))
        assert status(await client.answer(stream_id)) == ("0", "")
    await first.close()
    await second.close()
    await third.close()


async def test_at_the_maximum_with_a_call_open_on_each_a_new_one_is_sent_away(
    serve: Serve,
) -> None:
    served = await serve(max_connections=2)
    first, second = await served.connect(), await served.connect()
    for client in (first, second):
        client.call(1, INFER, message(delay_request(2)))
    await wait_until_async(
        lambda: sum(conn.open_streams for conn in served.server._connections) == 2
    )
    third = await served.connect()
    _, code, reason = await goaway(third)
    await third.close()
    assert (code, reason) == (
        h2.ENHANCE_YOUR_CALM,
        b"more than 2 connections, none of them idle (--grpc-max-connections)",
    )
    await first.close()
    await wait_until_async(lambda: len(served.server._connections) == 1)
    await second.close()
    await still_serves(served)  # room again


# ---------------------------------------------------------------------------------------
# frames and time


async def test_a_frame_over_the_max_frame_size_is_refused(serve: Serve) -> None:
    async with connected(serve) as (_, client):
        length = (1 << 24) - 1  # what the old limit let a client make the server wait for
        client.send(h2.frame_header(h2.DATA, 0, 1, length) + b"x" * 100)
        _, code, reason = await goaway(client)
        assert code == h2.FRAME_SIZE_ERROR
        assert b"over SETTINGS_MAX_FRAME_SIZE 16384" in reason


async def test_a_partial_frame_is_not_held_forever(serve: Serve) -> None:
    async with connected(serve, frame_timeout=0.3) as (_, client):
        client.send(h2.frame_header(h2.PING, 0, 0, 8) + b"1234")  # 4 of its 8 bytes
        _, code, reason = await goaway(client)
        assert code == h2.PROTOCOL_ERROR
        assert b"incomplete after 0.3 s" in reason


async def test_a_connection_without_a_preface_is_closed(serve: Serve) -> None:
    served = await serve(handshake_timeout=0.3)
    reader, writer = await asyncio.open_connection("127.0.0.1", served.server.port)
    try:
        writer.write(h2.PREFACE[:10])
        data = await asyncio.wait_for(reader.read(), 5)  # SETTINGS, then GOAWAY, then the end
        assert b"no preface and SETTINGS within 0.3 s" in data
    finally:
        writer.close()


async def test_an_idle_connection_is_sent_away(serve: Serve) -> None:
    async with connected(serve, idle_timeout=0.3) as (_, client):
        client.call(1, LIVE, message(b""))
        assert status(await client.answer(1)) == ("0", "")
        last, code, reason = await goaway(client)
        assert (last, code, reason) == (1, h2.NO_ERROR, b"idle")


async def test_keepalive_pings_and_closes_a_silent_client(serve: Serve) -> None:
    async with connected(serve, keepalive_time=0.2, keepalive_timeout=0.3) as (_, client):
        while True:
            frame_type, flags, _, _ = await client.read_frame()
            if frame_type == h2.PING and not flags & h2.ACK:
                break  # not answered: the server gives up after the keepalive timeout
        _, code, reason = await goaway(client)
        assert (code, reason) == (h2.NO_ERROR, b"keepalive watchdog timeout")


async def test_keepalive_keeps_a_client_that_answers(serve: Serve) -> None:
    async with connected(
        serve, keepalive_time=0.2, keepalive_timeout=0.3, max_pings_without_data=0
    ) as (_, client):
        pings = 0
        while pings < 4:  # about a second of pings, each answered
            frame_type, flags, _, payload = await client.read_frame()
            assert frame_type != h2.GOAWAY
            if frame_type == h2.PING and not flags & h2.ACK:
                client.send(h2.frame(h2.PING, h2.ACK, 0, payload))
                pings += 1
        client.call(1, LIVE, message(b""))
        assert status(await client.answer(1)) == ("0", "")


async def test_a_ping_flood_gets_too_many_pings(serve: Serve) -> None:
    async with connected(serve) as (_, client):
        client.send(h2.frame(h2.PING, 0, 0, b"12345678") * 10_000)
        _, code, reason = await goaway(client)
        assert (code, reason) == (h2.ENHANCE_YOUR_CALM, b"too_many_pings")


async def test_pings_allowed_by_the_policy_are_answered(serve: Serve) -> None:
    async with connected(
        serve, min_recv_ping_interval_without_data=0.0, keepalive_permit_without_calls=True
    ) as (_, client):
        client.send(h2.frame(h2.PING, 0, 0, b"12345678") * 5)
        acks = 0
        while acks < 5:
            frame_type, flags, _, _ = await client.read_frame()
            assert frame_type != h2.GOAWAY
            acks += frame_type == h2.PING and bool(flags & h2.ACK)


async def test_max_connection_age_sends_away_then_closes_after_the_grace(serve: Serve) -> None:
    async with connected(serve, max_connection_age=0.3, max_connection_age_grace=0.5) as (
        served,
        client,
    ):
        client.call(1, INFER, message(delay_request(3)))  # longer than age and grace
        while True:
            frame_type, _, _, payload = await client.read_frame()
            if frame_type == h2.GOAWAY:
                break
        assert struct.unpack(">LL", payload[:8]) == (1, h2.NO_ERROR)
        assert payload[8:] == b"max_age"
        assert await asyncio.wait_for(client.reader.read(), 5) == b""  # closed at the grace
        await wait_until_async(lambda: served.stand_in.cancelled == 1)  # the call in flight too


# ---------------------------------------------------------------------------------------
# flow control (RFC 9113 section 6.9)


async def test_connection_window_update_of_zero_is_a_protocol_error(serve: Serve) -> None:
    async with connected(serve) as (_, client):
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">L", 0)))
        _, code, _ = await goaway(client)
        assert code == h2.PROTOCOL_ERROR


async def test_stream_window_update_of_zero_resets_the_stream(serve: Serve) -> None:
    async with connected(serve) as (served, client):
        client.call(1, INFER, message(delay_request(2)))
        await asyncio.wait_for(served.stand_in.started.wait(), 5)
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 1, struct.pack(">L", 0)))
        assert await reset_of(client, 1) == h2.PROTOCOL_ERROR
        await wait_until_async(lambda: served.stand_in.cancelled == 1)  # cancelled with its stream


async def test_stream_window_overflow_resets_the_stream(serve: Serve) -> None:
    async with connected(serve) as (_, client):
        client.call(1, INFER, message(delay_request(2)))
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 1, struct.pack(">L", 2**31 - 1)))
        assert await reset_of(client, 1) == h2.FLOW_CONTROL_ERROR


async def never_reads(requests: object, context: object) -> None:
    await asyncio.sleep(30)


@contextlib.asynccontextmanager
async def holding_server(**limits: object) -> AsyncIterator[RawClient]:
    """A client connected to a server whose client-streaming /t.T/Hold reads nothing."""
    from triton_core.frontends.common import listen_socket
    from triton_core.frontends.grpc.transport import RpcMethod
    from triton_core.protos import grpc_service_pb2 as pb

    methods = {"/t.T/Hold": RpcMethod(never_reads, pb.ModelInferRequest, True, False)}
    sock = listen_socket("127.0.0.1", 0, "gRPC")
    server = GrpcServer(methods, sock, GrpcLimits(**limits))  # type: ignore[arg-type]
    await server.start()
    client = await RawClient.connect(server.port)
    try:
        client.send(headers_frame(client, 1, "/t.T/Hold"))
        yield client
    finally:
        await client.close()
        await server.stop(None)


async def test_a_handler_behind_shuts_its_window_and_data_beyond_it_is_refused() -> None:
    """A client stream whose handler reads nothing: its queue fills, its window stays shut."""
    async with holding_server(stream_window_size=65_535) as client:
        client.send_data(1, message(b"") * 40, end_stream=False)  # past the queue: held
        small = message(b"\x0a\x03abc")  # model_name "abc": 10 bytes on the wire
        client.send_data(1, small * 13_000, end_stream=False)  # 130 kB, twice the window
        assert await reset_of(client, 1) == h2.FLOW_CONTROL_ERROR
        updates = [f for f in client.frames if f[0] == h2.WINDOW_UPDATE and f[2] == 1]
        assert updates == []  # never reopened: the handler consumed nothing


def rss_kib() -> int:
    for line in open("/proc/self/status").read().splitlines():  # noqa: SIM115
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_a_slow_client_stream_holds_what_was_sent_not_what_it_inflates_to() -> None:
    """Ten gzip messages of 8 MiB each wait compressed (80 kB), not inflated (80 MiB)."""
    from triton_core.protos import grpc_service_pb2 as pb

    request = pb.ModelInferRequest(raw_input_contents=[bytes(8 << 20)]).SerializeToString()
    compressed = message(gzip.compress(request), compressed=True)
    async with holding_server(max_message_size=16 << 20) as client:
        before = rss_kib()
        client.send(
            h2.frame(
                h2.HEADERS,
                h2.END_HEADERS,
                3,
                client.headers_block("/t.T/Hold", (("grpc-encoding", "gzip"),)),
            )
        )
        client.send_data(3, compressed * 10, end_stream=False)
        client.send(h2.frame(h2.PING, 0, 0, b"received"))  # answered after the data is read
        while (await client.read_frame())[3] != b"received":
            pass
        assert rss_kib() - before < 20 << 10  # KiB: not the 80 MiB the messages inflate to


async def test_windows_reopen_as_data_is_consumed(serve: Serve) -> None:
    """A request far larger than both windows, sent only as the server opens them."""
    async with connected(serve, stream_window_size=65_535, connection_window_size=65_535) as (
        _,
        client,
    ):
        values = np.arange(200_000, dtype=np.float32)  # 800 kB, twelve windows
        payload = message(echo_request(values))
        client.send(headers_frame(client, 1, INFER))
        sent, stream_window, connection_window = 0, 65_535, 65_535
        while sent < len(payload):
            room = min(stream_window, connection_window, len(payload) - sent, 16_384)
            if room > 0:
                last = sent + room == len(payload)
                flags = h2.END_STREAM if last else 0
                client.send(h2.frame(h2.DATA, flags, 1, payload[sent : sent + room]))
                sent += room
                stream_window -= room
                connection_window -= room
                continue
            frame_type, _, stream_id, body = await client.read_frame()
            if frame_type == h2.WINDOW_UPDATE:
                increment = struct.unpack(">L", body)[0]
                if stream_id == 0:
                    connection_window += increment
                else:
                    stream_window += increment
        answer = await client.answer(1, window_updates=True)
        assert status(answer) == ("0", "")


# ---------------------------------------------------------------------------------------
# messages


async def test_a_message_over_the_max_is_refused_from_its_prefix(serve: Serve) -> None:
    async with connected(serve, max_message_size=1000) as (served, client):
        client.send(headers_frame(client, 1, INFER))
        client.send(h2.frame(h2.DATA, 0, 1, b"\x00" + (2000).to_bytes(4, "big") + b"x" * 10))
        answer = await client.answer(1)
        assert status(answer) == ("8", "Received message larger than max (2000 vs. 1000)")
        assert served.stand_in.requests == []


async def test_messages_still_arriving_are_bounded_over_all_calls(serve: Serve) -> None:
    served = await serve(max_buffered_input=90_000)
    payload = message(echo_request(np.arange(15_000, dtype=np.float32)))  # 60 kB each
    clients = [await served.connect() for _ in range(2)]
    try:
        for client in clients:  # most of a message on each, one after the other
            client.send(headers_frame(client, 1, INFER))
            client.send_data(1, payload[:50_000], end_stream=False)
            await wait_until_async(lambda: served.server.buffered_input == 50_000)
        refused = status(await clients[1].answer(1))
        assert refused == (
            "8",
            "the server holds more than 90000 bytes of request messages still arriving"
            " (--grpc-max-buffered-input)",
        )
        clients[0].send_data(1, payload[50_000:])  # the first call completes
        assert status(await clients[0].answer(1)) == ("0", "")
        assert served.server.buffered_input == 0  # all given back
    finally:
        for client in clients:
            await client.close()


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_compression_bomb_stops_at_the_max(serve: Serve, encoding: str) -> None:
    served = await serve(max_message_size=1 << 20)
    import zlib

    bomb = (
        gzip.compress(b"\x00" * (64 << 20))
        if encoding == "gzip"
        else zlib.compress(b"\x00" * (64 << 20))
    )
    assert len(bomb) < 100_000  # 64 MiB in well under a window
    client = await served.connect()
    try:
        client.call(1, INFER, message(bomb, compressed=True), (("grpc-encoding", encoding),))
        answer = await client.answer(1)
        assert status(answer) == (
            "8",
            f"Received message larger than max (more than {1 << 20} once inflated vs. {1 << 20})",
        )
    finally:
        await client.close()


async def test_a_truncated_compressed_message_is_internal(serve: Serve) -> None:
    async with connected(serve) as (_, client):
        truncated = gzip.compress(echo_request(np.ones(4)))[:-12]
        client.call(1, INFER, message(truncated, compressed=True), (("grpc-encoding", "gzip"),))
        code, details = status(await client.answer(1))
        assert code == "13" and "failed to decompress" in details


# ---------------------------------------------------------------------------------------
# output a client does not read


async def non_reading_client(port: int) -> RawClient:
    """A client with a tiny receive buffer that opens every window wide and reads nothing."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.setblocking(False)
    client = RawClient(*await asyncio.open_connection(sock=sock))
    settings = struct.pack(">HL", h2.SETTINGS_INITIAL_WINDOW_SIZE, 2**31 - 1)
    client.send(h2.PREFACE + h2.frame(h2.SETTINGS, 0, 0, settings))
    client.send(h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">L", 2**31 - 1 - 65_535)))
    return client


LARGE_ECHO = message(echo_request(np.arange(50_000, dtype=np.float32)))  # 200 kB answers


async def test_a_client_that_never_reads_is_dropped(serve: Serve) -> None:
    served = await serve(max_queued_output=1 << 16)
    client = await non_reading_client(served.server.port)
    await wait_until_async(lambda: served.server._connections)  # accepted
    try:
        for stream_id in range(1, 121, 2):  # 12 MB of answers asked for, at most
            client.call(stream_id, INFER, LARGE_ECHO)
            if not served.server._connections:
                break
            await asyncio.sleep(0.02)
        await wait_until_async(lambda: not served.server._connections)  # dropped, not left to queue
    finally:
        client.writer.transport.abort()
    await still_serves(served)


async def test_control_frames_owed_to_a_client_that_never_reads_are_bounded(serve: Serve) -> None:
    """Pings the policy allows, never an ACK read: the server stops reading, then drops it."""
    served = await serve(
        max_queued_output=1 << 16,
        min_recv_ping_interval_without_data=0.0,
        keepalive_permit_without_calls=True,
        max_ping_strikes=0,
    )
    client = await non_reading_client(served.server.port)
    await wait_until_async(lambda: served.server._connections)  # accepted
    try:
        client.send(h2.frame(h2.PING, 0, 0, b"12345678") * 300_000)  # 5 MB of ACKs owed
        await wait_until_async(lambda: not served.server._connections, 20)
    finally:
        client.writer.transport.abort()
    await still_serves(served)


async def test_a_server_stream_waits_while_its_client_does_not_read(serve: Serve) -> None:
    """ModelStreamInfer answers wait on the client reading, not in the transport's buffer."""
    served = await serve()
    client = await non_reading_client(served.server.port)
    try:
        client.send(headers_frame(client, 1, "/inference.GRPCInferenceService/ModelStreamInfer"))
        for _ in range(60):  # 12 MB of answers asked for
            client.send_data(1, LARGE_ECHO, end_stream=False)
        await wait_until_async(lambda: len(served.stand_in.requests) >= 3)
        await asyncio.sleep(0.5)  # a bounded wait: answers would pile up now, if they could
        (conn,) = served.server._connections
        assert conn.transport is not None
        assert conn.transport.get_write_buffer_size() < 4 << 20
    finally:
        client.writer.transport.abort()


# ---------------------------------------------------------------------------------------
# the limits themselves


def test_limits_are_checked() -> None:
    from triton_core.frontends.grpc.limits import checked

    with pytest.raises(ValueError, match="--grpc-http2-max-frame-size"):
        checked(GrpcLimits(max_frame_size=100))
    with pytest.raises(ValueError, match="--grpc-max-concurrent-streams must be at least 1"):
        checked(GrpcLimits(max_concurrent_streams=0))
    assert checked(GrpcLimits()) == GrpcLimits()
    assert dataclasses.replace(GrpcLimits(), reset_budget=5).reset_budget == 5


def test_flags_parse_to_limits_and_grpcio_refuses_what_it_lacks() -> None:
    from triton_core.cli import build_parser
    from triton_core.frontends.grpc.limits import from_arguments, grpcio_options

    args = build_parser().parse_args(
        [
            "serve",
            "--model-repository",
            "/nowhere",
            "--grpc-keepalive-time",
            "1000",
            "--grpc-keepalive-permit-without-calls",
            "--grpc-max-concurrent-streams",
            "7",
        ]
    )
    limits = from_arguments(args)
    assert limits.keepalive_time == 1.0
    assert limits.keepalive_permit_without_calls is True
    assert limits.max_concurrent_streams == 7
    assert limits.max_connection_age is None
    options = dict(grpcio_options(limits))
    assert options["grpc.keepalive_time_ms"] == 1000
    assert options["grpc.max_concurrent_streams"] == 7
    assert options["grpc.max_receive_message_length"] == 1 << 26
    assert "grpc.max_connection_age_ms" not in options
    with pytest.raises(ValueError, match="--grpc-http2-reset-budget applies to"):
        grpcio_options(GrpcLimits(reset_budget=5))
    bad = build_parser().parse_args(
        ["serve", "--model-repository", "/x", "--grpc-max-message-size", "-1"]
    )
    with pytest.raises(ValueError, match="--grpc-max-message-size must not be negative"):
        from_arguments(bad)


def test_every_limit_flag_is_documented() -> None:
    from tests.support import ROOT
    from triton_core.frontends.grpc.limits import FLAGS

    guide = (ROOT / "docs" / "security.md").read_text()
    for flag in FLAGS:
        assert f"| `{flag.name}` |" in guide, flag.name
