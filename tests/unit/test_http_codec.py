"""KServe v2 HTTP codec: requests built and responses read by the real tritonclient."""

from __future__ import annotations

import gzip
import struct

import ml_dtypes
import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from triton_core.errors import Status, TritonError
from triton_core.frontends.http.answers import encode_response
from triton_core.frontends.http.codec import (
    HEADER_LENGTH,
    decode_raw_request,
    decode_request,
)
from triton_core.shared_memory.refs import SharedMemoryInput, SharedMemoryRef
from triton_core.types import InferenceResponse, RequestedOutput, RequestFlag, Tensor

build_body = httpclient.InferenceServerClient.generate_request_body
parse_body = httpclient.InferenceServerClient.parse_response_body

NUMERIC = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
}
JSON_TYPES = [t for t in NUMERIC if t != "FP16"] + ["BYTES"]


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    count = int(np.prod(shape))
    if datatype == "BYTES":
        values = [f"s{i}\x00é".encode() for i in range(count)]
        return np.array(values, dtype=np.object_).reshape(shape)
    if datatype == "BOOL":
        return (np.arange(count) % 2 == 0).reshape(shape)
    if datatype == "BF16":
        return np.linspace(-2, 2, count).astype(ml_dtypes.bfloat16).reshape(shape)
    dtype = np.dtype(NUMERIC[datatype])
    values = np.arange(count) * 3 - (0 if dtype.kind == "u" else 5)
    if dtype.kind == "f":
        values = values / 4
    return values.astype(dtype).reshape(shape)


def as_server_array(array: np.ndarray, datatype: str) -> np.ndarray:
    """What the server holds: BF16 as uint16 bit patterns."""
    return array.view(np.uint16) if datatype == "BF16" else array


def roundtrip(
    array: np.ndarray, datatype: str, binary_in: bool, binary_out: bool
) -> tuple[Tensor, np.ndarray]:
    """Client body -> decode -> echo -> encode -> client result."""
    infer_input = httpclient.InferInput("IN", list(array.shape), datatype)
    infer_input.set_data_from_numpy(array, binary_data=binary_in)
    output = httpclient.InferRequestedOutput("OUT", binary_data=binary_out)
    body, header_length = build_body([infer_input], outputs=[output])
    decoded = decode_request("m", -1, body, header_length)
    tensor = decoded.request.inputs["IN"]
    response = InferenceResponse(
        outputs=[Tensor("OUT", datatype, tensor.data)], model_name="m", model_version=1
    )
    data, headers = encode_response(response, decoded.binary_outputs, decoded.default_binary)
    length = headers.get(HEADER_LENGTH)
    result = parse_body(data, header_length=int(length) if length else None)
    return tensor, result.as_numpy("OUT")


def error_of(call, *args, **kwargs) -> TritonError:
    with pytest.raises(TritonError) as info:
        call(*args, **kwargs)
    return info.value


def request_json(inputs: list[dict], **extra) -> bytes:
    return orjson.dumps({"inputs": inputs, **extra})


# ------------------------------------------------------------------------------------------
# round trips through tritonclient


@pytest.mark.parametrize("datatype", [*NUMERIC, "BF16", "BYTES"])
def test_binary_roundtrip_every_datatype(datatype: str) -> None:
    array = sample(datatype)
    tensor, result = roundtrip(array, datatype, binary_in=True, binary_out=True)
    assert tensor.datatype == datatype
    assert tensor.data.shape == (2, 3)
    np.testing.assert_array_equal(tensor.data, as_server_array(array, datatype))
    assert result.dtype == array.dtype
    np.testing.assert_array_equal(result, array)


@pytest.mark.parametrize("datatype", JSON_TYPES)
def test_json_roundtrip_every_datatype(datatype: str) -> None:
    array = sample(datatype)
    tensor, result = roundtrip(array, datatype, binary_in=False, binary_out=False)
    np.testing.assert_array_equal(tensor.data, array)
    assert tensor.data.dtype == (np.dtype(object) if datatype == "BYTES" else array.dtype)
    if datatype == "BYTES":
        # the client keeps JSON strings as str, as it does with Triton
        result = np.vectorize(str.encode, otypes=[object])(result)
    np.testing.assert_array_equal(result, array)


