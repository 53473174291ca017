"""ModelInferRequest / ModelInferResponse <-> :mod:`triton_core.types`.

This is the gRPC hot path: tensors in ``raw_input_contents`` become numpy views on the
request's bytes (no copy), outputs go out in ``raw_output_contents``
as Triton always answers. Everything that can be looked up once lives in module tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping, MutableSequence, Sequence
from math import prod
from typing import Any, Final

import numpy as np

from triton_core.errors import TritonError, invalid_arg
from triton_core.frontends.common import apply_request_parameters, parse_version
from triton_core.frontends.grpc.wire import (
    SPLIT_THRESHOLD,
    EncodedMessage,
    RawBuffer,
    SplitInferRequest,
    encode_with_raw_outputs,
)
from triton_core.observability.statistics import Duration, ModelStatistics
from triton_core.protos import grpc_service_pb2 as pb
from triton_core.shared_memory.refs import (
    SharedMemoryInput,
    SharedMemoryRef,
    SharedMemoryTensors,
)
from triton_core.tensors.dtypes import NUMPY_DTYPES, deserialize_bytes, serialize_bytes
from triton_core.types import (
    InferenceRequest,
    InferenceResponse,
    ParameterValue,
    RequestedOutput,
    Tensor,
)

#: the only ``triton_*`` request parameter a client may send (tritonclient sets it on streams)
EMPTY_FINAL_RESPONSE: Final = "triton_enable_empty_final_response"
#: response parameter on every streamed response: is this the last one for its request
FINAL_RESPONSE: Final = "triton_final_response"

#: wire datatype -> (numpy dtype, item size) for every fixed-size type
_FIXED: Final[dict[str, tuple[np.dtype, int]]] = {
    name: (dtype, dtype.itemsize) for name, dtype in NUMPY_DTYPES.items() if name != "BYTES"
}

#: wire datatype -> the InferTensorContents field that carries it (FP16/BF16 have none)
_CONTENTS_FIELD: Final[dict[str, str]] = {
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

#: InferTensorContents field -> (the datatype it holds natively, numpy dtype to read it as)
_FIELD_TYPES: Final[dict[str, tuple[str, np.dtype]]] = {
    "bool_contents": ("BOOL", np.dtype(np.bool_)),
    "int_contents": ("INT32", np.dtype(np.int32)),
    "int64_contents": ("INT64", np.dtype(np.int64)),
    "uint_contents": ("UINT32", np.dtype(np.uint32)),
    "uint64_contents": ("UINT64", np.dtype(np.uint64)),
    "fp32_contents": ("FP32", np.dtype(np.float32)),
    "fp64_contents": ("FP64", np.dtype(np.float64)),
    "bytes_contents": ("BYTES", np.dtype(object)),
}

_INT64_MAX: Final = 2**63 - 1


# ---------------------------------------------------------------------------------------
# requests


def decode_infer_request(message: pb.ModelInferRequest | SplitInferRequest) -> InferenceRequest:
    """Decode a ModelInferRequest; wire-level problems raise INVALID_ARG naming model and input.

    A :class:`~.wire.SplitInferRequest` (a large request, its raw contents cut out as views)
    decodes the same, its tensors viewing the received bytes.
    """
    if type(message) is SplitInferRequest:
        return _decode(message.message, message.raw_input_contents)[0]
    return _decode(message)[0]  # type: ignore[arg-type]


def decode_stream_request(message: pb.ModelInferRequest) -> tuple[InferenceRequest, bool]:
    """Decode a request read from a stream.

    Returns the request and the value of ``triton_enable_empty_final_response``.
    """
    return _decode(message)


def _decode(
    message: pb.ModelInferRequest, raws: Sequence[bytes | memoryview] | None = None
) -> tuple[InferenceRequest, bool]:
    model = message.model_name
    version = parse_version(message.model_version)  # first, as Triton does
    request = InferenceRequest(model_name=model, inputs={}, model_version=version, id=message.id)
    _decode_inputs(message, model, request, message.raw_input_contents if raws is None else raws)
    if message.outputs:
        request.outputs = _decode_outputs(message.outputs, model, request)
    empty_final = False
    if message.parameters:
        empty_final = _apply_parameters(request, message.parameters)
    return request, empty_final


def _decode_inputs(
    message: pb.ModelInferRequest,
    model: str,
    request: InferenceRequest,
    raws: Sequence[bytes | memoryview],
) -> None:
    """Fill the request's inputs; those in shared memory go to ``request.shared_memory``."""
    inputs = request.inputs
    shm: SharedMemoryTensors | None = None
    tensors = message.inputs
    if len(raws) > len(tensors):
        _check_raw_count(tensors, len(raws), model)
    in_shm = 0  # raw contents are for the inputs not in shared memory, in order
    for index, tensor in enumerate(tensors):
        name = tensor.name
        if name in inputs or (shm is not None and name in shm.inputs):
            raise invalid_arg(f"input '{name}' already exists in request for model '{model}'")
        datatype = tensor.datatype
        shape = tuple(tensor.shape)
        if tensor.parameters:
            ref = shm_parameters(tensor.parameters, name)
            if ref is not None:
                if tensor.HasField("contents"):
                    raise invalid_arg(
                        "unexpected 'content' provided when using shared memory for input "
                        f"tensor '{name}' for model '{model}'"
                    )
                if shm is None:
                    shm = request.shared_memory = SharedMemoryTensors()
                shm.inputs[name] = SharedMemoryInput(datatype, shape, ref)
                in_shm += 1
                continue
        if raws:
            if tensor.HasField("contents"):
                raise invalid_arg(
                    "contents field must not be specified when using raw_input_contents "
                    f"for '{name}' for model '{model}'"
                )
            if index - in_shm >= len(raws):  # Triton checks the contents field first
                raise invalid_arg(
                    f"unable to find data for input tensor '{name}' for model '{model}' in request."
                )
            data = _decode_raw(raws[index - in_shm], datatype, shape, name, model)
        elif tensor.HasField("contents"):
            data = _decode_contents(tensor.contents, datatype, shape, name, model)
        else:
            raise invalid_arg(
                f"unable to find data for input tensor '{name}' for model '{model}' in request."
            )
        inputs[name] = Tensor(name, datatype, data)
    if raws and len(raws) != len(tensors) - in_shm:
        _check_raw_count(tensors, len(raws), model)


