"""Everything the TensorRT backend decides without a device, from an engine's description.

Auto-complete and config checks follow Triton's TensorRT backend (model_state.cc): inputs,
outputs, datatypes and dims come from the engine, max_batch_size from the largest batch the
instance groups' optimization profiles take, and ``dynamic_batching {}`` is added for a
model that batches. At run time an instance picks, per batch, the profile whose optimum is
nearest the batch's shapes among those whose bounds hold it (instance_state.cc).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from triton_core import (
    CONFIG_TO_WIRE,
    DataType,
    ModelInstanceGroup,
    Status,
    TritonError,
    claimed_inputs,
    dims_error,
    fill_tensor,
    fill_unset,
    format_shape,
    state_outputs,
    wire_types,
)
from triton_core_tensorrt.description import (
    TRT_TO_NUMPY,
    EngineDescription,
    ProfileDescription,
    TensorDescription,
)

if TYPE_CHECKING:
    from triton_core import ModelConfig

#: Triton's name for the profile of an engine built without explicit profiles
DEFAULT_PROFILE: Final = "default"


# -- profiles --------------------------------------------------------------------------------


def profile_index(model: str, profile: str, count: int) -> int:
    """The index an instance group's ``profile`` entry names (a decimal string)."""
    if not re.fullmatch(r"[0-9]+", profile.strip()) or int(profile) >= count:
        raise TritonError(
            Status.INVALID_ARG,
            f"unable to autofill for '{model}', configuration specified invalid profile "
            f"{profile} . Number of profiles supported by TensorRT engine: {count}",
        )
    return int(profile)


def group_profiles(model: str, group: ModelInstanceGroup, count: int) -> tuple[int, ...]:
    """The profiles an instance group's instances use: its ``profile`` list, else profile 0."""
    indices = dict.fromkeys(profile_index(model, p, count) for p in group.profile)
    return tuple(indices) or (0,)


def config_profiles(config: ModelConfig, model: str, count: int) -> tuple[int, ...]:
    """Every profile some instance group uses (profile 0 when none names one)."""
    indices: dict[int, None] = {}
    for group in config.instance_group:
        for profile in group.profile:
            indices[profile_index(model, profile, count)] = None
    return tuple(indices) or (0,)


def profile_max_batch(description: EngineDescription, index: int) -> int:
    """The largest first dim every input of a profile takes (Triton's GetProfileMaxBatchSize)."""
    profile = description.profiles[index]
    batches = [hi[0] for (_, _, hi) in profile.inputs.values() if hi]
    return min(batches) if batches else 0


def max_supported_batch(description: EngineDescription, indices: Iterable[int]) -> int:
    """The largest batch over the given profiles (Triton's GetMaxSupportedBatchSize)."""
    return max((profile_max_batch(description, i) for i in indices), default=0)


# -- auto-complete and config checks -------------------------------------------------------------


def _engine_tensor(
    model: str, kind: str, engine: Mapping[str, TensorDescription], name: str
) -> TensorDescription:
    if name not in engine:
        raise TritonError(
            Status.INVALID_ARG,
            f"model '{model}': the config lists {kind} '{name}', which the TensorRT engine "
            f"does not have (its {kind}s: {', '.join(engine) or 'none'})",
        )
    return engine[name]


def _servable(model: str, tensor: TensorDescription) -> None:
    """Refuse what this backend does not serve, naming the tensor."""
    kind = "input" if tensor.is_input else "output"
    if not tensor.config_type:
        raise TritonError(
            Status.UNSUPPORTED,
            f"model '{model}': {kind} '{tensor.name}' has TensorRT type {tensor.dtype}, "
            f"which has no Triton datatype",
        )
    if tensor.is_shape_tensor:
        raise TritonError(
            Status.UNSUPPORTED,
            f"model '{model}': {kind} '{tensor.name}' is a shape tensor, which the "
            f"triton-core TensorRT backend does not serve",
        )
    if tensor.format != "LINEAR":
        raise TritonError(
            Status.UNSUPPORTED,
            f"model '{model}': {kind} '{tensor.name}' uses the {tensor.format} I/O format; "
            f"the triton-core TensorRT backend serves LINEAR tensors only",
        )


def _batch_hint(config: ModelConfig, description: EngineDescription, model: str) -> bool | None:
    """What the listed dims say about batching: True (one dim fewer than the engine), False
    (as many), None (no listed dims); contradicting tensors are an error, as in Triton."""
    engine = {t.name: t for t in description.tensors}
    hint: bool | None = None
    for tensor in config.input:
        if tensor.allow_ragged_batch:
            hint = True
    tensors: list[Any] = [*config.input, *config.output]
    for tensor in tensors:
        if tensor in config.input and tensor.allow_ragged_batch:
            continue
        dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
        described = engine.get(tensor.name)
        if not dims or described is None:
            continue
        batched = len(described.engine_shape) == len(dims) + 1
        if hint is not None and hint != batched:
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to autofill for '{model}', model tensor configurations are "
                f"contradicting each other in terms of whether batching is supported",
            )
        hint = batched
    return hint


