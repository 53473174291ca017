"""Triton's ``triton_python_backend_utils`` API, for ``model.py`` files written for Triton.

``import triton_python_backend_utils as pb_utils`` inside a model gives the classes and
helpers of Triton's Python backend (PROTOCOL.md section 6): ``Tensor``,
``InferenceRequest`` (with BLS ``exec``/``async_exec``), ``InferenceResponse``,
``TritonError``, ``Logger``, ``ModelConfig`` for ``auto_complete_config``, the config
helpers and the flag constants.

The module runs in the model's stub process (see ``triton_core_python.stub``), which sets
``_runtime`` to reach the server (BLS calls, decoupled responses, logs). Without a runtime
(plain imports, unit tests, ``auto_complete_config``) everything works except the calls
that need the server, which raise :class:`TritonModelException`.
"""

from __future__ import annotations

import json
import logging
import struct
import sys
from typing import Any

import numpy as np
from triton_core_python.wire import NUMPY_DTYPES, datatype_of

# -- constants --------------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

#: set by the stub process: how this module reaches the server
_runtime: Any = None

# TRITONSERVER_DataType values, in the C API's order
_TRITON_TYPES = (
    "INVALID", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
    "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16",
)  # fmt: skip
_TYPE_NUMBERS = {name: number for number, name in enumerate(_TRITON_TYPES)}

_STRING_TO_NUMPY = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


# -- errors -----------------------------------------------------------------------------------


class TritonError(Exception):
    """An error with a Triton status code; put it in ``InferenceResponse(error=...)``.

    Raising one from ``execute`` fails the batch with its code (Triton only allows
    returning it; raising is accepted here too).
    """

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        super().__init__(message)
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __str__(self) -> str:
        return self._message

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class TritonModelException(Exception):
    """Raised by this module's calls that fail; models raise it to fail a batch too."""

    def message(self) -> str:
        return str(self)


def _require_runtime(what: str) -> Any:
    if _runtime is None:
        raise TritonModelException(
            f"{what} is only available in a model served by the server (not at import or "
            "in auto_complete_config)"
        )
    return _runtime


# -- tensors ----------------------------------------------------------------------------------


class _Capsule:
    """Wraps a bare DLPack capsule so that numpy.from_dlpack accepts it (CPU memory)."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


class Tensor:
    """A named tensor: ``Tensor(name, numpy_array)``; ``as_numpy()`` gives the array back.

    BYTES tensors are object arrays of ``bytes`` (numpy ``str``/``bytes`` arrays are
    accepted and sent as BYTES). Inputs are views on shared memory: reading them copies
    nothing.
    """

    __slots__ = ("_array", "_datatype", "_name")

    def __init__(self, name: str, tensor: Any, *args: Any, **kwargs: Any) -> None:
        if not isinstance(name, str):
            raise TritonModelException(f"Tensor name must be a string, got {type(name).__name__}")
        if type(tensor) is not np.ndarray:
            if hasattr(tensor, "__dlpack__") and not isinstance(tensor, np.generic):
                tensor = _from_dlpack_object(name, tensor)
            else:
                tensor = np.asarray(tensor)
        self._name = name
        self._array = tensor
        try:
            self._datatype = datatype_of(tensor)
        except TypeError as exc:
            raise TritonModelException(f"tensor '{name}': {exc}") from None

    @classmethod
    def _of(cls, name: str, datatype: str, array: np.ndarray) -> Tensor:
        """A tensor with a known wire datatype (received ones; BF16 stays BF16)."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        tensor._datatype = datatype
        return tensor

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def triton_dtype(self) -> int:
        return _TYPE_NUMBERS[self._datatype]

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def memory_type(self) -> int:
        return TRITONSERVER_MEMORY_CPU

    def memory_type_id(self) -> int:
        return 0

    def to_dlpack(self) -> Any:
        if self._datatype == "BYTES":
            raise TritonModelException(f"BYTES tensor '{self._name}' cannot be shared via DLPack")
        return self._array.__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self.to_dlpack()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        return Tensor(name, _from_dlpack_object(name, capsule))

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={list(self._array.shape)})"


