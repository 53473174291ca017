"""One loaded model version: its config, instances and scheduler, and request validation."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triton_core.config import wire_datatype
from triton_core.errors import Status, TritonError, invalid_arg
from triton_core.plugins.failures import model_label
from triton_core.server.outputs import OutputCheck, format_shape, shape_matches
from triton_core.tensors.classification import classify
from triton_core.types import InferenceRequest, InferenceResponse, Tensor, TensorMetadata

if TYPE_CHECKING:
    from triton_core.backends.contract import BackendModel
    from triton_core.observability.statistics import ModelStatistics
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.scheduling.base import Scheduler
    from triton_core.scheduling.executor import InstancePool


@dataclass(frozen=True, slots=True)
class InputSpec:
    """What the config says about one input, precomputed for validation."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    optional: bool
    reshape: tuple[int, ...] | None


class ModelSignature:
    """A model version's inputs and outputs, and the checks a request must pass."""

    def __init__(self, config: ModelConfig) -> None:
        self.model_name = config.name
        self.max_batch_size = config.max_batch_size
        self.inputs: dict[str, InputSpec] = {}
        for tensor in config.input:
            reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
            self.inputs[tensor.name] = InputSpec(
                tensor.name,
                wire_datatype(tensor.data_type),
                tuple(tensor.dims),
                tensor.optional,
                reshape,
            )
        self.required = frozenset(name for name, spec in self.inputs.items() if not spec.optional)
        self.decoupled = config.model_transaction_policy.decoupled
        #: requests may be released to run again (sequence_batching iterative_sequence)
        self.iterative = config.sequence_batching.iterative_sequence
        self.output_datatypes = {t.name: wire_datatype(t.data_type) for t in config.output}
        self.labels: dict[str, list[str]] = {}
        self.output_check = OutputCheck(config)
        #: who produces the outputs, for error messages: the backend and its plugin
        self.origin = ""
        batch_prefix = (-1,) if self.max_batch_size > 0 else ()
        self.input_metadata = tuple(
            TensorMetadata(spec.name, spec.datatype, batch_prefix + spec.dims)
            for spec in self.inputs.values()
        )
        self.output_metadata = tuple(
            TensorMetadata(t.name, wire_datatype(t.data_type), batch_prefix + tuple(t.dims))
            for t in config.output
        )

    def validate(self, request: InferenceRequest) -> None:
        """Check a request against the config; reshape inputs that the config reshapes."""
        model = self.model_name
        inputs = request.inputs
        specs = self.inputs
        batch_size = -1
        for name, tensor in inputs.items():
            spec = specs.get(name)
            if spec is None:
                raise invalid_arg(
                    f"unexpected inference input '{name}' for model '{model}', allowed inputs "
                    f"are: {', '.join(specs)}"
                )
            if tensor.datatype != spec.datatype:
                raise invalid_arg(
                    f"inference input '{name}' data-type is '{tensor.datatype}', but model "
                    f"'{model}' expects '{spec.datatype}'"
                )
            shape = tensor.data.shape
            if self.max_batch_size > 0:
                if not shape:
                    raise invalid_arg(
                        f"input '{name}' for model '{model}' has no batch dimension; expected "
                        f"shape {format_shape((-1, *spec.dims))}"
                    )
                if batch_size < 0:
                    batch_size = shape[0]
                elif shape[0] != batch_size:
                    raise invalid_arg(
                        f"input '{name}' batch size {shape[0]} does not match other inputs' batch "
                        f"size {batch_size} for model '{model}'"
                    )
                item_shape = shape[1:]
            else:
                item_shape = shape
            if not shape_matches(item_shape, spec.dims):
                expected = (-1, *spec.dims) if self.max_batch_size > 0 else spec.dims
                raise invalid_arg(
                    f"unexpected shape for input '{name}' for model '{model}'. Expected "
                    f"{format_shape(expected)}, got {format_shape(shape)}"
                )
            if spec.reshape is not None:
                new_shape = (shape[0], *spec.reshape) if self.max_batch_size > 0 else spec.reshape
                tensor.data = tensor.data.reshape(new_shape)
        if batch_size > self.max_batch_size > 0:
            raise invalid_arg(
                f"inference request batch-size must be <= {self.max_batch_size} for '{model}'"
            )
        request.batch_size = batch_size if batch_size >= 0 else 1
        if len(inputs) < len(self.required):
            raise invalid_arg(self._input_count_problem(request))
        if request.outputs is not None:
            for output in request.outputs:
                if output.name not in self.output_datatypes:
                    raise invalid_arg(
                        f"unexpected inference output '{output.name}' for model '{model}'"
                    )

    def _input_count_problem(self, request: InferenceRequest) -> str:
        """Triton's words for too few inputs (it counts them, as here, before names)."""
        inputs, specs = request.inputs, self.inputs
        missing = [name for name in specs if name in self.required and name not in inputs]
        if len(self.required) == len(specs):
            expected = f"expected {len(specs)} inputs"
        else:
            expected = f"expected number of inputs between {len(self.required)} and {len(specs)}"
        return (
            f"{expected} but got {len(inputs)} inputs for model '{self.model_name}'. Got "
            f"input(s) {_name_list(inputs)}, but missing required input(s) "
            f"{_name_list(missing)}. Please provide all required input(s)."
        )

    def finish(
        self,
        requests: Sequence[InferenceRequest],
        responses: Sequence[InferenceResponse] | None,
        version: int,
        instance: str = "",
    ) -> list[InferenceResponse | TritonError | None]:
        """Check, name, number and trim backend responses to what each request asked for.

        A decoupled model answers through each request's response sender instead: its batch
        resolves with None per request once ``execute`` returns. A request the backend
        rescheduled resolves with None too (its scheduler runs it again).
        """
        if self.decoupled:
            if self.iterative:
                return [None] * len(requests)
            return [_not_reschedulable() if r.reschedule else None for r in requests]
        if responses is None or len(responses) != len(requests):
            count = 0 if responses is None else len(responses)
            error = self.backend_error(
                version, instance, f"returned {count} responses for {len(requests)} requests"
            )
            return [error] * len(requests)
        return [
            self.finish_one(request, response, version, instance)
            if response is not None
            else self._no_response(request, version, instance)
            for request, response in zip(requests, responses, strict=True)
        ]

    def _no_response(
        self, request: InferenceRequest, version: int, instance: str
    ) -> TritonError | None:
        """None from a backend: a rescheduled request (None: its scheduler runs it again)."""
        if not request.reschedule:
            return self.backend_error(version, instance, "returned None for a request")
        return None if self.iterative else _not_reschedulable()

    def finish_one(
        self,
        request: InferenceRequest,
        response: InferenceResponse,
        version: int,
        instance: str = "",
    ) -> InferenceResponse | TritonError:
        """One backend response made final: its error, or checked, named, numbered, trimmed.

        Outputs that break the config (:mod:`triton_core.server.outputs`) fail the request with
        INTERNAL, naming the model, version, instance and backend plugin.
        """
        if response.error is not None:
            return response.error
        problem = self.output_check.problem(response.outputs, request.batch_size)
        if problem is not None:
            return self.backend_error(version, instance, problem)
        response.model_name = self.model_name
        response.model_version = version
        response.id = request.id
        if request.outputs is not None:
            try:
                response.outputs = self._select_outputs(request, response, version, instance)
            except TritonError as error:
                return error
        return response

    def backend_error(self, version: int, instance: str, problem: str) -> TritonError:
        """INTERNAL, blaming the backend: ``model 'm' version 1 instance 'm_0': backend ...``."""
        where = model_label(self.model_name, version, instance)
        who = f" {self.origin}" if self.origin else ""
        return TritonError(Status.INTERNAL, f"{where}:{who} {problem}", reason="BACKEND")

    def _select_outputs(
        self, request: InferenceRequest, response: InferenceResponse, version: int, instance: str
    ) -> list[Tensor]:
        produced = {tensor.name: tensor for tensor in response.outputs}
        selected = []
        for output in request.outputs or ():
            tensor = produced.get(output.name)
            if tensor is None:
                problem = f"did not produce requested output '{output.name}'"
                raise self.backend_error(version, instance, problem)
            if output.classification > 0:
                tensor = classify(
                    tensor,
                    output.classification,
                    self.labels.get(output.name),
                    batched=self.max_batch_size > 0,
                )
            selected.append(tensor)
        return selected


