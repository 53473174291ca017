"""Property-based fuzzing of the gRPC transport's HTTP/2 framing and HPACK, and of the codec.

Random frame sequences and random bytes go into a real :class:`Http2Connection` (on one end
of a socket pair, behind the real gRPC server's streams): it may answer with GOAWAY and close,
but never raise, and never hold more than its limits allow. Random ModelInferRequest messages
go into the codec: it answers with a value or a TritonError, never another exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct

import hpack
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_grpc_servicer import StandInServer
from triton_core.errors import TritonError
from triton_core.frontends.grpc import create_grpc_server
from triton_core.frontends.grpc import frames as h2
from triton_core.frontends.grpc.codec import decode_infer_request
from triton_core.frontends.grpc.hpack_codec import HeaderDecoder
from triton_core.frontends.grpc.http2 import Http2Connection
from triton_core.frontends.grpc.limits import GrpcLimits
from triton_core.protos import grpc_service_pb2 as pb

LIMITS = GrpcLimits(max_concurrent_streams=8, max_message_size=1 << 16)
PATHS = (
    "/inference.GRPCInferenceService/ModelInfer",
    "/inference.GRPCInferenceService/ServerLive",
    "/inference.GRPCInferenceService/ModelStreamInfer",
    "/nowhere",
)
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

header_fields = st.lists(
    st.one_of(
        st.sampled_from(
            [
                (":method", "POST"),
                (":scheme", "http"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-encoding", "gzip"),
                ("grpc-timeout", "1S"),
            ]
        ),
        st.sampled_from(PATHS).map(lambda path: (":path", path)),
        st.tuples(st.text("abcdefgh-", min_size=1, max_size=12), st.text(max_size=40)),
    ),
    max_size=10,
)


@st.composite
def frames(draw: st.DrawFn) -> bytes:
    """A frame: often well formed, sometimes not; HEADERS mostly carry real HPACK."""
    frame_type = draw(st.integers(0, 11))
    flags = draw(st.sampled_from([0, 1, 4, 5, 8, 0x20, 0x25, 0xFF]))
    stream_id = draw(st.sampled_from([0, 1, 2, 3, 5, 7, 9, 101, 2**31 - 1]))
    if frame_type in (h2.HEADERS, h2.CONTINUATION) and draw(st.booleans()):
        payload = hpack.Encoder().encode(draw(header_fields))
    elif frame_type == h2.DATA and draw(st.booleans()):
        body = draw(st.binary(max_size=40))
        length = draw(st.one_of(st.just(len(body)), st.integers(0, 2**32 - 1)))
        payload = bytes((draw(st.integers(0, 1)),)) + struct.pack(">L", length) + body
    elif frame_type == h2.SETTINGS and draw(st.booleans()):
        entries = draw(
            st.lists(st.tuples(st.integers(0, 8), st.integers(0, 2**32 - 1)), max_size=8)
        )
        payload = b"".join(struct.pack(">HL", key, value) for key, value in entries)
    elif frame_type in (h2.WINDOW_UPDATE, h2.RST_STREAM) and draw(st.booleans()):
        payload = struct.pack(">L", draw(st.integers(0, 2**32 - 1)))
    else:
        payload = draw(st.binary(max_size=64))
    return h2.frame(frame_type, flags, stream_id, payload)


@st.composite
def calls(draw: st.DrawFn) -> bytes:
    """Mostly well-formed calls on ascending streams, with hostile frames among them."""
    encoder = hpack.Encoder()  # one per connection: blocks may refer to earlier ones
    encoder.header_table_size = draw(st.sampled_from([4096, 256]))
    out = b""
    for number in range(draw(st.integers(1, 12))):
        stream_id = 2 * number + 1
        fields = [(":path", draw(st.sampled_from(PATHS))), *draw(header_fields)]
        fields.append(("content-type", "application/grpc"))
        block = encoder.encode(fields)
        split = draw(st.integers(0, len(block)))
        if split and draw(st.booleans()):  # a block over HEADERS and CONTINUATION
            out += h2.frame(h2.HEADERS, 0, stream_id, block[:split])
            out += h2.frame(h2.CONTINUATION, h2.END_HEADERS, stream_id, block[split:])
        else:
            out += h2.frame(h2.HEADERS, h2.END_HEADERS, stream_id, block)
        body = draw(st.binary(max_size=40))
        prefix = bytes((draw(st.integers(0, 1)),)) + struct.pack(">L", len(body))
        end = h2.END_STREAM if draw(st.integers(0, 3)) else 0
        out += h2.frame(h2.DATA, end, stream_id, prefix + body)
        if draw(st.integers(0, 3)) == 0:
            out += draw(frames())
    return out


@st.composite
def connection_input(draw: st.DrawFn) -> list[bytes]:
    """A connection's bytes, cut into the reads that deliver them."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        body = draw(st.binary(max_size=200))  # no structure at all
    elif kind < 4:
        body = b"".join(draw(st.lists(frames(), max_size=30)))
    else:
        body = draw(calls())
    preface = h2.PREFACE + h2.frame(h2.SETTINGS, 0, 0) if draw(st.integers(0, 9)) else b""
    data = preface + body
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]