def _from_dlpack_object(name: str, value: Any) -> np.ndarray:
    source = value if hasattr(value, "__dlpack__") else _Capsule(value)
    device = getattr(source, "__dlpack_device__", lambda: (1, 0))()
    if device[0] not in (1, 3):  # kDLCPU, kDLCUDAHost
        raise TritonModelException(
            f"tensor '{name}' is in GPU memory; this server passes CPU tensors only: move it "
            "to the CPU first (e.g. tensor.cpu())"
        )
    try:
        return np.from_dlpack(source)
    except (TypeError, BufferError, RuntimeError) as exc:
        raise TritonModelException(f"tensor '{name}' cannot be read via DLPack: {exc}") from None


# -- requests and responses -------------------------------------------------------------------


class PreferredMemory:
    """Where BLS outputs should be placed (CPU only here; kept for API compatibility)."""

    def __init__(
        self, preferred_memory_type: int = TRITONSERVER_MEMORY_CPU, preferred_device_id: int = 0
    ):
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A request's trace context (tracing is not supported: an empty context)."""

    def __init__(self, context: str | None = None) -> None:
        self._context = context

    def get_context(self) -> str | None:
        return self._context


def _parameters_dict(parameters: Any, what: str) -> dict[str, Any]:
    if parameters is None or parameters == "":
        return {}
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters)
        except ValueError as exc:
            raise TritonModelException(f"{what} parameters are not valid JSON: {exc}") from None
    if not isinstance(parameters, dict):
        raise TritonModelException(f"{what} parameters must be a dict or a JSON object string")
    result: dict[str, Any] = {}
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(f"{what} parameter keys must be strings, got {key!r}")
        if isinstance(value, bool | np.bool_):
            result[key] = bool(value)
        elif isinstance(value, str):
            result[key] = str(value)
        elif isinstance(value, int | np.integer):
            result[key] = int(value)
        elif isinstance(value, float | np.floating):
            result[key] = float(value)
        else:
            raise TritonModelException(
                f"{what} parameter '{key}' must be a bool, int, float or str, got "
                f"{type(value).__name__}"
            )
    return result


