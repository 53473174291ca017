"""GPU execution-provider options from a config, as Triton's onnxruntime backend reads them.

``optimization { execution_accelerators { gpu_execution_accelerator [ ... ] } }`` selects
the providers of a GPU instance: ``tensorrt`` (TensorrtExecutionProvider, with Triton's
parameter names mapped to ORT's option keys) and ``cuda`` (CUDAExecutionProvider options,
passed through). Pure functions: nothing here needs onnxruntime or a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from triton_core import Parameters, Status, TritonError

if TYPE_CHECKING:
    from triton_core import ModelConfig

TENSORRT_PROVIDER: Final = "TensorrtExecutionProvider"
CUDA_PROVIDER: Final = "CUDAExecutionProvider"

#: Triton's TensorRT accelerator parameter -> (ORT option key, how the value is checked)
TENSORRT_PARAMETERS: Final[dict[str, tuple[str, str]]] = {
    "max_workspace_size_bytes": ("trt_max_workspace_size", "integer"),
    "trt_max_partition_iterations": ("trt_max_partition_iterations", "integer"),
    "trt_min_subgraph_size": ("trt_min_subgraph_size", "integer"),
    "int8_calibration_table_name": ("trt_int8_calibration_table_name", "string"),
    "int8_use_native_calibration_table": ("trt_int8_use_native_calibration_table", "boolean"),
    "trt_dla_enable": ("trt_dla_enable", "boolean"),
    "trt_dla_core": ("trt_dla_core", "integer"),
    "trt_engine_cache_enable": ("trt_engine_cache_enable", "boolean"),
    "trt_engine_cache_path": ("trt_engine_cache_path", "string"),
    "trt_engine_cache_prefix": ("trt_engine_cache_prefix", "string"),
    "trt_dump_subgraphs": ("trt_dump_subgraphs", "boolean"),
    "trt_force_sequential_engine_build": ("trt_force_sequential_engine_build", "boolean"),
    "trt_context_memory_sharing_enable": ("trt_context_memory_sharing_enable", "boolean"),
    "trt_layer_norm_fp32_fallback": ("trt_layer_norm_fp32_fallback", "boolean"),
    "trt_timing_cache_enable": ("trt_timing_cache_enable", "boolean"),
    "trt_timing_cache_path": ("trt_timing_cache_path", "string"),
    "trt_force_timing_cache": ("trt_force_timing_cache", "boolean"),
    "trt_detailed_build_log": ("trt_detailed_build_log", "boolean"),
    "trt_build_heuristics_enable": ("trt_build_heuristics_enable", "boolean"),
    "trt_sparsity_enable": ("trt_sparsity_enable", "boolean"),
    "trt_builder_optimization_level": ("trt_builder_optimization_level", "integer"),
    "trt_auxiliary_streams": ("trt_auxiliary_streams", "integer"),
    "trt_tactic_sources": ("trt_tactic_sources", "string"),
    "trt_extra_plugin_lib_paths": ("trt_extra_plugin_lib_paths", "string"),
    "trt_profile_min_shapes": ("trt_profile_min_shapes", "string"),
    "trt_profile_max_shapes": ("trt_profile_max_shapes", "string"),
    "trt_profile_opt_shapes": ("trt_profile_opt_shapes", "string"),
    "trt_cuda_graph_enable": ("trt_cuda_graph_enable", "boolean"),
    "trt_dump_ep_context_model": ("trt_dump_ep_context_model", "boolean"),
    "trt_ep_context_file_path": ("trt_ep_context_file_path", "string"),
    "trt_ep_context_embed_mode": ("trt_ep_context_embed_mode", "integer"),
}

#: ``precision_mode`` -> the ORT option it turns on (FP32 turns none on)
PRECISION_MODES: Final[dict[str, str | None]] = {
    "FP32": None,
    "FP16": "trt_fp16_enable",
    "BF16": "trt_bf16_enable",
    "INT8": "trt_int8_enable",
}

#: CUDA provider parameters Triton reads as booleans (the rest pass through as strings)
CUDA_BOOLEANS: Final = frozenset({"do_copy_in_default_stream", "use_ep_level_unified_stream"})


@dataclass(frozen=True, slots=True)
class GpuProviders:
    """The GPU execution providers a config asks for, without the device id."""

    #: TensorrtExecutionProvider options, or None when the config does not ask for it
    tensorrt: dict[str, str] | None
    #: CUDAExecutionProvider options (the CUDA provider always runs what TensorRT does not)
    cuda: dict[str, str]

    def for_device(self, device_id: int) -> list[tuple[str, dict[str, str]]]:
        """(provider, options) in ORT's order of preference for a GPU instance."""
        device = {"device_id": str(device_id)}
        providers = [(CUDA_PROVIDER, {**self.cuda, **device})]
        if self.tensorrt is not None:
            providers.insert(0, (TENSORRT_PROVIDER, {**self.tensorrt, **device}))
        return providers


def _owner(model: str, accelerator: str) -> str:
    return f"model '{model}': {accelerator} Execution Accelerator parameter"


def tensorrt_options(model: str, parameters: Mapping[str, str]) -> dict[str, str]:
    """ORT TensorRT provider options from Triton's accelerator parameters."""
    params = Parameters(parameters, _owner(model, "TensorRT"))
    options: dict[str, str] = {}
    for name, raw in parameters.items():
        if name == "precision_mode":
            if raw not in PRECISION_MODES:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"model '{model}': unsupported precision mode '{raw}' is requested",
                )
            flag = PRECISION_MODES[raw]
            if flag is not None:
                options[flag] = "True"
            continue
        if name not in TENSORRT_PARAMETERS:
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{model}': unknown parameter '{name}' is provided for TensorRT "
                f"Execution Accelerator",
            )
        key, kind = TENSORRT_PARAMETERS[name]
        if kind == "boolean":
            options[key] = str(params.boolean(name))
        elif kind == "integer":
            options[key] = str(params.integer(name))
        elif raw:
            options[key] = raw
    return options


def cuda_options(model: str, parameters: Mapping[str, str]) -> dict[str, str]:
    """CUDA provider options from the ``cuda`` accelerator's parameters (passed through)."""
    params = Parameters(parameters, _owner(model, "CUDA"))
    options = {}
    for name, raw in parameters.items():
        if name in CUDA_BOOLEANS:
            params.boolean(name)  # refuses a malformed value, naming it
        if raw:
            options[name] = raw
    return options


def gpu_providers(config: ModelConfig, model: str, legacy_cuda: Mapping[str, str]) -> GpuProviders:
    """The config's GPU accelerators; ``legacy_cuda`` holds the deprecated top-level CUDA
    parameters, which the ``cuda`` accelerator's own parameters override."""
    tensorrt: dict[str, str] | None = None
    cuda = dict(legacy_cuda)
    accelerators = config.optimization.execution_accelerators
    for accelerator in accelerators.gpu_execution_accelerator:
        parameters = dict(accelerator.parameters)
        if accelerator.name == "tensorrt":
            tensorrt = tensorrt_options(model, parameters)
        elif accelerator.name == "cuda":
            cuda.update(cuda_options(model, parameters))
        else:
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{model}': unknown Execution Accelerator '{accelerator.name}' is requested",
            )
    return GpuProviders(tensorrt=tensorrt, cuda=cuda)
