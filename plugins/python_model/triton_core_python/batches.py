"""A batch of requests in the stub's wire form, and its answers back as responses.

Inputs go into one shared-memory block with a descriptor per tensor (config ``reshape``
applied); outputs come back as numpy views of the stub's block (BF16 bits, reshapes).
Decoupled requests get a key each, under which the stub's responses find them. What a
batch's inputs take in shared memory is estimated cheaply beforehand
(:func:`estimated_bytes`), and its answer's clock readings become its statistics' times
(:func:`execution_times`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from triton_core import (
    ExecutionTimes,
    InferenceRequest,
    InferenceResponse,
    Tensor,
    TritonError,
    internal,
)
from triton_core_python import ipc
from triton_core_python.codes import status_of
from triton_core_python.wire import NUMPY_DTYPES, Descriptor, Packer, unpack

if TYPE_CHECKING:
    import weakref

    from triton_core import SharedMemorySpans
    from triton_core_python.launch import StubSettings


class EncodedBatch(NamedTuple):
    """A batch ready to send: its body, its tensors to copy, its decoupled keys, and the
    clients' system regions (by ident) the stub maps instead of receiving copies."""

    body: list[Any]
    packer: Packer
    keys: list[int]
    regions: dict[int, Any]


class BatchCodec:
    """Encodes batches for one stub process and decodes its responses."""

    def __init__(
        self, settings: StubSettings, traces: weakref.WeakValueDictionary[int, Any]
    ) -> None:
        self.settings = settings
        self.decoupled = settings.decoupled
        #: the process's shared memory, once it started
        self.memory: ipc.Memory | None = None
        #: decoupled requests by key, until their final response
        self.pending: dict[int, InferenceRequest] = {}
        #: the traces of traced requests sent to the stub, by id: their BLS calls continue them
        self._traces = traces
        #: whether the process may map one more client region (it keeps a bounded number)
        self.may_map: Callable[[Any], bool] = lambda region: True
        #: a decoupled request's watch token (0: not watched), see :meth:`encode`
        self.watch_cancel: Callable[[InferenceRequest, int], int] | None = None

    def encode(self, requests: list[InferenceRequest], watch: bool = False) -> EncodedBatch:
        """``watch`` (on the event loop only): decoupled requests whose cancellation the
        server tells the process (:attr:`watch_cancel`) carry their watch token, so that
        ``is_cancelled()`` in the model needs no question to the server."""
        packer = Packer()
        add = packer.add
        decoupled = self.decoupled
        reshapes = self.settings.input_reshapes
        body = []
        keys = []
        regions: dict[int, Any] = {}
        for index, request in enumerate(requests):
            spans = request.shared_memory_spans
            targets = None
            if spans is not None:
                mapped = _Mapped(regions, self.may_map)
                inputs = [
                    _input(packer, name, t, reshapes, spans, mapped)
                    for name, t in request.inputs.items()
                ]
                if not decoupled and spans.outputs:
                    targets = _output_targets(spans, mapped)
            elif reshapes:
                inputs = [
                    add(name, t.datatype, _reshaped(reshapes, name, t.data))
                    for name, t in request.inputs.items()
                ]
            else:
                inputs = [add(name, t.datatype, t.data) for name, t in request.inputs.items()]
            pooled = False
            token = 0
            if decoupled:
                # a rescheduled request comes back with the same key, so responses its model
                # sent before rescheduling still find it
                key = id(request)
                self.pending[key] = request
                keys.append(key)
                # its model's sends wait for room (--grpc-max-response-pool-size)
                pooled = getattr(request.response_sender, "pool", None) is not None
                if watch and self.watch_cancel is not None:
                    token = self.watch_cancel(request, key)
            else:
                key = index
            outputs = request.outputs
            body.append(
                (
                    key,
                    request.id,
                    request.correlation_id,
                    int(request.flags),
                    request.parameters or None,
                    None if outputs is None else [output.name for output in outputs],
                    inputs,
                    request.timeout_us,
                    self._trace_reference(request),
                    targets,
                    pooled,
                    token,
                )
            )
        return EncodedBatch(body, packer, keys, regions)

    def _trace_reference(self, request: InferenceRequest) -> tuple[int, str] | None:
        """(trace id, W3C context) of a traced request, for ``request.trace()`` in the stub."""
        trace = request.trace
        if trace is None:
            return None
        self._traces[trace.id] = trace
        return trace.id, trace.context()

    def responses(
        self, block: Any, items: list[Any], requests: list[InferenceRequest] | None = None
    ) -> list[InferenceResponse | None]:
        """The responses of a batch (of ``requests``, in order); None for a request its
        model rescheduled."""
        memory = self.memory
        assert memory is not None
        owner = memory.take_block(block)
        responses: list[InferenceResponse | None] = []
        for index, item in enumerate(items):
            if item == ipc.RESCHEDULED:
                responses.append(None)  # no response: the request runs again
                continue
            if item is None:
                responses.append(
                    InferenceResponse(
                        error=internal(
                            f"model '{self.settings.model_name}' returned None instead of a "
                            "response for a request"
                        )
                    )
                )
                continue
            descriptors, error, parameters, written = item
            if error is not None:
                responses.append(InferenceResponse(error=_carried_error(error)))
                continue
            if written:
                assert requests is not None
                try:
                    outputs = self._outputs_in_regions(owner, descriptors, written, requests[index])
                except TritonError as region_error:  # closed: its request was cancelled
                    responses.append(InferenceResponse(error=region_error))
                    continue
            else:
                outputs = [Tensor(d[0], self._datatype(d), unpack(owner, d)) for d in descriptors]
            if self.settings.output_reshapes:
                reshape_error = self._reshape_outputs(outputs)
                if reshape_error is not None:
                    responses.append(InferenceResponse(error=reshape_error))
                    continue
            responses.append(InferenceResponse(outputs, parameters or {}))
        return responses

    def _outputs_in_regions(
        self,
        owner: Any,
        descriptors: list[Descriptor],
        written: tuple[str, ...],
        request: InferenceRequest,
    ) -> list[Tensor]:
        """Outputs, those the stub wrote into their regions as views of the region there
        (the server's own mapping): the server recognises them and copies nothing."""
        spans = request.shared_memory_spans
        assert spans is not None
        outputs = []
        for descriptor in descriptors:
            name, _, shape, _, nbytes = descriptor
            span = spans.outputs.get(name) if name in written else None
            if span is None or nbytes > span.byte_size:
                outputs.append(Tensor(name, self._datatype(descriptor), unpack(owner, descriptor)))
                continue
            dtype = NUMPY_DTYPES[descriptor[1]]
            # the request may be gone (cancelled) and its region closed since the stub wrote
            span.region.check_alive()
            data = np.ndarray(shape, dtype, span.region.view(span.offset, nbytes))
            data.flags.writeable = False
            outputs.append(Tensor(name, self._datatype(descriptor), data))
        return outputs

    def _reshape_outputs(self, outputs: list[Tensor]) -> TritonError | None:
        """View outputs in the config's dims where the config reshapes them."""
        reshapes = self.settings.output_reshapes
        for tensor in outputs:
            reshape = reshapes.get(tensor.name)
            if reshape is None:
                continue
            try:
                tensor.data = reshape(tensor.data)
            except ValueError:
                return internal(
                    f"model '{self.settings.model_name}' returned output '{tensor.name}' with "
                    f"shape {list(tensor.data.shape)}, which does not match its config reshape"
                )
        return None

    def _datatype(self, descriptor: Descriptor) -> str:
        """An output's datatype: the bits of a BF16 output travel as UINT16."""
        datatype = descriptor[1]
        if datatype == "UINT16" and descriptor[0] in self.settings.bf16_outputs:
            return "BF16"
        return datatype

    def forget(self, keys: list[int]) -> None:
        for key in keys:
            self.pending.pop(key, None)


