"""Triton's logging extension (``/v2/logging``, gRPC ``LogSettings``) onto the process's log.

Both frontends check the types of the values they received with Triton's words, then hand
the checked changes here. ``log_file`` cannot change over the network (Triton: UNSUPPORTED).
"""

from __future__ import annotations

from typing import Any, Final

from triton_core.errors import TritonError, internal, invalid_arg, unavailable, unsupported
from triton_core.observability.logsettings import LOG, LOG_FORMATS

#: the keys a client may change, with the LogSettings field each sets
SETTABLE: Final = {
    "log_info": "info",
    "log_warning": "warning",
    "log_error": "error",
    "log_verbose_level": "verbose",
    "log_format": "format",
}
BOOL_KEYS: Final = ("log_info", "log_warning", "log_error")
#: Triton casts the level to int32
MAX_VERBOSE_LEVEL: Final = (1 << 31) - 1
_FILE_MESSAGE: Final = "log file location can not be updated through network protocol"


def current() -> dict[str, Any]:
    """The settings, with Triton's keys in Triton's order."""
    return LOG.settings.as_extension()


def update(changes: dict[str, Any]) -> dict[str, Any]:
    """Apply checked values (Triton keys, right Python types) together; the settings now."""
    fields = {SETTABLE[key]: value for key, value in changes.items()}
    return LOG.update(**fields).as_extension() if fields else current()


def _format_error(value: str, grpc: bool) -> TritonError:
    if grpc:
        return invalid_arg(f"invalid argument for log_format, got: {value}")
    return unavailable(f"invalid argument for --log_format, got: {value}")


def check_format(value: str, grpc: bool = False) -> str:
    if value not in LOG_FORMATS:
        raise _format_error(value, grpc)
    return value


def check_verbose(value: int) -> int:
    if value > MAX_VERBOSE_LEVEL:
        raise invalid_arg(f"log_verbose_level must be at most {MAX_VERBOSE_LEVEL}, got {value}")
    return value


def changes_from_json(body: object) -> dict[str, Any]:
    """The changes a POST body asks for, with Triton's messages for values of a wrong type.

    JSON ``null`` leaves a setting as it is; keys other than Triton's are ignored, as Triton.
    """
    if not isinstance(body, dict):
        return {}
    if body.get("log_file") is not None:
        raise unsupported(_FILE_MESSAGE)
    changes: dict[str, Any] = {}
    for key in SETTABLE:
        value = body.get(key)
        if value is None:
            continue
        if key in BOOL_KEYS:
            if not isinstance(value, bool):
                raise internal("attempt to access JSON non-boolean as boolean")
        elif key == "log_verbose_level":
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise internal("attempt to access JSON non-unsigned-integer as unsigned-integer")
            check_verbose(value)
        elif not isinstance(value, str):
            raise internal("attempt to access JSON non-string as string")
        else:
            check_format(value)
        changes[key] = value
    return changes


#: the gRPC SettingValue oneof each key needs, with Triton's name of the type in messages
GRPC_KINDS: Final = {
    "log_info": ("bool_param", "boolean"),
    "log_warning": ("bool_param", "boolean"),
    "log_error": ("bool_param", "boolean"),
    "log_verbose_level": ("uint32_param", "int32"),
    "log_format": ("string_param", "string"),
}


def changes_from_grpc(settings: dict[str, tuple[str | None, Any]]) -> dict[str, Any]:
    """The changes of a ``LogSettingsRequest``: key -> (the oneof set, its value)."""
    if "log_file" in settings:
        raise unsupported(_FILE_MESSAGE)
    changes: dict[str, Any] = {}
    for key, (kind, type_name) in GRPC_KINDS.items():
        if key not in settings:
            continue
        given, value = settings[key]
        if given != kind:
            raise invalid_arg(f"expect {type_name} for '{key}'")
        if key == "log_format":
            check_format(value, grpc=True)
        elif key == "log_verbose_level":
            check_verbose(value)
        changes[key] = value
    return changes