@pytest.mark.parametrize("binary_out", [True, False])
def test_binary_input_is_a_view_on_the_body(binary_out: bool) -> None:
    array = np.arange(64, dtype=np.float32).reshape(1, 64)
    infer_input = httpclient.InferInput("IN", [1, 64], "FP32")
    infer_input.set_data_from_numpy(array)
    body, header_length = build_body([infer_input])
    tensor = decode_request("m", -1, body, header_length).request.inputs["IN"]
    assert tensor.data.base is body  # no copy
    assert not tensor.data.flags.writeable


def test_tritonclient_request_fields() -> None:
    inputs = [httpclient.InferInput("A", [1, 2], "INT32"), httpclient.InferInput("B", [1], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([[1, 2]], dtype=np.int32))
    inputs[1].set_data_from_numpy(np.array([b"x"], dtype=np.object_), binary_data=False)
    outputs = [
        httpclient.InferRequestedOutput("O1", binary_data=True),
        httpclient.InferRequestedOutput("O2", binary_data=False, class_count=3),
    ]
    body, header_length = build_body(
        inputs,
        outputs=outputs,
        request_id="req-7",
        sequence_id=42,
        sequence_start=True,
        priority=2,
        timeout=1000,
        parameters={"custom": "v", "n": 3},
    )
    request, binary, default_binary = decode_request("m", 3, body, header_length)
    assert request.model_name == "m" and request.model_version == 3
    assert request.id == "req-7"
    assert request.correlation_id == 42
    assert request.flags == RequestFlag.SEQUENCE_START
    assert request.priority == 2 and request.timeout_us == 1000
    assert request.parameters == {"custom": "v", "n": 3}
    assert request.outputs == [RequestedOutput("O1"), RequestedOutput("O2", classification=3)]
    assert binary == {"O1": True, "O2": False}
    assert default_binary is False
    assert list(request.inputs) == ["A", "B"]
    np.testing.assert_array_equal(request.inputs["B"].data, np.array([b"x"], dtype=object))


def test_no_outputs_listed_means_all_in_binary() -> None:
    infer_input = httpclient.InferInput("IN", [1], "FP32")
    infer_input.set_data_from_numpy(np.ones(1, np.float32))
    body, header_length = build_body([infer_input])
    decoded = decode_request("m", -1, body, header_length)
    assert decoded.request.outputs is None
    assert decoded.default_binary is True


def test_whole_body_json_without_header() -> None:
    body = request_json([{"name": "IN", "shape": [2], "datatype": "INT64", "data": [1, 2]}])
    decoded = decode_request("m", -1, body)
    np.testing.assert_array_equal(decoded.request.inputs["IN"].data, [1, 2])


# ------------------------------------------------------------------------------------------
# JSON data


def test_json_data_nested_or_flat() -> None:
    for data in ([1, 2, 3, 4, 5, 6], [[1, 2, 3], [4, 5, 6]], [[1, 2], [3, 4], [5, 6]]):
        body = request_json([{"name": "X", "shape": [2, 3], "datatype": "INT32", "data": data}])
        array = decode_request("m", -1, body).request.inputs["X"].data
        np.testing.assert_array_equal(array, np.arange(1, 7).reshape(2, 3))
        assert array.dtype == np.int32


def test_json_ragged_nesting_counts_elements() -> None:
    body = request_json([{"name": "X", "shape": [3], "datatype": "FP32", "data": [[1], [2, 3]]}])
    np.testing.assert_array_equal(decode_request("m", -1, body).request.inputs["X"].data, [1, 2, 3])


def test_json_bool_and_bytes() -> None:
    body = request_json(
        [
            {"name": "B", "shape": [2], "datatype": "BOOL", "data": [True, False]},
            {"name": "S", "shape": [1, 2], "datatype": "BYTES", "data": [["a\u0000b", "é"]]},
        ]
    )
    inputs = decode_request("m", -1, body).request.inputs
    assert inputs["B"].data.tolist() == [True, False]
    assert inputs["S"].data.tolist() == [[b"a\x00b", "é".encode()]]


def test_json_uint64_above_int64() -> None:
    big = 2**64 - 1
    body = request_json([{"name": "X", "shape": [2], "datatype": "UINT64", "data": [1, big]}])
    array = decode_request("m", -1, body).request.inputs["X"].data
    assert array.dtype == np.uint64 and array.tolist() == [1, big]


@pytest.mark.parametrize(
    ("datatype", "data"),
    [
        ("INT32", [1, "2"]),
        ("INT32", [1.5, 2]),
        ("FP32", [True, False]),
        ("BOOL", [1, 0]),
        ("UINT8", [-1, 2]),
        ("INT64", [None, 1]),
        ("BYTES", ["a", 1]),
        ("FP64", [{"a": 1}, 2]),
    ],
)
def test_json_data_of_the_wrong_type(datatype: str, data: list) -> None:
    body = request_json([{"name": "X", "shape": [2], "datatype": datatype, "data": data}])
    error = error_of(decode_request, "mdl", -1, body)
    assert error.status is Status.INVALID_ARG
    assert "'X'" in error.message and "'mdl'" in error.message


@pytest.mark.parametrize("data", [[1, 2, 3], [1], []])
def test_json_data_count_must_match_shape(data: list) -> None:
    body = request_json([{"name": "X", "shape": [1, 2], "datatype": "FP32", "data": data}])
    error = error_of(decode_request, "mdl", -1, body)
    assert "Shape does not match true shape of 'data' field" in error.message
    assert "'X'" in error.message and "'mdl'" in error.message


def test_json_bytes_count_must_match_shape() -> None:
    body = request_json([{"name": "S", "shape": [3], "datatype": "BYTES", "data": ["a", "b"]}])
    assert "Shape does not match" in error_of(decode_request, "m", -1, body).message


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_precision_in_json_is_rejected(datatype: str) -> None:
    body = request_json([{"name": "H", "shape": [1], "datatype": datatype, "data": [1.0]}])
    error = error_of(decode_request, "mdl", -1, body)
    assert error.status is Status.INVALID_ARG
    assert error.message.startswith(f"receiving {datatype} data via JSON is not supported")
    assert "'H'" in error.message and "'mdl'" in error.message


def test_zero_element_input_needs_no_data() -> None:
    body = request_json([{"name": "E", "shape": [0, 4], "datatype": "FP32"}])
    array = decode_request("m", -1, body).request.inputs["E"].data
    assert array.shape == (0, 4) and array.dtype == np.float32


# ------------------------------------------------------------------------------------------
# binary data


def binary_request(inputs: list[tuple[dict, bytes]], header: bool = True) -> tuple[bytes, int]:
    doc = request_json([meta for meta, _ in inputs])
    return doc + b"".join(blob for _, blob in inputs), len(doc)


def bin_input(name: str, datatype: str, shape: list[int], size: int) -> dict:
    return {
        "name": name,
        "datatype": datatype,
        "shape": shape,
        "parameters": {"binary_data_size": size},
    }


def test_several_binary_inputs_in_json_order() -> None:
    a = np.arange(4, dtype=np.int16)
    b = np.array([1.5, -2.5], dtype=np.float64)
    body, length = binary_request(
        [
            (bin_input("A", "INT16", [4], 8), a.tobytes()),
            (bin_input("B", "FP64", [2], 16), b.tobytes()),
        ]
    )
    inputs = decode_request("m", -1, body, length).request.inputs
    np.testing.assert_array_equal(inputs["A"].data, a)
    np.testing.assert_array_equal(inputs["B"].data, b)


def test_binary_size_that_does_not_match_the_shape() -> None:
    body, length = binary_request([(bin_input("X", "FP32", [1, 4], 12), bytes(12))])
    error = error_of(decode_request, "mdl", -1, body, length)
    assert error.message == (
        "input byte size mismatch for input 'X' for model 'mdl'. Expected 16, got 12"
    )


def test_binary_blob_missing_from_the_body() -> None:
    body, length = binary_request([(bin_input("X", "FP32", [4], 16), bytes(10))])
    error = error_of(decode_request, "mdl", -1, body, length)
    assert error.message == (
        "unexpected size for input 'X', expecting 6 additional bytes for model 'mdl'"
    )


def test_binary_input_without_header_length() -> None:
    body, _ = binary_request([(bin_input("X", "FP32", [4], 16), bytes(16))])
    # without the header the whole body is JSON: a JSON parse error
    assert error_of(decode_request, "m", -1, body).status is Status.INVALID_ARG


def test_leftover_bytes_after_the_blobs() -> None:
    body, length = binary_request([(bin_input("X", "UINT8", [2], 2), b"\x01\x02\x03")])
    error = error_of(decode_request, "mdl", -1, body, length)
    assert error.message == "unexpected additional input data for model 'mdl'"


def test_zero_size_binary_input() -> None:
    body, length = binary_request([(bin_input("X", "FP32", [0], 0), b"")])
    assert decode_request("m", -1, body, length).request.inputs["X"].data.shape == (0,)


def bytes_blob(*items: bytes) -> bytes:
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def test_binary_bytes_with_embedded_nul() -> None:
    blob = bytes_blob(b"a\x00b", b"", b"\x00\xff")
    body, length = binary_request([(bin_input("S", "BYTES", [3], len(blob)), blob)])
    data = decode_request("m", -1, body, length).request.inputs["S"].data
    assert data.tolist() == [b"a\x00b", b"", b"\x00\xff"]


@pytest.mark.parametrize(
    "blob",
    [
        bytes_blob(b"ab") + b"\x01\x00",  # truncated length prefix
        bytes_blob(b"ab") + struct.pack("<I", 10) + b"xyz",  # length past the end
        bytes_blob(b"ab"),  # one element short
        bytes_blob(b"a", b"b", b"c"),  # one element too many
    ],
)
def test_broken_bytes_length_prefixes(blob: bytes) -> None:
    body, length = binary_request([(bin_input("S", "BYTES", [2], len(blob)), blob)])
    error = error_of(decode_request, "mdl", -1, body, length)
    assert error.status is Status.INVALID_ARG
    assert "'S'" in error.message and "'mdl'" in error.message


# ------------------------------------------------------------------------------------------
# malformed requests


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "failed to parse the request JSON buffer"),
        (b"[]", "Unable to parse 'inputs'"),
        (b'{"inputs": {}}', "Unable to parse 'inputs'"),
        (b'{"inputs": [1]}', "Unable to parse 'inputs'"),
        (b'{"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}', "'name'"),
        (b'{"inputs": [{"name": "X", "shape": [1], "data": [1]}]}', "'datatype'"),
        (b'{"inputs": [{"name": "X", "datatype": "FP32", "data": [1]}]}', "'shape'"),
        (b'{"inputs": [{"name": "X", "shape": [-1], "datatype": "FP32", "data": [1]}]}', "'shape'"),
        (
            b'{"inputs": [{"name": "X", "shape": [1.0], "datatype": "FP32", "data": [1]}]}',
            "'shape'",
        ),
        (b'{"inputs": [{"name": "X", "shape": [1], "datatype": "FP8", "data": [1]}]}', "datatype"),
        (b'{"inputs": [{"name": "X", "shape": [1], "datatype": "FP32", "data": 1}]}', "'data'"),
        (b'{"inputs": [], "id": 5}', "'id'"),
        (b'{"inputs": [], "outputs": {}}', "'outputs'"),
        (b'{"inputs": [], "outputs": [{"name": 1}]}', "'name'"),
        (
            b'{"inputs": [], "outputs": [{"name": "O", "parameters": {"binary_data": 1}}]}',
            "'binary_data'",
        ),
        (
            b'{"inputs": [], "outputs": [{"name": "O", "parameters": {"classification": -1}}]}',
            "'classification'",
        ),
        (b'{"inputs": [], "parameters": {"binary_data_output": "yes"}}', "'binary_data_output'"),
        (b'{"inputs": [], "parameters": {"triton_x": 1}}', "reserved"),
        (b'{"inputs": [], "parameters": {"nested": {"a": 1}}}', "invalid type"),
        (b'{"inputs": [], "parameters": {"sequence_start": 1}}', "'sequence_start'"),
    ],
)
def test_malformed_request(body: bytes, fragment: str) -> None:
    error = error_of(decode_request, "m", -1, body)
    assert error.status is Status.INVALID_ARG
    assert fragment in error.message


