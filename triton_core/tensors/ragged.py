"""Ragged batching: ``allow_ragged_batch`` inputs, ``batch_input`` and ``batch_output``.

As Triton: the server adds each ``batch_input`` to every request of a batch once the batch
is formed (:meth:`RaggedBatching.add_batch_inputs`, per request, so that joining the
requests along the first dimension gives the batch's tensor, and a Python model sees its
request's share); framework backends join ragged inputs into one 1-D tensor
(:meth:`RaggedBatching.join`) and cut each ``BATCH_SCATTER_WITH_INPUT_SHAPE`` output back
into one piece per request, shaped like that request's source input
(:meth:`RaggedBatching.scatter`).

Per request, with ``n`` the element count of its source input (batch dimension included):

* ``BATCH_ELEMENT_COUNT``: ``[n]``
* ``BATCH_ACCUMULATED_ELEMENT_COUNT``: ``[n + the counts of the requests before it]``
* ``..._WITH_ZERO``: the same, with a leading 0 for the first request
* ``BATCH_MAX_ELEMENT_COUNT_AS_SHAPE``: shape ``[max n]`` for the first request, ``[0]`` after
  (the values mean nothing; zeros here)
* ``BATCH_ITEM_SHAPE``: ``[batch, rank - 1]``, the source's shape without the batch dimension
  per batch item; ``BATCH_ITEM_SHAPE_FLATTEN``: the same flattened
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from triton_core.errors import Status, TritonError, invalid_arg
from triton_core.protos.model_config_pb2 import BatchInput, BatchOutput, DataType, ModelConfig
from triton_core.tensors import buffer_manager
from triton_core.types import InferenceRequest, Tensor

_Kind = BatchInput.Kind
_WIRE = {DataType.TYPE_INT32: "INT32", DataType.TYPE_FP32: "FP32"}
_DTYPE = {"INT32": np.dtype("<i4"), "FP32": np.dtype("<f4")}


def _element_counts(shapes: Sequence[tuple[int, ...]]) -> list[int]:
    return [int(np.prod(shape, dtype=np.int64)) for shape in shapes]


def _element_count(shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    return [np.array([n]) for n in _element_counts(shapes)]


def _accumulated(shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    return [np.array([n]) for n in np.cumsum(_element_counts(shapes))]


def _accumulated_with_zero(shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    values = _accumulated(shapes)
    values[0] = np.array([0, values[0][0]])
    return values


def _max_as_shape(shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    largest = max(_element_counts(shapes))
    return [np.zeros(largest if i == 0 else 0) for i in range(len(shapes))]


def _item_shape(shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    return [np.tile(np.array(shape[1:]), (shape[0], 1)) for shape in shapes]


def _item_shape_flatten(shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    return [item.reshape(-1) for item in _item_shape(shapes)]


_KINDS: dict[int, Callable[[Sequence[tuple[int, ...]]], list[np.ndarray]]] = {
    _Kind.BATCH_ELEMENT_COUNT: _element_count,
    _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT: _accumulated,
    _Kind.BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO: _accumulated_with_zero,
    _Kind.BATCH_MAX_ELEMENT_COUNT_AS_SHAPE: _max_as_shape,
    _Kind.BATCH_ITEM_SHAPE: _item_shape,
    _Kind.BATCH_ITEM_SHAPE_FLATTEN: _item_shape_flatten,
}


@dataclass(frozen=True, slots=True)
class _BatchInput:
    target: str
    kind: int
    datatype: str
    source: str


class RaggedBatching:
    """A model's ragged inputs, batch inputs and batch outputs."""

    def __init__(self, config: ModelConfig) -> None:
        self.model = config.name
        self.ragged = frozenset(t.name for t in config.input if t.allow_ragged_batch)
        self.batch_inputs = tuple(
            _BatchInput(target, spec.kind, _WIRE[spec.data_type], spec.source_input[0])
            for spec in config.batch_input
            for target in spec.target_name
        )
        #: batch output name -> the input whose shape each request's piece takes
        self.scattered = {
            target: spec.source_input[0]
            for spec in config.batch_output
            for target in spec.target_name
        }

    @classmethod
    def of(cls, config: ModelConfig) -> RaggedBatching | None:
        """None for a config with no ragged input, batch input or batch output."""
        if config.batch_input or config.batch_output:
            return cls(config)
        if any(tensor.allow_ragged_batch for tensor in config.input):
            return cls(config)
        return None

    @property
    def target_types(self) -> dict[str, str]:
        """Batch input name -> wire datatype, for backends that bind model inputs."""
        return {spec.target: spec.datatype for spec in self.batch_inputs}

    def add_batch_inputs(self, requests: Sequence[InferenceRequest]) -> None:
        """Give each request of a formed batch its share of every batch input."""
        for spec in self.batch_inputs:
            shapes = [self._source(request, spec.source).data.shape for request in requests]
            dtype = _DTYPE[spec.datatype]
            for request, values in zip(requests, _KINDS[spec.kind](shapes), strict=True):
                request.inputs[spec.target] = Tensor(
                    spec.target, spec.datatype, values.astype(dtype)
                )

    def _source(self, request: InferenceRequest, name: str) -> Tensor:
        tensor = request.inputs.get(name)
        if tensor is None:
            raise invalid_arg(
                f"model '{self.model}': batch input source '{name}' is missing from request "
                f"'{request.id}'"
            )
        return tensor

    def join(self, batch: Sequence[InferenceRequest]) -> dict[str, np.ndarray]:
        """One array per input: ragged ones flattened end to end, others along dim 0."""
        first = batch[0].inputs
        if any(request.inputs.keys() != first.keys() for request in batch):
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{self.model}': the requests of a ragged batch must send the same inputs",
            )
        joined = {}
        for name in first:
            parts = [request.inputs[name].data for request in batch]
            if name in self.ragged:
                parts = [part.reshape(-1) for part in parts]
            try:
                joined[name] = buffer_manager.gather(parts)
            except ValueError:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"model '{self.model}': input '{name}' differs in shape between the "
                    "requests of a batch and does not set allow_ragged_batch",
                ) from None
        return joined

    def scatter(
        self, name: str, array: np.ndarray, batch: Sequence[InferenceRequest]
    ) -> list[np.ndarray]:
        """A batch output cut into each request's piece, shaped like its source input."""
        source = self.scattered[name]
        shapes = [request.inputs[source].data.shape for request in batch]
        flat = array.reshape(-1)
        counts = _element_counts(shapes)
        if flat.size != sum(counts):
            raise TritonError(
                Status.INTERNAL,
                f"model '{self.model}' returned batch output '{name}' with {flat.size} "
                f"elements; its source input '{source}' has {sum(counts)} in the batch",
            )
        pieces = []
        start = 0
        for shape, count in zip(shapes, counts, strict=True):
            pieces.append(flat[start : start + count].reshape(shape))
            start += count
        return pieces


