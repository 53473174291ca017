"""Batched execution for framework backends: select outputs, run many requests as one call.

A :class:`BatchPlan` is built once per model, at load. An instance's ``execute`` hands it the
batch and a ``run`` function that makes one framework call::

    def execute(self, requests):
        return self.plan.execute(requests, self._run)

    def _run(self, inputs, output_names):  # {name: array}, names -> one array per name
        return self.session.run(output_names, inputs)

The requests of a batch are concatenated along the batch dimension, run once, and each
request gets views of its rows of every output it asked for (no copies). A request asking
for outputs the model lacks fails alone; requests that cannot be concatenated run one at a
time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from triton_core.errors import Status, TritonError
from triton_core.tensors import buffer_manager
from triton_core.types import InferenceRequest, InferenceResponse, Tensor

if TYPE_CHECKING:
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.tensors.ragged import RaggedBatching

#: ``run(inputs, output_names)`` -> one array per name, batch dimension first. It may
#: replace values in ``inputs`` (a dict of its own) while converting them for the framework.
RunBatch = Callable[[dict[str, np.ndarray], list[str]], Sequence[np.ndarray]]

#: views an array in another shape (config ``reshape``)
Reshape = Callable[[np.ndarray], np.ndarray]


class BatchPlan:
    """What executing a model needs from its config, computed once per model load."""

    __slots__ = ("_all", "_known", "_wire", "batching", "model", "outputs", "ragged")

    def __init__(
        self,
        model: str,
        outputs: Mapping[str, str],
        *,
        batching: bool,
        ragged: RaggedBatching | None = None,
    ) -> None:
        """``outputs``: every output the model produces -> its wire datatype (``FP32``...);
        ``batching``: max_batch_size > 0, so the requests of a batch can be concatenated;
        ``ragged``: the config's ragged inputs and batch outputs (``RaggedBatching.of``):
        every batch, even of one request, then runs joined that way."""
        self.model = model
        self.ragged = ragged
        self.outputs: tuple[str, ...] = tuple(outputs)
        self.batching = batching
        self._wire = dict(outputs)
        self._all = list(outputs)
        self._known = frozenset(outputs)

    def select(self, request: InferenceRequest) -> list[str]:
        """The outputs ``request`` asks for (every output when it names none), in its order.

        Raises INVALID_ARG naming the outputs the model does not have.
        """
        names = request.output_names()
        if names is None:
            return self._all
        if not self._known.issuperset(names):
            raise self._unknown_outputs(names)
        return names

    def tensors(self, names: Sequence[str], arrays: Sequence[np.ndarray]) -> list[Tensor]:
        """Output tensors of ``arrays`` (in the order of ``names``) with their wire types."""
        wire = self._wire
        return [Tensor(name, wire[name], array) for name, array in zip(names, arrays, strict=True)]

    def execute(self, requests: list[InferenceRequest], run: RunBatch) -> list[InferenceResponse]:
        """One response per request: one ``run`` for the whole batch where the model batches.

        An error raised for a single request (or by a concatenated ``run``) fails the batch;
        a request that runs on its own in a larger batch gets its error in its response.
        """
        if self.ragged is not None and requests:
            return self._execute_concatenated(requests, run)
        if len(requests) == 1:
            request = requests[0]
            names = self.select(request)
            arrays = run({name: tensor.data for name, tensor in request.inputs.items()}, names)
            return [InferenceResponse(outputs=self.tensors(names, arrays))]
        if not self.batching or not requests:
            return [self.execute_alone(request, run) for request in requests]
        return self._execute_concatenated(requests, run)

    def execute_alone(self, request: InferenceRequest, run: RunBatch) -> InferenceResponse:
        """Run one request; a TritonError becomes the response's error."""
        try:
            names = self.select(request)
            arrays = run({name: tensor.data for name, tensor in request.inputs.items()}, names)
        except TritonError as exc:
            return InferenceResponse(error=exc)
        return InferenceResponse(outputs=self.tensors(names, arrays))

    def _unknown_outputs(self, names: Sequence[str]) -> TritonError:
        unknown = [name for name in names if name not in self._known]
        return TritonError(
            Status.INVALID_ARG,
            f"model '{self.model}' has no output(s) {', '.join(unknown)} "
            f"(outputs: {', '.join(self._all)})",
        )

    def _execute_concatenated(
        self, requests: list[InferenceRequest], run: RunBatch
    ) -> list[InferenceResponse]:
        responses: list[InferenceResponse | None] = [None] * len(requests)
        members: list[int] = []  # the requests that join the call
        wanted: list[list[str]] = []  # what each member asked for
        union: set[str] = set()
        every_output = False
        for i, request in enumerate(requests):
            names = request.output_names()
            if names is None:
                every_output = True
                names = self._all
            elif not self._known.issuperset(names):
                responses[i] = InferenceResponse(error=self._unknown_outputs(names))
                continue
            union.update(names)
            wanted.append(names)
            members.append(i)
        if members:
            batch = [requests[i] for i in members]
            names = self._all if every_output else [n for n in self._all if n in union]
            answers = self._run_members(batch, wanted, names, run)
            for i, response in zip(members, answers, strict=True):
                responses[i] = response
        return [response for response in responses if response is not None]

    def _run_members(
        self,
        batch: list[InferenceRequest],
        wanted: list[list[str]],
        names: list[str],
        run: RunBatch,
    ) -> list[InferenceResponse]:
        if self.ragged is not None:
            return self._run_ragged(batch, wanted, names, run, self.ragged)
        inputs = _concatenate(batch)
        if inputs is None:
            return [self.execute_alone(request, run) for request in batch]
        first = next(iter(batch[0].inputs))
        sizes = [request.inputs[first].data.shape[0] for request in batch]
        total = sum(sizes)
        results: dict[str, np.ndarray] = {}
        for name, array in zip(names, run(inputs, names), strict=True):
            if array.ndim == 0 or array.shape[0] != total:
                raise TritonError(
                    Status.INTERNAL,
                    f"model '{self.model}' returned output '{name}' with shape "
                    f"{list(array.shape)} for a batch of {total}",
                )
            results[name] = array
        responses = []
        start = 0
        for names_i, size in zip(wanted, sizes, strict=True):
            stop = start + size
            # Basic slices are views: no copy per request.
            outputs = [Tensor(n, self._wire[n], results[n][start:stop]) for n in names_i]
            responses.append(InferenceResponse(outputs=outputs))
            start = stop
        return responses

    def _run_ragged(
        self,
        batch: list[InferenceRequest],
        wanted: list[list[str]],
        names: list[str],
        run: RunBatch,
        ragged: RaggedBatching,
    ) -> list[InferenceResponse]:
        """One call with ragged inputs joined end to end; batch outputs scattered back."""
        arrays = run(ragged.join(batch), names)
        sizes = [request.batch_size for request in batch]
        pieces: dict[str, list[np.ndarray]] = {}
        for name, array in zip(names, arrays, strict=True):
            if name in ragged.scattered:
                pieces[name] = ragged.scatter(name, array, batch)
            elif array.ndim == 0 or array.shape[0] != sum(sizes):
                raise TritonError(
                    Status.INTERNAL,
                    f"model '{self.model}' returned output '{name}' with shape "
                    f"{list(array.shape)} for a batch of {sum(sizes)}",
                )
            else:
                bounds = np.cumsum([0, *sizes])
                pieces[name] = [array[a:b] for a, b in pairwise(bounds)]
        return [
            InferenceResponse(outputs=[Tensor(n, self._wire[n], pieces[n][i]) for n in names_i])
            for i, names_i in enumerate(wanted)
        ]


