"""The ONNX Runtime settings of a model: what its config's ``parameters`` and
``optimization`` ask of every session, read and checked once at load, as Triton's
onnxruntime backend reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import onnxruntime as ort

from triton_core import Parameters, Status, TritonError
from triton_core import available_cpus as _available_cpus
from triton_core_onnx.providers import GpuProviders, gpu_providers

if TYPE_CHECKING:
    from triton_core import ModelConfig

#: ``optimization { graph { level } }`` -> ORT level, as Triton maps it (anything else: all)
GRAPH_LEVELS: Final[dict[int, ort.GraphOptimizationLevel]] = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """What a model's config asks of every session, parsed and checked once at load."""

    intra_op_threads: int
    inter_op_threads: int
    #: False when the config set ``intra_op_thread_count`` itself
    default_threads: bool
    execution_mode: ort.ExecutionMode
    graph_level: ort.GraphOptimizationLevel
    enable_mem_arena: bool | None
    enable_mem_pattern: bool | None
    #: ``session.*`` parameters, passed to ORT as session config entries
    session_entries: dict[str, str]
    #: ``memory.enable_memory_arena_shrinkage`` (a run option), or None
    arena_shrinkage: str | None
    #: GPU execution providers (TensorRT, CUDA) and their options for GPU instances
    gpu: GpuProviders

    def session_options(self) -> ort.SessionOptions:
        """A fresh ``SessionOptions`` (ORT cannot share one between sessions safely)."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.intra_op_threads
        options.inter_op_num_threads = self.inter_op_threads
        options.execution_mode = self.execution_mode
        options.graph_optimization_level = self.graph_level
        if self.enable_mem_arena is not None:
            options.enable_cpu_mem_arena = self.enable_mem_arena
        if self.enable_mem_pattern is not None:
            options.enable_mem_pattern = self.enable_mem_pattern
        if self.default_threads:
            # Spinning threads burn the cores other instances need; sleep when idle instead.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        for key, value in self.session_entries.items():
            options.add_session_config_entry(key, value)
        return options

    def run_options(self) -> ort.RunOptions | None:
        if self.arena_shrinkage is None:
            return None
        options = ort.RunOptions()
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", self.arena_shrinkage)
        return options


#: deprecated top-level CUDA parameters that Triton still reads, with their value spellings
_CUDA_PARAMETERS: Final[dict[str, dict[str, str]]] = {
    "cudnn_conv_algo_search": {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"},
    "gpu_mem_limit": {},
    "arena_extend_strategy": {"0": "kNextPowerOfTwo", "1": "kSameAsRequested"},
    "do_copy_in_default_stream": {},
}


def parse_session_settings(config: ModelConfig, model: str, instances: int) -> SessionSettings:
    """Read the ORT settings from a config's ``parameters`` and ``optimization``."""
    params = Parameters.of_model(config, model)
    default_threads = "intra_op_thread_count" not in params
    intra = (
        max(1, _available_cpus() // max(1, instances))
        if default_threads
        else params.integer("intra_op_thread_count", 0)
    )
    mode = params.integer("execution_mode", 0, allowed=(0, 1))
    level = config.optimization.graph.level if config.HasField("optimization") else 0

    legacy_cuda: dict[str, str] = {}
    for key, spellings in _CUDA_PARAMETERS.items():
        if key in params:
            value = params[key].strip()
            legacy_cuda[key] = spellings.get(value, value)
    for accelerator in config.optimization.execution_accelerators.cpu_execution_accelerator:
        raise TritonError(
            Status.UNSUPPORTED,
            f"model '{model}': cpu_execution_accelerator '{accelerator.name}' is not "
            f"supported by the triton-core onnxruntime backend",
        )

    return SessionSettings(
        intra_op_threads=intra,
        # Sequential execution ignores inter-op threads; with parallel execution the config
        # decides, else one thread, so that instances do not oversubscribe the CPU.
        inter_op_threads=params.integer("inter_op_thread_count", 1),
        default_threads=default_threads,
        execution_mode=(
            ort.ExecutionMode.ORT_PARALLEL if mode == 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        ),
        graph_level=GRAPH_LEVELS.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        enable_mem_arena=params.boolean("enable_mem_arena"),
        enable_mem_pattern=params.boolean("enable_mem_pattern"),
        session_entries={k: v for k, v in params.items() if k.startswith("session.")},
        arena_shrinkage=params.get("memory.enable_memory_arena_shrinkage"),
        gpu=gpu_providers(config, model, legacy_cuda),
    )
