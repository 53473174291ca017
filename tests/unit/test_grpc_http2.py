"""The built-in HTTP/2 transport, frame by frame: what a gRPC client library never tries.

A raw client on a loopback socket writes frames and reads them back, so each test can send
what stock clients do not (small windows, split header blocks, resets, bad frames) and check
every frame the server answers with. The servicer behind it is the stand-in of
test_grpc_servicer.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import struct
from collections.abc import AsyncIterator
from typing import Any

import grpc
import hpack
import numpy as np
import pytest

from tests.support import wait_until_async
from tests.unit.test_grpc_servicer import StandInServer
from triton_core.frontends.grpc import create_grpc_server
from triton_core.frontends.grpc import frames as h2
from triton_core.frontends.grpc.fields import parse_timeout, percent_encode
from triton_core.frontends.grpc.hpack_codec import HeaderDecoder, encode_literal
from triton_core.frontends.grpc.limits import GrpcLimits
from triton_core.protos import grpc_service_pb2 as pb

INFER = "/inference.GRPCInferenceService/ModelInfer"
LIVE = "/inference.GRPCInferenceService/ServerLive"


def message(payload: bytes, compressed: bool = False) -> bytes:
    """One gRPC length-prefixed message."""
    return bytes((int(compressed),)) + len(payload).to_bytes(4, "big") + payload


def echo_request(values: np.ndarray, model: str = "echo") -> bytes:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="x", datatype="FP32", shape=list(values.shape))
    request.raw_input_contents.append(values.astype(np.float32).tobytes())
    return request.SerializeToString()


def delay_request(seconds: float) -> bytes:
    request = pb.ModelInferRequest(model_name="slow")
    request.inputs.add(name="delay", datatype="FP64", shape=[1])
    request.raw_input_contents.append(np.array([seconds], dtype=np.float64).tobytes())
    return request.SerializeToString()


class RawClient:
    """An HTTP/2 client that writes frames as told and reads every frame back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.frames: list[tuple[int, int, int, bytes]] = []
        #: frames read while waiting for another stream's, kept for its answer()
        self.unread: dict[int, list[tuple[int, int, int, bytes]]] = {}

    @classmethod
    async def connect(cls, port: int, settings: dict[int, int] | None = None) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        payload = b"".join(struct.pack(">HL", k, v) for k, v in (settings or {}).items())
        client.send(h2.PREFACE + h2.frame(h2.SETTINGS, 0, 0, payload))
        return client

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def headers_block(self, path: str, extra: tuple[tuple[str, str], ...] = ()) -> bytes:
        return self.encoder.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "127.0.0.1"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                *extra,
            ]
        )

    def call(
        self,
        stream_id: int,
        path: str,
        payload: bytes,
        extra: tuple[tuple[str, str], ...] = (),
        end_stream: bool = True,
    ) -> None:
        """HEADERS and one DATA frame carrying ``payload`` (already length-prefixed)."""
        block = self.headers_block(path, extra)
        self.send(h2.frame(h2.HEADERS, h2.END_HEADERS, stream_id, block))
        self.send_data(stream_id, payload, end_stream)

    def send_data(self, stream_id: int, payload: bytes, end_stream: bool = True) -> None:
        """``payload`` in DATA frames of the default maximum frame size."""
        size = h2.DEFAULT_MAX_FRAME
        chunks = [payload[i : i + size] for i in range(0, len(payload), size)] or [b""]
        for chunk in chunks[:-1]:
            self.send(h2.frame(h2.DATA, 0, stream_id, chunk))
        flags = h2.END_STREAM if end_stream else 0
        self.send(h2.frame(h2.DATA, flags, stream_id, chunks[-1]))

    async def read_frame(self, timeout: float = 5.0) -> tuple[int, int, int, bytes]:
        header = await asyncio.wait_for(self.reader.readexactly(9), timeout)
        high, low, frame_type, flags, stream_id = struct.unpack(">BHBBL", header)
        payload = await asyncio.wait_for(self.reader.readexactly((high << 16) | low), timeout)
        item = (frame_type, flags, stream_id & 0x7FFFFFFF, payload)
        self.frames.append(item)
        return item

    async def answer(self, stream_id: int, window_updates: bool = False) -> dict[str, Any]:
        """Frames of one stream until it ends: headers, data, trailers (decoded)."""
        result: dict[str, Any] = {"headers": None, "data": b"", "trailers": None, "reset": None}
        while True:
            waiting = self.unread.get(stream_id)
            frame_type, flags, sid, payload = waiting.pop(0) if waiting else await self.read_frame()
            if frame_type == h2.SETTINGS and not flags & h2.ACK:
                self.send(h2.frame(h2.SETTINGS, h2.ACK, 0))
                continue
            if sid != stream_id:
                if sid:
                    self.unread.setdefault(sid, []).append((frame_type, flags, sid, payload))
                continue
            if frame_type == h2.HEADERS:
                headers = dict(self.decoder.decode(payload))
                key = "headers" if result["headers"] is None else "trailers"
                result[key] = headers
            elif frame_type == h2.DATA:
                result["data"] += payload
                if window_updates and payload:
                    increment = struct.pack(">L", len(payload))
                    self.send(
                        h2.frame(h2.WINDOW_UPDATE, 0, 0, increment)
                        + h2.frame(h2.WINDOW_UPDATE, 0, stream_id, increment)
                    )
            elif frame_type == h2.RST_STREAM:
                result["reset"] = struct.unpack(">L", payload)[0]
                return result
            if flags & h2.END_STREAM:
                if result["trailers"] is None and frame_type == h2.HEADERS:
                    result["trailers"] = result["headers"]  # a trailers-only answer
                return result

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


