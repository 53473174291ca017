"""The config ``parameters`` Triton's PyTorch backend understands, parsed once per model load.

Pure Python (no torch import): the keys, their defaults here, and which of them are
meaningless for a model (a TorchScript-only switch on a ``torch.export`` program, a CUDA
switch on CPU instances). Those are ignored with a warning instead of failing the load, so a
config written for Triton loads unchanged.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from triton_core import ModelInstanceGroup, Status, TritonError

if TYPE_CHECKING:
    from triton_core import ModelConfig

logger = logging.getLogger(__name__)

_KIND_GPU: Final = ModelInstanceGroup.KIND_GPU
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})

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


def available_cpus() -> int:
    """The CPUs this process may run on (affinity, cgroups through taskset), not the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def count_instances(config: ModelConfig, default_cpu_count: int = 1) -> int:
    """Total instances of a model over its instance groups (per listed GPU for KIND_GPU)."""
    total = 0
    for group in config.instance_group:
        gpu = group.kind == _KIND_GPU
        count = group.count if group.count > 0 else (1 if gpu else default_cpu_count)
        if gpu:
            count *= max(1, len(group.gpus))
        total += count
    return total or default_cpu_count


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
    params = {key: value.string_value for key, value in config.parameters.items()}
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
    usable = {key: value for key, value in params.items() if key not in ignored}

    def boolean(key: str) -> bool | None:
        raw = usable.get(key)
        if raw is None:
            return None
        lowered = raw.strip().lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise TritonError(
            Status.INVALID_ARG,
            f"model '{model}': parameter '{key}' is '{raw}', expected true/false (or 1/0)",
        )

    def count(key: str) -> int | None:
        raw = usable.get(key)
        if raw is None:
            return None
        try:
            value = int(raw.strip())
        except ValueError:
            value = -1
        if value < 0:
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{model}': parameter '{key}' is '{raw}', expected an integer >= 0",
            )
        # Triton treats 0 as "not set" for both thread counts.
        return value or None

    intra = count("INTRA_OP_THREAD_COUNT")
    disable_cudnn = boolean("DISABLE_CUDNN")
    disable_optimized = boolean("DISABLE_OPTIMIZED_EXECUTION")
    inference_mode = boolean("INFERENCE_MODE")
    return TorchSettings(
        intra_op_threads=intra or default_intra_op_threads(instances),
        default_threads=intra is None,
        inter_op_threads=count("INTER_OP_THREAD_COUNT"),
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