def validate_batch_io(config: ModelConfig) -> None:
    """Triton's checks of ``batch_input`` and ``batch_output`` (its messages)."""
    model = config.name
    inputs = {tensor.name for tensor in config.input}
    outputs = {tensor.name for tensor in config.output}
    ragged = config.batch_input or config.batch_output
    if (ragged or any(t.allow_ragged_batch for t in config.input)) and config.max_batch_size < 1:
        raise invalid_arg(
            f"model '{model}': 'batch_input', 'batch_output' and 'allow_ragged_batch' need "
            "max_batch_size > 0"
        )
    for spec in config.batch_input:
        kind = BatchInput.Kind.Name(spec.kind)
        if len(spec.source_input) != 1:
            raise invalid_arg(
                f"batch input kind '{kind}' expects 1 source input, got "
                f"{len(spec.source_input)} for {model}"
            )
        if spec.data_type not in _WIRE:
            raise invalid_arg(f"batch input data type must be TYPE_INT32 or TYPE_FP32 for {model}")
        _check_sources(spec.source_input, inputs, model)
        _check_targets(spec.target_name, inputs, model)
    for out in config.batch_output:
        if len(out.source_input) != 1:
            raise invalid_arg(
                f"batch output kind '{BatchOutput.Kind.Name(out.kind)}' expects 1 source "
                f"input, got {len(out.source_input)} for {model}"
            )
        _check_sources(out.source_input, inputs, model)
        for target in out.target_name:
            if target not in outputs:
                raise invalid_arg(f"unknown target output name '{target}' for {model}")


def _check_sources(sources: Sequence[str], inputs: set[str], model: str) -> None:
    for source in sources:
        if source not in inputs:
            raise invalid_arg(f"unknown source input name '{source}' for {model}")


def _check_targets(targets: Sequence[str], inputs: set[str], model: str) -> None:
    if not targets:
        raise invalid_arg(f"model '{model}': every 'batch_input' needs a 'target_name'")
    for target in targets:
        if target in inputs:
            raise invalid_arg(
                f"model '{model}': batch input '{target}' is also listed in 'input'; the "
                "server fills batch inputs, so remove it from 'input'"
            )