def _check_raw_count(
    tensors: Sequence[pb.ModelInferRequest.InferInputTensor], raw_count: int, model: str
) -> None:
    """One raw content per input not in shared memory, or Triton's error."""
    plain = [t for t in tensors if "shared_memory_region" not in t.parameters]
    if raw_count < len(plain):
        # Triton consumes raw contents in input order; name the first input left without
        name = plain[raw_count].name
        raise invalid_arg(
            f"unable to find data for input tensor '{name}' for model '{model}' in request."
        )
    if raw_count > len(plain):
        raise invalid_arg(
            f"expected {len(plain)} raw_input_contents (one per input) for model "
            f"'{model}', got {raw_count}"
        )


def _decode_raw(
    raw: bytes | memoryview, datatype: str, shape: tuple[int, ...], name: str, model: str
) -> np.ndarray:
    count = prod(shape)
    if count <= 0 or min(shape, default=0) < 0:  # two negative dimensions make a positive
        _check_shape(shape, name, model)
    fixed = _FIXED.get(datatype)
    if fixed is not None:
        dtype, itemsize = fixed
        expected = count * itemsize
        if len(raw) != expected:
            raise invalid_arg(
                f"input byte size mismatch for input '{name}' for model '{model}'. "
                f"Expected {expected}, got {len(raw)}"
            )
        # a read-only view on the request's bytes, shaped in one call: no copy
        return np.ndarray(shape, dtype, raw)
    if datatype == "BYTES":
        try:
            flat = deserialize_bytes(raw)
        except ValueError as exc:
            raise invalid_arg(
                f"invalid BYTES data for input '{name}' for model '{model}': {exc}"
            ) from None
        if len(flat) != count:
            raise invalid_arg(
                f"expected {count} string elements for inference input '{name}' for model "
                f"'{model}', got {len(flat)}"
            )
        return flat.reshape(shape)
    raise _bad_datatype(datatype, name, model)


