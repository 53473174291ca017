"""Triton's ``triton_python_backend_utils`` API, for ``model.py`` files written for Triton.

``import triton_python_backend_utils as pb_utils`` inside a model gives the classes and
helpers of Triton's Python backend (PROTOCOL.md section 6): ``Tensor``,
``InferenceRequest`` (with BLS ``exec``/``async_exec``), ``InferenceResponse``,
``TritonError``, ``Logger``, ``MetricFamily``, model management (``load_model`` ...),
``ModelConfig`` for ``auto_complete_config``, the config helpers and the constants: every
public name of Triton's module.

The module runs in the model's stub process (see ``triton_core_python.stub``), which sets
``_runtime`` (its ``triton_core_python.server_calls.ServerCalls``) to reach the server (BLS
calls, decoupled responses, logs, metrics, model management). Without a runtime
(plain imports, unit tests, ``auto_complete_config``) everything works except the calls
that need the server, which raise :class:`TritonModelException`.

Why one file of over 900 lines: it mirrors Triton's single module, which models' ``model.py``
import by this exact name for every name they use, and its classes refer to each other
(requests, responses, tensors, senders).
"""

from __future__ import annotations

import enum
import json
import struct
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from triton_core_python.wire import NUMPY_DTYPES, datatype_of

# -- constants --------------------------------------------------------------------------------

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class MemoryType(enum.IntEnum):
    """Where a BLS call would like its outputs (``PreferredMemory``), Triton's values."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU

#: set by the stub process: how this module reaches the server
_runtime: Any = None
#: the folder of model.py, set by the stub (also while auto_complete_config runs)
_model_dir: str | None = None

# TRITONSERVER_DataType values, in the C API's order
_TRITON_TYPES = (
    "INVALID", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
    "INT64", "FP16", "FP32", "FP64", "BYTES", "BF16",
)  # fmt: skip
_TYPE_NUMBERS = {name: number for number, name in enumerate(_TRITON_TYPES)}

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    "TYPE_BOOL": bool,
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


def _incompatible(function: str, signature: str, *invoked: Any) -> TypeError:
    """The TypeError Triton's bindings (pybind11) raise for arguments of the wrong type."""
    kind = "constructor" if function == "__init__" else "function"
    return TypeError(
        f"{function}(): incompatible {kind} arguments. The following argument types are "
        f"supported:\n    1. {signature}\n\nInvoked with: {', '.join(map(repr, invoked))}"
    )


def _is_int(value: Any) -> bool:
    return hasattr(value, "__index__") and not isinstance(value, float)


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
        if not isinstance(name, str) or tensor is None:
            raise _incompatible("__init__", "Tensor(arg0: str, arg1: numpy.ndarray)", name, tensor)
        if not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        datatype = None
        if type(tensor) is not np.ndarray:
            if hasattr(tensor, "__dlpack__") and not isinstance(tensor, np.generic):
                tensor, datatype = _from_dlpack_object(name, tensor)
            else:
                tensor = np.asarray(tensor)
        self._name = name
        self._array = tensor
        if datatype is not None:
            self._datatype = datatype
            return
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
        if self._datatype == "BF16":  # numpy has no bfloat16: Triton refuses, so do we
            raise TritonModelException(
                "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and "
                "from_dlpack() instead."
            )
        return self._array

    def triton_dtype(self) -> int:
        return _TYPE_NUMBERS[self._datatype]

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule of this tensor (no copy); BF16 comes out as bfloat16."""
        return self._exported().__dlpack__()

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._exported().__dlpack__()

    def _exported(self) -> Any:
        """What DLPack exports: the array, or a torch bfloat16 view of a BF16 tensor's bits."""
        if self._datatype == "BYTES":
            raise TritonModelException("DLPack does not have support for string tensors.")
        if self._datatype != "BF16":
            return self._array
        torch = _torch()
        if torch is None:
            raise TritonModelException(
                f"BF16 tensor '{self._name}': exporting bfloat16 via DLPack needs torch"
            )
        bits = np.ascontiguousarray(self._array).view(np.int16)
        return torch.from_numpy(bits).view(torch.bfloat16)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        if not isinstance(name, str) or not name:
            raise TritonModelException("Tensor name cannot be an empty string.")
        if not hasattr(capsule, "__dlpack__") and type(capsule).__name__ != "PyCapsule":
            raise TritonModelException(
                "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                "`__dlpack__` and `__dlpack_device__` attributes"
            )
        array, datatype = _from_dlpack_object(name, capsule)
        return Tensor._of(name, datatype, array)

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, {self._datatype}, shape={list(self._array.shape)})"


