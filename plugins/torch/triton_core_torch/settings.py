"""The config ``parameters`` Triton's PyTorch backend understands, parsed once per model load.

Pure Python (no torch import): the keys, their defaults here, and which of them are
meaningless for a model (a TorchScript-only switch on a ``torch.export`` program, a CUDA
switch on CPU instances). Those are ignored with a warning instead of failing the load, so a
config written for Triton loads unchanged.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from triton_core import ModelInstanceGroup, Parameters, available_cpus

if TYPE_CHECKING:
    from triton_core import ModelConfig

logger = logging.getLogger(__name__)

#: switches of the TorchScript graph executor: meaningless for a torch.export program
TORCHSCRIPT_ONLY: Final = (
    "DISABLE_OPTIMIZED_EXECUTION",
    "ENABLE_TENSOR_FUSER",
    "ENABLE_JIT_PROFILING",
    "ENABLE_JIT_EXECUTOR",
)
#: switches that only act on CUDA devices
CUDA_ONLY: Final = ("DISABLE_CUDNN", "ENABLE_CACHE_CLEANING")
#: switches of PyTorch versions long gone (nvfuser was removed in PyTorch 2.2)
OBSOLETE: Final = ("ENABLE_NVFUSER",)


def has_gpu_instances(config: ModelConfig) -> bool:
    """True when an instance group may place the model on a CUDA device."""
    kinds = {group.kind for group in config.instance_group}
    return bool(kinds - {ModelInstanceGroup.KIND_CPU}) or not kinds


def default_intra_op_threads(instances: int) -> int:
    """Intra-op threads per instance when the config does not say: ``(CPUs - 1) // instances``.

    The instances of a model split the CPUs so that they do not oversubscribe the host, less
    one CPU left to the frontends (the event loop, gRPC's threads): an OpenMP team waits for
    its slowest thread at every op, so a team that shares its cores with busy frontend
    threads stalls (measured on 2 CPUs: 1 instance x 2 threads served half of what the same
    module does alone; 1 x 1 and 2 x 1 served 0.8-0.9 of it, see bench/torch_overhead.py).
    """
    cpus = available_cpus()
    spare = cpus - 1 if cpus > 1 else cpus
    return max(1, spare // max(1, instances))


@dataclass(frozen=True, slots=True)
class TorchSettings:
    """What a model's ``parameters`` ask of the runtime; see the README for each key."""

    #: intra-op threads of each instance's worker thread (``INTRA_OP_THREAD_COUNT``)
    intra_op_threads: int
    #: False when the config set ``INTRA_OP_THREAD_COUNT`` itself
    default_threads: bool
    #: ``INTER_OP_THREAD_COUNT`` (process-wide, settable once), or None to leave PyTorch's
    inter_op_threads: int | None = None
    #: ``INFERENCE_MODE`` (default on): ``torch.inference_mode()``, else ``torch.no_grad()``
    inference_mode: bool = True
    #: not ``DISABLE_OPTIMIZED_EXECUTION``: the TorchScript profiling/optimizing executor
    optimized_execution: bool = True
    #: ``ENABLE_WEIGHT_SHARING``: instances on one device share one loaded module
    weight_sharing: bool = False
    #: ``ENABLE_CACHE_CLEANING``: empty the CUDA caching allocator after each execution
    cache_cleaning: bool = False
    #: ``DISABLE_CUDNN`` inverted; None leaves PyTorch's (process-wide) default
    cudnn: bool | None = None
    #: ``ENABLE_DETERMINISTIC_ALGORITHMS`` (process-wide); None leaves PyTorch's default
    deterministic: bool | None = None
    #: ``ENABLE_TENSOR_FUSER`` / ``ENABLE_JIT_PROFILING`` / ``ENABLE_JIT_EXECUTOR``
    #: (TorchScript, process-wide); None leaves PyTorch's default
    tensor_fuser: bool | None = None
    jit_profiling: bool | None = None
    jit_executor: bool | None = None


def parse_settings(
    config: ModelConfig, model: str, *, exported: bool, instances: int
) -> TorchSettings:
    """Read the ``parameters`` of a config; bad values fail with INVALID_ARG naming the key."""
    params = config.parameters
    ignored = [key for key in OBSOLETE if key in params]
    if exported:
        ignored += [key for key in TORCHSCRIPT_ONLY if key in params]
    if not has_gpu_instances(config):
        ignored += [key for key in CUDA_ONLY if key in params]
    for key in ignored:
        logger.warning(
            "model '%s': parameter '%s' has no meaning for this %s model; ignored",
            model,
            key,
            "torch.export" if exported else "CPU" if key in CUDA_ONLY else "PyTorch",
        )
    usable = Parameters.of_model(config, model, ignore=ignored)
    boolean = usable.boolean
    # Triton treats 0 as "not set" for both thread counts.
    intra = usable.integer("INTRA_OP_THREAD_COUNT") or None
    disable_cudnn = boolean("DISABLE_CUDNN")
    disable_optimized = boolean("DISABLE_OPTIMIZED_EXECUTION")
    inference_mode = boolean("INFERENCE_MODE")
    return TorchSettings(
        intra_op_threads=intra or default_intra_op_threads(instances),
        default_threads=intra is None,
        inter_op_threads=usable.integer("INTER_OP_THREAD_COUNT") or None,
        inference_mode=True if inference_mode is None else inference_mode,
        optimized_execution=not disable_optimized,
        weight_sharing=bool(boolean("ENABLE_WEIGHT_SHARING")),
        cache_cleaning=bool(boolean("ENABLE_CACHE_CLEANING")),
        cudnn=None if disable_cudnn is None else not disable_cudnn,
        deterministic=boolean("ENABLE_DETERMINISTIC_ALGORITHMS"),
        tensor_fuser=boolean("ENABLE_TENSOR_FUSER"),
        jit_profiling=boolean("ENABLE_JIT_PROFILING"),
        jit_executor=boolean("ENABLE_JIT_EXECUTOR"),
    )
