"""A backend for the cache tests: OUT = IN * 2, executed on the server (so a miss shows as an
execution in the statistics and a hit does not)."""

from __future__ import annotations

from triton_core import (
    Backend,
    BackendModel,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    Tensor,
    hookimpl,
)


class DoublingInstance(ModelInstance):
    def execute(self, requests):  # type: ignore[no-untyped-def]
        return [
            InferenceResponse(outputs=[Tensor("OUT", "FP32", request.inputs["IN"].data * 2)])
            for request in requests
        ]


class DoublingModel(BackendModel):
    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return DoublingInstance()


class DoublingBackend(Backend):
    name = "redis_cache_test_doubling"
    default_model_filename = "model.bin"

    def load_model(self, context: ModelContext) -> BackendModel:
        return DoublingModel()


@hookimpl
def triton_register_backends(registry):  # type: ignore[no-untyped-def]
    registry.add(DoublingBackend)