def status(answer: dict[str, Any]) -> tuple[str, str]:
    trailers = answer["trailers"] or {}
    return trailers.get("grpc-status", ""), trailers.get("grpc-message", "")


def infer_response(answer: dict[str, Any]) -> pb.ModelInferResponse:
    data = answer["data"]
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == len(data) - 5
    return pb.ModelInferResponse.FromString(data[5:])


def assert_echoed(answer: dict[str, Any], values: np.ndarray) -> None:
    """The answer is OK and its one output is ``values`` (FP32)."""
    assert status(answer) == ("0", "")
    raw = infer_response(answer).raw_output_contents[0]
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32), values)


@pytest.fixture
def stand_in() -> StandInServer:
    return StandInServer()


@pytest.fixture
async def port(stand_in: StandInServer) -> AsyncIterator[int]:
    server = create_grpc_server(stand_in, "127.0.0.1", 0, transport="http2")
    number = server.port
    await server.start()
    try:
        yield number
    finally:
        await server.stop(None)


@pytest.fixture
async def client(port: int) -> AsyncIterator[RawClient]:
    raw = await RawClient.connect(port)
    try:
        yield raw
    finally:
        await raw.close()


# ---------------------------------------------------------------------------------------
# connection setup and control frames


async def test_server_settings_and_acks(client: RawClient) -> None:
    frame_type, flags, _, payload = await client.read_frame()
    assert (frame_type, flags) == (h2.SETTINGS, 0)
    settings = dict(struct.unpack_from(">HL", payload, i) for i in range(0, len(payload), 6))
    limits = GrpcLimits()
    assert settings == {
        h2.SETTINGS_ENABLE_PUSH: 0,
        h2.SETTINGS_MAX_CONCURRENT_STREAMS: limits.max_concurrent_streams,
        h2.SETTINGS_INITIAL_WINDOW_SIZE: limits.stream_window_size,
        h2.SETTINGS_MAX_FRAME_SIZE: limits.max_frame_size,
        h2.SETTINGS_MAX_HEADER_LIST_SIZE: limits.max_header_list_size,
    }
    frame_type, _, _, payload = await client.read_frame()
    assert frame_type == h2.WINDOW_UPDATE  # the connection window opened wider
    increment = struct.unpack(">L", payload)[0]
    assert increment == limits.connection_window_size - h2.DEFAULT_WINDOW
    frame_type, flags, _, _ = await client.read_frame()
    assert (frame_type, flags) == (h2.SETTINGS, h2.ACK)  # our SETTINGS acknowledged
    client.send(h2.frame(h2.PING, 0, 0, b"12345678"))
    assert await client.read_frame() == (h2.PING, h2.ACK, 0, b"12345678")