class InferenceRequest:
    """A request: one of those ``execute`` receives, or a BLS request a model builds.

    For BLS: ``InferenceRequest(model_name=..., requested_output_names=[...],
    inputs=[Tensor, ...])``, then ``exec()`` (blocking) or ``await async_exec()`` inside
    ``async def execute``; ``decoupled=True`` returns an iterator over the responses of a
    decoupled model.
    """

    def __init__(
        self,
        model_name: str = "",
        requested_output_names: list[str] | None = None,
        inputs: list[Tensor] | None = None,
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: Any = None,
    ) -> None:
        if not isinstance(correlation_id, int | str) or isinstance(correlation_id, bool):
            raise TritonModelException("correlation_id must be an int or a str")
        self._model_name = model_name
        self._model_version = int(model_version)
        self._output_names = list(requested_output_names or [])
        self._inputs = list(inputs or [])
        for tensor in self._inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"inputs must be pb_utils.Tensor objects, got {type(tensor).__name__}"
                )
        self._id = str(request_id)
        self._correlation_id = correlation_id
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = _parameters_dict(parameters, "request")
        self._trace = trace or InferenceTrace()
        self._preferred_memory = preferred_memory or PreferredMemory()
        self._key = -1  # set for requests received from the server
        self._decoupled = False
        self._sender: InferenceResponseSender | None = None
        self._by_name: dict[str, Tensor] | None = None
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL

    @classmethod
    def _received(
        cls,
        key: int,
        request_id: str,
        correlation_id: int | str,
        flags: int,
        parameters: dict[str, Any] | None,
        output_names: list[str],
        inputs: list[Tensor],
        timeout: int,
        model_name: str,
        model_version: int,
        decoupled: bool,
    ) -> InferenceRequest:
        request = cls.__new__(cls)
        request._model_name = model_name
        request._model_version = model_version
        request._output_names = output_names
        request._inputs = inputs
        request._id = request_id
        request._correlation_id = correlation_id
        request._flags = flags
        request._timeout = timeout
        request._parameters = parameters or {}
        request._trace = InferenceTrace()
        request._preferred_memory = PreferredMemory()
        request._key = key
        request._decoupled = decoupled
        request._sender = None
        request._by_name = None
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        return request

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def _input(self, name: str) -> Tensor | None:
        by_name = self._by_name
        if by_name is None:
            by_name = self._by_name = {tensor._name: tensor for tensor in self._inputs}
        return by_name.get(name)

    def request_id(self) -> str:
        return self._id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        return self._timeout

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def parameters(self) -> str:
        """The request's parameters as a JSON object string."""
        return json.dumps(self._parameters)

    def trace(self) -> InferenceTrace:
        return self._trace

    def requested_output_names(self) -> list[str]:
        return list(self._output_names)

    def get_response_sender(self) -> InferenceResponseSender:
        if self._key < 0:
            raise TritonModelException("a BLS request has no response sender")
        if self._sender is None:
            self._sender = InferenceResponseSender(self)
        return self._sender

    def is_cancelled(self) -> bool:
        if self._key < 0 or not self._decoupled or _runtime is None:
            return False
        return bool(_runtime.is_cancelled(self._key))

    def set_release_flags(self, flags: int) -> None:
        """``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`` runs the request again once ``execute``
        returns (iterative sequences); its response in the returned list must be None."""
        self._release_flags = int(flags)

    def _check_bls(self) -> None:
        if not self._model_name:
            raise TritonModelException("a BLS request needs a model_name")

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on a model of the server and wait: a response, or an iterator
        over the responses when ``decoupled``. Errors come back as the response's error."""
        self._check_bls()
        return _require_runtime("BLS").infer(self, decoupled)

    def async_exec(self, decoupled: bool = False) -> Any:
        """Like :meth:`exec`, as an awaitable (use it in ``async def execute``)."""
        self._check_bls()
        return _require_runtime("BLS").infer_async(self, decoupled)

    def __repr__(self) -> str:
        return (
            f"InferenceRequest(model_name={self._model_name!r}, request_id={self._id!r}, "
            f"inputs={[t.name() for t in self._inputs]})"
        )