def _from_dlpack_object(name: str, value: Any) -> tuple[np.ndarray, str]:
    """A CPU DLPack tensor or capsule as (array, wire datatype); no copy."""
    if not hasattr(value, "__dlpack__"):
        torch = _torch()
        # torch reads every dtype of a bare capsule (numpy refuses bfloat16)
        value = torch.utils.dlpack.from_dlpack(value) if torch is not None else _Capsule(value)
    device = getattr(value, "__dlpack_device__", lambda: (1, 0))()
    if device[0] not in (1, 3):  # kDLCPU, kDLCUDAHost
        raise TritonModelException(
            f"tensor '{name}' is in GPU memory; this server passes CPU tensors only: move it "
            "to the CPU first (e.g. tensor.cpu())"
        )
    if str(getattr(value, "dtype", "")) == "torch.bfloat16":
        # numpy has no bfloat16: keep the bits, labelled BF16
        torch = _torch()
        assert torch is not None
        value = value.view(torch.int16)
        bf16 = True
    else:
        bf16 = False
    if hasattr(value, "is_contiguous") and not value.is_contiguous():
        raise TritonModelException(
            "DLPack tensor is not contiguous. Only contiguous DLPack tensors that are stored "
            "in C-Order are supported."
        )
    try:
        array = np.from_dlpack(value)
    except (TypeError, BufferError, RuntimeError) as exc:
        raise TritonModelException(f"tensor '{name}' cannot be read via DLPack: {exc}") from None
    if bf16:
        return array.view(np.uint16), "BF16"
    try:
        return array, datatype_of(array)
    except TypeError as exc:
        raise TritonModelException(f"tensor '{name}': {exc}") from None


_TORCH: list[Any] = []


def _torch() -> Any:
    """torch when the model's environment has it (imported once, only for DLPack)."""
    if not _TORCH:
        try:
            import torch  # optional, and heavy: only when DLPack needs it
        except ImportError:
            torch = None
        _TORCH.append(torch)
    return _TORCH[0]


# -- requests and responses -------------------------------------------------------------------


