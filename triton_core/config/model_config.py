"""Reading, normalising, validating and rendering Triton's ``ModelConfig``."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format

from triton_core.errors import invalid_arg
from triton_core.protos.model_config_pb2 import (
    DataType,
    ModelConfig,
    ModelDynamicBatching,
    ModelInput,
    ModelInstanceGroup,
    ModelQueuePolicy,
    ModelSequenceBatching,
)
from triton_core.tensors.dtypes import CONFIG_TO_WIRE

CONFIG_FILENAME = "config.pbtxt"

#: model config ``parameters`` (beyond Triton) that bound each version's load and each
#: batch's execute, in seconds; unset means no bound
LOAD_TIMEOUT_PARAMETER = "load_timeout_secs"
EXECUTE_TIMEOUT_PARAMETER = "execute_timeout_secs"

#: a metric_tags key: the label "_<key>" must be a Prometheus label name, and not reserved
_METRIC_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")

_IMAGE_FORMATS = (ModelInput.FORMAT_NHWC, ModelInput.FORMAT_NCHW)

_KIND_NAMES: dict[int, str] = {
    ModelInstanceGroup.KIND_CPU: "CPU",
    ModelInstanceGroup.KIND_GPU: "GPU",
    ModelInstanceGroup.KIND_MODEL: "MODEL",
}


def parse_config_text(text: str, source: str) -> ModelConfig:
    """Parse protobuf text; errors name ``source`` and the line, column and field."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise invalid_arg(f"failed to parse model configuration {source}: {exc}") from None
    return config


def read_config_file(path: Path) -> ModelConfig:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise invalid_arg(f"failed to read model configuration {path}: {exc}") from None
    return parse_config_text(text, str(path))


def config_from_json(text: str, source: str = "request") -> ModelConfig:
    """Parse a config given as JSON (the repository load override)."""
    config = ModelConfig()
    try:
        json_format.Parse(text, config, ignore_unknown_fields=False)
    except json_format.ParseError as exc:
        raise invalid_arg(f"failed to parse model configuration from {source}: {exc}") from None
    return config


def instance_kind_name(kind: int) -> str:
    return _KIND_NAMES.get(kind, "CPU")


def scheduling_choice(config: ModelConfig) -> str:
    """``default`` or the name of the config's scheduling oneof member."""
    return config.WhichOneof("scheduling_choice") or "default"


def normalize(
    config: ModelConfig,
    *,
    default_cpu_instance_count: int = 1,
    gpu_count: int = 0,
    auto_on_gpus: bool = True,
) -> None:
    """Fill defaults the way Triton does before a model loads or its config is reported.

    ``auto_on_gpus``: whether a ``KIND_AUTO`` group becomes ``KIND_GPU`` where there are
    GPUs (its backend can run on them)."""
    if not config.HasField("version_policy"):
        config.version_policy.latest.num_versions = 1
    is_ensemble = config.platform == "ensemble"
    batching = config.dynamic_batching if config.HasField("dynamic_batching") else None
    if batching is not None and config.max_batch_size > 0 and not batching.preferred_batch_size:
        batching.preferred_batch_size.append(config.max_batch_size)
    if config.HasField("sequence_batching"):
        seq = config.sequence_batching
        if seq.max_sequence_idle_microseconds == 0:
            seq.max_sequence_idle_microseconds = 1_000_000
        oldest = seq.oldest if seq.HasField("oldest") else None
        if oldest is not None and config.max_batch_size > 0 and not oldest.preferred_batch_size:
            oldest.preferred_batch_size.append(config.max_batch_size)
    if is_ensemble:
        return
    config.optimization.input_pinned_memory.enable = True
    config.optimization.output_pinned_memory.enable = True
    _normalize_instance_groups(config, default_cpu_instance_count, gpu_count, auto_on_gpus)


def _normalize_instance_groups(
    config: ModelConfig, default_cpu_count: int, gpu_count: int, auto_on_gpus: bool
) -> None:
    if not config.instance_group:
        config.instance_group.add()
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == ModelInstanceGroup.KIND_AUTO:
            on_gpus = gpu_count and auto_on_gpus
            group.kind = ModelInstanceGroup.KIND_GPU if on_gpus else ModelInstanceGroup.KIND_CPU
        if group.kind == ModelInstanceGroup.KIND_GPU and not group.gpus and gpu_count:
            group.gpus.extend(range(gpu_count))
        if group.count < 1:
            group.count = default_cpu_count if group.kind == ModelInstanceGroup.KIND_CPU else 1