def test_duplicate_input() -> None:
    x = {"name": "X", "shape": [1], "datatype": "FP32", "data": [1]}
    assert "already exists" in error_of(decode_request, "m", -1, request_json([x, x])).message


@pytest.mark.parametrize(
    ("input_json", "fragment"),
    [
        ({"name": "X", "shape": [1], "datatype": "FP32"}, "But no field is set"),
        (
            {"name": "X", "shape": [1], "datatype": "FP32", "data": [1]}
            | {"parameters": {"binary_data_size": 4}},
            "But set 'data' 'binary_data_size'",
        ),
    ],
)
def test_input_must_set_exactly_one_content_field(input_json: dict, fragment: str) -> None:
    error = error_of(decode_request, "m", -1, request_json([input_json]))
    assert error.message.startswith("Input must set only one of the following fields")
    assert fragment in error.message


def test_shared_memory_tensors_decode_to_references() -> None:
    shm = {"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": 8}
    body = request_json(
        [{"name": "X", "shape": [1], "datatype": "FP32", "parameters": shm}],
        outputs=[{"name": "O", "parameters": shm | {"binary_data": False}}],
    )
    decoded = decode_request("m", -1, body)
    tensors = decoded.request.shared_memory
    assert tensors is not None and decoded.request.inputs == {}
    assert tensors.inputs["X"] == SharedMemoryInput("FP32", (1,), SharedMemoryRef("r", 4, 8))
    assert tensors.outputs == {"O": SharedMemoryRef("r", 4, 8)}
    body = request_json([], outputs=[{"name": "O", "parameters": shm | {"binary_data": True}}])
    assert "can't set both" in error_of(decode_request, "m", -1, body).message