class InferenceResponse:
    """``InferenceResponse(output_tensors=[...], error=None, parameters=None)``."""

    __slots__ = ("_error", "_parameters", "_tensors")

    def __init__(
        self,
        output_tensors: list[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: Any = None,
    ) -> None:
        tensors = list(output_tensors) if output_tensors is not None else []
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"output_tensors must be pb_utils.Tensor objects, got {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._tensors = tensors
        self._error = error
        self._parameters = _parameters_dict(parameters, "response")

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        return json.dumps(self._parameters)

    def __repr__(self) -> str:
        if self._error is not None:
            return f"InferenceResponse(error={self._error!r})"
        return f"InferenceResponse({self._tensors!r})"


class InferenceResponseSender:
    """Sends a request's responses (decoupled models): any number, then the final flag."""

    def __init__(self, request: InferenceRequest) -> None:
        self._request = request
        self._closed = False
        #: a non-decoupled model's one response, sent during execute (returned with it)
        self._captured: InferenceResponse | None = None

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if self._closed:
            raise TritonModelException("Unable to send response. Response sender has been closed.")
        if response is None and not flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException(
                "Inference response must be provided unless flags is "
                "TRITONSERVER_RESPONSE_COMPLETE_FINAL"
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send() expects an InferenceResponse, got {type(response).__name__}"
            )
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        request = self._request
        if not request._decoupled:
            # a non-decoupled model answers once, inside execute
            if response is not None:
                if self._captured is not None:
                    raise TritonModelException(
                        "a model that is not decoupled sends exactly one response per request"
                    )
                self._captured = response
            if final:
                self._closed = True
            return
        if final:
            self._closed = True
        _require_runtime("sending responses").send_response(request._key, response, flags)

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()


class ResponseIterator:
    """The responses of a decoupled BLS call, as they arrive; the last one is final."""

    def __init__(self, source: Any, cancel: Any) -> None:
        self._source = source
        self._cancel = cancel
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        if self._done:
            raise StopIteration
        response, final = self._source()
        if final:
            self._done = True
        if response is None:
            raise StopIteration
        return response

    def cancel(self) -> None:
        if not self._done:
            self._cancel()


# -- helpers ----------------------------------------------------------------------------------


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    return inference_request._input(name)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for input_properties in model_config.get("input", ()):
        if input_properties.get("name") == name:
            return input_properties
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for output_properties in model_config.get("output", ()):
        if output_properties.get("name") == name:
            return output_properties
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return _STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    name = _TRITON_TYPES[data_type] if 0 < data_type < len(_TRITON_TYPES) else ""
    if name in ("", "BF16"):
        return None
    return NUMPY_DTYPES[name].type


def numpy_to_triton_type(data_type: Any) -> int | None:
    try:
        return _TYPE_NUMBERS[datatype_of(np.empty(0, dtype=data_type))]
    except TypeError:
        return None


def serialize_byte_tensor(input_tensor: np.ndarray) -> np.ndarray:
    """Triton's BYTES wire encoding of an object/bytes array, as a 0-d object array."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.object_)
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type is not np.bytes_:
        raise TritonModelException("cannot serialize bytes tensor: invalid datatype")
    parts = []
    for item in input_tensor.reshape(-1):
        if input_tensor.dtype == np.object_:
            data = item if isinstance(item, bytes) else str(item).encode("utf-8")
        else:
            data = bytes(item)
        parts.append(struct.pack("<I", len(data)))
        parts.append(data)
    return np.asarray(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor: Any) -> np.ndarray:
    """The elements of Triton's BYTES wire encoding, as an object array of bytes."""
    items = []
    offset = 0
    buffer = encoded_tensor
    while offset < len(buffer):
        (length,) = struct.unpack_from("<I", buffer, offset)
        offset += 4
        (item,) = struct.unpack_from(f"<{length}s", buffer, offset)
        offset += length
        items.append(item)
    return np.array(items, dtype=np.object_)


# -- model management (BLS) -------------------------------------------------------------------


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    _require_runtime("load_model").control("load", model_name, config, files or {})


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    _require_runtime("unload_model").control("unload", model_name, unload_dependents)


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    return bool(_require_runtime("is_model_ready").control("ready", model_name, model_version))


# -- logging ----------------------------------------------------------------------------------


class LogLevel:
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR
    VERBOSE = logging.DEBUG


class Logger:
    """Logs into the server's log (``Logger.log_info("...")``)."""

    @staticmethod
    def log(message: str, level: int = LogLevel.INFO) -> None:
        if _runtime is not None:
            _runtime.log(int(level), str(message))
        else:
            print(f"[{logging.getLevelName(level)}] {message}", file=sys.stderr)

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, LogLevel.VERBOSE)


# -- custom metrics (kept in the stub; not exported to /metrics yet) ---------------------------


class Metric:
    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None):
        self._family = family
        self._labels = dict(labels)
        self._buckets = list(buckets) if buckets else None
        self._value = 0.0
        self._observations: list[float] = []

    def increment(self, value: float) -> None:
        if self._family._kind == MetricFamily.COUNTER and value < 0:
            raise TritonModelException("a counter cannot be decremented")
        self._value += value

    def set(self, value: float) -> None:
        if self._family._kind != MetricFamily.GAUGE:
            raise TritonModelException("only a gauge can be set")
        self._value = float(value)

    def observe(self, value: float) -> None:
        if self._family._kind != MetricFamily.HISTOGRAM:
            raise TritonModelException("only a histogram observes values")
        self._observations.append(float(value))
        self._value += value

    def value(self) -> float:
        return self._value


