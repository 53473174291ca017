"""A small numpy backend for the core's own tests: ``identity`` and ``add_sub`` models.

It is registered on a plugin manager the same way a third-party plugin is, and lets the core
be tested without any framework installed. The model kind comes from the config parameter
``kind`` (``identity`` copies every input to the output of the same index; ``add_sub`` adds
and subtracts INPUT0 and INPUT1; ``fail`` raises; ``sleep`` waits ``sleep_ms`` first).
"""

from __future__ import annotations

import time
from pathlib import Path

from triton_core import (
    Backend,
    BackendModel,
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


class NumpyInstance(ModelInstance):
    def __init__(self, context: ModelContext, spec: InstanceSpec) -> None:
        config = context.config
        self.spec = spec
        parameters = config.parameters
        self.kind = parameters["kind"].string_value if "kind" in parameters else "identity"
        sleep_ms = parameters["sleep_ms"].string_value if "sleep_ms" in parameters else "0"
        self.sleep = float(sleep_ms) / 1000
        self.inputs = [t.name for t in config.input]
        self.outputs = [(t.name, wire_datatype(t.data_type)) for t in config.output]
        self.executions: list[int] = []

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        self.executions.append(len(requests))
        if self.sleep:
            time.sleep(self.sleep)
        if self.kind == "fail":
            raise internal("numpy backend was told to fail")
        responses = []
        for request in requests:
            arrays = [request.inputs[name].data for name in self.inputs if name in request.inputs]
            if self.kind == "add_sub":
                values = [arrays[0] + arrays[1], arrays[0] - arrays[1]]
            else:
                values = arrays
            responses.append(
                InferenceResponse(
                    outputs=[
                        Tensor(name, datatype, value)
                        for (name, datatype), value in zip(self.outputs, values, strict=False)
                    ]
                )
            )
        return responses


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
        return NumpyModel(context)


@hookimpl
def triton_register_backends(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add(NumpyBackend)