def auto_complete(config: ModelConfig, description: EngineDescription, model: str) -> None:
    """Complete ``config`` in place from the engine, as Triton's TensorRT backend does."""
    inputs, outputs = description.inputs, description.outputs
    for kind, section, engine in (
        ("input", config.input, inputs),
        ("output", config.output, outputs),
    ):
        for tensor in section:
            _engine_tensor(model, kind, engine, tensor.name)
    profiles = config_profiles(config, model, len(description.profiles))
    supported = max_supported_batch(description, profiles)
    hint = _batch_hint(config, description, model)
    if hint and supported == 0:
        raise TritonError(
            Status.INVALID_ARG,
            f"autofill failed for model '{model}': model tensor shape configuration hints "
            f"for dynamic batching but the underlying engine doesn't support batching.",
        )
    if hint is False:
        supported = 0
    if config.max_batch_size == 0:
        config.max_batch_size = supported
    elif config.max_batch_size > supported:
        raise TritonError(
            Status.INVALID_ARG,
            f"autofill failed for model '{model}': configuration specified max-batch "
            f"{config.max_batch_size} but TensorRT engine only supports max-batch {supported}",
        )
    if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()
    # Tensors the sequence batcher feeds or reads back stay out of 'input' and 'output'.
    internal = claimed_inputs(config) | set(state_outputs(config))
    for section, engine in ((config.input, inputs), (config.output, outputs)):
        listed = {tensor.name: tensor for tensor in section}
        if not listed:
            for described in engine.values():
                if described.name in internal:
                    continue
                _servable(model, described)
                fill_tensor(section.add(), described, config.max_batch_size)
        for name, tensor in listed.items():
            described = engine[name]
            _servable(model, described)
            fill_unset(tensor, described, config.max_batch_size)


def check_config(config: ModelConfig, description: EngineDescription, model: str) -> None:
    """At load: every config tensor is the engine's, with its datatype and fitting dims."""
    batching = config.max_batch_size > 0
    for kind, section, engine in (
        ("input", config.input, description.inputs),
        ("output", config.output, description.outputs),
    ):
        for tensor in section:
            described = _engine_tensor(model, kind, engine, tensor.name)
            _servable(model, described)
            if DataType.Name(tensor.data_type) != described.config_type:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"unable to load model '{model}', {kind} '{tensor.name}' data-type is "
                    f"{DataType.Name(tensor.data_type)} in the config but "
                    f"{described.config_type} in the TensorRT engine",
                )
            shape = described.engine_shape
            if batching and shape:
                # The batch dim is checked against the profiles' bounds, per batch.
                shape = (-1, *shape[1:])
            error = dims_error(model, kind, tensor, shape, config.max_batch_size)
            if error:
                raise TritonError(Status.INVALID_ARG, error)
    fed = {t.name for t in config.input} | claimed_inputs(config)
    for name in description.inputs:
        if name not in fed:
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{model}': the TensorRT engine's input '{name}' is "
                f"missing from the config",
            )
    supported = max_supported_batch(
        description, config_profiles(config, model, len(description.profiles))
    )
    if config.max_batch_size > supported:
        raise TritonError(
            Status.INVALID_ARG,
            f"unable to load model '{model}': configuration specified max-batch "
            f"{config.max_batch_size} but TensorRT engine only supports max-batch {supported}",
        )


def served_outputs(config: ModelConfig, model: str) -> dict[str, str]:
    """Every output an instance produces -> wire datatype: the config's, then the implicit
    state the sequence batcher reads back."""
    outputs = wire_types(model, "output", config.output)
    for name, data_type in state_outputs(config).items():
        outputs.setdefault(name, CONFIG_TO_WIRE[DataType.Name(data_type)])
    return outputs


# -- run time: profile choice and shape checks ------------------------------------------------


def _profile_name(index: int, names: Mapping[int, str]) -> str:
    return f"'{names.get(index, str(index))}' [{index}]"


def bounds_error(
    model: str, profile: ProfileDescription, shapes: Mapping[str, tuple[int, ...]]
) -> str | None:
    """Why ``shapes`` (input name -> full shape) fall outside a profile, or None."""
    for name, shape in shapes.items():
        ranges = profile.inputs.get(name)
        if ranges is None:
            continue
        lo, _, hi = ranges
        if len(shape) != len(hi):
            return (
                f"model '{model}' input '{name}': model expected {len(hi)} dimensions but "
                f"received {len(shape)} dimensions (shape {format_shape(shape)})"
            )
        for axis, (size, low, high) in enumerate(zip(shape, lo, hi, strict=True)):
            if size < low or size > high:
                return (
                    f"model '{model}' input '{name}': model expected the shape of dimension "
                    f"{axis} to be between {low} and {high} but received {size} (shape "
                    f"{format_shape(shape)}, profile bounds {format_shape(lo)} to "
                    f"{format_shape(hi)})"
                )
    return None