@pytest.mark.parametrize(
    "bad",
    [
        {"shared_memory_region": 3, "shared_memory_byte_size": 4},
        {"shared_memory_region": "r", "shared_memory_byte_size": -1},
        {"shared_memory_region": "r", "shared_memory_byte_size": "4"},
        {"shared_memory_region": "r", "shared_memory_byte_size": 4, "shared_memory_offset": 1.5},
        {"shared_memory_region": "r", "shared_memory_byte_size": True},
    ],
)
def test_shared_memory_parameters_are_checked(bad: dict) -> None:
    body = request_json([{"name": "X", "shape": [1], "datatype": "FP32", "parameters": bad}])
    error = error_of(decode_request, "m", -1, body)
    assert error.status is Status.INVALID_ARG and "Unable to parse 'shared_memory_" in error.message
    assert "input 'X'" in error.message


# ------------------------------------------------------------------------------------------
# output format choice (PROTOCOL 1.4 GOTCHA)


def output_formats(outputs: list | None, binary_data_output: bool | None) -> dict[str, str]:
    extra: dict = {}
    if outputs is not None:
        extra["outputs"] = outputs
    if binary_data_output is not None:
        extra["parameters"] = {"binary_data_output": binary_data_output}
    decoded = decode_request("m", -1, request_json([], **extra))
    response = InferenceResponse(
        outputs=[
            Tensor("A", "INT32", np.arange(2, dtype=np.int32)),
            Tensor("B", "INT32", np.arange(3, dtype=np.int32)),
        ],
        model_name="m",
        model_version=1,
    )
    body, headers = encode_response(response, decoded.binary_outputs, decoded.default_binary)
    length = int(headers.get(HEADER_LENGTH, len(body)))
    doc = orjson.loads(body[:length])
    return {o["name"]: ("binary" if "parameters" in o else "json") for o in doc["outputs"]}