_CACHEABLE_SCHEDULING = (None, "dynamic_batching", "ensemble_scheduling")
#: schedulers that hand a request's tensors to an instance as they are
_DEVICE_TENSOR_SCHEDULING = (None, "dynamic_batching")


def _name_list(names: Iterable[str]) -> str:
    """Names as Triton lists them in messages: ``['a','b']``."""
    return "[" + ",".join(f"'{name}'" for name in names) + "]"


def _not_reschedulable() -> TritonError:
    return invalid_arg(
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is "
        "not configured to handle such a flag."
    )


class ModelRetired(Exception):
    """The model version was swapped out or unloaded between lookup and submission."""


class LoadedModel:
    """A model version that is ready to serve: signature, instances and scheduler."""

    def __init__(
        self,
        config: ModelConfig,
        version: int,
        signature: ModelSignature,
        backend_model: BackendModel,
        pool: InstancePool,
        scheduler: Scheduler,
        statistics: ModelStatistics,
    ) -> None:
        self.name = config.name
        self.version = version
        self.config = config
        self.signature = signature
        self.backend_model = backend_model
        self.pool = pool
        self.scheduler = scheduler
        self.statistics = statistics
        self.platform = config.platform or config.backend
        self.decoupled = config.model_transaction_policy.decoupled
        #: set when a reload or unload takes this version out of service
        self.retired = False
        #: Triton caches only non-decoupled models with the default or dynamic scheduler, and
        #: ensembles at the top level (their load refuses a cache where it cannot work)
        self.cacheable = (
            config.response_cache.enable
            and not self.decoupled
            and config.WhichOneof("scheduling_choice") in _CACHEABLE_SCHEDULING
        )

        #: CUDA shared-memory tensors may reach instances as device memory: some instance
        #: accepts them, and no scheduler on the way reads or keeps values on the host (a
        #: plugin's batch strategy may look at them)
        self.device_inputs = (
            pool.device_inputs
            and config.WhichOneof("scheduling_choice") in _DEVICE_TENSOR_SCHEDULING
            and "batch_strategy" not in config.parameters
        )

    def enqueue(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        """Validate and hand the request to the scheduler (raises on invalid input)."""
        self.signature.validate(request)
        return self.submit(request)

    def submit(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        """Hand an already validated request to the scheduler.

        Raises :class:`ModelRetired` once a reload or unload retired this version: the caller
        looks the model up again, so a swap never fails a request.
        """
        if self.retired:
            raise ModelRetired(self.name)
        request.queued_ns = time.monotonic_ns()
        return self.scheduler.enqueue(request)

    async def unload(self) -> None:
        """Finish the requests already accepted, then release the instances and the model."""
        self.retired = True
        await self.scheduler.stop()
        await asyncio.to_thread(self.backend_model.finalize)