async def test_unary_call_frames(client: RawClient) -> None:
    values = np.arange(4, dtype=np.float32).reshape(1, 4)
    client.call(1, INFER, message(echo_request(values)))
    answer = await client.answer(1)
    assert answer["headers"][":status"] == "200"
    assert answer["headers"]["content-type"] == "application/grpc"
    assert status(answer) == ("0", "")
    response = infer_response(answer)
    np.testing.assert_array_equal(
        np.frombuffer(response.raw_output_contents[0], np.float32).reshape(1, 4), values
    )


async def test_many_streams_interleaved_on_one_connection(client: RawClient) -> None:
    ids = list(range(1, 41, 2))
    for stream_id in ids:
        client.call(stream_id, INFER, message(echo_request(np.full((1, 2), stream_id))))
    for stream_id in ids:
        answer = await client.answer(stream_id)
        raw = infer_response(answer).raw_output_contents[0]
        assert np.frombuffer(raw, np.float32).tolist() == [stream_id, stream_id]


async def test_header_block_split_over_continuation_frames(client: RawClient) -> None:
    block = client.headers_block(LIVE, (("x-padding", "p" * 3000),))
    first, middle, last = block[:10], block[10:2000], block[2000:]
    client.send(
        h2.frame(h2.HEADERS, 0, 1, first)
        + h2.frame(h2.CONTINUATION, 0, 1, middle)
        + h2.frame(h2.CONTINUATION, h2.END_HEADERS, 1, last)
        + h2.frame(h2.DATA, h2.END_STREAM, 1, message(b""))
    )
    answer = await client.answer(1)
    assert status(answer) == ("0", "")
    assert pb.ServerLiveResponse.FromString(answer["data"][5:]).live


async def test_request_in_many_small_data_frames(client: RawClient) -> None:
    values = np.arange(100_000, dtype=np.float32)  # 400 kB in 1 kB frames
    payload = message(echo_request(values))
    client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, client.headers_block(INFER)))
    chunks = [payload[i : i + 1000] for i in range(0, len(payload), 1000)]
    for chunk in chunks[:-1]:
        client.send(h2.frame(h2.DATA, 0, 1, chunk))
    client.send(h2.frame(h2.DATA, h2.END_STREAM, 1, chunks[-1]))
    answer = await client.answer(1, window_updates=True)
    assert status(answer) == ("0", "")
    raw = infer_response(answer).raw_output_contents[0]
    np.testing.assert_array_equal(np.frombuffer(raw, np.float32), values)


async def test_padded_frames(client: RawClient) -> None:
    block = client.headers_block(LIVE)
    client.send(
        h2.frame(h2.HEADERS, h2.END_HEADERS | h2.PADDED, 1, b"\x03" + block + b"\x00" * 3)
        + h2.frame(h2.DATA, h2.END_STREAM | h2.PADDED, 1, b"\x02" + message(b"") + b"\x00\x00")
    )
    assert status(await client.answer(1)) == ("0", "")


# ---------------------------------------------------------------------------------------
# flow control