class _Mapped:
    """The regions a batch refers to, within what the process may map."""

    __slots__ = ("_may_map", "regions")

    def __init__(self, regions: dict[int, Any], may_map: Callable[[Any], bool]) -> None:
        self.regions = regions
        self._may_map = may_map

    def take(self, region: Any) -> bool:
        if region.ident in self.regions or self._may_map(region):
            self.regions[region.ident] = region
            return True
        return False


def _carried_error(error: tuple[int, str]) -> TritonError:
    """The error an ``InferenceResponse(error=...)`` carries: its client sees the error, but
    the request counts as a success, as in Triton's Python backend (only an execute that
    raises is a failure)."""
    carried = TritonError(status_of(error[0]), error[1])
    carried.counts_as_success = True
    return carried


def _input(
    packer: Packer,
    name: str,
    tensor: Tensor,
    reshapes: Mapping[str, Callable[[Any], Any]],
    spans: SharedMemorySpans,
    mapped: _Mapped,
) -> tuple[Any, ...]:
    """An input's descriptor: where it is in its region when the server resolved it from
    one (the stub maps it), else its bytes planned into the batch's block."""
    data = tensor.data
    if reshapes:
        data = _reshaped(reshapes, name, data)
    entry = spans.inputs.get(name)
    if entry is None or entry[0] is not tensor.data or not mapped.take(entry[1].region):
        return packer.add(name, tensor.datatype, data)
    span = entry[1]
    return (name, tensor.datatype, data.shape, span.offset, span.byte_size, span.region.ident)


def _output_targets(spans: SharedMemorySpans, mapped: _Mapped) -> dict[str, Any]:
    """Output name -> (region ident, offset, byte size): where the stub may write it."""
    return {
        name: (span.region.ident, span.offset, span.byte_size)
        for name, span in spans.outputs.items()
        if mapped.take(span.region)
    }


def in_region(
    request: InferenceRequest, name: str, data: Any, may_map: Callable[[Any], bool]
) -> bool:
    """Whether the input ``name`` (``data``) travels as a reference to its region."""
    spans = request.shared_memory_spans
    if spans is None:
        return False
    entry = spans.inputs.get(name)
    return entry is not None and entry[0] is data and may_map(entry[1].region)


def _reshaped(reshapes: Mapping[str, Callable[[Any], Any]], name: str, array: Any) -> Any:
    reshape = reshapes.get(name)
    return array if reshape is None else reshape(array)


def execution_times(measured: tuple[int, int, int, int] | None) -> ExecutionTimes | None:
    """The statistics' times of a batch from the process's clock readings (the same
    monotonic clock as the server's): received, execute called, returned, answer sent."""
    if measured is None:
        return None
    received, started, ended, answered = measured
    if not received <= started <= ended <= answered:
        return None
    return ExecutionTimes(received, started - received, ended - started, answered - ended)


def estimated_bytes(requests: list[InferenceRequest], may_map: Callable[[Any], bool]) -> int:
    """Roughly how many bytes a batch's inputs take in shared memory (cheap to compute)."""
    total = 0
    for request in requests:
        for name, tensor in request.inputs.items():
            data = tensor.data
            if request.shared_memory_spans is not None and in_region(request, name, data, may_map):
                continue  # the process maps it: nothing to copy
            # BYTES elements are objects: count them at a typical string's size
            total += data.size * 64 if data.dtype.kind == "O" else data.nbytes
    return total