class MetricFamily:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2

    def __init__(self, name: str, description: str, kind: int) -> None:
        self._name = name
        self._description = description
        self._kind = kind

    def Metric(
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        return Metric(self, labels or {}, buckets)


# -- auto_complete_config -----------------------------------------------------------------------


class ModelConfig:
    """The model configuration handed to ``auto_complete_config`` (a dict underneath)."""

    def __init__(self, model_config: dict[str, Any] | str) -> None:
        if isinstance(model_config, str):
            model_config = json.loads(model_config)
        self._model_config = model_config

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def _name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._model_config.get("max_batch_size", 0) or 0)
        if current != 0 and current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config "
                f"function for model '{self._name()}' specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        if self._model_config.get("sequence_batching"):
            raise ValueError(
                f"Configuration specified scheduling_choice as 'sequence_batching', but "
                f"auto-complete-config function for model '{self._name()}' tries to set "
                "scheduling_choice as 'dynamic_batching'"
            )
        if self._model_config.get("ensemble_scheduling"):
            raise ValueError(
                f"Configuration specified scheduling_choice as 'ensemble_scheduling', but "
                f"auto-complete-config function for model '{self._name()}' tries to set "
                "scheduling_choice as 'dynamic_batching'"
            )
        self._model_config.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    f"model transaction property in auto-complete-config function for model "
                    f"'{self._name()}' contains property other than 'decoupled'"
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        decoupled = bool(transaction_policy_dict.get("decoupled", False))
        if "decoupled" in policy and bool(policy["decoupled"]) != decoupled:
            raise ValueError(
                f"trying to change decoupled property in auto-complete-config for model "
                f"'{self._name()}', which is already set to {policy['decoupled']}"
            )
        policy["decoupled"] = decoupled

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        name = self._name()
        if not isinstance(tensor, dict):
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{name}' must be a dict"
            )
        for key in tensor:
            if key not in allowed:
                listed = ", ".join(f"'{k}'" for k in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} in auto-complete-config function for model '{name}' contains "
                    f"property other than {listed}."
                )
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError(
                    f"{kind} in auto-complete-config function for model '{name}' is missing "
                    f"'{key}' property."
                )
        tensors = self._model_config.setdefault(kind, [])
        for current in tensors:
            if str(current.get("name", "")).strip() != str(tensor["name"]).strip():
                continue
            current_type = current.get("data_type", "TYPE_INVALID")
            if (
                current_type not in ("TYPE_INVALID", "", None)
                and current_type != tensor["data_type"]
            ):
                raise ValueError(
                    f"unable to load model '{name}', configuration expects datatype "
                    f"{current_type} for {kind} '{tensor['name']}', model provides "
                    f"{tensor['data_type']}"
                )
            current_dims = [int(d) for d in current.get("dims") or []]
            new_dims = [int(d) for d in tensor["dims"]]
            if current_dims and current_dims != new_dims:
                raise ValueError(
                    f"model '{name}', tensor '{tensor['name']}': the model expects dims "
                    f"{new_dims} but the model configuration specifies dims {current_dims}"
                )
            if (
                "optional" in tensor
                and "optional" in current
                and bool(current["optional"]) != bool(tensor["optional"])
            ):
                raise ValueError(
                    f"model '{name}', tensor '{tensor['name']}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies optional "
                    f"{current['optional']}"
                )
            current["data_type"] = tensor["data_type"]
            current["dims"] = new_dims
            if "optional" in tensor:
                current["optional"] = bool(tensor["optional"])
            return
        tensors.append(dict(tensor))

    def add_input(self, input: dict[str, Any]) -> None:
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add_tensor("output", output, ("name", "data_type", "dims"))
