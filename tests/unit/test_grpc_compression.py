"""``--grpc-infer-response-compression-level`` on the wire: what each transport sends, frame
by frame, to a raw HTTP/2 client (the stand-in servicer of test_grpc_servicer.py)."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from tests.unit.test_grpc_http2 import (
    INFER,
    LIVE,
    RawClient,
    echo_request,
    infer_response,
    message,
    status,
)
from tests.unit.test_grpc_servicer import StandInServer
from triton_core.frontends.grpc import create_grpc_server
from triton_core.protos import grpc_service_pb2 as pb

ACCEPT_GZIP = (("grpc-accept-encoding", "identity,deflate,gzip"),)


@pytest.fixture(params=["http2", "grpcio"])
async def compressing(request: pytest.FixtureRequest) -> AsyncIterator[RawClient]:
    server = create_grpc_server(
        StandInServer(), "127.0.0.1", 0, transport=request.param, compression_level="low"
    )
    port = server.port  # type: ignore[union-attr]
    await server.start()
    client = await RawClient.connect(port)
    client.transport = request.param  # type: ignore[attr-defined]
    try:
        yield client
    finally:
        await client.close()
        await server.stop(None)


def _gunzipped(answer: dict[str, Any]) -> bytes:
    data = answer["data"]
    assert data[0] == 1, "the compressed flag of the message"
    assert int.from_bytes(data[1:5], "big") == len(data) - 5
    return gzip.decompress(data[5:])


async def test_infer_answers_are_compressed_for_clients_that_accept_it(
    compressing: RawClient,
) -> None:
    """Level low, a client accepting gzip and deflate: gzip, as gRPC core picks."""
    values = np.arange(64, dtype=np.float32).reshape(1, 64)
    compressing.call(1, INFER, message(echo_request(values)), ACCEPT_GZIP)
    answer = await compressing.answer(1, window_updates=True)
    assert status(answer) == ("0", "")
    assert answer["headers"]["grpc-encoding"] == "gzip"
    reply = pb.ModelInferResponse.FromString(_gunzipped(answer))
    np.testing.assert_array_equal(
        np.frombuffer(reply.raw_output_contents[0], np.float32), values[0]
    )


async def test_no_gzip_for_clients_that_do_not_accept_it(compressing: RawClient) -> None:
    values = np.ones((1, 4), np.float32)
    compressing.call(1, INFER, message(echo_request(values)), (("grpc-accept-encoding", "x"),))
    answer = await compressing.answer(1)
    assert status(answer) == ("0", "")
    assert answer["headers"].get("grpc-encoding", "identity") == "identity"
    assert infer_response(answer).raw_output_contents[0] == values.tobytes()


async def test_other_answers_compressed_only_by_grpcio(compressing: RawClient) -> None:
    """As Triton, the built-in transport compresses inference answers only; grpcio's server
    takes one level for every call (docs/compatibility.md). A message that compression would
    not shrink goes uncompressed, as gRPC core sends it."""
    compressing.call(1, LIVE, message(pb.ServerLiveRequest().SerializeToString()), ACCEPT_GZIP)
    answer = await compressing.answer(1)
    assert status(answer) == ("0", "")
    if compressing.transport == "http2":  # type: ignore[attr-defined]
        assert "grpc-encoding" not in answer["headers"]
    else:
        assert answer["headers"]["grpc-encoding"] == "gzip"
    assert answer["data"][0] == 0
    assert pb.ServerLiveResponse.FromString(answer["data"][5:]).live


async def test_level_none_sends_no_compressed_answers() -> None:
    server = create_grpc_server(StandInServer(), "127.0.0.1", 0, transport="http2")
    await server.start()
    client = await RawClient.connect(server.port)  # type: ignore[union-attr]
    try:
        client.call(1, INFER, message(echo_request(np.ones((1, 4), np.float32))), ACCEPT_GZIP)
        answer = await client.answer(1)
        assert "grpc-encoding" not in answer["headers"]
        assert answer["data"][0] == 0
    finally:
        await client.close()
        await server.stop(None)


@pytest.mark.parametrize(
    ("level", "accepted", "algorithm"),
    [
        ("low", "identity,deflate,gzip", "gzip"),
        ("medium", "identity,deflate,gzip", "deflate"),
        ("high", "identity,deflate,gzip", "deflate"),
        ("low", "identity,deflate", "deflate"),
        ("high", "gzip", "gzip"),
    ],
)
@pytest.mark.parametrize("transport", ["http2", "grpcio"])
async def test_both_transports_pick_the_algorithm_as_grpc_core(
    transport: str, level: str, accepted: str, algorithm: str
) -> None:
    """grpcio is gRPC core itself (as in Triton): the built-in transport must agree with it."""
    server = create_grpc_server(
        StandInServer(), "127.0.0.1", 0, transport=transport, compression_level=level
    )
    await server.start()
    client = await RawClient.connect(server.port)  # type: ignore[union-attr]
    try:
        values = np.zeros((1, 256), np.float32)  # compressible: compressed by both
        client.call(1, INFER, message(echo_request(values)), (("grpc-accept-encoding", accepted),))
        answer = await client.answer(1)
        assert status(answer) == ("0", "")
        assert answer["headers"]["grpc-encoding"] == algorithm
        data = answer["data"]
        assert data[0] == 1
        body = gzip.decompress(data[5:]) if algorithm == "gzip" else zlib.decompress(data[5:])
        assert pb.ModelInferResponse.FromString(body).raw_output_contents[0] == values.tobytes()
    finally:
        await client.close()
        await server.stop(None)
