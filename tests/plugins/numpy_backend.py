"""A small numpy backend for the core's own tests: ``identity`` and ``add_sub`` models.

It is registered on a plugin manager the same way a third-party plugin is, and lets the core
be tested without any framework installed. The model kind comes from the config parameter
``kind`` (``identity`` copies every input to the output of the same index; ``add_sub`` adds
and subtracts INPUT0 and INPUT1; ``fail`` raises; ``sleep`` waits ``sleep_ms`` first).
With the parameter ``started_file``, each ``execute`` first appends a line to that file, so
that a test knows a batch is running. In-process tests may set an instance's ``gate`` (a
``threading.Event``): ``execute`` then signals ``entered`` and waits for the gate. The
parameter ``hang_load`` ("true") makes the load wait until ``RELEASE_LOADS`` is set.
With ``device_tensors`` ("true") the instances accept device tensors (CUDA shared memory):
``identity`` then copies device inputs into the device output targets it is offered, device
to device, and every instance records the type of each input it got in ``received``.

Kinds that misbehave, for the server's output checks and error attribution (each is
``identity`` gone wrong): ``wrong_dtype`` (values of another numpy dtype than the config's),
``numpy_datatype`` (the datatype named ``float32`` instead of ``FP32``), ``extra_dims`` (one
trailing dimension too many), ``extra_rows`` (three times the request's rows), ``list_output``
(a Python list instead of an array), ``undeclared`` (an output named ``EXTRA`` too),
``empty`` (no outputs) and ``key_error`` (``execute`` raises ``KeyError('x')``).

Stateful kinds, for ``sequence_batching`` models:

* ``accumulate``: the first output is the running sum of the first input over a sequence,
  kept in the instance and keyed by the CORRID control (or, without one, by the request's
  position in the batch, that is its direct-strategy slot). START resets the sum, END drops
  it, READY false skips the request. Every batch's controls are logged in
  ``sequence_log`` as ``(position, corrid, ready, start, end)`` tuples.
* ``state_add``: implicit state: each state output is its state input plus the first input,
  and every other output repeats the first state output.
* ``iterate`` (``iterative_sequence``): counts the runs of each request (by CORRID) and
  reschedules it until it ran as many times as its first input's first value says; then
  answers that count. Batches are logged in ``sequence_log`` as for ``accumulate``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from triton_core import (
    Backend,
    BackendModel,
    DeviceBuffer,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    Tensor,
    hookimpl,
)
from triton_core.config import wire_datatype
from triton_core.errors import internal
from triton_core.protos.model_config_pb2 import ModelSequenceBatching

Kind = ModelSequenceBatching.Control.Kind

#: hung loads (``hang_load``) go on when a test sets this
RELEASE_LOADS = threading.Event()


def _on_device(request: InferenceRequest, name: str, datatype: str, value: Any) -> Any:
    """``value`` copied device to device into the output's target, where it has one."""
    target = (request.device_outputs or {}).get(name)
    if target is None or not isinstance(value, DeviceBuffer):
        return value
    placed = target.laid_out(name, datatype, value.shape)
    placed.copy_from_device(value.pointer, value.nbytes)
    return placed