async def test_answers_respect_small_client_windows() -> None:
    """An answer larger than the client's windows waits for its WINDOW_UPDATEs."""
    server = create_grpc_server(StandInServer(), "127.0.0.1", 0, transport="http2")
    number = server.port
    await server.start()
    client = await RawClient.connect(number, {h2.SETTINGS_INITIAL_WINDOW_SIZE: 1000})
    try:
        values = np.arange(50_000, dtype=np.float32)  # a 200 kB answer, 1 kB stream window
        client.call(1, INFER, message(echo_request(values)))
        answer = await client.answer(1, window_updates=True)
        assert status(answer) == ("0", "")
        raw = infer_response(answer).raw_output_contents[0]
        np.testing.assert_array_equal(np.frombuffer(raw, np.float32), values)
        data_frames = [f for f in client.frames if f[0] == h2.DATA]
        assert max(len(f[3]) for f in data_frames) <= 1000
        assert len(data_frames) > 200
    finally:
        await client.close()
        await server.stop(None)


async def test_without_window_updates_the_answer_waits(client: RawClient) -> None:
    values = np.arange(50_000, dtype=np.float32)  # more than the default 64 kB windows
    client.call(1, INFER, message(echo_request(values)))
    received = 0
    with pytest.raises(asyncio.TimeoutError):
        while True:
            frame_type, _, stream_id, payload = await client.read_frame(timeout=0.5)
            if frame_type == h2.DATA and stream_id == 1:
                received += len(payload)
    assert received == h2.DEFAULT_WINDOW  # exactly the window, not a byte more
    client.send(h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">L", 1 << 20)))
    client.send(h2.frame(h2.WINDOW_UPDATE, 0, 1, struct.pack(">L", 1 << 20)))
    answer = await client.answer(1)
    assert len(answer["data"]) + received > 200_000
    assert status(answer) == ("0", "")


async def test_frames_follow_the_max_frame_size_after_its_ack() -> None:
    server = create_grpc_server(StandInServer(), "127.0.0.1", 0, transport="http2")
    number = server.port
    await server.start()
    client = await RawClient.connect(
        number, {h2.SETTINGS_INITIAL_WINDOW_SIZE: 1 << 24, h2.SETTINGS_MAX_FRAME_SIZE: 1 << 15}
    )
    try:
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">L", 1 << 24)))
        values = np.arange(100_000, dtype=np.float32)
        client.call(1, INFER, message(echo_request(values)))
        answer = await client.answer(1)
        assert status(answer) == ("0", "")
        sizes = [len(f[3]) for f in client.frames if f[0] == h2.DATA]
        assert max(sizes) == 1 << 15
        # the SETTINGS ACK precedes every frame sized by those settings
        kinds = [(f[0], f[1]) for f in client.frames]
        assert kinds.index((h2.SETTINGS, h2.ACK)) < kinds.index((h2.DATA, 0))
    finally:
        await client.close()
        await server.stop(None)


# ---------------------------------------------------------------------------------------
# large messages: the split request, the answer written as parts


async def _served(limits: GrpcLimits | None = None) -> Any:
    server = create_grpc_server(
        StandInServer(), "127.0.0.1", 0, transport="http2", limits=limits or GrpcLimits()
    )
    await server.start()
    return server


