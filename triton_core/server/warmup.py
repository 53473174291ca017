"""Model warm-up (``model_warmup``): samples run on every instance before a version is ready.

As Triton: each sample becomes ``batch_size`` requests of batch 1 that go straight to an
instance (no scheduler), ``count`` times (at least once); a sample with ``batch_size: 0`` is
skipped. Inputs are zeros, random bytes (zeros for BYTES) or a file under the model's
``warmup/`` folder, raw row-major (BYTES: 4-byte little-endian length before each element).
A response with an error fails the load with ``failed to run warmup sample '<name>': ...``.
Warm-up executions count in the model's statistics, as Triton counts them.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import monotonic_ns
from typing import TYPE_CHECKING, Protocol

import numpy as np

from triton_core.config import wire_datatype
from triton_core.errors import TritonError, invalid_arg
from triton_core.observability.statistics import ExecutionTimes
from triton_core.plugins.failures import exception_text
from triton_core.protos.model_config_pb2 import DataType, ModelConfig, ModelWarmup
from triton_core.repository.layout import is_within
from triton_core.tensors.dtypes import ELEMENT_SIZE, NUMPY_DTYPES, deserialize_bytes, element_count
from triton_core.types import InferenceRequest, Tensor

if TYPE_CHECKING:
    from triton_core.backends.contract import EventDrivenInstance, ModelInstance
    from triton_core.observability.statistics import ModelStatistics
    from triton_core.types import InferenceResponse

logger = logging.getLogger(__name__)

WARMUP_FOLDER = "warmup"
#: bytes one warm-up input may hold (a config may come from a load request)
MAX_INPUT_BYTES = 1 << 30
#: iterations one sample may ask for
MAX_COUNT = 100_000


class RequestChecks(Protocol):
    """What warm-up needs of a model's signature
    (:class:`~triton_core.server.model.ModelSignature`): its request checks, and whether the
    model is decoupled."""

    decoupled: bool

    def validate(self, request: InferenceRequest) -> None: ...


@dataclass(slots=True)
class WarmupSample:
    """One ``model_warmup`` entry, its input data made once."""

    name: str
    batch_size: int
    count: int
    #: one request's inputs, with the batch dimension of 1 where the model batches
    inputs: dict[str, Tensor]
    #: inputs the server supplies in normal operation (sequence controls, states)
    extra: dict[str, Tensor]


def build_samples(
    config: ModelConfig, model_dir: Path, signature: RequestChecks
) -> list[WarmupSample]:
    """The config's warm-up samples with their data; refuses bad ones naming sample and field."""
    samples = []
    for warmup in config.model_warmup:
        if warmup.batch_size == 0:
            logger.debug("skipping batch 0 warmup sample '%s'", warmup.name)
            continue
        samples.append(_build_sample(config, model_dir, warmup))
    for sample in samples:  # Triton's request checks, with its messages
        for request in sample_requests(config.name, sample):
            try:
                signature.validate(request)
            except TritonError as error:
                raise invalid_arg(f"warmup sample '{sample.name}': {error.message}") from None
    return samples


def _build_sample(config: ModelConfig, model_dir: Path, warmup: ModelWarmup) -> WarmupSample:
    where = f"model '{config.name}' warmup sample '{warmup.name}'"
    if not warmup.name:
        raise invalid_arg(f"model '{config.name}': every 'model_warmup' sample needs a 'name'")
    if warmup.count > MAX_COUNT:
        raise invalid_arg(f"{where}: 'count' {warmup.count} is above the limit of {MAX_COUNT}")
    batching = config.max_batch_size > 0
    if batching and warmup.batch_size > config.max_batch_size:
        raise invalid_arg(
            f"{where}: 'batch_size' {warmup.batch_size} exceeds max_batch_size "
            f"{config.max_batch_size}"
        )
    if not batching and warmup.batch_size > 1:
        raise invalid_arg(
            f"{where}: 'batch_size' {warmup.batch_size} needs a model that batches; "
            "max_batch_size is 0, so use batch_size: 1"
        )
    model_inputs = {tensor.name for tensor in config.input}
    supplied = _server_supplied_inputs(config)
    inputs: dict[str, Tensor] = {}
    extra: dict[str, Tensor] = {}
    for name, spec in sorted(warmup.inputs.items()):
        if name not in model_inputs and name not in supplied:
            raise invalid_arg(
                f"{where}: input '{name}' is not an input of the model (inputs: "
                f"{', '.join(sorted(model_inputs | supplied))})"
            )
        data = _input_data(where, name, spec, model_dir)
        shape = ((1,) if batching else ()) + data.shape
        tensor = Tensor(name, wire_datatype(spec.data_type), data.reshape(shape))
        (inputs if name in model_inputs else extra)[name] = tensor
    return WarmupSample(warmup.name, warmup.batch_size, max(1, warmup.count), inputs, extra)