class PreferredMemory:
    """Where BLS outputs should be placed. Outputs here are always in CPU memory, which
    Triton's Python backend also gives when the preferred memory is not available."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        if preferred_memory_type is None or preferred_device_id is None:
            raise TypeError("PreferredMemory() arguments cannot be None")
        self.preferred_memory_type = MemoryType(preferred_memory_type)
        self.preferred_device_id = int(preferred_device_id)


class InferenceTrace:
    """A request's trace: pass ``request.trace()`` to a BLS ``InferenceRequest`` to trace the
    call as a child of the request. ``get_context()``: the W3C context (opentelemetry mode)."""

    def __init__(self, context: str | None = None, trace_id: int | None = None) -> None:
        self._context = context
        self._trace_id = trace_id

    def get_context(self) -> str | None:
        return self._context


def _parameters_dict(parameters: Any) -> dict[str, Any]:
    """A request's or response's ``parameters`` checked as Triton's stub checks them: None
    or a dict of ``str`` keys to ``bool``, ``int`` or ``str`` values, with its messages."""
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        # Triton's message names the C++ (pybind11) type it expects, mangled
        raise TritonModelException(f"Expect N8pybind114dictE, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, bool | int | str):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return dict(parameters)


_REQUEST_SIGNATURE = (
    "InferenceRequest(request_id: str = '', correlation_id: object = 0, inputs: "
    "list[Tensor], requested_output_names: list[str], model_name: str, model_version: "
    "int = -1, flags: int = 0, timeout: int = 0, preferred_memory: PreferredMemory = "
    "PreferredMemory(DEFAULT, 0), trace: InferenceTrace = InferenceTrace(), "
    "parameters: object = None)"
)


def _check_request_arguments(
    request_id: Any, correlation_id: Any, inputs: Any, output_names: Any, model_name: Any,
    model_version: Any, flags: Any, timeout: Any, preferred_memory: Any, trace: Any,
) -> None:  # fmt: skip
    """Refuse, as Triton's bindings do with a TypeError, arguments of the wrong type (None
    included); None among the inputs is Triton's TritonModelException, raised later."""
    well_typed = (
        isinstance(request_id, str)
        and correlation_id is not None
        and isinstance(inputs, list | tuple)
        and all(tensor is None or isinstance(tensor, Tensor) for tensor in inputs)
        and isinstance(output_names, list | tuple)
        and all(isinstance(name, str) for name in output_names)
        and isinstance(model_name, str)
        and all(_is_int(number) for number in (model_version, flags, timeout))
        and (preferred_memory is None or isinstance(preferred_memory, PreferredMemory))
        and (trace is None or isinstance(trace, InferenceTrace))
    )
    if not well_typed:
        raise _incompatible(
            "__init__", _REQUEST_SIGNATURE, request_id, correlation_id, inputs, output_names,
            model_name, model_version, flags, timeout, preferred_memory, trace,
        )  # fmt: skip


def _empty_in_request(what: str, request_id: str, model_name: str) -> TritonModelException:
    return TritonModelException(
        f"{what} for request with id '{request_id}' and model name '{model_name}' should "
        "not be empty."
    )


class InferenceRequest:
    """A request: one of those ``execute`` receives, or a BLS request a model builds.

    For BLS: ``InferenceRequest(model_name=..., requested_output_names=[...],
    inputs=[Tensor, ...])``, then ``exec()`` (blocking) or ``await async_exec()`` inside
    ``async def execute``; ``decoupled=True`` returns an iterator over the responses of a
    decoupled model.
    """

    def __init__(  # Triton's parameter order
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: list[Tensor] | None = None,
        requested_output_names: list[str] | None = None,
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: Any = None,
    ) -> None:
        _check_request_arguments(
            request_id, correlation_id, inputs, requested_output_names, model_name,
            model_version, flags, timeout, preferred_memory, trace,
        )  # fmt: skip
        if not isinstance(correlation_id, int | str) or isinstance(correlation_id, bool):
            raise TritonModelException("Correlation ID must be integer or string")
        self._model_name = model_name
        self._model_version = int(model_version)
        self._output_names = list(requested_output_names or ())
        self._inputs = list(inputs or ())
        if None in self._inputs:
            raise _empty_in_request("Input tensor", request_id, model_name)
        if "" in self._output_names:
            raise _empty_in_request("Requested output name", request_id, model_name)
        self._id = str(request_id)
        self._correlation_id = correlation_id
        self._flags = int(flags)
        self._timeout = int(timeout)
        self._parameters = _parameters_dict(parameters)
        self._trace = trace or InferenceTrace()
        self._preferred_memory = preferred_memory
        self._key = -1  # set for requests received from the server
        self._decoupled = False
        self._pooled = False
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
        request._preferred_memory = None
        request._key = key
        request._decoupled = decoupled
        request._pooled = False  # the stub sets it: sends wait for room in the server's pool
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
        if self._key < 0 or _runtime is None:
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
        output_tensors: list[Tensor] | tuple[Tensor, ...] = (),
        error: TritonError | None = None,
        parameters: Any = None,
    ) -> None:
        if not isinstance(output_tensors, list | tuple) or not all(
            tensor is None or isinstance(tensor, Tensor) for tensor in output_tensors
        ):
            raise _incompatible(
                "__init__",
                "InferenceResponse(output_tensors: list[Tensor] = [], error: TritonError = "
                "None, parameters: object = None)",
                output_tensors, error, parameters,
            )  # fmt: skip
        tensors = list(output_tensors)
        if None in tensors:
            raise TritonModelException("Output tensor for inference response should not be empty.")
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._tensors = tensors
        self._error = error
        self._parameters = _parameters_dict(parameters)

    @classmethod
    def _received(
        cls, tensors: list[Tensor], error: TritonError | None, parameters: dict[str, Any] | None
    ) -> InferenceResponse:
        """A BLS call's response, from the server: its parameters are taken as they are."""
        response = cls(tensors, error)
        response._parameters = parameters or {}
        return response

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
        #: a non-decoupled model's one response (the answer of its execute, whenever sent)
        self._captured: InferenceResponse | None = None
        #: called once that response is sent (the stub waits for it after execute returned)
        self._on_captured: Callable[[], None] | None = None

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if not self._request._decoupled:
            _check_single_response(self._captured is not None, response, flags)
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
            # its one response answers the request's execute, before or after it returned
            if final:
                self._closed = True
            if response is not None:
                self._captured = response
                on_captured = self._on_captured
                if on_captured is not None:
                    on_captured()
            return
        if final:
            self._closed = True
        # a flag-only final never waits (Triton allocates no response for it)
        wait = request._pooled and response is not None
        _require_runtime("sending responses").send_response(request._key, response, flags, wait)

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()


