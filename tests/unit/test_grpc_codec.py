"""gRPC codec: ModelInferRequest/Response <-> triton_core.types, checked against tritonclient."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as tc
from tritonclient.grpc import _utils as tc_utils
from tritonclient.grpc import service_pb2 as tc_pb

from triton_core.errors import Status, TritonError
from triton_core.frontends.grpc.codec import (
    decode_infer_request,
    decode_stream_request,
    encode_infer_response,
    encode_stream_error,
    encode_stream_response,
)
from triton_core.protos import grpc_service_pb2 as pb
from triton_core.shared_memory.refs import SharedMemoryInput, SharedMemoryRef
from triton_core.tensors.dtypes import NUMPY_DTYPES
from triton_core.types import InferenceRequest, InferenceResponse, RequestFlag, Tensor

FIXED_TYPES = [name for name in NUMPY_DTYPES if name != "BYTES"]


def sample(datatype: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray:
    """Values of a datatype as the server holds them (BF16 as uint16 bits)."""
    count = int(np.prod(shape))
    if datatype == "BYTES":
        items = [b"a\x00b", b"", "\u00e9".encode(), b"\x00\x00", b"xyz" * 5, b"\xff"]
        data = np.empty(count, dtype=object)
        data[:] = (items * count)[:count]
        return data.reshape(shape)
    if datatype == "BOOL":
        return (np.arange(count) % 2 == 0).reshape(shape)
    if datatype == "BF16":
        values = np.linspace(-2, 2, count).astype(ml_dtypes.bfloat16)
        return values.view(np.uint16).reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    if dtype.kind == "f":
        return np.linspace(-1.5, 1.5, count).astype(dtype).reshape(shape)
    info = np.iinfo(dtype)
    extremes = [int(info.min), int(info.max), 0, 1, int(info.min) + 1, int(info.max) - 1]
    return np.array((extremes * count)[:count], dtype=dtype).reshape(shape)


def to_client_array(datatype: str, data: np.ndarray) -> np.ndarray:
    return data.view(ml_dtypes.bfloat16) if datatype == "BF16" else data


def client_request(
    inputs: list[tc.InferInput], model: str = "m", **kwargs: object
) -> pb.ModelInferRequest:
    """A request built by tritonclient itself, re-read in our descriptor pool."""
    args: dict[str, object] = {
        "model_version": "",
        "request_id": "",
        "outputs": None,
        "sequence_id": 0,
        "sequence_start": False,
        "sequence_end": False,
        "priority": 0,
        "timeout": None,
        "parameters": None,
    }
    args.update(kwargs)
    message = tc_utils._get_inference_request(model_name=model, inputs=inputs, **args)
    return pb.ModelInferRequest.FromString(message.SerializeToString())


def client_input(name: str, datatype: str, data: np.ndarray) -> tc.InferInput:
    tensor = tc.InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(to_client_array(datatype, data))
    return tensor


def check_error(exc: pytest.ExceptionInfo[TritonError], status: Status, *fragments: str) -> None:
    assert exc.value.status is status, exc.value
    for fragment in fragments:
        assert fragment in exc.value.message, (fragment, exc.value.message)


# ---------------------------------------------------------------------------------------
# requests: raw contents


@pytest.mark.parametrize("datatype", [*FIXED_TYPES, "BYTES"])
def test_raw_round_trip_from_tritonclient(datatype: str) -> None:
    data = sample(datatype)
    request = decode_infer_request(client_request([client_input("x", datatype, data)]))
    tensor = request.inputs["x"]
    assert tensor.name == "x"
    assert tensor.datatype == datatype
    assert tensor.shape == data.shape
    if datatype == "BYTES":
        assert tensor.data.dtype == object
        assert tensor.data.tolist() == data.tolist()
    else:
        assert tensor.data.dtype == NUMPY_DTYPES[datatype]
        np.testing.assert_array_equal(tensor.data, data)


def test_raw_input_is_a_view_on_the_message_bytes() -> None:
    data = np.arange(64, dtype=np.float32).reshape(1, 64)
    request = decode_infer_request(client_request([client_input("x", "FP32", data)]))
    array = request.inputs["x"].data
    assert not array.flags.owndata  # a view, no copy
    assert isinstance(array.base, bytes)
    assert not array.flags.writeable


def test_bytes_with_embedded_nul_and_empty_elements() -> None:
    data = np.array([[b"\x00", b"a\x00\x00b"], [b"", b"\x00end"]], dtype=object)
    request = decode_infer_request(client_request([client_input("s", "BYTES", data)]))
    assert request.inputs["s"].data.tolist() == data.tolist()


def test_several_inputs_keep_their_order_and_names() -> None:
    a = sample("INT32", (4,))
    b = sample("BYTES", (1, 2))
    c = sample("FP16", (2, 2))
    message = client_request(
        [client_input("a", "INT32", a), client_input("b", "BYTES", b), client_input("c", "FP16", c)]
    )
    request = decode_infer_request(message)
    assert list(request.inputs) == ["a", "b", "c"]
    np.testing.assert_array_equal(request.inputs["a"].data, a)
    assert request.inputs["b"].data.tolist() == b.tolist()
    np.testing.assert_array_equal(request.inputs["c"].data, c)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2)])
def test_scalar_and_empty_shapes(shape: tuple[int, ...]) -> None:
    data = sample("FP32", shape)
    request = decode_infer_request(client_request([client_input("x", "FP32", data)]))
    assert request.inputs["x"].shape == shape


def test_request_fields_and_defaults() -> None:
    data = sample("FP32", (1, 4))
    message = client_request([client_input("x", "FP32", data)], model="mlp", model_version="3")
    message.id = "req-7"
    request = decode_infer_request(message)
    assert request.model_name == "mlp"
    assert request.model_version == 3
    assert request.id == "req-7"
    assert request.outputs is None  # no outputs named: all of them
    assert request.parameters == {}
    assert request.flags == RequestFlag.NONE

    unversioned = decode_infer_request(client_request([client_input("x", "FP32", data)]))
    assert unversioned.model_version == -1


def test_requested_outputs_and_classification() -> None:
    data = sample("FP32", (1, 4))
    outputs = [tc.InferRequestedOutput("probs", class_count=3), tc.InferRequestedOutput("y")]
    request = decode_infer_request(
        client_request([client_input("x", "FP32", data)], outputs=outputs)
    )
    assert request.outputs is not None
    assert [(o.name, o.classification) for o in request.outputs] == [("probs", 3), ("y", 0)]
    assert request.output_names() == ["probs", "y"]


def test_reserved_and_custom_parameters_from_tritonclient() -> None:
    data = sample("FP32", (1, 4))
    message = client_request(
        [client_input("x", "FP32", data)],
        sequence_id=42,
        sequence_start=True,
        sequence_end=False,
        priority=5,
        timeout=1000,
        parameters={"temperature": 0.5, "mode": "fast", "top_k": 3, "flag": True},
    )
    request = decode_infer_request(message)
    assert request.correlation_id == 42
    assert request.flags == RequestFlag.SEQUENCE_START
    assert request.priority == 5  # tritonclient sends uint64_param
    assert request.timeout_us == 1000
    assert request.parameters == {"temperature": 0.5, "mode": "fast", "top_k": 3, "flag": True}


def test_string_sequence_id_and_sequence_end() -> None:
    data = sample("FP32", (1, 4))
    message = client_request(
        [client_input("x", "FP32", data)],
        sequence_id="session-1",
        sequence_start=False,
        sequence_end=True,
    )
    request = decode_infer_request(message)
    assert request.correlation_id == "session-1"
    assert request.flags == RequestFlag.SEQUENCE_END


def test_empty_final_response_flag_is_read_on_streams() -> None:
    data = sample("FP32", (1, 4))
    message = client_request([client_input("x", "FP32", data)])
    assert decode_stream_request(message)[1] is False
    message.parameters["triton_enable_empty_final_response"].bool_param = True
    request, empty_final = decode_stream_request(message)
    assert empty_final is True
    assert "triton_enable_empty_final_response" not in request.parameters
    # Triton's unary handler accepts (and ignores) it too
    assert decode_infer_request(message).parameters == {}


# ---------------------------------------------------------------------------------------
# requests: typed contents


TYPED_FIELDS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def typed_request(
    datatype: str, data: np.ndarray, field: str | None = None
) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype=datatype, shape=data.shape)
    getattr(tensor.contents, field or TYPED_FIELDS[datatype]).extend(data.flatten().tolist())
    return message


@pytest.mark.parametrize("datatype", list(TYPED_FIELDS))
def test_typed_contents_round_trip(datatype: str) -> None:
    data = sample(datatype)
    tensor = decode_infer_request(typed_request(datatype, data)).inputs["x"]
    assert tensor.datatype == datatype
    assert tensor.shape == data.shape
    if datatype == "BYTES":
        assert tensor.data.tolist() == data.tolist()
    else:
        assert tensor.data.dtype == NUMPY_DTYPES[datatype]
        np.testing.assert_array_equal(tensor.data, data)


def test_typed_contents_through_the_wire_from_tritonclient_messages() -> None:
    message = tc_pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype="INT16", shape=[3])
    tensor.contents.int_contents.extend([-32768, 0, 32767])
    request = decode_infer_request(pb.ModelInferRequest.FromString(message.SerializeToString()))
    np.testing.assert_array_equal(request.inputs["x"].data, np.array([-32768, 0, 32767], np.int16))


def test_typed_contents_with_zero_elements() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="FP32", shape=[0, 4]).contents.SetInParent()
    assert decode_infer_request(message).inputs["x"].shape == (0, 4)


@pytest.mark.parametrize("datatype", ["FP16", "BF16"])
def test_half_types_cannot_use_typed_contents(datatype: str) -> None:
    message = typed_request(datatype, np.zeros(4, np.float32), field="fp32_contents")
    with pytest.raises(TritonError) as exc:
        decode_infer_request(message)
    check_error(exc, Status.INVALID_ARG, "'x'", "'m'", datatype, "raw_input_contents")


def test_typed_contents_wrong_field_for_datatype() -> None:
    message = typed_request("FP32", np.arange(3, dtype=np.int64), field="int64_contents")
    with pytest.raises(TritonError) as exc:
        decode_infer_request(message)
    check_error(
        exc,
        Status.INVALID_ARG,
        "input tensor 'x' for model 'm'",
        "'INT64'",
        "expected datatype 'FP32'",
    )


def test_typed_contents_wrong_element_count() -> None:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype="INT32", shape=[2, 2])
    tensor.contents.int_contents.extend([1, 2, 3])
    with pytest.raises(TritonError) as exc:
        decode_infer_request(message)
    check_error(exc, Status.INVALID_ARG, "'x'", "'m'", "Expected 4, got 3")


def test_typed_contents_two_fields() -> None:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="x", datatype="INT32", shape=[1])
    tensor.contents.int_contents.append(1)
    tensor.contents.fp32_contents.append(1.0)
    with pytest.raises(TritonError) as exc:
        decode_infer_request(message)
    check_error(exc, Status.INVALID_ARG, "'x'", "'m'", "more than one contents field")


# ---------------------------------------------------------------------------------------
# requests: wire errors


def decode_error(message: pb.ModelInferRequest) -> TritonError:
    with pytest.raises(TritonError) as exc:
        decode_infer_request(message)
    return exc.value


def test_contents_together_with_raw_contents() -> None:
    message = client_request(
        [
            client_input("a", "FP32", sample("FP32", (2,))),
            client_input("b", "FP32", sample("FP32", (2,))),
        ]
    )
    message.inputs[1].contents.fp32_contents.extend([1.0, 2.0])
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert error.message == (
        "contents field must not be specified when using raw_input_contents for 'b' for model 'm'"
    )


def test_too_few_raw_contents_names_the_input() -> None:
    message = client_request(
        [
            client_input("a", "FP32", sample("FP32", (2,))),
            client_input("b", "FP32", sample("FP32", (2,))),
        ]
    )
    del message.raw_input_contents[1]
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert error.message == "unable to find data for input tensor 'b' for model 'm' in request."


def test_too_many_raw_contents() -> None:
    message = client_request([client_input("a", "FP32", sample("FP32", (2,)))])
    message.raw_input_contents.append(b"\x00" * 8)
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert "expected 1 raw_input_contents" in error.message and "'m'" in error.message


def test_no_data_at_all() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="FP32", shape=[1])
    error = decode_error(message)
    assert error.message == "unable to find data for input tensor 'x' for model 'm' in request."


@pytest.mark.parametrize("datatype", ["FP32", "INT64", "BOOL", "BF16"])
def test_raw_byte_size_mismatch(datatype: str) -> None:
    message = client_request([client_input("x", datatype, sample(datatype, (2, 2)))])
    message.inputs[0].shape[:] = [2, 3]
    itemsize = NUMPY_DTYPES[datatype].itemsize
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert error.message == (
        f"input byte size mismatch for input 'x' for model 'm'. "
        f"Expected {6 * itemsize}, got {4 * itemsize}"
    )


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"\x05\x00\x00\x00abc", "declares 5 bytes"),  # length runs past the end
        (b"\x01\x00\x00\x00a\x02\x00", "truncated length prefix"),  # cut-short prefix
    ],
)
def test_broken_bytes_length_prefixes(raw: bytes, fragment: str) -> None:
    message = pb.ModelInferRequest(model_name="m", raw_input_contents=[raw])
    message.inputs.add(name="s", datatype="BYTES", shape=[1])
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert "input 's' for model 'm'" in error.message
    assert fragment in error.message


def test_bytes_element_count_mismatch() -> None:
    message = client_request([client_input("s", "BYTES", sample("BYTES", (3,)))])
    message.inputs[0].shape[:] = [4]
    error = decode_error(message)
    assert error.message == (
        "expected 4 string elements for inference input 's' for model 'm', got 3"
    )


def test_invalid_datatype() -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (2,)))])
    message.inputs[0].datatype = "FLOAT"
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert error.message == "invalid datatype 'FLOAT' for input 'x' for model 'm'"


def test_negative_dimension() -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (0,)))])
    message.inputs[0].shape[:] = [0, -1]
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert "'x'" in error.message and "must not be negative" in error.message


def test_duplicate_input_names() -> None:
    data = sample("FP32", (2,))
    message = client_request([client_input("x", "FP32", data), client_input("x", "FP32", data)])
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert "'x'" in error.message and "'m'" in error.message


def test_bad_model_version() -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (2,)))], model_version="v1")
    assert decode_error(message).status is Status.INVALID_ARG


def test_shared_memory_tensors_decode_to_references() -> None:
    message = client_request(
        [
            client_input("x", "FP32", sample("FP32", (2,))),
            client_input("y", "FP32", sample("FP32", (2,))),
        ]
    )
    del message.raw_input_contents[0]  # x is in shared memory: y's raw contents come first
    message.inputs[0].parameters["shared_memory_region"].string_param = "region0"
    message.inputs[0].parameters["shared_memory_byte_size"].int64_param = 8
    message.inputs[0].parameters["shared_memory_offset"].int64_param = 16
    output = message.outputs.add(name="out")
    output.parameters["shared_memory_region"].string_param = "out0"
    output.parameters["shared_memory_byte_size"].int64_param = 8
    request = decode_infer_request(message)
    assert list(request.inputs) == ["y"]
    assert request.shared_memory is not None
    assert request.shared_memory.inputs["x"] == SharedMemoryInput(
        "FP32", (2,), SharedMemoryRef("region0", 8, 16)
    )
    assert request.shared_memory.outputs == {"out": SharedMemoryRef("out0", 8, 0)}


@pytest.mark.parametrize(
    ("key", "kind", "fragment"),
    [
        ("shared_memory_region", "int64_param", "expected string_param"),
        ("shared_memory_byte_size", "string_param", "expected int64_param"),
        ("shared_memory_offset", "bool_param", "expected int64_param"),
    ],
)
def test_shared_memory_parameter_types_are_checked(key: str, kind: str, fragment: str) -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (2,)))])
    del message.raw_input_contents[:]
    params = message.inputs[0].parameters
    params["shared_memory_region"].string_param = "r"
    params["shared_memory_byte_size"].int64_param = 8
    setattr(params[key], kind, {"int64_param": 1, "string_param": "1", "bool_param": True}[kind])
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG and fragment in error.message


def test_shared_memory_byte_size_is_required() -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (2,)))])
    del message.raw_input_contents[:]
    message.inputs[0].parameters["shared_memory_region"].string_param = "r"
    assert "'shared_memory_byte_size' must be specified" in decode_error(message).message


def test_classification_must_be_int64() -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (2,)))])
    message.outputs.add(name="y").parameters["classification"].string_param = "3"
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert "classification" in error.message


@pytest.mark.parametrize(
    ("key", "setter", "fragment"),
    [
        ("triton_foo", ("bool_param", True), "reserved"),
        ("triton_enable_empty_final_response", ("int64_param", 1), "expected bool_param"),
        ("custom", ("uint64_param", 1), "invalid value type for 'custom'"),
        ("sequence_id", ("uint64_param", 1), "invalid value type for 'sequence_id'"),
        ("sequence_start", ("int64_param", 1), "sequence_start"),
        ("priority", ("int64_param", -1), "priority"),
        ("priority", ("string_param", "high"), "priority"),
    ],
)
def test_bad_request_parameters(key: str, setter: tuple[str, object], fragment: str) -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (2,)))])
    setattr(message.parameters[key], *setter)
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert fragment in error.message


def test_parameter_without_a_value() -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (2,)))])
    message.parameters["empty"].SetInParent()
    assert "'empty'" in decode_error(message).message


# ---------------------------------------------------------------------------------------
# responses


def client_result(message: pb.ModelInferResponse) -> tc.InferResult:
    """Read our response the way tritonclient reads one off the wire."""
    return tc.InferResult(tc_pb.ModelInferResponse.FromString(message.SerializeToString()))


@pytest.mark.parametrize("datatype", [*FIXED_TYPES, "BYTES"])
def test_response_round_trip_through_tritonclient(datatype: str) -> None:
    data = sample(datatype, (2, 3))
    response = InferenceResponse(
        outputs=[Tensor("y", datatype, data)], model_name="m", model_version=2, id="r1"
    )
    message = encode_infer_response(response)
    assert message.model_name == "m"
    assert message.model_version == "2"
    assert message.id == "r1"
    assert len(message.raw_output_contents) == 1
    assert not message.outputs[0].HasField("contents")
    result = client_result(message)
    got = result.as_numpy("y")
    assert got.shape == data.shape
    if datatype == "BYTES":
        assert got.tolist() == data.tolist()
    else:
        np.testing.assert_array_equal(got, to_client_array(datatype, data))
    output = result.get_output("y")
    assert output.datatype == datatype
    assert list(output.shape) == [2, 3]


def test_response_fills_unset_fields_from_the_request() -> None:
    request = InferenceRequest(model_name="m", inputs={}, model_version=4, id="abc")
    message = encode_infer_response(InferenceResponse(), request)
    assert (message.model_name, message.model_version, message.id) == ("m", "4", "abc")
    unversioned = InferenceRequest(model_name="m", inputs={})
    assert encode_infer_response(InferenceResponse(), unversioned).model_version == ""


def test_response_outputs_in_order_including_empty_ones() -> None:
    outputs = [
        Tensor("a", "FP32", np.zeros((0, 3), np.float32)),
        Tensor("b", "INT64", np.arange(3, dtype=np.int64)),
        Tensor("c", "BYTES", np.array([b"\x00x"], dtype=object)),
    ]
    message = encode_infer_response(InferenceResponse(outputs=outputs, model_name="m"))
    assert [o.name for o in message.outputs] == ["a", "b", "c"]
    assert message.raw_output_contents[0] == b""
    result = client_result(message)
    assert result.as_numpy("a").shape == (0, 3)
    np.testing.assert_array_equal(result.as_numpy("b"), np.arange(3))
    assert result.as_numpy("c").tolist() == [b"\x00x"]


def test_response_non_contiguous_and_mismatched_arrays() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4).T  # Fortran order view
    wide = np.arange(3, dtype=np.float64)  # FP32 declared, float64 held
    bf16 = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)  # BF16 held as ml_dtypes
    big_endian = np.arange(3, dtype=">i4")
    outputs = [
        Tensor("t", "FP32", data),
        Tensor("w", "FP32", wide),
        Tensor("h", "BF16", bf16),
        Tensor("be", "INT32", big_endian),
    ]
    result = client_result(encode_infer_response(InferenceResponse(outputs=outputs)))
    np.testing.assert_array_equal(result.as_numpy("t"), data)
    np.testing.assert_array_equal(result.as_numpy("w"), wide.astype(np.float32))
    np.testing.assert_array_equal(result.as_numpy("h"), bf16)
    np.testing.assert_array_equal(result.as_numpy("be"), np.arange(3))


def test_bytes_output_from_str_and_numpy_string_arrays() -> None:
    outputs = [
        Tensor("s", "BYTES", np.array(["h\u00e9", "x"], dtype=object)),
        Tensor("n", "BYTES", np.array([b"\x00a", b"bc"])),  # "S" arrays drop trailing NULs
    ]
    result = client_result(encode_infer_response(InferenceResponse(outputs=outputs)))
    assert result.as_numpy("s").tolist() == ["h\u00e9".encode(), b"x"]
    assert result.as_numpy("n").tolist() == [b"\x00a", b"bc"]


def test_response_parameters() -> None:
    response = InferenceResponse(
        parameters={"flag": True, "count": 3, "big": 2**63, "ratio": 0.25, "text": "hi"}
    )
    params = encode_infer_response(response).parameters
    assert params["flag"].bool_param is True
    assert params["count"].int64_param == 3
    assert params["big"].uint64_param == 2**63
    assert params["ratio"].double_param == 0.25
    assert params["text"].string_param == "hi"


def test_stream_response_is_final() -> None:
    request = InferenceRequest(model_name="m", inputs={}, id="s1")
    message = encode_stream_response(
        InferenceResponse(outputs=[Tensor("y", "INT8", np.arange(2, dtype=np.int8))]), request
    )
    assert message.error_message == ""
    assert message.infer_response.id == "s1"
    assert message.infer_response.parameters["triton_final_response"].bool_param is True
    np.testing.assert_array_equal(client_result(message.infer_response).as_numpy("y"), np.arange(2))


def test_stream_error_keeps_the_request_id() -> None:
    message = encode_stream_error("boom", "r9")
    assert message.error_message == "boom"
    assert message.infer_response.id == "r9"
    assert not message.infer_response.outputs


def test_typed_contents_with_an_invalid_datatype() -> None:
    message = typed_request("FP32", np.zeros(2, np.float32))
    message.inputs[0].datatype = "FP8"
    error = decode_error(message)
    assert error.message == "invalid datatype 'FP8' for input 'x' for model 'm'"


def test_negative_classification() -> None:
    message = client_request([client_input("x", "FP32", sample("FP32", (2,)))])
    message.outputs.add(name="y").parameters["classification"].int64_param = -1
    error = decode_error(message)
    assert error.status is Status.INVALID_ARG
    assert "'y'" in error.message and ">= 0" in error.message


def test_output_with_an_invalid_datatype_is_a_server_bug() -> None:
    response = InferenceResponse(outputs=[Tensor("y", "FP8", np.zeros(1, np.float32))])
    with pytest.raises(TypeError, match="'y'"):
        encode_infer_response(response)
