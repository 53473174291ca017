"""Model configuration: Triton's ``ModelConfig`` protobuf, read from ``config.pbtxt``."""

from __future__ import annotations

from triton_core.config.model_config import (
    CONFIG_FILENAME,
    config_from_json,
    config_to_json,
    instance_kind_name,
    normalize,
    parse_config_text,
    read_config_file,
    scheduling_choice,
    validate,
    wire_datatype,
)
from triton_core.protos.model_config_pb2 import ModelConfig

__all__ = [
    "CONFIG_FILENAME",
    "ModelConfig",
    "config_from_json",
    "config_to_json",
    "instance_kind_name",
    "normalize",
    "parse_config_text",
    "read_config_file",
    "scheduling_choice",
    "validate",
    "wire_datatype",
]