def choose_profile(
    model: str,
    description: EngineDescription,
    indices: Sequence[int],
    shapes: Mapping[str, tuple[int, ...]],
) -> int:
    """The profile among ``indices`` nearest ``shapes`` (Manhattan distance to its optimum)
    whose bounds hold them; INVALID_ARG naming the input and the bounds when none does."""
    if len(indices) == 1:
        error = bounds_error(model, description.profiles[indices[0]], shapes)
        if error:
            raise TritonError(Status.INVALID_ARG, error)
        return indices[0]
    best, best_distance, first_error = -1, math.inf, None
    for index in indices:
        profile = description.profiles[index]
        error = bounds_error(model, profile, shapes)
        if error:
            first_error = first_error or error
            continue
        distance = sum(
            abs(size - opt)
            for name, shape in shapes.items()
            if name in profile.inputs
            for size, opt in zip(shape, profile.inputs[name][1], strict=True)
        )
        if distance < best_distance:
            best, best_distance = index, distance
    if best < 0:
        names = " ".join(f"[{i}]" for i in indices)
        raise TritonError(
            Status.INVALID_ARG,
            f"failed to find any Optimization Profile among [ {names}] to support the "
            f"requested dimensions: {first_error}",
        )
    return best


def resolve_output_shape(model: str, name: str, shape: Sequence[int]) -> tuple[int, ...]:
    """An output's shape as the execution context reports it once the inputs are set; a
    dimension still unknown (data-dependent) is an error naming the output."""
    resolved = tuple(int(d) for d in shape)
    if any(d < 0 for d in resolved):
        raise TritonError(
            Status.INTERNAL,
            f"model '{model}': TensorRT left the shape of output '{name}' unresolved "
            f"({format_shape(resolved)}); data-dependent output shapes are not served",
        )
    return resolved


# -- buffers ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Binding:
    """One I/O tensor's device buffer: sized for the largest shape of the instance's profiles."""

    name: str
    is_input: bool
    dtype: np.dtype
    nbytes: int


def binding_plan(
    model: str, description: EngineDescription, indices: Sequence[int]
) -> tuple[Binding, ...]:
    """The buffers one instance allocates once: every I/O tensor at its largest size over the
    profiles it uses, so that no batch allocates device memory."""
    largest: dict[str, int] = {}
    for index in indices:
        profile = description.profiles[index]
        shapes = {name: hi for name, (_, _, hi) in profile.inputs.items()}
        shapes.update(profile.max_outputs)
        for tensor in description.tensors:
            shape = shapes.get(tensor.name, tensor.engine_shape)
            if any(d < 0 for d in shape):
                raise TritonError(
                    Status.UNSUPPORTED,
                    f"model '{model}': the largest shape of {tensor.mode.lower()} "
                    f"'{tensor.name}' in profile {index} is unknown "
                    f"({format_shape(shape)}); data-dependent shapes are not served",
                )
            largest[tensor.name] = max(largest.get(tensor.name, 0), math.prod(shape))
    bindings = []
    for tensor in description.tensors:
        dtype = np.dtype(TRT_TO_NUMPY.get(tensor.dtype, "uint8"))
        # At least one element: TensorRT wants a valid address even for empty tensors.
        nbytes = max(largest[tensor.name], 1) * dtype.itemsize
        bindings.append(Binding(tensor.name, tensor.is_input, dtype, nbytes))
    return tuple(bindings)


# -- what failed to load ----------------------------------------------------------------------

#: TensorRT's log text when a plan was serialized by another version / for another device
_VERSION_PATTERNS: Final = (
    re.compile(r"version", re.IGNORECASE),
    re.compile(r"magic tag", re.IGNORECASE),
)
_DEVICE_PATTERNS: Final = (
    re.compile(r"incompatible device", re.IGNORECASE),
    re.compile(r"compute capability|expecting compute", re.IGNORECASE),
)


def deserialize_error(
    model: str,
    path: str,
    log: Sequence[str],
    tensorrt_version: str,
    compute_capability: tuple[int, int] | None,
) -> TritonError:
    """The load error for an engine TensorRT could not deserialize, saying whether it was
    built for another GPU or another TensorRT version when TensorRT's log says so."""
    text = " ".join(log).strip()
    device = (
        f"compute capability {compute_capability[0]}.{compute_capability[1]}"
        if compute_capability
        else "this GPU"
    )
    if any(p.search(text) for p in _DEVICE_PATTERNS):
        reason = (
            f"the engine was built for another GPU (this device has {device}); rebuild it "
            f"on this GPU model"
        )
    elif any(p.search(text) for p in _VERSION_PATTERNS):
        reason = (
            f"the engine was built with another TensorRT version (this server has TensorRT "
            f"{tensorrt_version}); rebuild it with this version"
        )
    else:
        reason = "TensorRT could not deserialize the engine"
    detail = f" (TensorRT: {text})" if text else ""
    return TritonError(
        Status.INVALID_ARG,
        f"unable to load model '{model}': unable to create TensorRT engine from '{path}': "
        f"{reason}{detail}",
    )