async def feed(chunks: list[bytes]) -> None:
    """``chunks`` into a real connection; the property: no exception, bounded state."""
    server = create_grpc_server(StandInServer(), "127.0.0.1", 0, transport="http2", limits=LIMITS)
    await server.start()  # so that stop() closes its socket
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    closed: list[Http2Connection] = []
    _, conn = await loop.connect_accepted_socket(
        lambda: Http2Connection(server._open_stream, closed.append, LIMITS), sock=ours
    )
    try:
        for chunk in chunks:
            conn.data_received(chunk)  # raising here fails the property
            assert conn.open_streams <= LIMITS.max_concurrent_streams
            assert len(conn._pending) <= LIMITS.max_frame_size + 9 + len(chunk)
        await asyncio.sleep(0)  # let started calls run a step
    finally:
        conn.close()
        theirs.close()
        for _ in range(100):  # until the connection is gone and its streams reset
            if closed:
                break
            await asyncio.sleep(0.001)
        await server.stop(None)
    assert closed == [conn]


@FUZZ
@given(connection_input())
def test_random_frames_never_raise(chunks: list[bytes]) -> None:
    asyncio.run(feed(chunks))


# ---------------------------------------------------------------------------------------
# HPACK alone


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=5))
def test_random_header_blocks_decode_or_fail_cleanly(blocks: list[bytes]) -> None:
    decoder = HeaderDecoder(1024)
    for block in blocks:
        try:
            headers = decoder.decode(block)
        except h2.Http2Error as error:
            assert error.code in (h2.COMPRESSION_ERROR, h2.ENHANCE_YOUR_CALM)
            return  # a connection error: the connection ends here
        assert sum(len(n) + len(v) + 32 for n, v in headers) <= 1024


@settings(max_examples=200, deadline=None)
@given(st.lists(header_fields, min_size=1, max_size=6))
def test_decoded_headers_match_what_was_encoded(blocks: list[list[tuple[str, str]]]) -> None:
    """Any mix of indexing, references and evictions: the cache never changes an answer."""
    encoder, decoder = hpack.Encoder(), HeaderDecoder(1 << 20)
    encoder.header_table_size = 256  # small: entries churn
    for fields in blocks * 2:  # each block again, now partly from the table or the cache
        expected = tuple((name.lower(), value) for name, value in fields)
        assert decoder.decode(encoder.encode(fields)) == expected


# ---------------------------------------------------------------------------------------
# the codec


DATATYPES = ("BOOL", "UINT8", "INT32", "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES", "X")
dims = st.lists(
    st.one_of(st.integers(-3, 6), st.sampled_from([2**31, 2**62, -(2**62)])), max_size=4
)


@st.composite
def infer_requests(draw: st.DrawFn) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name=draw(st.text(max_size=8)))
    request.model_version = draw(st.sampled_from(["", "1", "-1", "x", "99999999999999999999"]))
    raw = draw(st.booleans())
    for index in range(draw(st.integers(0, 3))):
        tensor = request.inputs.add(
            name=draw(st.sampled_from(["a", "b", "a"])),
            datatype=draw(st.sampled_from(DATATYPES)),
            shape=draw(dims),
        )
        if raw:
            request.raw_input_contents.append(draw(st.binary(max_size=64)))
        elif draw(st.booleans()):
            field = draw(st.sampled_from(["int_contents", "fp32_contents", "bytes_contents"]))
            values = {
                "int_contents": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8),
                "fp32_contents": st.lists(st.floats(width=32), max_size=8),
                "bytes_contents": st.lists(st.binary(max_size=8), max_size=8),
            }[field]
            getattr(tensor.contents, field).extend(draw(values))
        if draw(st.integers(0, 5)) == 0:
            tensor.parameters["shared_memory_region"].string_param = "r"
        del index
    for name in draw(st.lists(st.sampled_from(["a", "c"]), max_size=2)):
        request.outputs.add(name=name)
    if draw(st.booleans()):
        key = draw(st.sampled_from(["sequence_id", "priority", "timeout", "binary_data_output"]))
        which = draw(st.sampled_from(["int64_param", "bool_param", "string_param"]))
        value = {"int64_param": -1, "bool_param": True, "string_param": "x"}[which]
        setattr(request.parameters[key], which, value)
    return request


@settings(max_examples=400, deadline=None)
@given(infer_requests())
def test_codec_decodes_or_raises_triton_errors(request: pb.ModelInferRequest) -> None:
    try:
        decoded = decode_infer_request(request)
    except TritonError:
        return
    for tensor in decoded.inputs.values():
        assert isinstance(tensor.data, np.ndarray)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_codec_on_random_wire_bytes(data: bytes) -> None:
    from google.protobuf.message import DecodeError

    try:
        message = pb.ModelInferRequest.FromString(data)
    except DecodeError:
        return  # the transport answers INTERNAL "Exception deserializing request!"
    with contextlib.suppress(TritonError):
        decode_infer_request(message)


@pytest.mark.parametrize(
    ("shape", "raw", "problem"),
    [
        ([-1, -2], True, "must not be negative"),  # found by the fuzzing above
        ([-2, -2, 3], False, "must not be negative"),
        ([-(2**62), -2], True, "must not be negative"),
        ([0, 2**62], True, "too large"),  # numpy: "array is too big"
        ([2**40, 0, 2**40], False, "too large"),
    ],
)
def test_shapes_found_by_fuzzing_are_invalid_arg(shape: list[int], raw: bool, problem: str) -> None:
    request = pb.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="a", datatype="INT32", shape=shape)
    if raw:
        request.raw_input_contents.append(b"\x00" * (8 if 0 not in shape else 0))
    else:
        tensor.contents.int_contents.extend([0, 0] if 0 not in shape else [])
    with pytest.raises(TritonError, match=problem):
        decode_infer_request(request)