def validate(config: ModelConfig, *, gpu_count: int = 0) -> None:
    """Reject configs Triton would reject; messages name the model and the field."""
    model = config.name
    if config.max_batch_size < 0:
        raise invalid_arg(f"model '{model}': 'max_batch_size' must be non-negative")
    is_ensemble = config.platform == "ensemble"
    if not is_ensemble and not config.input and not config.output:
        raise invalid_arg(f"model '{model}' must specify 'input' and 'output' in its config")
    for field_name, tensors in (("input", config.input), ("output", config.output)):
        seen: set[str] = set()
        for tensor in tensors:
            where = f"model '{model}' {field_name} '{tensor.name}'"
            if not tensor.name:
                raise invalid_arg(f"model '{model}': every {field_name} must have a 'name'")
            if tensor.name in seen:
                raise invalid_arg(f"{where} is declared more than once")
            seen.add(tensor.name)
            if tensor.data_type == DataType.TYPE_INVALID:
                raise invalid_arg(f"{where} must specify 'data_type'")
            if not tensor.dims and not tensor.is_shape_tensor:
                raise invalid_arg(
                    f"{where} must specify 'dims' (use dims: [1] with reshape: {{shape: []}} "
                    "for a scalar per batch item)"
                )
            for dim in tensor.dims:
                if dim < -1:
                    raise invalid_arg(f"{where} has invalid dimension {dim} in 'dims'")
    for tensor in config.input:
        if tensor.format in _IMAGE_FORMATS and len(tensor.dims) != 3:
            raise invalid_arg(f"model input NHWC/NCHW require 3 dims for {model}")
    if config.instance_group and all(group.passive for group in config.instance_group):
        raise invalid_arg(
            f"model '{model}': every instance group is 'passive', so no instance would serve "
            "requests"
        )
    for group in config.instance_group:
        if group.kind == ModelInstanceGroup.KIND_GPU:
            if not gpu_count:
                raise invalid_arg(
                    f"instance group '{group.name}' of model '{model}' has kind KIND_GPU but no "
                    "GPUs are available"
                )
            for gpu in group.gpus:
                if gpu < 0 or gpu >= gpu_count:
                    raise invalid_arg(
                        f"instance group '{group.name}' of model '{model}' specifies invalid or "
                        f"unsupported gpu id {gpu}; {gpu_count} GPU(s) are available"
                    )
    if config.response_cache.enable and config.model_transaction_policy.decoupled:
        raise invalid_arg(
            f"Response Cache does not currently support model {model} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )
    if config.HasField("dynamic_batching"):
        _validate_dynamic_batching(config)
    if config.HasField("sequence_batching"):
        _validate_sequence_batching(config)
    for key in (LOAD_TIMEOUT_PARAMETER, EXECUTE_TIMEOUT_PARAMETER):
        timeout_parameter(config, key)
    if config.HasField("model_metrics"):
        _validate_model_metrics(config)
    for tag in config.metric_tags:
        if not _METRIC_TAG.fullmatch(tag):
            raise invalid_arg(
                f"model '{model}': 'metric_tags' key '{tag}' must be letters, digits and "
                "underscores, not starting with an underscore (it becomes the metric label "
                f"'_{tag}')"
            )


#: histogram buckets one metric_control may set (each costs memory per model and scrape)
MAX_HISTOGRAM_BUCKETS = 256


def _validate_model_metrics(config: ModelConfig) -> None:
    """Triton's checks of ``model_metrics`` (its messages), and finite, bounded buckets."""
    for control in config.model_metrics.metric_control:
        if not control.HasField("metric_identifier"):
            raise invalid_arg("metric control must specify 'metric_identifier'")
        if not control.metric_identifier.family:
            raise invalid_arg("metric identifier must specify non-empty 'family'")
        if not control.HasField("histogram_options"):
            raise invalid_arg("metric control must specify 'histogram_options'")
        buckets = control.histogram_options.buckets
        if not buckets:
            raise invalid_arg("histogram options must specify non-empty 'buckets'")
        if len(buckets) > MAX_HISTOGRAM_BUCKETS or not all(map(math.isfinite, buckets)):
            raise invalid_arg(
                f"model '{config.name}': model_metrics 'buckets' of "
                f"'{control.metric_identifier.family}' must be at most "
                f"{MAX_HISTOGRAM_BUCKETS} finite numbers"
            )


def timeout_parameter(config: ModelConfig, key: str, model: str = "") -> float | None:
    """A timeout in seconds from the config's ``parameters``; None when it is not set.

    Refuses anything but a positive, finite number of seconds, naming the model (``model``,
    for a config as written, which may not name it) and the key.
    """
    if key not in config.parameters:
        return None
    text = config.parameters[key].string_value
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise invalid_arg(
            f"model '{model or config.name}' parameter '{key}' must be a positive number of "
            f"seconds, got '{text}'"
        )
    return seconds


def _validate_dynamic_batching(config: ModelConfig) -> None:
    """Triton's checks of ``dynamic_batching``, plus ones for settings Triton silently ignores."""
    batching = config.dynamic_batching
    model = config.name
    if config.max_batch_size == 0:
        raise invalid_arg(
            f"model '{model}': 'dynamic_batching' requires 'max_batch_size' greater than 0"
        )
    for size in batching.preferred_batch_size:
        if size < 1 or size > config.max_batch_size:
            raise invalid_arg(
                f"model '{model}': dynamic_batching 'preferred_batch_size' {size} must be "
                f"between 1 and max_batch_size {config.max_batch_size}"
            )
    levels = batching.priority_levels
    if levels:
        if not 1 <= batching.default_priority_level <= levels:
            raise invalid_arg(
                f"model '{model}': dynamic_batching 'default_priority_level' must be in "
                f"[1, {levels}]"
            )
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                raise invalid_arg(
                    f"model '{model}': dynamic_batching 'priority_queue_policy' key {level} "
                    f"must be in [1, {levels}]"
                )
    elif batching.priority_queue_policy:
        # Triton ignores these policies without priority levels; say so instead.
        raise invalid_arg(
            f"model '{model}': dynamic_batching 'priority_queue_policy' needs "
            "'priority_levels' (the policies would never apply); use 'default_queue_policy' "
            "for a model without priority levels"
        )
    if batching.preserve_ordering:
        _validate_preserve_ordering(model, batching)


def _validate_preserve_ordering(model: str, batching: ModelDynamicBatching) -> None:
    if batching.priority_levels > 1:
        raise invalid_arg(
            f"model '{model}': dynamic_batching 'preserve_ordering' allows only one priority "
            f"level, but 'priority_levels' is {batching.priority_levels}"
        )
    policies = [("default_queue_policy", batching.default_queue_policy)] + [
        (f"priority_queue_policy[{level}]", policy)
        for level, policy in sorted(batching.priority_queue_policy.items())
    ]
    for where, policy in policies:
        # A request's own timeout may set one even where the default is 0.
        has_timeout = policy.default_timeout_microseconds or policy.allow_timeout_override
        if has_timeout and policy.timeout_action == ModelQueuePolicy.DELAY:
            raise invalid_arg(
                f"model '{model}': dynamic_batching {where} 'timeout_action' cannot be DELAY "
                "when 'preserve_ordering' is true"
            )


_Control = ModelSequenceBatching.Control
#: datatypes a CONTROL_SEQUENCE_CORRID input may have (Triton's list)
_CORRID_TYPES = (
    DataType.TYPE_UINT64,
    DataType.TYPE_INT64,
    DataType.TYPE_UINT32,
    DataType.TYPE_INT32,
    DataType.TYPE_STRING,
)


def _validate_sequence_batching(config: ModelConfig) -> None:
    """Controls, strategy and implicit state of ``sequence_batching`` (Triton's checks, and a
    few more that Triton leaves to fail at inference time)."""
    model = config.name
    batching = config.sequence_batching
    if config.response_cache.enable:
        raise invalid_arg(
            f"Response Cache does not currently support model {model} with sequence batching "
            "scheduler. Please disable the response cache."
        )
    inputs = {tensor.name for tensor in config.input}
    controls = _validate_sequence_controls(config, inputs)
    if batching.HasField("oldest"):
        oldest = batching.oldest
        if oldest.max_candidate_sequences < 0:
            raise invalid_arg(
                f"model '{model}': sequence_batching oldest 'max_candidate_sequences' must be "
                f"non-negative, got {oldest.max_candidate_sequences}"
            )
        for size in oldest.preferred_batch_size:
            if size < 1 or size > config.max_batch_size:
                raise invalid_arg(
                    f"model '{model}': sequence_batching oldest 'preferred_batch_size' {size} "
                    f"must be between 1 and max_batch_size {config.max_batch_size}"
                )
    utilization = batching.direct.minimum_slot_utilization
    if not 0.0 <= utilization <= 1.0:
        raise invalid_arg(
            f"model '{model}': sequence_batching direct 'minimum_slot_utilization' must be in "
            f"[0.0, 1.0], got {utilization}"
        )
    _validate_sequence_states(config, inputs | controls)


def _validate_sequence_controls(config: ModelConfig, inputs: set[str]) -> set[str]:
    """Check ``control_input``; returns the control tensor names."""
    model = config.name
    names: set[str] = set()
    kinds: set[int] = set()
    for control_input in config.sequence_batching.control_input:
        name = control_input.name
        if not name:
            raise invalid_arg(
                f"model '{model}': every sequence_batching 'control_input' must have a 'name'"
            )
        if name in names:
            raise invalid_arg(
                f"model '{model}': sequence_batching control input '{name}' is declared more "
                "than once"
            )
        names.add(name)
        if name in inputs:
            raise invalid_arg(
                f"model '{model}': sequence_batching control input '{name}' is also listed in "
                "'input'; the server supplies control inputs, so remove it from 'input'"
            )
        if len(control_input.control) != 1:
            raise invalid_arg(
                f"model '{model}': sequence_batching control input '{name}' must have exactly "
                f"one 'control', got {len(control_input.control)}"
            )
        control = control_input.control[0]
        kind = _Control.Kind.Name(control.kind)
        if control.kind in kinds:
            raise invalid_arg(
                f"model '{model}': sequence_batching specifies multiple {kind} control inputs"
            )
        kinds.add(control.kind)
        where = f"model '{model}': sequence_batching control input '{name}' ({kind})"
        value_lists = [
            (field, values)
            for field, values in (
                ("int32_false_true", control.int32_false_true),
                ("fp32_false_true", control.fp32_false_true),
                ("bool_false_true", control.bool_false_true),
            )
            if len(values)
        ]
        if control.kind == _Control.CONTROL_SEQUENCE_CORRID:
            if value_lists:
                raise invalid_arg(
                    f"{where} must not specify '{value_lists[0][0]}'; it carries the "
                    "correlation ID in 'data_type'"
                )
            if control.data_type not in _CORRID_TYPES:
                raise invalid_arg(
                    f"{where} has 'data_type' {DataType.Name(control.data_type)}; allowed data "
                    "types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING"
                )
            continue
        if len(value_lists) != 1:
            raise invalid_arg(
                f"{where} must specify exactly one of 'int32_false_true', 'fp32_false_true' "
                "or 'bool_false_true'"
            )
        field, values = value_lists[0]
        if len(values) != 2:
            raise invalid_arg(f"{where} '{field}' must have exactly 2 entries (false, true)")
    return names


def _validate_sequence_states(config: ModelConfig, taken_inputs: set[str]) -> None:
    model = config.name
    outputs = {tensor.name: tensor for tensor in config.output}
    input_names: set[str] = set()
    output_names: set[str] = set()
    for state in config.sequence_batching.state:
        if not state.input_name or not state.output_name:
            raise invalid_arg(
                f"model '{model}': every sequence_batching 'state' must have an 'input_name' "
                "and an 'output_name'"
            )
        where = f"model '{model}': sequence_batching state '{state.input_name}'"
        if state.input_name in input_names or state.input_name in taken_inputs:
            raise invalid_arg(
                f"{where}: 'input_name' is already used by another state, a control input or "
                "an 'input'"
            )
        if state.output_name in output_names:
            raise invalid_arg(
                f"{where}: 'output_name' '{state.output_name}' is used by another state"
            )
        input_names.add(state.input_name)
        output_names.add(state.output_name)
        if state.data_type == DataType.TYPE_INVALID:
            raise invalid_arg(f"{where} must specify 'data_type'")
        if not state.dims:
            raise invalid_arg(f"{where} must specify 'dims'")
        if any(dim < 1 and dim != -1 for dim in state.dims):
            raise invalid_arg(f"{where} has an invalid dimension in 'dims' {list(state.dims)}")
        listed = outputs.get(state.output_name)
        if listed is not None and listed.data_type != state.data_type:
            raise invalid_arg(
                f"{where}: output '{state.output_name}' is listed in 'output' with data_type "
                f"{DataType.Name(listed.data_type)} but the state has "
                f"{DataType.Name(state.data_type)}"
            )
        _validate_initial_state(where, state)


def _validate_initial_state(where: str, state: ModelSequenceBatching.State) -> None:
    if len(state.initial_state) > 1:
        raise invalid_arg(
            f"{where}: 'initial_state' must contain exactly one or zero element, found "
            f"{len(state.initial_state)}"
        )
    if not state.initial_state:
        return
    initial = state.initial_state[0]
    if initial.data_type != state.data_type:
        raise invalid_arg(
            f"{where}: 'initial_state' data_type {DataType.Name(initial.data_type)} does not "
            f"match the state data_type {DataType.Name(state.data_type)}"
        )
    if not initial.name:
        raise invalid_arg(f"{where}: 'initial_state' must have a 'name'")
    if len(initial.dims) != len(state.dims):
        raise invalid_arg(
            f"{where}: 'initial_state' dims {list(initial.dims)} must have as many dimensions "
            f"as the state dims {list(state.dims)}"
        )
    for dim, state_dim in zip(initial.dims, state.dims, strict=True):
        if dim < 1 or (state_dim != -1 and dim != state_dim):
            raise invalid_arg(
                f"{where}: 'initial_state' dims {list(initial.dims)} must be fixed (>= 1) and "
                f"match the state dims {list(state.dims)}"
            )
    choice = initial.WhichOneof("state_data")
    if choice is None or (choice == "zero_data" and not initial.zero_data):
        raise invalid_arg(f"{where}: 'initial_state' must set 'zero_data' or 'data_file'")
    if choice == "data_file" and not initial.data_file:
        raise invalid_arg(f"{where}: 'initial_state' 'data_file' must not be empty")


# -- JSON rendering (PROTOCOL 1.10) --------------------------------------------------------------

# Paths (through repeated fields and maps) of int64/uint64 fields that Triton prints as numbers.
_NUMERIC_INT64_PATHS: tuple[tuple[str, ...], ...] = (
    ("input", "dims"),
    ("input", "reshape", "shape"),
    ("output", "dims"),
    ("output", "reshape", "shape"),
    ("version_policy", "specific", "versions"),
    ("dynamic_batching", "max_queue_delay_microseconds"),
    ("dynamic_batching", "priority_levels"),
    ("dynamic_batching", "default_priority_level"),
    ("dynamic_batching", "default_queue_policy", "default_timeout_microseconds"),
    ("dynamic_batching", "priority_queue_policy", "*", "default_timeout_microseconds"),
    ("sequence_batching", "max_sequence_idle_microseconds"),
    ("sequence_batching", "direct", "max_queue_delay_microseconds"),
    ("sequence_batching", "oldest", "max_queue_delay_microseconds"),
    ("sequence_batching", "state", "dims"),
    ("sequence_batching", "state", "initial_state", "dims"),
    ("ensemble_scheduling", "step", "model_version"),
    ("model_warmup", "inputs", "*", "dims"),
)


def config_to_json(config: ModelConfig) -> dict[str, Any]:
    """The config as Triton's model-configuration endpoint renders it (PROTOCOL 1.10)."""
    rendered = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    for path in _NUMERIC_INT64_PATHS:
        _numbers_at(rendered, path)
    return rendered


def _numbers_at(node: object, path: tuple[str, ...]) -> None:
    if isinstance(node, list):
        for item in node:
            _numbers_at(item, path)
        return
    if not isinstance(node, dict) or not path:
        return
    key, rest = path[0], path[1:]
    children = list(node.values()) if key == "*" else [node.get(key)] if key in node else []
    if not rest:
        if key in node:
            node[key] = _to_number(node[key])
        return
    for child in children:
        _numbers_at(child, rest)


def _to_number(value: object) -> object:
    if isinstance(value, list):
        return [_to_number(item) for item in value]
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


def wire_datatype(data_type: int) -> str:
    """``TYPE_FP32`` enum value -> ``FP32``."""
    return CONFIG_TO_WIRE[DataType.Name(data_type)]