def _server_supplied_inputs(config: ModelConfig) -> set[str]:
    if not config.HasField("sequence_batching"):
        return set()
    batching = config.sequence_batching
    return {c.name for c in batching.control_input} | {s.input_name for s in batching.state}


def _input_data(where: str, name: str, spec: ModelWarmup.Input, model_dir: Path) -> np.ndarray:
    if spec.data_type == DataType.TYPE_INVALID:
        raise invalid_arg(f"{where}: input '{name}' must specify 'data_type'")
    datatype = wire_datatype(spec.data_type)
    dims = tuple(spec.dims)
    if any(dim < 0 for dim in dims):
        raise invalid_arg(
            "warmup setting expects all variable-size dimensions are specified for input "
            f"'{name}' ({where})"
        )
    count = element_count(dims)
    size = count * max(ELEMENT_SIZE[datatype], 4)
    if size > MAX_INPUT_BYTES:
        raise invalid_arg(
            f"{where}: input '{name}' dims {list(dims)} need {size} bytes, above the limit of "
            f"{MAX_INPUT_BYTES}"
        )
    choice = spec.WhichOneof("input_data_type")
    if choice == "input_data_file":
        return _file_data(where, name, spec.input_data_file, model_dir, datatype, dims)
    if choice is None:
        raise invalid_arg(f"warmup setting expects input '{name}' to have input_data_type set")
    if datatype == "BYTES":  # Triton sends zeros: 4-byte zero lengths, empty elements
        return np.full(dims, b"", dtype=object)
    if choice == "random_data":
        raw = np.random.default_rng().bytes(count * ELEMENT_SIZE[datatype])
        data = np.frombuffer(raw, dtype=NUMPY_DTYPES[datatype]).reshape(dims)
        return data.astype(np.bool_) if datatype == "BOOL" else data.copy()
    return np.zeros(dims, dtype=NUMPY_DTYPES[datatype])


def _file_data(
    where: str, name: str, filename: str, model_dir: Path, datatype: str, dims: tuple[int, ...]
) -> np.ndarray:
    folder = model_dir / WARMUP_FOLDER
    path = folder / filename
    if not filename or not is_within(path, folder):
        raise invalid_arg(
            f"{where}: input '{name}' 'input_data_file' '{filename}' must name a file in the "
            f"model's {WARMUP_FOLDER}/ folder"
        )
    count = element_count(dims)
    needed = count * ELEMENT_SIZE[datatype]
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_INPUT_BYTES + 1 if datatype == "BYTES" else needed)
    except OSError as exc:
        raise invalid_arg(f"{where}: cannot read input '{name}' data file: {exc}") from None
    if datatype == "BYTES":
        if len(raw) > MAX_INPUT_BYTES:
            raise invalid_arg(f"{where}: input '{name}' data file is above {MAX_INPUT_BYTES} bytes")
        try:
            return deserialize_bytes(raw, count).reshape(dims)
        except ValueError as exc:
            raise invalid_arg(
                f"{where}: input '{name}' data file {filename} is not {count} length-prefixed "
                f"BYTES elements: {exc}"
            ) from None
    if len(raw) < needed:
        raise invalid_arg(
            f"warmup setting expects {needed} bytes, but the data provided from {filename} "
            f"only has {len(raw)} bytes ({where}, input '{name}')"
        )
    data = np.frombuffer(raw, dtype=NUMPY_DTYPES[datatype]).reshape(dims)
    return data.astype(np.bool_) if datatype == "BOOL" else data


def sample_requests(model_name: str, sample: WarmupSample) -> list[InferenceRequest]:
    """Fresh requests for one run of ``sample`` (a backend may change what it is given)."""
    return [
        InferenceRequest(
            model_name,
            {name: Tensor(name, t.datatype, t.data) for name, t in sample.inputs.items()},
            id=f"warmup:{sample.name}",
        )
        for _ in range(sample.batch_size)
    ]


