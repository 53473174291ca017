"""The backend: auto-complete from the model file, checks at load, batched execution."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from triton_core import (
    Backend,
    BackendModel,
    BatchPlan,
    DataType,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelConfig,
    ModelContext,
    ModelInput,
    ModelInstance,
    ModelOutput,
    complete_batching,
    dims_error,
    fill_tensor,
    fill_unset,
    invalid_arg,
    wire_types,
)
from triton_core_example_numpy.linear import LinearLayer, Reported

TYPE_FP32 = DataType.Value("TYPE_FP32")


class LinearBackend(Backend):
    """``backend: "numpy_linear"`` in a config; the model file is ``<version>/model.json``."""

    name = "numpy_linear"
    default_model_filename = "model.json"

    def auto_complete_config(self, config: ModelConfig, model_path: Path) -> None:
        """Fill what the config leaves out from the model file of the newest version."""
        model = config.name
        layer = LinearLayer.read(model_path, model)
        if not config.input or not config.output:
            # max_batch_size and dynamic_batching {}, as Triton's framework backends do
            complete_batching(config, model, layer.inputs(), layer.outputs(), self)
        if not config.input:
            for reported in layer.inputs().values():
                fill_tensor(config.input.add(), reported, config.max_batch_size)
        if not config.output:
            for reported in layer.outputs().values():
                fill_tensor(config.output.add(), reported, config.max_batch_size)
        for kind, tensor in config_tensors(config):
            reported = model_tensor(model, kind, layer.tensors(kind), tensor.name)
            fill_unset(tensor, reported, config.max_batch_size)  # a listed tensor's datatype, dims

    def load_model(self, context: ModelContext) -> LinearModel:
        return LinearModel(context)


class LinearModel(BackendModel):
    """One loaded version: the layer and the plan its instances execute with."""

    def __init__(self, context: ModelContext) -> None:
        config, model = context.config, context.name
        self.layer = LinearLayer.read(context.model_path, model)
        check_config(config, model, self.layer)
        outputs = wire_types(model, "output", config.output)
        # Built once per model: which outputs a request wants, how a batch is joined and split.
        self.plan = BatchPlan(model, outputs, batching=config.max_batch_size > 0)

    def create_instance(self, spec: InstanceSpec) -> LinearInstance:
        return LinearInstance(self.plan, self.layer)


class LinearInstance(ModelInstance):
    """Executes batches on its own thread; numpy releases the GIL in the matrix product."""

    def __init__(self, plan: BatchPlan, layer: LinearLayer) -> None:
        self.plan = plan
        self.layer = layer

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        return self.plan.execute(requests, self.run)

    def run(self, inputs: dict[str, np.ndarray], output_names: list[str]) -> list[np.ndarray]:
        """One product for the whole batch: the requests' rows, concatenated."""
        y = self.layer(inputs[self.layer.input])
        return [y for _ in output_names]  # the layer has one output


def config_tensors(config: ModelConfig) -> list[tuple[str, ModelInput | ModelOutput]]:
    """("input", tensor) for each config input, then ("output", tensor) for each output."""
    return [("input", t) for t in config.input] + [("output", t) for t in config.output]


def model_tensor(model: str, kind: str, reported: dict[str, Reported], name: str) -> Reported:
    """The model's tensor for a config tensor; INVALID_ARG when the model has none so named."""
    if name not in reported:
        raise invalid_arg(
            f"model '{model}': the config lists {kind} '{name}', the model file has "
            f"{kind} {', '.join(reported)}"
        )
    return reported[name]


def check_config(config: ModelConfig, model: str, layer: LinearLayer) -> None:
    """The config as auto-completed or written must fit the layer: names, FP32, dims."""
    for kind, tensor in config_tensors(config):
        if tensor.data_type != TYPE_FP32:
            raise invalid_arg(
                f"model '{model}': {kind} '{tensor.name}' is {DataType.Name(tensor.data_type)}; "
                "a linear layer takes and gives TYPE_FP32"
            )
        shape = model_tensor(model, kind, layer.tensors(kind), tensor.name).shape
        error = dims_error(model, kind, tensor, shape, config.max_batch_size)
        if error:
            raise invalid_arg(error)