def _decode_contents(
    contents: pb.InferTensorContents,
    datatype: str,
    shape: tuple[int, ...],
    name: str,
    model: str,
) -> np.ndarray:
    count = prod(shape)
    if count <= 0 or min(shape, default=0) < 0:
        _check_shape(shape, name, model)
    expected_field = _CONTENTS_FIELD.get(datatype)
    if expected_field is None:
        if datatype in NUMPY_DTYPES:  # FP16 / BF16: no typed field can carry them
            raise invalid_arg(
                f"unexpected explicit tensor data for input tensor '{name}' for model "
                f"'{model}': {datatype} data must be sent in raw_input_contents"
            )
        raise _bad_datatype(datatype, name, model)
    fields = contents.ListFields()  # only the non-empty repeated fields
    values: Sequence[Any]
    if not fields:
        values = ()
        field_name = expected_field
    elif len(fields) == 1:
        field_name = fields[0][0].name
        values = fields[0][1]
    else:
        raise invalid_arg(
            f"unexpected explicit tensor data for input tensor '{name}' for model '{model}', "
            f"more than one contents field is set"
        )
    if field_name != expected_field:
        raise invalid_arg(
            f"unexpected explicit tensor data for input tensor '{name}' for model '{model}' "
            f"of type '{_FIELD_TYPES[field_name][0]}', expected datatype '{datatype}'"
        )
    got = len(values)
    if got != count:
        raise invalid_arg(
            f"unexpected number of elements in contents for input '{name}' for model "
            f"'{model}'. Expected {count}, got {got}"
        )
    if datatype == "BYTES":
        data = np.empty(count, dtype=object)
        data[:] = list(values)
        return data.reshape(shape)
    data = np.fromiter(values, _FIELD_TYPES[field_name][1], count)
    target = _FIXED[datatype][0]
    if data.dtype != target:
        # INT8/INT16 ride in int32, UINT8/UINT16 in uint32: keep the low bytes, as Triton does
        data = data.astype(target)
    return data.reshape(shape)


def _check_shape(shape: tuple[int, ...], name: str, model: str) -> None:
    """A shape with no elements (or negative dimensions) names no array too large to shape."""
    for dim in shape:
        if dim < 0:
            raise invalid_arg(
                f"invalid shape {list(shape)} for input '{name}' for model '{model}': "
                "dimensions must not be negative"
            )
    if prod(dim for dim in shape if dim) > _INT64_MAX // 16:  # numpy's bound, at any itemsize
        raise invalid_arg(
            f"invalid shape {list(shape)} for input '{name}' for model '{model}': "
            "dimensions too large"
        )


def _bad_datatype(datatype: str, name: str, model: str) -> TritonError:
    return invalid_arg(f"invalid datatype '{datatype}' for input '{name}' for model '{model}'")


def shm_parameters(
    parameters: Mapping[str, pb.InferParameter], tensor: str
) -> SharedMemoryRef | None:
    """The tensor's region, offset and byte size, or None when it is not in shared memory
    (Triton's ParseSharedMemoryParams)."""
    has_region = "shared_memory_region" in parameters
    if has_region:
        param = parameters["shared_memory_region"]
        if param.WhichOneof("parameter_choice") != "string_param":
            raise invalid_arg(
                "invalid value type for 'shared_memory_region' parameter for tensor "
                f"'{tensor}', expected string_param."
            )
    numbers = []
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        if key not in parameters:
            if has_region and key == "shared_memory_byte_size":
                raise invalid_arg(
                    f"'{key}' must be specified along with 'shared_memory_region' parameter "
                    f"for tensor '{tensor}'"
                )
            numbers.append(0)
            continue
        if not has_region:
            raise invalid_arg(
                f"'{key}' can not be specified without 'shared_memory_region' parameter for "
                f"tensor '{tensor}'"
            )
        param = parameters[key]
        if param.WhichOneof("parameter_choice") != "int64_param":
            raise invalid_arg(
                f"invalid value type for '{key}' parameter for tensor '{tensor}', expected "
                "int64_param."
            )
        numbers.append(param.int64_param)
    if not has_region:
        return None
    return SharedMemoryRef(parameters["shared_memory_region"].string_param, numbers[1], numbers[0])