async def _read_by(server: Any, reads: int, timeout: float = 5.0) -> None:
    """Wait until the server's one connection has made ``reads`` reads (bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if any(conn._reads >= reads for conn in server._connections):
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"the server made fewer than {reads} reads")


@pytest.mark.parametrize("frame_size", [1000, h2.DEFAULT_MAX_FRAME])
@pytest.mark.parametrize("seed", [0, 1])
async def test_large_request_split_over_reads_anywhere(frame_size: int, seed: int) -> None:
    """Frames, the preface and the 9-byte headers cut at any byte by the reads."""
    server = await _served()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    client = RawClient(reader, writer)
    try:
        values = np.random.default_rng(seed).random(100_000, dtype=np.float32)  # 400 kB
        payload = message(echo_request(values))
        stream = bytearray(h2.PREFACE + h2.frame(h2.SETTINGS, 0, 0))
        stream += h2.frame(h2.HEADERS, h2.END_HEADERS, 1, client.headers_block(INFER))
        for start in range(0, len(payload), frame_size):
            end = min(start + frame_size, len(payload))
            stream += h2.frame(h2.DATA, h2.END_STREAM if end == len(payload) else 0, 1,
                               payload[start:end])  # fmt: skip
        rng = np.random.default_rng(seed)
        cuts = sorted({1, 5, 24, 25, 30, 33, *rng.integers(34, len(stream), 24).tolist()})
        previous = 0
        for number, cut in enumerate([*cuts, len(stream)], start=1):
            client.send(bytes(stream[previous:cut]))
            previous = cut
            await _read_by(server, number)  # one read per write: the cuts are the reads'
        assert_echoed(await client.answer(1, window_updates=True), values)
    finally:
        await client.close()
        await server.stop(None)


@pytest.mark.parametrize("count", [65_000, 65_600, 400_000])
async def test_large_answers_in_small_windows_and_frames(count: int) -> None:
    """Answers around and above the split size, in 1000-byte windows and 16 kB frames."""
    server = await _served()
    client = await RawClient.connect(server.port, {h2.SETTINGS_INITIAL_WINDOW_SIZE: 1000})
    try:
        values = np.arange(count, dtype=np.float32)
        client.call(1, INFER, message(echo_request(values)))
        answer = await client.answer(1, window_updates=True)
        assert status(answer) == ("0", "")
        response = infer_response(answer)
        assert response.model_name == "echo" and list(response.outputs[0].shape) == [count]
        np.testing.assert_array_equal(
            np.frombuffer(response.raw_output_contents[0], np.float32), values
        )
        data_frames = [f for f in client.frames if f[0] == h2.DATA]
        assert max(len(f[3]) for f in data_frames) <= 1000
    finally:
        await client.close()
        await server.stop(None)


async def test_large_answer_to_a_reader_that_pauses() -> None:
    """A 16 MiB answer queued while the client reads nothing arrives whole and right."""
    server = await _served()
    client = await RawClient.connect(
        server.port, {h2.SETTINGS_INITIAL_WINDOW_SIZE: 1 << 25, h2.SETTINGS_MAX_FRAME_SIZE: 1 << 22}
    )
    try:
        client.send(h2.frame(h2.WINDOW_UPDATE, 0, 0, struct.pack(">L", 1 << 25)))
        values = np.random.default_rng(3).random(4 << 20, dtype=np.float32)
        client.call(1, INFER, message(echo_request(values)))
        # wait (bounded) until the answer waits in the server's socket buffers, unread
        deadline = asyncio.get_running_loop().time() + 30
        while asyncio.get_running_loop().time() < deadline:
            if any(conn.transport.get_write_buffer_size() for conn in server._connections):
                break
            await asyncio.sleep(0.01)
        assert_echoed(await client.answer(1), values)
    finally:
        await client.close()
        await server.stop(None)


async def test_request_exactly_at_the_message_limit() -> None:
    """A message of exactly --grpc-max-message-size bytes is served; one byte more is not."""
    values = np.arange(100_000, dtype=np.float32)
    size = len(echo_request(values))
    server = await _served(GrpcLimits(max_message_size=size))
    client = await RawClient.connect(server.port)
    try:
        client.call(1, INFER, message(echo_request(values)))
        assert_echoed(await client.answer(1, window_updates=True), values)
        over = np.arange(100_001, dtype=np.float32)
        client.call(3, INFER, message(echo_request(over)))
        code, text = status(await client.answer(3, window_updates=True))
        assert code == str(grpc.StatusCode.RESOURCE_EXHAUSTED.value[0])
        assert f"vs. {size}" in text
    finally:
        await client.close()
        await server.stop(None)


# ---------------------------------------------------------------------------------------
# gRPC semantics


async def test_unknown_method_is_unimplemented(client: RawClient) -> None:
    client.call(1, "/inference.GRPCInferenceService/NoSuchThing", message(b""))
    answer = await client.answer(1)
    assert answer["headers"][":status"] == "200"  # trailers-only: status in the headers
    assert status(answer)[0] == "12"


async def test_not_grpc_content_type_is_415(client: RawClient) -> None:
    block = client.encoder.encode(
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", LIVE),
            (":authority", "x"),
            ("content-type", "application/json"),
        ]
    )
    client.send(h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 1, block))
    answer = await client.answer(1)
    assert answer["headers"][":status"] == "415"


async def test_gzip_and_deflate_requests(client: RawClient) -> None:
    import zlib

    values = np.ones((1, 4), np.float32)
    payload = echo_request(values)
    client.call(1, INFER, message(gzip.compress(payload), True), (("grpc-encoding", "gzip"),))
    assert status(await client.answer(1)) == ("0", "")
    client.call(3, INFER, message(zlib.compress(payload), True), (("grpc-encoding", "deflate"),))
    assert status(await client.answer(3)) == ("0", "")
    client.call(5, INFER, message(payload), (("grpc-encoding", "snappy"),))
    assert status(await client.answer(5)) == (
        "12",
        "Compression algorithm 'snappy' is not supported",
    )
    client.call(7, INFER, message(payload, True))  # a compressed flag without an encoding
    assert status(await client.answer(7))[0] == "13"


async def test_malformed_message_is_internal(client: RawClient) -> None:
    client.call(1, INFER, message(b"\xff\xff\xff"))
    assert status(await client.answer(1)) == ("13", "Exception deserializing request!")
    client.call(3, INFER, message(b"")[:3])  # ends inside the length prefix
    assert status(await client.answer(3))[0] == "13"


async def test_error_message_is_percent_encoded(client: RawClient) -> None:
    client.call(1, INFER, message(echo_request(np.ones(1), model="caf\u00e9 100%")))
    code, text = status(await client.answer(1))
    assert code == "3"  # INVALID_ARGUMENT: an unknown model, as the real server says
    assert "caf%C3%A9 100%25" in text


async def test_client_reset_cancels_the_call(client: RawClient, stand_in: StandInServer) -> None:
    client.call(1, INFER, message(delay_request(30)))
    await asyncio.wait_for(stand_in.started.wait(), 5)
    client.send(h2.frame(h2.RST_STREAM, 0, 1, struct.pack(">L", h2.CANCEL)))
    await wait_until_async(lambda: stand_in.cancelled, what="the cancel")
    assert stand_in.cancelled == 1
    client.call(3, LIVE, message(b""))  # the connection goes on
    assert status(await client.answer(3)) == ("0", "")


async def test_deadline_exceeded(client: RawClient, stand_in: StandInServer) -> None:
    client.call(1, INFER, message(delay_request(30)), (("grpc-timeout", "200m"),))
    answer = await client.answer(1)
    assert status(answer) == ("4", "Deadline Exceeded")
    await wait_until_async(lambda: stand_in.cancelled, what="the cancel")
    assert stand_in.cancelled == 1


async def test_client_streaming_call_over_raw_frames(client: RawClient) -> None:
    """ModelStreamInfer: messages across DATA frames, answers as each finishes."""
    path = "/inference.GRPCInferenceService/ModelStreamInfer"
    first = message(echo_request(np.full((1, 2), 1.0)))
    second = message(echo_request(np.full((1, 2), 2.0)))
    stream = first + second
    block = client.headers_block(path)
    client.send(
        h2.frame(h2.HEADERS, h2.END_HEADERS, 1, block)
        + h2.frame(h2.DATA, 0, 1, stream[:3])  # split inside the length prefix
        + h2.frame(h2.DATA, 0, 1, stream[3:20])  # and inside the message
        + h2.frame(h2.DATA, 0, 1, stream[20:])
    )
    await asyncio.sleep(0.1)  # the behaviour under test: the end of the stream comes later
    client.send(h2.frame(h2.DATA, h2.END_STREAM, 1, b""))
    answer = await client.answer(1)
    assert status(answer) == ("0", "")
    data, values = answer["data"], []
    while data:
        length = int.from_bytes(data[1:5], "big")
        reply = pb.ModelStreamInferResponse.FromString(data[5 : 5 + length])
        values.append(np.frombuffer(reply.infer_response.raw_output_contents[0], np.float32)[0])
        data = data[5 + length :]
    assert sorted(values) == [1.0, 2.0]


# ---------------------------------------------------------------------------------------
# protocol errors end the connection, not the server


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b" " * 20,  # not HTTP/2
        h2.PREFACE + h2.frame(h2.HEADERS, h2.END_HEADERS, 2, b""),  # an even stream id
        h2.PREFACE + h2.frame(h2.PUSH_PROMISE, 0, 1, b"\x00\x00\x00\x02"),  # a client push
        h2.PREFACE + h2.frame(h2.HEADERS, h2.END_HEADERS, 1, b"\xff\xff\xff\xff"),  # bad HPACK
        h2.PREFACE + h2.frame(h2.DATA, 0, 0, b"x"),  # DATA on stream 0
        h2.PREFACE + h2.frame(h2.SETTINGS, 0, 0, b"\x00\x04\x80\x00\x00\x00"),  # window > 2^31-1
    ],
    ids=["http1", "even-stream", "push", "hpack", "data-on-0", "window"],
)
async def test_protocol_errors_close_with_goaway(port: int, data: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    client = RawClient(reader, writer)
    client.send(data)
    try:
        while True:
            frame_type, _, _, payload = await client.read_frame()
            if frame_type == h2.GOAWAY:
                assert struct.unpack(">L", payload[4:8])[0] != h2.NO_ERROR
                break
        assert await asyncio.wait_for(reader.read(), 5) == b""  # then the connection closes
    finally:
        await client.close()
    fresh = await RawClient.connect(port)  # and the server serves the next one
    try:
        fresh.call(1, LIVE, message(b""))
        assert status(await fresh.answer(1)) == ("0", "")
    finally:
        await fresh.close()


# ---------------------------------------------------------------------------------------
# shutdown


async def test_stop_lets_calls_in_flight_finish_and_refuses_new_ones() -> None:
    stand_in = StandInServer()
    server = create_grpc_server(stand_in, "127.0.0.1", 0, transport="http2")
    number = server.port
    await server.start()
    client = await RawClient.connect(number)
    try:
        client.call(1, INFER, message(delay_request(0.5)))
        await asyncio.wait_for(stand_in.started.wait(), 5)
        stopping = asyncio.ensure_future(server.stop(10))
        answers: dict[int, tuple[str, Any]] = {}
        goaway = None

        async def read_one() -> None:
            nonlocal goaway
            frame_type, flags, stream_id, payload = await client.read_frame()
            if frame_type == h2.GOAWAY:
                goaway = struct.unpack(">LL", payload[:8])
            elif frame_type == h2.RST_STREAM:
                answers[stream_id] = ("reset", struct.unpack(">L", payload)[0])
            elif frame_type == h2.HEADERS and flags & h2.END_STREAM:
                answers[stream_id] = ("status", dict(client.decoder.decode(payload)))
            elif frame_type == h2.HEADERS:
                client.decoder.decode(payload)

        while goaway is None:  # bounded: read_frame times out
            await read_one()
        client.call(3, LIVE, message(b""))  # after GOAWAY: refused
        while len(answers) < 2:
            await read_one()
        assert goaway == (1, h2.NO_ERROR)  # the last stream it will answer, no error
        assert answers[3] == ("reset", h2.REFUSED_STREAM)
        assert answers[1][1]["grpc-status"] == "0"  # the call in flight finished
        await asyncio.wait_for(stopping, 5)
        assert stand_in.cancelled == 0
    finally:
        await client.close()


# ---------------------------------------------------------------------------------------
# helpers


def test_percent_encode() -> None:
    assert percent_encode("plain text: ok") == "plain text: ok"
    assert percent_encode("100%") == "100%25"
    assert percent_encode("caf\u00e9\n") == "caf%C3%A9%0A"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("1S", 1.0), ("200m", 0.2), ("5u", 5e-6), ("3n", 3e-9), ("2M", 120.0), ("1H", 3600.0)],
)
def test_parse_timeout(value: str, seconds: float) -> None:
    assert parse_timeout(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "S", "1x", "-1S", "123456789S"])
def test_parse_timeout_rejects_malformed(value: str) -> None:
    assert parse_timeout(value) is None


def test_hpack_integers_round_trip() -> None:
    for value in (0, 1, 126, 127, 128, 300, 16_384, 2**20):
        block = encode_literal("x-n", "v" * value)
        assert hpack.Decoder(max_header_list_size=2**22).decode(block) == [("x-n", "v" * value)]


def test_header_cache_follows_the_dynamic_table() -> None:
    encoder, decoder = hpack.Encoder(), HeaderDecoder()
    first = encoder.encode([(":path", "/a"), ("x-k", "1")])
    again = encoder.encode([(":path", "/a"), ("x-k", "1")])  # now only table references
    assert decoder.decode(first) == ((":path", "/a"), ("x-k", "1"))
    assert decoder.decode(again) == ((":path", "/a"), ("x-k", "1"))
    assert decoder.decode(again) is decoder.decode(again)  # served from the cache
    changed = encoder.encode([("x-k", "2")])  # a new entry moves the old ones
    assert decoder.decode(changed) == (("x-k", "2"),)
    same_bytes = encoder.encode([(":path", "/a"), ("x-k", "1")])
    assert decoder.decode(same_bytes) == ((":path", "/a"), ("x-k", "1"))


# ---------------------------------------------------------------------------------------
# the servicer context


class Recording:
    """A Health servicer whose Check keeps its context and waits when told to."""

    def __init__(self) -> None:
        self.contexts: list[Any] = []
        self.wait = False

    async def Check(self, request: Any, context: Any) -> Any:
        from triton_core.protos import health_pb2

        self.contexts.append(context)
        if self.wait:
            await asyncio.sleep(30)  # a call that runs until it is cancelled
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

    async def Watch(self, request: Any, context: Any) -> None:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "no watching")


async def test_context_cancelled_follows_resets_and_deadlines() -> None:
    from triton_core.frontends.common import listen_socket
    from triton_core.frontends.grpc.transport import GrpcServer, method_table
    from triton_core.protos import health_pb2

    servicer = Recording()
    methods = method_table([(health_pb2.DESCRIPTOR.services_by_name["Health"], servicer)])
    server = GrpcServer(methods, listen_socket("127.0.0.1", 0, "gRPC"))
    await server.start()
    client = await RawClient.connect(server.port)
    check = "/grpc.health.v1.Health/Check"
    try:
        client.call(1, check, message(b""))
        assert status(await client.answer(1)) == ("0", "")
        assert servicer.contexts[0].cancelled() is False  # answered, not cancelled

        servicer.wait = True
        client.call(3, check, message(b""))
        await wait_until_async(lambda: len(servicer.contexts) == 2, what="the second call")
        client.send(h2.frame(h2.RST_STREAM, 0, 3, struct.pack(">L", h2.CANCEL)))
        await wait_until_async(lambda: servicer.contexts[1].cancelled(), what="the cancel")
        assert servicer.contexts[1].cancelled() is True

        client.call(5, check, message(b""), (("grpc-timeout", "100m"),))
        assert status(await client.answer(5)) == ("4", "Deadline Exceeded")
        assert servicer.contexts[2].cancelled() is True
        assert servicer.contexts[2].time_remaining() == 0.0
    finally:
        await client.close()
        await server.stop(None)