def _concatenate(batch: list[InferenceRequest]) -> dict[str, np.ndarray] | None:
    """The batch's inputs joined along the batch dimension, or None where they cannot be."""
    first = batch[0].inputs
    if not first or any(request.inputs.keys() != first.keys() for request in batch):
        return None  # without a common set of inputs there is nothing to concatenate
    try:
        return {
            name: buffer_manager.gather([request.inputs[name].data for request in batch])
            for name in first
        }
    except ValueError:
        return None  # different non-batch dims: the batcher should not have combined them


# -- reshape -----------------------------------------------------------------------------------


def reshaper(shape: tuple[int, ...], *, batched: bool) -> Reshape | None:
    """A function viewing an array as ``[batch] + shape`` (or ``shape``), or None if ambiguous.

    It returns the array itself when it has that shape already.
    """
    if list(shape).count(-1) > 1:
        return None  # numpy cannot infer two dims; leave such tensors as they come

    if batched:

        def reshape_batch(array: np.ndarray) -> np.ndarray:
            target = (array.shape[0], *shape)
            return array if array.shape == target else array.reshape(target)

        return reshape_batch

    def reshape(array: np.ndarray) -> np.ndarray:
        return array if array.shape == shape else array.reshape(shape)

    return reshape


def input_reshapes(config: ModelConfig) -> dict[str, Reshape]:
    """Input name -> a function from the config's dims to the ``reshape`` the model takes."""
    shapes = {t.name: t.reshape.shape for t in config.input if t.HasField("reshape")}
    return _reshapes(shapes, batched=config.max_batch_size > 0)


def output_reshapes(config: ModelConfig) -> dict[str, Reshape]:
    """Output name -> a function from the model's ``reshape`` to the config's dims."""
    shapes = {t.name: t.dims for t in config.output if t.HasField("reshape")}
    return _reshapes(shapes, batched=config.max_batch_size > 0)


def _reshapes(shapes: Mapping[str, Iterable[int]], *, batched: bool) -> dict[str, Reshape]:
    return {
        name: function
        for name, shape in shapes.items()
        if (function := reshaper(tuple(shape), batched=batched))
    }