def _check_single_response(sent: bool, response: InferenceResponse | None, flags: int) -> None:
    """Triton's rules for a model that is not decoupled: one response, then (or with it)
    the final flag."""
    if response is not None and sent:
        raise TritonModelException(
            "Unable to send response. Non-decoupled model cannot send more than one response."
        )
    if response is None and flags == TRITONSERVER_RESPONSE_COMPLETE_FINAL and not sent:
        raise TritonModelException(
            "Unable to send response. Non-decoupled model cannot send complete final before "
            "sending a response."
        )


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
    return TRITON_STRING_TO_NUMPY[triton_type_string]


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


class LogLevel(enum.IntEnum):
    """Triton's log levels (``pb_utils.Logger.INFO`` ... are the same values)."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3


def _log_message(function: str, message: Any) -> str:
    """A log call's message: a str, as Triton's bindings take it (others are a TypeError)."""
    if not isinstance(message, str):
        raise _incompatible(function, "(message: str) -> None", message)
    return message


class Logger:
    """Logs into the server's log, with the caller's file and line as Triton does:
    ``Logger.log_info("...")`` or ``Logger.log("...", Logger.WARNING)``."""

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: str, level: LogLevel = LogLevel.INFO) -> None:
        if not isinstance(message, str) or not isinstance(level, LogLevel):
            raise _incompatible(
                "log",
                "(message: str, level: LogLevel = <LogLevel.INFO: 0>) -> None",
                message,
                level,
            )
        Logger._send(message, level, 2)

    @staticmethod
    def log_info(message: str) -> None:
        Logger._send(_log_message("log_info", message), LogLevel.INFO, 2)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger._send(_log_message("log_warn", message), LogLevel.WARNING, 2)

    @staticmethod
    def log_error(message: str) -> None:
        Logger._send(_log_message("log_error", message), LogLevel.ERROR, 2)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger._send(_log_message("log_verbose", message), LogLevel.VERBOSE, 2)

    @staticmethod
    def _send(message: str, level: LogLevel, depth: int) -> None:
        frame = sys._getframe(depth)
        filename, line = frame.f_code.co_filename, frame.f_lineno
        if _runtime is not None:
            _runtime.log(int(level), message, filename, line)
        else:
            # no server yet (auto_complete_config, plain imports): Triton writes to stderr
            print(
                f"{level.name[0]} {filename.rsplit('/', 1)[-1]}:{line}] {message}", file=sys.stderr
            )


# -- custom metrics ---------------------------------------------------------------------------


class MetricKind(enum.IntEnum):
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2


_KIND_NAMES = {
    MetricKind.COUNTER: "TRITONSERVER_METRIC_KIND_COUNTER",
    MetricKind.GAUGE: "TRITONSERVER_METRIC_KIND_GAUGE",
    MetricKind.HISTOGRAM: "TRITONSERVER_METRIC_KIND_HISTOGRAM",
}


class MetricFamily:
    """A metric family in the server's ``/metrics``: ``MetricFamily(name, description,
    kind=MetricFamily.COUNTER)``; ``.Metric(labels={...})`` adds a series to it."""

    COUNTER = MetricKind.COUNTER
    GAUGE = MetricKind.GAUGE
    HISTOGRAM = MetricKind.HISTOGRAM

    def __init__(self, name: str, description: str, kind: MetricKind) -> None:
        if name is None or description is None or kind is None:
            raise TypeError("MetricFamily() needs a name, a description and a kind")
        try:
            kind = MetricKind(kind)
        except ValueError:
            raise TritonModelException("Unknown metric kind") from None
        self._kind = kind
        self._name = str(name)
        self._id = 0
        try:
            self._id = _require_runtime("MetricFamily").metric_call(
                "family", (self._name, str(description), int(kind))
            )
        except TritonModelException as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc}") from None

    def Metric(  # Triton's name
        self, labels: dict[str, str] | None = None, buckets: list[float] | None = None
    ) -> Metric:
        return Metric._create(self, labels, buckets)

    def __del__(self) -> None:
        _release_metric_object(getattr(self, "_id", 0))


class Metric:
    """One series of a :class:`MetricFamily`: ``increment``, ``set``, ``observe``, ``value``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("create metrics with MetricFamily.Metric(labels=..., buckets=...)")

    @classmethod
    def _create(cls, family: MetricFamily, labels: Any, buckets: Any) -> Metric:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if family._kind != MetricKind.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            buckets = [float(bound) for bound in buckets]
        elif family._kind == MetricKind.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        labels = {str(key): str(value) for key, value in (labels or {}).items()}
        metric = cls.__new__(cls)
        metric._family = family
        metric._kind = family._kind
        metric._id = 0
        try:
            metric._id = _require_runtime("Metric").metric_call(
                "metric", (family._id, labels, buckets)
            )
        except TritonModelException as exc:
            raise TritonModelException(f"Error when creating Metric: {exc}") from None
        return metric

    def _refuse(self, what: str, operation: str) -> None:
        raise TritonModelException(
            f"Failed to {what} metric value: {_KIND_NAMES[self._kind]} does not support {operation}"
        )

    def increment(self, value: float) -> None:
        if self._kind == MetricKind.HISTOGRAM:
            self._refuse("increment", "Increment")
        value = float(value)
        if self._kind == MetricKind.COUNTER and value < 0.0:
            raise TritonModelException(
                "Failed to increment metric value: TRITONSERVER_METRIC_KIND_COUNTER can only "
                "be incremented monotonically by non-negative values."
            )
        _require_runtime("Metric").metric_update(self._id, "increment", value)

    def set(self, value: float) -> None:
        if self._kind != MetricKind.GAUGE:
            self._refuse("set", "Set")
        _require_runtime("Metric").metric_update(self._id, "set", float(value))

    def observe(self, value: float) -> None:
        if self._kind != MetricKind.HISTOGRAM:
            self._refuse("observe", "Observe")
        _require_runtime("Metric").metric_update(self._id, "observe", float(value))

    def value(self) -> float:
        if self._kind == MetricKind.HISTOGRAM:
            self._refuse("get", "Value")
        return float(_require_runtime("Metric").metric_call("value", (self._id,)))

    def __del__(self) -> None:
        _release_metric_object(getattr(self, "_id", 0))


def _release_metric_object(ident: int) -> None:
    runtime = _runtime
    if ident and runtime is not None:
        runtime.metric_release(ident)


# -- model directory ----------------------------------------------------------------------------


def get_model_dir() -> str:
    """The folder of the model's ``model.py`` (its version folder), as in Triton."""
    if _model_dir is not None:
        return _model_dir
    raise TritonModelException("get_model_dir() is only available inside a model")


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
