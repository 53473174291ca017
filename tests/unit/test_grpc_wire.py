"""Large ModelInfer messages at the wire level: the split request and the pre-encoded answer
decode exactly as protobuf's own parse and serialization of the same message."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from triton_core.frontends.grpc import wire
from triton_core.frontends.grpc.codec import decode_infer_request, encode_infer_answer
from triton_core.protos import grpc_service_pb2 as pb
from triton_core.types import InferenceResponse, Tensor

BIG = wire.SPLIT_THRESHOLD


def request_with(raws: list[bytes], **fields: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", **fields)
    for index, raw in enumerate(raws):
        request.inputs.add(name=f"in{index}", datatype="UINT8", shape=[len(raw)])
    request.raw_input_contents.extend(raws)
    request.parameters["p"].string_param = "v"
    request.outputs.add(name="out")
    return request


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([0, 1, 127, 128, 16_383, 16_384, BIG, BIG + 1]), max_size=4),
    request_id=st.text(max_size=40),
)
def test_a_split_request_is_the_message_protobuf_parses(sizes: list[int], request_id: str) -> None:
    raws = [bytes([index % 251]) * size for index, size in enumerate(sizes)]
    encoded = request_with(raws, id=request_id).SerializeToString()
    parsed = wire.parse_infer_request(encoded)
    expected = pb.ModelInferRequest.FromString(encoded)
    if len(encoded) < BIG:
        assert parsed == expected
        return
    assert isinstance(parsed, wire.SplitInferRequest)
    assert [bytes(raw) for raw in parsed.raw_input_contents] == list(expected.raw_input_contents)
    assert not parsed.message.raw_input_contents
    parsed.message.raw_input_contents.extend(bytes(raw) for raw in parsed.raw_input_contents)
    assert parsed.message == expected


def test_raw_contents_anywhere_in_the_message_keep_their_order() -> None:
    """protobuf puts repeated entries anywhere; the split keeps their order and the rest."""
    first, second = b"a" * BIG, b"b" * 10
    head = pb.ModelInferRequest(model_name="m", id="x").SerializeToString()
    tail = pb.ModelInferRequest(model_version="3").SerializeToString()
    raw = pb.ModelInferRequest()
    raw.raw_input_contents.append(first)
    raw_two = pb.ModelInferRequest()
    raw_two.raw_input_contents.append(second)
    encoded = raw.SerializeToString() + head + raw_two.SerializeToString() + tail
    parsed = wire.parse_infer_request(encoded)
    assert isinstance(parsed, wire.SplitInferRequest)
    assert [bytes(r) for r in parsed.raw_input_contents] == [first, second]
    assert (parsed.message.model_name, parsed.message.id) == ("m", "x")
    assert parsed.message.model_version == "3"


def test_tensors_of_a_split_request_are_read_only_views() -> None:
    values = np.arange(BIG // 4 + 8, dtype=np.float32)
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="x", datatype="FP32", shape=[values.size])
    request.raw_input_contents.append(values.tobytes())
    encoded = request.SerializeToString()
    decoded = decode_infer_request(wire.parse_infer_request(encoded))
    array = decoded.inputs["x"].data
    np.testing.assert_array_equal(array, values)
    assert not array.flags.writeable
    assert np.shares_memory(array, np.frombuffer(encoded, np.uint8))  # a view, not a copy


@pytest.mark.parametrize(
    "cut",
    [
        lambda data: data[:-1],  # the last raw field runs past the end
        lambda data: data + b"\x80",  # a tag cut short
        lambda data: data + b"\x0b",  # a group (wire type 3)
    ],
    ids=["truncated", "tag-cut", "group"],
)
def test_what_the_scan_cannot_read_goes_to_protobuf(cut) -> None:
    encoded = cut(request_with([b"z" * BIG]).SerializeToString())
    with pytest.raises(DecodeError):
        pb.ModelInferRequest.FromString(encoded)
    with pytest.raises(DecodeError):
        wire.parse_infer_request(encoded)


def test_more_fields_than_the_scan_reads_goes_to_protobuf_whole() -> None:
    request = request_with([b"z" * BIG])
    for index in range(wire.MAX_SCANNED_FIELDS):
        request.outputs.add(name=f"o{index}")
    parsed = wire.parse_infer_request(request.SerializeToString())
    assert isinstance(parsed, pb.ModelInferRequest)
    assert parsed == request


@pytest.mark.parametrize("count", [BIG // 4 - 64, BIG // 4, 1 << 20])
def test_an_encoded_answer_is_the_message_protobuf_would_send(count: int) -> None:
    values = np.arange(count, dtype=np.float32)
    strided = np.arange(2 * count, dtype=np.int32)[::2]  # not contiguous: copied, same bytes
    response = InferenceResponse(
        model_name="m",
        model_version=2,
        id="r",
        outputs=[
            Tensor("y", "FP32", values),
            Tensor("s", "INT32", strided),
            Tensor("e", "FP32", np.zeros(0, np.float32)),
            Tensor("b", "BYTES", np.array([b"ab", b""], dtype=object)),
        ],
        parameters={"k": 1},
    )
    answer = encode_infer_answer(response)
    if isinstance(answer, pb.ModelInferResponse):
        assert answer.ByteSize() < BIG + 64
        data = answer.SerializeToString()
    else:
        data = answer.SerializeToString()
        assert len(data) == answer.size
    decoded = pb.ModelInferResponse.FromString(data)
    assert (decoded.model_name, decoded.model_version, decoded.id) == ("m", "2", "r")
    assert [o.name for o in decoded.outputs] == ["y", "s", "e", "b"]
    assert decoded.raw_output_contents[0] == values.tobytes()
    assert decoded.raw_output_contents[1] == strided.tobytes()
    assert decoded.raw_output_contents[2] == b""
    assert decoded.raw_output_contents[3] == b"\x02\x00\x00\x00ab\x00\x00\x00\x00"
    assert decoded.parameters["k"].int64_param == 1


def test_varints_round_trip() -> None:
    for value in (0, 1, 127, 128, 300, 2**21, 2**31 - 1, 2**35):
        encoded = wire.encode_varint(value)
        assert wire._read_varint(memoryview(encoded), 0) == (value, len(encoded))
