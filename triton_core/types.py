"""Typed, wire-independent objects that flow between the frontends, the server and backends."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from triton_core.errors import TritonError
from triton_core.tensors.device_tensors import DeviceBuffer

if TYPE_CHECKING:
    import asyncio

    from triton_core.observability.statistics import StepTimes
    from triton_core.observability.tracing.trace import Trace
    from triton_core.shared_memory.refs import SharedMemorySpans, SharedMemoryTensors

#: request and response parameter values, as the parameters extension allows them
ParameterValue = bool | int | float | str


class RequestFlag(enum.IntFlag):
    """Request flags (TRITONSERVER_REQUEST_FLAG_*)."""

    NONE = 0
    SEQUENCE_START = 1
    SEQUENCE_END = 2


@dataclass(slots=True)
class Tensor:
    """A named tensor; ``data`` holds the values (see :mod:`triton_core.tensors.dtypes`).

    ``data`` is a numpy array, except for instances that declare ``accepts_device_tensors``:
    they may get (and return) a :class:`~triton_core.DeviceBuffer` instead, see
    :mod:`triton_core.tensors.device_tensors`.
    """

    name: str
    datatype: str
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape


@dataclass(slots=True)
class RequestedOutput:
    """An output a client asked for; ``classification`` > 0 asks for top-K labels instead."""

    name: str
    classification: int = 0


class ResponseSender(Protocol):
    """How a decoupled model answers: any number of responses, then a final flag.

    ``send`` may be called from any thread, during or after ``execute``. The last call must
    pass ``final=True`` (with or without a response), as Triton's
    ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``. Off the event loop, sending a response may
    wait while the client has not taken the earlier ones (``--grpc-max-response-pool-size``
    on a gRPC stream, as Triton blocks the backend's thread); it returns when there is room
    or the client is gone (then ``is_cancelled()`` is true).
    """

    def send(self, response: InferenceResponse | None = None, *, final: bool = False) -> None: ...

    def is_cancelled(self) -> bool:
        """True once the client stopped waiting (stream closed, request cancelled)."""
        ...


@dataclass(slots=True)
class InferenceRequest:
    """One inference request, as the server and the backends see it."""

    model_name: str
    inputs: dict[str, Tensor]
    model_version: int = -1
    id: str = ""
    #: None means every output of the model
    outputs: list[RequestedOutput] | None = None
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    priority: int = 0
    timeout_us: int = 0
    correlation_id: int | str = 0
    flags: RequestFlag = RequestFlag.NONE
    #: set by the server: the batch size (first dimension, or 1 for non-batching models)
    batch_size: int = 1
    #: set by the server: monotonic ns when the request entered its model's scheduler
    queued_ns: int = 0
    #: set by the server for decoupled models: where the model sends its responses
    response_sender: ResponseSender | None = None
    #: set by a frontend for a request it samples for tracing (None: not traced)
    trace: Trace | None = None
    #: tensors in registered shared-memory regions (None: none); the server turns the
    #: inputs into views in ``inputs`` and writes the outputs into their regions
    shared_memory: SharedMemoryTensors | None = None
    #: set by the server on a request whose tensors it resolved from system regions: where
    #: they are, for backends that map the regions in the model's own process
    shared_memory_spans: SharedMemorySpans | None = None
    #: set by a backend: the model released the request with Triton's
    #: ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``, to run it again (no response this time);
    #: only a sequence batcher with ``iterative_sequence`` accepts that
    reschedule: bool = False
    #: set by the ensemble scheduler on a step's request: where its compute times are added,
    #: for the ensemble's statistics (None: not a step of an ensemble)
    ensemble_steps: StepTimes | None = None
    #: set by the server, for instances that accept device tensors only: outputs asked into
    #: CUDA shared memory -> the client's bytes, for the backend to write into (None: none)
    device_outputs: dict[str, DeviceBuffer] | None = None
    #: set by the server on a request that is not decoupled: the future its client awaits,
    #: which the server cancels when the client stops waiting (see :meth:`is_cancelled`)
    answer: asyncio.Future[Any] | None = field(default=None, repr=False, compare=False)

    def output_names(self) -> list[str] | None:
        """Names of the requested outputs, or None for all of them."""
        if self.outputs is None:
            return None
        return [output.name for output in self.outputs]

    def is_cancelled(self) -> bool:
        """Whether the client stopped waiting for this request (Triton's
        ``TRITONBACKEND_RequestIsCancelled``): its call was cancelled, its stream closed."""
        if self.response_sender is not None:
            return self.response_sender.is_cancelled()
        return self.answer is not None and self.answer.cancelled()


@dataclass(slots=True)
class InferenceResponse:
    """The answer to one request: output tensors, or an error.

    Backends fill ``outputs`` (and optionally ``parameters`` or ``error``); the server fills
    the model name, version and request id.
    """

    outputs: list[Tensor] = field(default_factory=list)
    parameters: dict[str, ParameterValue] = field(default_factory=dict)
    error: TritonError | None = None
    model_name: str = ""
    model_version: int = -1
    id: str = ""
    #: False for all but the last response of a decoupled model's request
    final: bool = True
    #: outputs the server wrote into shared-memory regions: their answer is metadata only
    shared_memory_outputs: frozenset[str] | None = None

    def output(self, name: str) -> Tensor:
        for tensor in self.outputs:
            if tensor.name == name:
                return tensor
        raise KeyError(name)


@dataclass(slots=True, frozen=True)
class TensorMetadata:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(slots=True, frozen=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]


@dataclass(slots=True, frozen=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(slots=True, frozen=True)
class ModelIndexEntry:
    """One row of the repository index: a model (and version) with its state."""

    name: str
    version: int = -1
    state: str = ""
    reason: str = ""


def as_parameter_value(value: Any) -> ParameterValue:
    if isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"parameter value {value!r} is not bool, int, float or str")


# -- requests with tensors in device memory --------------------------------------------------------


def has_device_tensors(request: InferenceRequest) -> bool:
    """Whether ``request`` has an input or an output target in device memory."""
    return request.device_outputs is not None or bool(_input_buffers(request))


def request_to_host(request: InferenceRequest) -> None:
    """Make ``request`` host-only, in place: device inputs copied to host arrays, device
    output targets dropped (the server then writes host outputs into their regions)."""
    targets, request.device_outputs = request.device_outputs, None
    buffers = list((targets or {}).values())
    for name, tensor in list(request.inputs.items()):
        data = tensor.data
        if isinstance(data, DeviceBuffer):
            request.inputs[name] = Tensor(name, tensor.datatype, data.to_host())
            buffers.append(data)
    for buffer in buffers:  # the instance will not touch the device memory
        if buffer.lease is not None:
            buffer.lease.end()


def release_leases(requests: list[InferenceRequest]) -> None:
    """After a batch executed: its device tensors' regions are no longer in use by it."""
    for request in requests:
        for buffer in [*_input_buffers(request), *(request.device_outputs or {}).values()]:
            if buffer.lease is not None:
                buffer.lease.end()


def request_on_device(request: InferenceRequest, device_id: int) -> bool:
    """Whether every device tensor of ``request`` is on ``device_id`` (else copy through)."""
    targets = list((request.device_outputs or {}).values())
    return all(buffer.device_id == device_id for buffer in [*targets, *_input_buffers(request)])


def _input_buffers(request: InferenceRequest) -> list[DeviceBuffer]:
    found = []
    for tensor in request.inputs.values():
        data: object = tensor.data
        if isinstance(data, DeviceBuffer):
            found.append(data)
    return found
