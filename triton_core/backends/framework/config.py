"""Config completion and checks for framework backends, with Triton's rules and messages.

A framework reports a model's tensors (a :class:`ReportedTensor` each: name, datatype,
shape). Auto-complete fills the sections a config leaves empty from that report
(:func:`complete_batching`, :func:`fill_tensor`, :func:`fill_unset`); at load, the backend
checks the config against it (:func:`dims_error`) and maps datatypes (:func:`wire_types`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final, Protocol, cast

from triton_core.errors import Status, TritonError
from triton_core.protos.model_config_pb2 import DataType, ModelInstanceGroup
from triton_core.tensors.dtypes import CONFIG_TO_WIRE

if TYPE_CHECKING:
    from typing import TypeAlias

    from triton_core.backends.contract import Backend
    from triton_core.protos.model_config_pb2 import ModelConfig, ModelInput, ModelOutput

    ConfigTensor: TypeAlias = ModelInput | ModelOutput

#: backend option (``--backend-config=<backend>,default-max-batch-size=N``)
DEFAULT_MAX_BATCH_SIZE_OPTION: Final = "default-max-batch-size"
#: Triton's value of that option when it is not given
DEFAULT_MAX_BATCH_SIZE: Final = 4


class ReportedTensor(Protocol):
    """One input or output of a model, as the framework reports it.

    Any object with these attributes will do, such as a frozen dataclass of the backend's
    own that also keeps the framework's type name for messages.
    """

    @property
    def name(self) -> str:
        """The tensor's name in the model."""

    @property
    def config_type(self) -> str:
        """The config datatype (``TYPE_FP32`` ...), or "" where the framework does not say."""

    @property
    def shape(self) -> tuple[int, ...] | None:
        """The full shape, -1 for a variable dim; None where the framework does not say."""


# -- shapes ----------------------------------------------------------------------------------


def batchable(shape: tuple[int, ...] | None) -> bool:
    """True when the first dim is variable, so the model takes batches of any size."""
    return shape is not None and len(shape) > 0 and shape[0] == -1


def config_shape(tensor: ConfigTensor) -> tuple[int, ...]:
    """The shape the model sees for a config tensor, without batch: reshape wins over dims."""
    if tensor.HasField("reshape"):
        return tuple(tensor.reshape.shape)
    return tuple(tensor.dims)


def format_shape(shape: Iterable[int]) -> str:
    """``[1, -1, 3]``, as the messages write shapes."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


def dims_error(
    model: str,
    kind: str,
    tensor: ConfigTensor,
    shape: tuple[int, ...],
    max_batch_size: int,
    *,
    hint: str = "",
) -> str | None:
    """Why a config tensor's dims do not fit the model's ``shape``, or None when they do.

    ``kind`` is "input" or "output"; ``hint`` (e.g. how to re-export the model) ends the
    message given when batching needs a variable first dim the model does not have.
    """
    dims = config_shape(tensor)
    what = "reshape" if tensor.HasField("reshape") else "dims"
    full = (-1, *dims) if max_batch_size > 0 else dims
    per_item = shape
    if max_batch_size > 0:
        if not batchable(shape):
            return (
                f"model '{model}': {kind} '{tensor.name}' has shape {format_shape(shape)} in the "
                f"model, without the variable first (batch) dimension that max_batch_size "
                f"{max_batch_size} in the config needs" + (f" ({hint})" if hint else "")
            )
        per_item = shape[1:]
    # A fixed model dim must be matched exactly; a variable one accepts any config dim.
    if len(dims) != len(per_item) or any(
        m != -1 and d != m for d, m in zip(dims, per_item, strict=True)
    ):
        return (
            f"model '{model}': {kind} '{tensor.name}' has {what} {format_shape(dims)} in the "
            f"config (max_batch_size {max_batch_size}, full shape {format_shape(full)}) but "
            f"shape {format_shape(shape)} in the model"
        )
    return None


# -- datatypes -------------------------------------------------------------------------------


def wire_type(model: str, kind: str, tensor: ConfigTensor) -> str:
    """The wire datatype (``FP32`` ...) of a config tensor; INVALID_ARG for ``TYPE_INVALID``."""
    name = DataType.Name(tensor.data_type)
    wire = CONFIG_TO_WIRE.get(name)
    if wire is None:
        raise TritonError(
            Status.INVALID_ARG, f"model '{model}': {kind} '{tensor.name}' has data_type {name}"
        )
    return wire


def wire_types(model: str, kind: str, tensors: Iterable[ConfigTensor]) -> dict[str, str]:
    """Config tensor name -> wire datatype, in config order (see :func:`wire_type`)."""
    return {tensor.name: wire_type(model, kind, tensor) for tensor in tensors}


# -- tensors the server feeds or reads besides input and output -----------------------------


def claimed_inputs(config: ModelConfig) -> set[str]:
    """Model inputs the server feeds from config sections other than ``input``: batch inputs,
    the sequence batcher's control inputs and implicit-state inputs."""
    names: set[str] = set()
    for batch_input in config.batch_input:
        names.update(batch_input.target_name)
    if config.HasField("sequence_batching"):
        names.update(control.name for control in config.sequence_batching.control_input)
        names.update(state.input_name for state in config.sequence_batching.state)
    return names


def state_outputs(config: ModelConfig) -> dict[str, int]:
    """Implicit-state outputs (``sequence_batching.state``) by name, with their data_type: a
    model produces them besides its ``output`` and the sequence batcher reads them back."""
    if not config.HasField("sequence_batching"):
        return {}
    return {state.output_name: state.data_type for state in config.sequence_batching.state}