def test_listed_outputs_use_only_their_own_binary_data() -> None:
    listed = [{"name": "A", "parameters": {"binary_data": True}}, {"name": "B"}]
    assert output_formats(listed, None) == {"A": "binary", "B": "json"}
    # binary_data_output does not apply to a listed output without binary_data
    assert output_formats(listed, True) == {"A": "binary", "B": "json"}


def test_unlisted_outputs_follow_binary_data_output() -> None:
    listed = [{"name": "A", "parameters": {"binary_data": False}}]
    assert output_formats(listed, True) == {"A": "json", "B": "binary"}
    assert output_formats(None, True) == {"A": "binary", "B": "binary"}
    assert output_formats(None, False) == {"A": "json", "B": "json"}
    assert output_formats(None, None) == {"A": "json", "B": "json"}
    assert output_formats([], True) == {"A": "binary", "B": "binary"}


# ------------------------------------------------------------------------------------------
# response encoding


def test_response_layout_and_headers() -> None:
    response = InferenceResponse(
        outputs=[
            Tensor("J", "INT8", np.array([[1, -2]], dtype=np.int8)),
            Tensor("B1", "FP32", np.array([1.5], dtype=np.float32)),
            Tensor("E", "FP32", np.zeros((0, 3), dtype=np.float32)),
            Tensor("B2", "UINT16", np.array([7, 8], dtype=np.uint16)),
        ],
        parameters={"p": 1, "q": "s", "r": True, "f": 0.5},
        model_name="m",
        model_version=4,
        id="abc",
    )
    body, headers = encode_response(response, {"J": False}, True)
    length = int(headers[HEADER_LENGTH])
    assert headers["Content-Type"] == "application/octet-stream"
    doc = orjson.loads(body[:length])
    assert list(doc) == ["id", "model_name", "model_version", "parameters", "outputs"]
    assert doc["model_version"] == "4" and doc["id"] == "abc"
    assert doc["parameters"] == {"p": 1, "q": "s", "r": True, "f": 0.5}
    assert doc["outputs"][0] == {"name": "J", "datatype": "INT8", "shape": [1, 2], "data": [1, -2]}
    assert [o["parameters"]["binary_data_size"] for o in doc["outputs"][1:]] == [4, 0, 4]
    # blobs in output order; the zero-size output contributes nothing
    assert body[length:] == np.float32(1.5).tobytes() + np.array([7, 8], np.uint16).tobytes()
    result = parse_body(body, header_length=length)
    assert result.as_numpy("E").size == 0
    np.testing.assert_array_equal(result.as_numpy("B2"), [7, 8])