def _decode_outputs(
    outputs: Iterable[pb.ModelInferRequest.InferRequestedOutputTensor],
    model: str,
    request: InferenceRequest,
) -> list[RequestedOutput]:
    result: list[RequestedOutput] = []
    for output in outputs:
        classification = 0
        if output.parameters:
            params = output.parameters
            ref = shm_parameters(params, output.name)
            if ref is not None:
                if request.shared_memory is None:
                    request.shared_memory = SharedMemoryTensors()
                request.shared_memory.outputs[output.name] = ref
            if "classification" in params:
                param = params["classification"]
                if param.WhichOneof("parameter_choice") != "int64_param":
                    raise invalid_arg(
                        "invalid value type for 'classification' parameter of output "
                        f"'{output.name}' for model '{model}', expected int64_param."
                    )
                classification = param.int64_param
                if classification < 0:
                    raise invalid_arg(
                        f"invalid value for 'classification' of output '{output.name}' for "
                        f"model '{model}', expected value >= 0."
                    )
        result.append(RequestedOutput(output.name, classification))
    return result


def _apply_parameters(
    request: InferenceRequest, parameters: Mapping[str, pb.InferParameter]
) -> bool:
    """Decode the request parameter map; returns ``triton_enable_empty_final_response``."""
    decoded: dict[str, ParameterValue] = {}
    empty_final = False
    for key, param in parameters.items():
        which = param.WhichOneof("parameter_choice")
        if which is None:
            raise invalid_arg(f"parameter '{key}' has no value")
        if key == EMPTY_FINAL_RESPONSE:
            if which != "bool_param":
                raise invalid_arg(f"invalid value type for '{key}' parameter, expected bool_param.")
            empty_final = param.bool_param
            continue
        if which == "uint64_param" and key != "priority":
            # uint64 is accepted for 'priority' only (tritonclient sends it that way)
            raise invalid_arg(
                f"invalid value type for '{key}' parameter, expected int64_param, "
                "bool_param, string_param or double_param."
            )
        decoded[key] = getattr(param, which)
    apply_request_parameters(request, decoded)
    return empty_final


# ---------------------------------------------------------------------------------------
# responses


def encode_infer_response(
    response: InferenceResponse, request: InferenceRequest | None = None
) -> pb.ModelInferResponse:
    """Encode a response; outputs always go in ``raw_output_contents``, as Triton does.

    ``request`` fills the model name, version and id when the response leaves them unset.
    """
    message = pb.ModelInferResponse()
    _fill_response(message, response, request, message.raw_output_contents, _raw_bytes)
    return message


def encode_infer_answer(
    response: InferenceResponse, request: InferenceRequest | None = None
) -> pb.ModelInferResponse | EncodedMessage:
    """:func:`encode_infer_response`, already encoded when its outputs are large.

    Large outputs then go to the socket as they are, not through protobuf's serializer
    (which copies them twice); raises ValueError past protobuf's 2 GiB message limit.
    """
    message = pb.ModelInferResponse()
    if sum(tensor.data.nbytes for tensor in response.outputs) < SPLIT_THRESHOLD:
        _fill_response(message, response, request, message.raw_output_contents, _raw_bytes)
        return message
    raws: list[RawBuffer] = []
    _fill_response(message, response, request, raws, _raw_view)
    return encode_with_raw_outputs(message, raws)


def encode_stream_response(
    response: InferenceResponse, request: InferenceRequest | None = None, final: bool = True
) -> pb.ModelStreamInferResponse:
    """Encode a streamed response, with the ``triton_final_response`` parameter set."""
    message = pb.ModelStreamInferResponse()
    infer_response = message.infer_response
    _fill_response(
        infer_response, response, request, infer_response.raw_output_contents, _raw_bytes
    )
    infer_response.parameters[FINAL_RESPONSE].bool_param = final
    return message


def encode_stream_error(message: str, request_id: str = "") -> pb.ModelStreamInferResponse:
    """A streamed error: the message, and the request id so the client can match it."""
    result = pb.ModelStreamInferResponse(error_message=message)
    result.infer_response.id = request_id
    return result