class NumpyInstance(ModelInstance):
    def __init__(self, context: ModelContext, spec: InstanceSpec) -> None:
        config = context.config
        self.spec = spec
        parameters = config.parameters
        self.kind = parameters["kind"].string_value if "kind" in parameters else "identity"
        sleep_ms = parameters["sleep_ms"].string_value if "sleep_ms" in parameters else "0"
        self.sleep = float(sleep_ms) / 1000
        started = parameters.get("started_file")
        self.started_file = started.string_value if started is not None else ""
        self.inputs = [t.name for t in config.input]
        self.outputs = [(t.name, wire_datatype(t.data_type)) for t in config.output]
        self.executions: list[int] = []
        self.entered = threading.Event()
        self.gate: threading.Event | None = None
        # sequence_batching: control inputs by kind name, implicit states, per-sequence sums
        self.controls = _control_inputs(config)
        self.states = [
            (state.input_name, state.output_name, wire_datatype(state.data_type))
            for state in config.sequence_batching.state
        ]
        self.sums: dict[object, np.ndarray] = {}
        self.sequence_log: list[list[tuple[int, object, bool, bool, bool]]] = []
        device = parameters.get("device_tensors")
        self.accepts_device_tensors = device is not None and device.string_value == "true"
        #: per request: input name -> the type of its data ("ndarray", "DeviceBuffer")
        self.received: list[dict[str, str]] = []

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        self.executions.append(len(requests))
        for request in requests:
            self.received.append({n: type(t.data).__name__ for n, t in request.inputs.items()})
        if self.started_file:
            with open(self.started_file, "a") as started:
                started.write(f"{len(requests)}\n")
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(120)
        if self.sleep:
            time.sleep(self.sleep)
        if self.kind == "fail":
            raise internal("numpy backend was told to fail")
        if self.kind == "accumulate":
            return self._accumulate(requests)
        if self.kind == "state_add":
            return [self._state_add(request) for request in requests]
        if self.kind == "iterate":
            return self._iterate(requests)
        if self.kind == "key_error":
            raise KeyError("x")
        responses = []
        for request in requests:
            arrays = [request.inputs[name].data for name in self.inputs if name in request.inputs]
            if self.kind == "add_sub":
                values = [arrays[0] + arrays[1], arrays[0] - arrays[1]]
            else:
                values = arrays
            outputs = [
                Tensor(name, datatype, _on_device(request, name, datatype, value))
                for (name, datatype), value in zip(self.outputs, values, strict=False)
            ]
            responses.append(InferenceResponse(outputs=_misbehave(self.kind, outputs)))
        return responses

    def _control(self, request: InferenceRequest, kind: str, default: bool) -> bool:
        control = self.controls.get(kind)
        if control is None:
            return default
        name, true = control
        return bool(request.inputs[name].data.flat[0] == true)

    def _corrid(self, request: InferenceRequest) -> object:
        control = self.controls.get("CORRID")
        if control is None:
            return None
        value = request.inputs[control[0]].data.flat[0]
        return value.decode() if isinstance(value, bytes) else int(value)

    def _accumulate(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        name, datatype = self.outputs[0]
        log = []
        responses = []
        for position, request in enumerate(requests):
            value = request.inputs[self.inputs[0]].data
            corrid = self._corrid(request)
            ready = self._control(request, "READY", True)
            start = self._control(request, "START", False)
            end = self._control(request, "END", False)
            log.append((position, corrid, ready, start, end))
            if not ready:
                responses.append(InferenceResponse(outputs=[Tensor(name, datatype, value * 0)]))
                continue
            key = corrid if corrid is not None else position
            previous = self.sums.get(key)
            # a copy: the input may view a client's shared memory, valid for this request only
            total = value.copy() if start or previous is None else previous + value
            self.sums[key] = total
            if end:
                del self.sums[key]
            responses.append(InferenceResponse(outputs=[Tensor(name, datatype, total)]))
        self.sequence_log.append(log)
        return responses

    def _iterate(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        name, datatype = self.outputs[0]
        log = []
        responses: list[InferenceResponse | None] = []
        for position, request in enumerate(requests):
            value = request.inputs[self.inputs[0]].data
            corrid = self._corrid(request)
            start = self._control(request, "START", False)
            log.append((position, corrid, True, start, False))
            runs = 1 if start else self.sums.get(corrid, 0) + 1
            if runs < int(value.flat[0]):
                self.sums[corrid] = runs
                request.reschedule = True  # run it again; no response this time
                responses.append(None)
            else:
                self.sums.pop(corrid, None)
                count = np.full_like(value, runs)
                responses.append(InferenceResponse(outputs=[Tensor(name, datatype, count)]))
        self.sequence_log.append(log)
        return responses  # type: ignore[return-value]  # None: rescheduled

    def _state_add(self, request: InferenceRequest) -> InferenceResponse:
        value = request.inputs[self.inputs[0]].data
        outputs = [
            Tensor(output_name, datatype, request.inputs[input_name].data + value)
            for input_name, output_name, datatype in self.states
        ]
        state_outputs = {tensor.name for tensor in outputs}
        outputs += [
            Tensor(name, datatype, outputs[0].data)
            for name, datatype in self.outputs
            if name not in state_outputs
        ]
        return InferenceResponse(outputs=outputs)


def _misbehave(kind: str, outputs: list[Tensor]) -> list[Tensor]:
    """The first output broken the way ``kind`` says (unchanged for well-behaved kinds)."""
    if kind == "empty":
        return []
    if kind == "undeclared":
        return [*outputs, Tensor("EXTRA", outputs[0].datatype, outputs[0].data)]
    first = outputs[0]
    data = first.data
    if kind == "wrong_dtype":
        first.data = data.astype(np.int32 if data.dtype != np.int32 else np.float32)
    elif kind == "numpy_datatype":
        first.datatype = str(data.dtype)
    elif kind == "extra_dims":
        first.data = data[..., np.newaxis]
    elif kind == "extra_rows":
        first.data = np.concatenate([data, data, data])
    elif kind == "list_output":
        first.data = data.tolist()
    return outputs


def _control_inputs(config) -> dict[str, tuple[str, object]]:  # type: ignore[no-untyped-def]
    """``{"START": (input name, true value), ...}`` from ``sequence_batching.control_input``."""
    controls: dict[str, tuple[str, object]] = {}
    for control_input in config.sequence_batching.control_input:
        for control in control_input.control:
            kind = Kind.Name(control.kind).removeprefix("CONTROL_SEQUENCE_")
            values = (
                list(control.int32_false_true)
                or list(control.fp32_false_true)
                or list(control.bool_false_true)
            )
            controls[kind] = (control_input.name, values[1] if values else None)
    return controls


class NumpyModel(BackendModel):
    def __init__(self, context: ModelContext) -> None:
        self.context = context

    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return NumpyInstance(self.context, spec)


class NumpyBackend(Backend):
    name = "numpy"
    platforms = ("numpy_test",)
    default_model_filename = "model.npy"

    def auto_complete_config(self, config, model_path: Path) -> None:  # type: ignore[no-untyped-def]
        if not config.HasField("dynamic_batching") and config.max_batch_size == 0:
            config.max_batch_size = int(self.options.get("default-max-batch-size", "0"))

    def load_model(self, context: ModelContext) -> BackendModel:
        if not context.model_path.exists():
            raise internal(f"model file {context.model_path} is missing")
        parameters = context.config.parameters
        if "load_sleep_ms" in parameters:  # a slow load, for readiness-during-load tests
            time.sleep(float(parameters["load_sleep_ms"].string_value) / 1000)
        if "hang_load" in parameters:
            RELEASE_LOADS.wait()
        if "fail_load" in parameters:
            raise internal(f"numpy backend was told to fail loading '{context.name}'")
        return NumpyModel(context)


@hookimpl
def triton_register_backends(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add(NumpyBackend)