def test_json_only_response_has_no_header_length() -> None:
    response = InferenceResponse(
        outputs=[Tensor("O", "FP64", np.array([0.25]))], model_name="m", model_version=1
    )
    body, headers = encode_response(response, {}, False)
    assert headers == {"Content-Type": "application/json"}
    assert list(orjson.loads(body)) == ["model_name", "model_version", "outputs"]


def test_non_contiguous_and_mistyped_outputs() -> None:
    base = np.arange(12, dtype=np.int64).reshape(3, 4)
    response = InferenceResponse(
        outputs=[
            Tensor("T", "INT64", base.T),
            Tensor("S", "INT32", base[:, ::2]),  # int64 data declared INT32
            Tensor("U", "BOOL", np.array([0, 2], dtype=np.uint8)),
        ],
        model_name="m",
        model_version=1,
    )
    for binary in (True, False):
        body, headers = encode_response(response, {}, binary)
        length = headers.get(HEADER_LENGTH)
        result = parse_body(body, header_length=int(length) if length else None)
        np.testing.assert_array_equal(result.as_numpy("T"), base.T)
        np.testing.assert_array_equal(result.as_numpy("S"), base[:, ::2])
        assert result.as_numpy("S").dtype == np.int32
        assert result.as_numpy("U").tolist() == [False, True]


