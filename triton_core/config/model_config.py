"""Reading, normalising, validating and rendering Triton's ``ModelConfig``."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import json_format, text_format

from triton_core.dtypes import CONFIG_TO_WIRE
from triton_core.errors import invalid_arg
from triton_core.protos.model_config_pb2 import DataType, ModelConfig, ModelInstanceGroup

CONFIG_FILENAME = "config.pbtxt"

_KIND_NAMES = {
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
) -> None:
    """Fill defaults the way Triton does before a model loads or its config is reported."""
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
    _normalize_instance_groups(config, default_cpu_instance_count, gpu_count)


def _normalize_instance_groups(config: ModelConfig, default_cpu_count: int, gpu_count: int) -> None:
    if not config.instance_group:
        config.instance_group.add()
    for index, group in enumerate(config.instance_group):
        if not group.name:
            group.name = f"{config.name}_{index}"
        if group.kind == ModelInstanceGroup.KIND_AUTO:
            group.kind = ModelInstanceGroup.KIND_GPU if gpu_count else ModelInstanceGroup.KIND_CPU
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
    if config.HasField("dynamic_batching"):
        _validate_dynamic_batching(config)


def _validate_dynamic_batching(config: ModelConfig) -> None:
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


def config_to_json(config: ModelConfig) -> dict:
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
