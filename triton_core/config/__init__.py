"""Model configuration: Triton's ``ModelConfig`` protobuf, read from ``config.pbtxt``."""

from __future__ import annotations

from triton_core.config.model_config import (
    CONFIG_FILENAME,
    EXECUTE_TIMEOUT_PARAMETER,
    LOAD_TIMEOUT_PARAMETER,
    config_from_json,
    config_to_json,
    instance_kind_name,
    normalize,
    parse_config_text,
    read_config_file,
    scheduling_choice,
    timeout_parameter,
    validate,
    wire_datatype,
)
from triton_core.protos.model_config_pb2 import ModelConfig

__all__ = [
    "CONFIG_FILENAME",
    "EXECUTE_TIMEOUT_PARAMETER",
    "LOAD_TIMEOUT_PARAMETER",
    "ModelConfig",
    "config_from_json",
    "config_to_json",
    "instance_kind_name",
    "normalize",
    "parse_config_text",
    "read_config_file",
    "scheduling_choice",
    "timeout_parameter",
    "validate",
    "wire_datatype",
]