class _WarmupSender:
    """Collects a decoupled model's warm-up responses: their errors and the final flag."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors
        self.finished = threading.Event()

    def send(self, response: InferenceResponse | None = None, *, final: bool = False) -> None:
        if response is not None and response.error is not None:
            self.errors.append(response.error.message)
        if final:
            self.finished.set()

    def is_cancelled(self) -> bool:
        return False


class Warmup:
    """Runs a model version's samples on one instance; shared by the version's instances."""

    def __init__(
        self,
        model_name: str,
        samples: Sequence[WarmupSample],
        signature: RequestChecks,
        statistics: ModelStatistics,
        prepare: Callable[[list[InferenceRequest]], None] | None = None,
    ) -> None:
        self.model_name = model_name
        self._complete = prepare
        self.samples = list(samples)
        self._signature = signature
        self._statistics = statistics
        self._lock = threading.Lock()  # instances warm up in parallel; statistics are shared

    def run(self, instance: ModelInstance, name: str) -> None:
        """Every sample on ``instance`` (on its worker thread); raises the first failure."""
        for sample, iteration in self._runs():
            self._log(name, sample, iteration)
            requests, senders, errors = self._prepare(sample)
            start = monotonic_ns()
            try:
                result: object = instance.execute(requests)
            except Exception as exc:
                result = exc
            for sender in senders:
                sender.finished.wait()
            self._finish(sample, requests, result, errors, start)

    async def run_async(self, instance: EventDrivenInstance, name: str) -> None:
        """Every sample on an event-driven ``instance`` (on the event loop)."""
        loop = asyncio.get_running_loop()
        for sample, iteration in self._runs():
            self._log(name, sample, iteration)
            requests, senders, errors = self._prepare(sample)
            answered: asyncio.Future[object] = loop.create_future()

            def done(result: object, times: object = None, answered=answered) -> None:
                if not answered.done():
                    answered.set_result(result)

            start = monotonic_ns()
            try:
                instance.begin_execute(requests, done)
            except Exception as exc:
                done(exc)
            result = await answered
            for sender in senders:
                await asyncio.to_thread(sender.finished.wait)
            self._finish(sample, requests, result, errors, start)

    def _runs(self) -> list[tuple[WarmupSample, int]]:
        return [(s, i) for s in self.samples for i in range(1, s.count + 1)]

    def _log(self, instance: str, sample: WarmupSample, iteration: int) -> None:
        logger.debug(
            "model '%s' instance %s is running warmup sample '%s' for iteration %d",
            self.model_name,
            instance,
            sample.name,
            iteration,
        )

    def _prepare(
        self, sample: WarmupSample
    ) -> tuple[list[InferenceRequest], list[_WarmupSender], list[str]]:
        requests = sample_requests(self.model_name, sample)
        errors: list[str] = []
        senders = []
        for request in requests:
            self._signature.validate(request)  # checked at build: reshapes, sets batch size
            request.inputs.update(sample.extra)
            request.queued_ns = monotonic_ns()
            if self._signature.decoupled:
                sender = _WarmupSender(errors)
                request.response_sender = sender
                senders.append(sender)
        if self._complete is not None:
            self._complete(requests)
        return requests, senders, errors

    def _finish(
        self,
        sample: WarmupSample,
        requests: list[InferenceRequest],
        result: object,
        errors: list[str],
        start: int,
    ) -> None:
        end = monotonic_ns()
        if isinstance(result, BaseException):
            message = result.message if isinstance(result, TritonError) else exception_text(result)
            errors.append(message)
        elif not self._signature.decoupled:
            errors.extend(_response_errors(result, len(requests)))
        self._record(requests, start, end, failed=bool(errors))
        if errors:
            text = "".join(f"{error}; " for error in errors)
            raise invalid_arg(f"failed to run warmup sample '{sample.name}': {text}")

    def _record(self, requests: list[InferenceRequest], start: int, end: int, failed: bool) -> None:
        times = ExecutionTimes(start, 0, end - start, 0)
        with self._lock:
            statistics = self._statistics
            statistics.record_execution(
                sum(r.batch_size for r in requests), [r.queued_ns for r in requests], times
            )
            for request in requests:
                if failed:
                    statistics.record_failure(end - request.queued_ns, "BACKEND")
                else:
                    statistics.record_success(end - request.queued_ns)


def _response_errors(result: object, expected: int) -> list[str]:
    if not isinstance(result, list | tuple) or len(result) != expected:
        count = len(result) if isinstance(result, list | tuple) else 0
        return [f"the backend returned {count} responses for {expected} requests"]
    return [response.error.message for response in result if response.error is not None]
