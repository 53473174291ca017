"""triton_python_backend_utils on its own: tensors, requests, responses, helpers, ModelConfig."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
import triton_python_backend_utils as pb_utils
from triton_core_python.wire import NUMPY_DTYPES

from triton_core.tensors.dtypes import NUMPY_DTYPES as CORE_DTYPES


def test_the_stub_keeps_the_cores_datatype_table():
    assert NUMPY_DTYPES == CORE_DTYPES


@pytest.mark.parametrize(
    ("array", "number"),
    [
        (np.array([True]), 1),
        (np.array([1], np.uint8), 2),
        (np.array([1], np.int32), 8),
        (np.array([1], np.int64), 9),
        (np.array([1], np.float16), 10),
        (np.array([1], np.float32), 11),
        (np.array([1], np.float64), 12),
        (np.array([b"x"], np.object_), 13),
        (np.array(["x"]), 13),
        (np.array([b"x"]), 13),
    ],
)
def test_tensor_datatypes(array, number):
    tensor = pb_utils.Tensor("T", array)
    assert tensor.name() == "T" and tensor.triton_dtype() == number
    assert tensor.as_numpy() is array and tensor.shape() == [1] and tensor.is_cpu()


def test_tensors_reject_what_triton_cannot_carry():
    with pytest.raises(pb_utils.TritonModelException, match="complex"):
        pb_utils.Tensor("T", np.array([1j]))
    with pytest.raises(TypeError, match="incompatible constructor arguments"):
        pb_utils.Tensor(1, np.array([1]))  # type: ignore[arg-type]


def test_wrongly_typed_arguments_raise_the_type_error_tritons_bindings_raise():
    """qa/L0_backend_python/argument_validation: None (or a wrong type) where Triton's pybind
    signature wants a value is a TypeError; None among tensors is a TritonModelException."""
    tensor = pb_utils.Tensor("IN", np.array([1, 2], np.int32))
    request = {"inputs": [tensor], "model_name": "m", "requested_output_names": ["OUT"]}
    for name in (
        "inputs", "model_name", "requested_output_names", "request_id", "correlation_id",
        "model_version", "flags", "timeout",
    ):  # fmt: skip
        with pytest.raises(TypeError, match="incompatible constructor arguments"):
            pb_utils.InferenceRequest(**{**request, name: None})
    with pytest.raises(TypeError):
        pb_utils.InferenceRequest(**{**request, "requested_output_names": [None]})
    with pytest.raises(pb_utils.TritonModelException, match="Input tensor for request with id "):
        pb_utils.InferenceRequest(**{**request, "inputs": [None]})
    with pytest.raises(pb_utils.TritonModelException, match="Requested output name for request"):
        pb_utils.InferenceRequest(**{**request, "requested_output_names": [""]})
    pb_utils.InferenceRequest(inputs=[], requested_output_names=[], model_name="m")
    with pytest.raises(TypeError):
        pb_utils.InferenceResponse(output_tensors=None)  # type: ignore[arg-type]
    with pytest.raises(pb_utils.TritonModelException, match="should not be empty"):
        pb_utils.InferenceResponse(output_tensors=[None])  # type: ignore[list-item]
    pb_utils.InferenceResponse()
    for name, array in ((None, np.array([1])), ("OUT", None), ("", None)):
        with pytest.raises(TypeError):
            pb_utils.Tensor(name, array)  # type: ignore[arg-type]
    for name in ("OUT", ""):
        with pytest.raises(pb_utils.TritonModelException):
            pb_utils.Tensor.from_dlpack(name, None)


def test_log_calls_take_a_str_message_and_a_log_level():
    for call in (
        lambda: pb_utils.Logger.log("message", None),  # type: ignore[arg-type]
        lambda: pb_utils.Logger.log(None),  # type: ignore[arg-type]
        lambda: pb_utils.Logger.log_info(None),  # type: ignore[arg-type]
        lambda: pb_utils.Logger.log_warn(None),  # type: ignore[arg-type]
        lambda: pb_utils.Logger.log_error(None),  # type: ignore[arg-type]
        lambda: pb_utils.Logger.log_verbose(None),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="incompatible function arguments"):
            call()


def test_dlpack_round_trip():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("T", array)
    back = pb_utils.Tensor.from_dlpack("U", tensor.to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), array)
    assert np.from_dlpack(tensor).shape == (2, 3)  # __dlpack__ / __dlpack_device__


def test_received_request_accessors_and_helpers():
    tensor = pb_utils.Tensor._of("IN", "INT32", np.array([1, 2], np.int32))
    request = pb_utils.InferenceRequest._received(
        7, "r1", 42, 1, {"k": "v"}, ["OUT"], [tensor], 100, "m", 2, False
    )
    assert request.request_id() == "r1" and request.correlation_id() == 42
    assert request.flags() == pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
    assert json.loads(request.parameters()) == {"k": "v"}
    assert request.requested_output_names() == ["OUT"] and request.timeout() == 100
    assert pb_utils.get_input_tensor_by_name(request, "IN") is tensor
    assert pb_utils.get_input_tensor_by_name(request, "NOPE") is None
    assert request.is_cancelled() is False  # not decoupled: nothing to ask


def test_response_parameters_and_errors():
    out = pb_utils.Tensor("OUT", np.array([1.0]))
    response = pb_utils.InferenceResponse([out], parameters={"a": 1, "b": True, "c": "x"})
    assert json.loads(response.parameters()) == {"a": 1, "b": True, "c": "x"}
    assert pb_utils.get_output_tensor_by_name(response, "OUT") is out
    assert not response.has_error() and response.error() is None
    failed = pb_utils.InferenceResponse(
        error=pb_utils.TritonError("nope", pb_utils.TritonError.NOT_FOUND)
    )
    assert failed.has_error()
    assert failed.error().message() == "nope" and failed.error().code() == 2
    assert pb_utils.TritonError("x").code() == pb_utils.TritonError.INTERNAL
    with pytest.raises(pb_utils.TritonModelException) as info:
        pb_utils.InferenceResponse([], parameters={"bad": [1]})
    assert str(info.value) == (
        "Expect parameters values to have type bool/int/str, found type <class 'list'>"
    )


def test_a_non_decoupled_sender_captures_its_one_response():
    request = pb_utils.InferenceRequest._received(0, "", 0, 0, None, [], [], 0, "m", 1, False)
    sender = request.get_response_sender()
    response = pb_utils.InferenceResponse([])
    sender.send(response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert sender._captured is response
    with pytest.raises(pb_utils.TritonModelException, match="cannot send more than one response"):
        sender.send(response)
    with pytest.raises(pb_utils.TritonModelException, match="Response sender has been closed"):
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)


def test_bls_needs_a_server():
    request = pb_utils.InferenceRequest(model_name="m", requested_output_names=[], inputs=[])
    with pytest.raises(pb_utils.TritonModelException, match="only available"):
        request.exec()


def test_config_helpers():
    config = {
        "input": [{"name": "IN", "data_type": "TYPE_FP32"}],
        "output": [{"name": "OUT", "data_type": "TYPE_STRING"}],
        "model_transaction_policy": {"decoupled": True},
    }
    assert pb_utils.get_input_config_by_name(config, "IN")["data_type"] == "TYPE_FP32"
    assert pb_utils.get_output_config_by_name(config, "OUT")["data_type"] == "TYPE_STRING"
    assert pb_utils.get_output_config_by_name(config, "X") is None
    assert pb_utils.using_decoupled_model_transaction_policy(config)
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_to_numpy_type(11) is np.float32
    assert pb_utils.numpy_to_triton_type(np.int64) == 9


def test_bytes_serialization_helpers_keep_nul_bytes():
    items = np.array([b"a\x00b", b"", b"\x00"], dtype=np.object_)
    encoded = pb_utils.serialize_byte_tensor(items)
    assert encoded.dtype == np.object_ and encoded.shape == ()
    assert encoded.item() == b"\x03\x00\x00\x00a\x00b\x00\x00\x00\x00\x01\x00\x00\x00\x00"
    assert pb_utils.deserialize_bytes_tensor(encoded.item()).tolist() == items.tolist()


def test_model_config_auto_complete_api():
    config = pb_utils.ModelConfig(
        {"name": "m", "max_batch_size": 0, "input": [{"name": "IN", "data_type": "TYPE_INVALID",
                                                      "dims": []}], "output": []}
    )  # fmt: skip
    config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [4]})
    config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [4]})
    config.set_max_batch_size(8)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    result = config.as_dict()
    assert result["input"] == [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}]
    assert result["output"][0]["name"] == "OUT" and result["max_batch_size"] == 8
    assert result["dynamic_batching"] == {}
    with pytest.raises(ValueError, match="configuration expects datatype TYPE_FP32"):
        config.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [4]})
    with pytest.raises(ValueError, match="contains property other than"):
        config.add_output({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "optional": True})
    with pytest.raises(ValueError, match="missing 'dims' property"):
        config.add_input({"name": "Y", "data_type": "TYPE_FP32"})
    with pytest.raises(ValueError, match="max_batch_size"):
        config.set_max_batch_size(2)
    sequence = pb_utils.ModelConfig({"name": "s", "sequence_batching": {"direct": {}}})
    with pytest.raises(ValueError, match="sequence_batching"):
        sequence.set_dynamic_batching()


def test_logger_without_a_server_writes_to_stderr_with_the_callers_line(capsys):
    line = sys._getframe().f_lineno + 1
    pb_utils.Logger.log_info("hello")
    pb_utils.Logger.log("careful", pb_utils.Logger.WARNING)
    assert capsys.readouterr().err.splitlines() == [
        f"I test_pb_utils.py:{line}] hello",
        f"W test_pb_utils.py:{line + 1}] careful",
    ]


def test_logger_levels_are_tritons():
    logger = pb_utils.Logger
    assert [logger.INFO, logger.WARNING, logger.ERROR, logger.VERBOSE] == [0, 1, 2, 3]
    assert logger.LogLevel is pb_utils.LogLevel and logger.LogLevel.VERBOSE is logger.VERBOSE
    with pytest.raises(TypeError, match="incompatible function arguments"):
        logger.log("x", 7)  # type: ignore[arg-type]


def test_bf16_travels_through_dlpack_as_bfloat16():
    torch = pytest.importorskip("torch")
    values = torch.tensor([[1.5, -2.0], [0.25, 3.0]], dtype=torch.bfloat16)
    for source in (values, torch.utils.dlpack.to_dlpack(values)):
        tensor = pb_utils.Tensor.from_dlpack("B", source)
        assert tensor.triton_dtype() == 14 and tensor.shape() == [2, 2]
        with pytest.raises(pb_utils.TritonModelException) as refused:
            tensor.as_numpy()
        assert str(refused.value) == (
            "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
            "from_dlpack() instead."
        )  # Triton 2.51's words
        back = torch.utils.dlpack.from_dlpack(tensor.to_dlpack())
        assert back.dtype == torch.bfloat16 and torch.equal(back, values)
        assert torch.equal(torch.from_dlpack(tensor), values)


@pytest.mark.parametrize("dtype", [np.bool_, np.float16, np.int8, np.uint64, np.float64])
def test_dlpack_keeps_every_dtype(dtype):
    array = np.array([[1, 0, 1]], dtype=dtype)
    tensor = pb_utils.Tensor("T", array)
    back = pb_utils.Tensor.from_dlpack("U", tensor.to_dlpack())
    assert back.as_numpy().dtype == array.dtype and back.triton_dtype() == tensor.triton_dtype()
    np.testing.assert_array_equal(back.as_numpy(), array)


def test_dlpack_refuses_strings_and_bad_names_as_triton_does():
    strings = pb_utils.Tensor("S", np.array([b"x"], dtype=object))
    with pytest.raises(pb_utils.TritonModelException, match="DLPack does not have support"):
        strings.to_dlpack()
    with pytest.raises(pb_utils.TritonModelException, match="cannot be an empty string"):
        pb_utils.Tensor("", np.array([1]))
    with pytest.raises(pb_utils.TritonModelException, match="Provided tensor is not supported"):
        pb_utils.Tensor.from_dlpack("X", [1, 2])


def test_triton_string_to_numpy_table_is_tritons():
    assert pb_utils.TRITON_STRING_TO_NUMPY["TYPE_BOOL"] is bool
    assert pb_utils.TRITON_STRING_TO_NUMPY["TYPE_STRING"] is np.object_
    assert "TYPE_BF16" not in pb_utils.TRITON_STRING_TO_NUMPY
    assert pb_utils.triton_to_numpy_type(13) is np.object_
    assert pb_utils.triton_to_numpy_type(14) is None


#: the public names of Triton 2.51's pb_utils in a model (dir() in a real tritonserver)
TRITON_NAMES = [
    "InferenceRequest", "InferenceResponse", "Logger", "MetricFamily", "ModelConfig",
    "PreferredMemory", "TRITONSERVER_MEMORY_CPU", "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END", "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL", "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL", "TRITON_STRING_TO_NUMPY", "Tensor", "TritonError",
    "TritonModelException", "deserialize_bytes_tensor", "get_input_config_by_name",
    "get_input_tensor_by_name", "get_model_dir", "get_output_config_by_name",
    "get_output_tensor_by_name", "is_model_ready", "load_model", "numpy_to_triton_type",
    "serialize_byte_tensor", "triton_string_to_numpy", "triton_to_numpy_type", "unload_model",
    "using_decoupled_model_transaction_policy",
]  # fmt: skip

#: methods of its classes (python_backend's pybind11 module definitions)
TRITON_METHODS = {
    "Tensor": "name as_numpy triton_dtype to_dlpack is_cpu shape from_dlpack __dlpack__ "
    "__dlpack_device__",
    "InferenceRequest": "inputs request_id correlation_id flags set_flags timeout parameters "
    "trace exec async_exec requested_output_names get_response_sender is_cancelled "
    "set_release_flags",
    "InferenceResponse": "output_tensors has_error error parameters",
    "InferenceResponseSender": "send is_cancelled",
    "ResponseIterator": "__iter__ __next__ cancel",
    "Logger": "log log_info log_warn log_error log_verbose INFO WARNING ERROR VERBOSE LogLevel",
    "MetricFamily": "Metric COUNTER GAUGE HISTOGRAM",
    "Metric": "increment set observe value",
    "TritonError": "code message UNKNOWN INTERNAL NOT_FOUND INVALID_ARG UNAVAILABLE "
    "UNSUPPORTED ALREADY_EXISTS CANCELLED",
    "ModelConfig": "as_dict set_max_batch_size set_dynamic_batching add_input add_output "
    "set_model_transaction_policy",
    "InferenceTrace": "get_context",
}


def test_every_name_of_tritons_module_is_here():
    assert [name for name in TRITON_NAMES if not hasattr(pb_utils, name)] == []
    missing = [
        f"{cls}.{method}"
        for cls, methods in TRITON_METHODS.items()
        for method in methods.split()
        if not hasattr(getattr(pb_utils, cls), method)
    ]
    assert missing == []
    assert pb_utils.TRITONSERVER_MEMORY_CPU == 1 and pb_utils.TRITONSERVER_MEMORY_GPU == 0