def test_nan_and_infinity_in_json() -> None:
    values = np.array([np.nan, np.inf, -np.inf, 1.0, 2.5], dtype=np.float32)
    response = InferenceResponse(
        outputs=[Tensor("O", "FP32", values), Tensor("I", "INT32", np.array([1], np.int32))],
        model_name="null",
        model_version=1,
    )
    body, _ = encode_response(response, {}, False)
    assert b"[NaN,Infinity,-Infinity,1.0,2.5]" in body
    result = parse_body(body)
    np.testing.assert_array_equal(result.as_numpy("O"), values)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_precision_output_in_json_is_rejected(datatype: str) -> None:
    response = InferenceResponse(
        outputs=[Tensor("O", datatype, np.zeros(2, dtype=np.uint16))], model_name="m"
    )
    error = error_of(encode_response, response, {}, False)
    assert error.status is Status.INVALID_ARG
    assert error.message.startswith(f"sending {datatype} data via JSON is not supported")


def test_bytes_output_json_and_binary() -> None:
    values = np.array([b"a\x00b", "é", b""], dtype=object)
    response = InferenceResponse(outputs=[Tensor("S", "BYTES", values)], model_name="m")
    body, _ = encode_response(response, {}, False)
    assert parse_body(body).as_numpy("S").tolist() == ["a\x00b", "é", ""]
    body, headers = encode_response(response, {}, True)
    result = parse_body(body, header_length=int(headers[HEADER_LENGTH]))
    assert result.as_numpy("S").tolist() == [b"a\x00b", "é".encode(), b""]


def test_bytes_output_that_is_not_utf8_is_written_raw_like_triton() -> None:
    values = np.array([b'\xff"q\\', b"ok"], dtype=object)
    response = InferenceResponse(outputs=[Tensor("S", "BYTES", values)], model_name="m")
    body, _ = encode_response(response, {}, False)
    assert b'"data":["\xff\\"q\\\\","ok"]' in body
    # the stock client then asks for binary_data, as it does with Triton
    with pytest.raises(InferenceServerException, match="binary_data=True"):
        parse_body(body)


def test_compressed_body_parses_with_the_client() -> None:
    response = InferenceResponse(
        outputs=[Tensor("O", "FP32", np.arange(10, dtype=np.float32))],
        model_name="m",
        model_version=1,
    )
    body, headers = encode_response(response, {}, True)
    result = parse_body(
        gzip.compress(body), header_length=int(headers[HEADER_LENGTH]), content_encoding="gzip"
    )
    np.testing.assert_array_equal(result.as_numpy("O"), np.arange(10))


# ------------------------------------------------------------------------------------------
# raw binary request


def raw_config(data_type: str, dims: list[int], max_batch_size: int = 8, n: int = 1) -> dict:
    inputs = [{"name": f"IN{i}", "data_type": data_type, "dims": dims} for i in range(n)]
    return {"name": "m", "max_batch_size": max_batch_size, "input": inputs}


def test_raw_request_batching_model_with_variable_dim() -> None:
    values = np.arange(6, dtype=np.float32)
    decoded = decode_raw_request("m", 2, values.tobytes(), raw_config("TYPE_FP32", [-1]))
    tensor = decoded.request.inputs["IN0"]
    assert tensor.datatype == "FP32" and tensor.data.shape == (1, 6)
    np.testing.assert_array_equal(tensor.data[0], values)
    assert decoded.request.model_version == 2
    assert decoded.request.outputs is None and decoded.default_binary is True