# -- auto-complete ---------------------------------------------------------------------------


def default_max_batch_size(backend: Backend) -> int:
    """The backend's ``default-max-batch-size`` option: the max_batch_size auto-complete gives
    a model that can batch (Triton's default: 4; a negative value counts as 0)."""
    raw = backend.options.get(DEFAULT_MAX_BATCH_SIZE_OPTION, str(DEFAULT_MAX_BATCH_SIZE))
    try:
        return max(int(raw), 0)
    except ValueError:
        raise TritonError(
            Status.INVALID_ARG,
            f"backend option {DEFAULT_MAX_BATCH_SIZE_OPTION}={raw!r} of backend "
            f"'{backend.name}' is not an integer",
        ) from None


def complete_batching(
    config: ModelConfig,
    model: str,
    inputs: Mapping[str, ReportedTensor],
    outputs: Mapping[str, ReportedTensor],
    backend: Backend,
    *,
    optional_inputs: Mapping[str, ReportedTensor] | None = None,
    max_batch: int | None = None,
    why: str = "",
) -> None:
    """Fill max_batch_size and dynamic batching from the model, as Triton's auto-complete does.

    Call it when the config leaves ``input`` or ``output`` empty. A model whose every input
    and output has a variable first dim can batch: max_batch_size 0 becomes
    :func:`default_max_batch_size` (at most ``max_batch``, the largest batch the model
    takes, where the framework knows one) unless a listed tensor spells out the model's full
    shape; then max_batch_size > 1 adds ``dynamic_batching {}`` when the config chooses no
    scheduler. A model that cannot batch with a non-zero max_batch_size is an INVALID_ARG
    error (``why`` says why, e.g. the model's signature).

    The tensors are keyed by their config names; ``optional_inputs`` (inputs the model
    does not need, such as overridable initializers) count as listed but do not decide
    whether the model can batch.
    """
    reported = [*inputs.values(), *outputs.values()]
    if not reported or not all(batchable(tensor.shape) for tensor in reported):
        if config.max_batch_size != 0:
            raise TritonError(
                Status.INVALID_ARG,
                f"autofill failed for model '{model}': model does not support batching"
                + (f" ({why})" if why else "")
                + " while non-zero max_batch_size is specified",
            )
        return
    known = {**(optional_inputs or {}), **inputs, **outputs}
    if config.max_batch_size == 0 and not _listed_without_batch(config, known):
        size = default_max_batch_size(backend)
        # A larger batch than the model's bound would fail in the framework.
        config.max_batch_size = size if max_batch is None else min(size, max_batch)
    if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()


def _listed_without_batch(config: ModelConfig, known: Mapping[str, ReportedTensor]) -> bool:
    """True when a listed tensor spells out the model's full shape (so max_batch_size is 0)."""
    tensors: list[ConfigTensor] = [*config.input, *config.output]
    for tensor in tensors:
        reported = known.get(tensor.name)
        if reported is None or reported.shape is None:
            continue
        explicit = tensor.dims or tensor.HasField("reshape")
        if explicit and len(config_shape(tensor)) == len(reported.shape):
            return True
    return False


def fill_tensor(
    tensor: ConfigTensor, reported: ReportedTensor, max_batch_size: int, *, name: str = ""
) -> None:
    """Fill a new config tensor from the model: name (``name`` or the model's), data_type and
    dims (without the batch dim when max_batch_size > 0)."""
    tensor.name = name or reported.name
    tensor.data_type = _data_type(reported.config_type)
    _fill_dims(tensor, reported, max_batch_size)


def fill_unset(tensor: ConfigTensor, reported: ReportedTensor, max_batch_size: int) -> None:
    """Fill what a listed config tensor leaves unset (data_type, dims) from the model."""
    if tensor.data_type == 0:
        tensor.data_type = _data_type(reported.config_type)
    if not tensor.dims and not tensor.HasField("reshape"):
        _fill_dims(tensor, reported, max_batch_size)


def _data_type(config_type: str) -> DataType:
    return cast("DataType", DataType.Value(config_type))  # the stubs type Value as int


def _fill_dims(tensor: ConfigTensor, reported: ReportedTensor, max_batch_size: int) -> None:
    if reported.shape is None:
        raise ValueError(f"the framework reports no shape for tensor '{reported.name}'")
    dims = reported.shape[1:] if max_batch_size > 0 else reported.shape
    if dims:
        tensor.dims.extend(dims)
    else:
        # Config dims may not be empty: a per-item scalar is dims [1] reshaped to [] (Triton).
        tensor.dims.append(1)
        if max_batch_size > 0:
            tensor.reshape.SetInParent()


# -- instances -------------------------------------------------------------------------------


def available_cpus() -> int:
    """The CPUs this process may run on (affinity, cgroups through taskset), not the host's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def count_instances(config: ModelConfig, default_cpu_count: int) -> int:
    """Total instances of a model over its instance groups (per listed GPU for KIND_GPU).

    A group without a count has 1 instance per GPU, or ``default_cpu_count`` on the CPU
    (the backend's ``default_cpu_instance_count``); so has a config without groups.
    """
    total = 0
    for group in config.instance_group:
        gpu = group.kind == ModelInstanceGroup.KIND_GPU
        count = group.count if group.count > 0 else (1 if gpu else default_cpu_count)
        if gpu:
            count *= max(1, len(group.gpus))
        total += count
    return total or default_cpu_count