def _fill_response(
    message: pb.ModelInferResponse,
    response: InferenceResponse,
    request: InferenceRequest | None,
    raws: MutableSequence[bytes] | list[RawBuffer],
    raw_of: Callable[[Tensor], RawBuffer],
) -> None:
    """Fill ``message``; the outputs' raw contents (``raw_of`` each) go to ``raws``, in order."""
    model_name = response.model_name
    version = response.model_version
    response_id = response.id
    if request is not None:
        model_name = model_name or request.model_name
        if version < 0:
            version = request.model_version
        response_id = response_id or request.id
    message.model_name = model_name
    if version >= 0:
        message.model_version = str(version)
    message.id = response_id
    outputs = message.outputs
    in_shm = response.shared_memory_outputs
    for tensor in response.outputs:
        output = outputs.add()
        output.name = tensor.name
        output.datatype = tensor.datatype
        output.shape.extend(tensor.data.shape)
        if in_shm is not None and tensor.name in in_shm:
            raws.append(b"")  # written into its region: an empty entry, as Triton sends
        else:
            raws.append(raw_of(tensor))  # type: ignore[arg-type]
    if response.parameters:
        _set_parameters(message.parameters, response.parameters)


def _raw_bytes(tensor: Tensor) -> bytes:
    data = tensor.data
    datatype = tensor.datatype
    if datatype == "BYTES":
        return serialize_bytes(data)
    fixed = _FIXED.get(datatype)
    if fixed is None:
        raise TypeError(f"output '{tensor.name}' has an invalid datatype '{datatype}'")
    if data.dtype != fixed[0] and not (datatype == "BF16" and data.dtype.itemsize == 2):
        # the wire carries the declared datatype in little-endian order, whatever the array
        # (BF16 may also come as ml_dtypes.bfloat16: its bits are already the wire bits)
        data = data.astype(fixed[0])
    # protobuf needs bytes; tobytes() is the one unavoidable copy (C order, any layout)
    return data.tobytes()


def _raw_view(tensor: Tensor) -> RawBuffer:
    """The output's wire bytes, viewing its array where that already holds them as sent.

    The view keeps the array (and whatever memory it views) alive until it is written.
    """
    data = tensor.data
    fixed = _FIXED.get(tensor.datatype)
    if fixed is not None and data.dtype == fixed[0] and data.flags.c_contiguous:
        return data.reshape(-1).view(np.uint8)
    return _raw_bytes(tensor)


def _set_parameters(
    target: MutableMapping[str, pb.InferParameter], parameters: Mapping[str, ParameterValue]
) -> None:
    for key, value in parameters.items():
        param = target[key]  # a message map creates the entry on first access
        # bool before int: bool is an int subclass
        if isinstance(value, bool):
            param.bool_param = value
        elif isinstance(value, int):
            if value > _INT64_MAX:
                param.uint64_param = value
            else:
                param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        else:
            param.string_param = str(value)


def _fill_duration(message: pb.StatisticDuration, duration: Duration) -> None:
    message.count = duration.count
    message.ns = duration.ns


def encode_statistics(statistics: list[ModelStatistics]) -> pb.ModelStatisticsResponse:
    """The statistics extension's response message."""
    response = pb.ModelStatisticsResponse()
    for stats in statistics:
        entry = response.model_stats.add()
        entry.name = stats.name
        entry.version = str(stats.version)
        entry.last_inference = stats.last_inference_ms
        entry.inference_count = stats.inference_count
        entry.execution_count = stats.execution_count
        inference = entry.inference_stats
        for field_name in (
            "success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
            "cache_hit", "cache_miss",
        ):  # fmt: skip
            _fill_duration(getattr(inference, field_name), getattr(stats, field_name))
        for size, batch in sorted(stats.batches.items()):
            batch_entry = entry.batch_stats.add()
            batch_entry.batch_size = size
            _fill_duration(batch_entry.compute_input, batch.compute_input)
            _fill_duration(batch_entry.compute_infer, batch.compute_infer)
            _fill_duration(batch_entry.compute_output, batch.compute_output)
    return response