def test_raw_request_fixed_shape_non_batching() -> None:
    body = np.arange(4, dtype=np.int32).tobytes()
    tensor = decode_raw_request("m", -1, body, raw_config("TYPE_INT32", [2, 2], 0)).request.inputs[
        "IN0"
    ]
    assert tensor.data.shape == (2, 2)
    error = error_of(decode_raw_request, "m", -1, body[:12], raw_config("TYPE_INT32", [2, 2], 0))
    assert error.message.startswith("input byte size mismatch for input 'IN0' for model 'm'")


def test_raw_request_bytes() -> None:
    decoded = decode_raw_request("m", -1, b"\x00raw", raw_config("TYPE_STRING", [1]))
    assert decoded.request.inputs["IN0"].data.tolist() == [[b"\x00raw"]]
    error = error_of(decode_raw_request, "m", -1, b"x", raw_config("TYPE_STRING", [-1]))
    assert "must have input shape [1]" in error.message


def test_raw_request_needs_one_input_and_one_variable_dim() -> None:
    error = error_of(decode_raw_request, "m", -1, b"", raw_config("TYPE_FP32", [4], n=2))
    assert error.message.startswith("Raw request must only have 1 input")
    error = error_of(decode_raw_request, "m", -1, b"", raw_config("TYPE_FP32", [-1, -1]))
    assert "more than one variable-sized dimension" in error.message


# ------------------------------------------------------------------------------------------
# a request header seen before is not parsed again


def binary_body(values: np.ndarray, **options: object) -> tuple[bytes, int]:
    infer_input = httpclient.InferInput("INPUT0", list(values.shape), "FP32")
    infer_input.set_data_from_numpy(values, binary_data=True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    return build_body([infer_input], outputs=outputs, **options)


def test_requests_with_the_same_header_get_their_own_data_and_fields() -> None:
    first_body, length = binary_body(np.zeros((1, 4), np.float32), sequence_id=7)
    second_body, second_length = binary_body(np.ones((1, 4), np.float32), sequence_id=7)
    assert first_body[:length] == second_body[:second_length]  # same JSON, other data
    first = decode_request("m", -1, first_body, length)
    second = decode_request("m", -1, second_body, second_length)
    assert first.request.inputs["INPUT0"].data.tolist() == [[0, 0, 0, 0]]
    assert second.request.inputs["INPUT0"].data.tolist() == [[1, 1, 1, 1]]
    for decoded in (first, second):
        assert decoded.request.correlation_id == 7
        assert [o.name for o in decoded.request.outputs or []] == ["OUTPUT0"]
        assert decoded.binary_outputs == {"OUTPUT0": True}
    assert first.request.outputs is not second.request.outputs
    assert first.request is not second.request


def test_a_known_header_still_checks_the_binary_data_against_the_body() -> None:
    body, length = binary_body(np.zeros((1, 4), np.float32))
    decode_request("m", -1, body, length)
    with pytest.raises(TritonError, match="expecting 4 additional bytes"):
        decode_request("m", -1, body[:-4], length)
    with pytest.raises(TritonError, match="unexpected additional input data"):
        decode_request("m", -1, body + b"\0" * 4, length)


def test_values_in_the_json_are_decoded_for_each_request() -> None:
    body = orjson.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "INT32", "data": [1, 2]}]}
    )
    first, second = decode_request("m", -1, body), decode_request("m", -1, body)
    first.request.inputs["INPUT0"].data[0] = 5
    assert second.request.inputs["INPUT0"].data.tolist() == [1, 2]


def test_a_header_that_fails_is_refused_every_time() -> None:
    body = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "INPUT0",
                    "shape": [1],
                    "datatype": "INT32",
                    "parameters": {"binary_data_size": 4},
                }
            ],
            "parameters": {"triton_reserved": 1},
        }
    )
    for _ in range(2):
        with pytest.raises(TritonError, match="reserved for Triton usage"):
            decode_request("m", -1, body + b"\0" * 4, len(body))
