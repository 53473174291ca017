"""Trace settings: ``--trace-config`` (and the deprecated ``--trace-*`` flags), and the
settings a client reads and changes through the trace extension.

Names, defaults and messages are Triton's (``src/command_line_parser.cc``,
``src/http_server.cc`` ``HandleTrace``, ``src/grpc/grpc_server.cc`` ``TraceSetting``).
"""

from __future__ import annotations

import argparse
import enum
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from triton_core.errors import invalid_arg

logger = logging.getLogger(__name__)


class TraceLevel(enum.IntFlag):
    OFF = 0
    TIMESTAMPS = 1
    TENSORS = 2


TRITON: Final = "triton"
OPENTELEMETRY: Final = "opentelemetry"
MODES: Final = (TRITON, OPENTELEMETRY)
#: the lowest ``trace_count``: -1 traces without a limit
MIN_TRACE_COUNT: Final = -1
UINT32_MAX: Final = 4294967295
INT32_MAX: Final = 2147483647
#: OpenTelemetry's batch span processor settings and their defaults (environment first)
BSP_SETTINGS: Final = (
    ("bsp_max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", "2048"),
    ("bsp_schedule_delay", "OTEL_BSP_SCHEDULE_DELAY", "5000"),
    ("bsp_max_export_batch_size", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
)
DEFAULT_OTLP_URL: Final = "http://localhost:4318/v1/traces"
_OTEL_SETTINGS: Final = ("url", "resource", *(name for name, _, _ in BSP_SETTINGS))


@dataclass(frozen=True, slots=True)
class TraceConfig:
    """The trace settings the server starts with."""

    level: TraceLevel = TraceLevel.OFF
    rate: int = 1000
    count: int = -1
    log_frequency: int = 0
    file: str = ""
    mode: str = TRITON
    #: the opentelemetry settings, in the order given (defaults of the bsp_* ones appended)
    otel: tuple[tuple[str, str], ...] = ()

    def otel_value(self, key: str, default: str = "") -> str:
        for name, value in self.otel:
            if name == key:
                return value
        return default

    def otel_resources(self) -> dict[str, str]:
        """``resource=<key>=<value>`` settings, over Triton's ``service.name``."""
        resources = {"service.name": "triton-inference-server"}
        for name, value in self.otel:
            if name == "resource":
                key, _, text = value.partition("=")
                resources[key] = text
        return resources


@dataclass(slots=True)
class TraceFlags:
    """The raw trace flags of the command line."""

    config: list[str] = field(default_factory=list)
    file: str | None = None
    level: list[str] = field(default_factory=list)
    rate: str | None = None
    count: str | None = None
    log_frequency: str | None = None


def parse_level(text: str) -> TraceLevel:
    """A ``level=`` value: OFF/false, TIMESTAMPS (true, on, min, max), TENSORS."""
    value = text.lower()
    if value in ("false", "off"):
        return TraceLevel.OFF
    if value in ("true", "on", "min", "max", "timestamps"):
        return TraceLevel.TIMESTAMPS
    if value == "tensors":
        return TraceLevel.TENSORS
    raise ValueError(f"invalid value for trace level option: {text}")


def parse_mode(text: str) -> str:
    value = text.lower()
    if value not in MODES:
        raise ValueError(
            f'invalid value for trace mode option: {value}. Available options are "triton" '
            'and "opentelemetry"'
        )
    return value


def split_trace_config(text: str) -> tuple[str, str, str]:
    """``[<mode>,]<setting>=<value>`` as (mode or "", setting, value)."""
    mode, comma, rest = text.partition(",")
    if not comma:
        mode, rest = "", text
    elif not mode:
        raise ValueError(
            "No trace mode specified. --trace-config option format is "
            f"<trace mode>,<setting>=<value> or <setting>=<value>. Got {text}"
        )
    else:
        mode = parse_mode(mode)
    setting, equals, value = rest.partition("=")
    if not equals or not setting or not value:
        raise ValueError(
            f"--trace-config option format is '<trace mode>,<setting>=<value>'. Got {text}"
        )
    return mode, setting, value


def _integer(text: str, low: int, high: int, flag: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f'Bad option: "{flag}".\ninvalid argument: {text}') from None
    if not low <= value <= high:
        raise ValueError(f'Bad option: "{flag}".\n{text} is out of range [{low}, {high}]')
    return value


def parse_trace_flags(flags: TraceFlags, environ: Mapping[str, str] = os.environ) -> TraceConfig:
    """The trace settings of a command line; ValueError names a bad flag or value.

    ``--trace-config`` wins over the deprecated flag of the same setting, as in Triton.
    """
    level, explicit_off = TraceLevel.OFF, False
    for text in flags.level:
        parsed = parse_level(text)
        explicit_off |= parsed is TraceLevel.OFF
        level |= parsed
    rate = 1000 if flags.rate is None else _integer(flags.rate, 0, UINT32_MAX, "--trace-rate")
    count = -1 if flags.count is None else _integer(flags.count, -1, INT32_MAX, "--trace-count")
    frequency = (
        0
        if flags.log_frequency is None
        else _integer(flags.log_frequency, 0, UINT32_MAX, "--trace-log-frequency")
    )
    file, mode = flags.file or "", TRITON
    otel: list[tuple[str, str]] = []
    triton: list[tuple[str, str]] = []
    for text in flags.config:
        mode_of, setting, value = split_trace_config(text)
        if mode_of == TRITON:
            triton.append((setting, value))
        elif mode_of == OPENTELEMETRY:
            if setting not in _OTEL_SETTINGS:
                raise ValueError(
                    f'Bad option: "--trace-config opentelemetry,{setting}": unknown setting '
                    f"(known: {', '.join(_OTEL_SETTINGS)})"
                )
            otel.append((setting, value))
        elif setting == "rate":
            rate = _integer(value, 0, UINT32_MAX, "--trace-config rate")
        elif setting == "count":
            count = _integer(value, -1, INT32_MAX, "--trace-config count")
        elif setting == "mode":
            mode = parse_mode(value)
        elif setting == "level":
            try:
                parsed = parse_level(value)
            except ValueError as exc:
                raise ValueError(f'Bad option: "--trace-config level".\n{exc}') from None
            explicit_off |= parsed is TraceLevel.OFF
            level |= parsed
        else:
            raise ValueError(
                f'Bad option: "--trace-config {setting}": unknown setting '
                "(global settings: rate, level, count, mode; use triton,<setting> or "
                "opentelemetry,<setting> for the others)"
            )
    for setting, value in triton:
        if setting == "file":
            file = value
        elif setting == "log-frequency":
            frequency = _integer(value, 0, UINT32_MAX, "--trace-config triton,log-frequency")
        else:
            raise ValueError(
                f'Bad option: "--trace-config triton,{setting}": unknown setting '
                "(known: file, log-frequency)"
            )
    if explicit_off:
        level = TraceLevel.OFF
    ignored = triton if mode == OPENTELEMETRY else otel
    for setting, _ in ignored:
        other = TRITON if mode == OPENTELEMETRY else OPENTELEMETRY
        logger.warning(
            "'--trace-config %s,%s' has no effect: the trace mode is %s", other, setting, mode
        )
    if mode == OPENTELEMETRY:
        if level & TraceLevel.TENSORS:
            raise ValueError(
                "--trace-config level=TENSORS is not supported in opentelemetry trace mode"
            )
        otel = _with_bsp_defaults(otel, environ)
    else:
        otel = []
    return TraceConfig(level, rate, count, frequency, file, mode, tuple(otel))


def _with_bsp_defaults(
    otel: list[tuple[str, str]], environ: Mapping[str, str]
) -> list[tuple[str, str]]:
    """The batch span processor settings checked, and those not given from the environment."""
    given = set()
    for name, value in otel:
        if name.startswith("bsp_"):
            _integer(value, 0, UINT32_MAX, f"--trace-config opentelemetry,{name}")
            given.add(name)
    for name, variable, default in BSP_SETTINGS:
        if name not in given:
            value = environ.get(variable, default)
            _integer(value, 0, UINT32_MAX, variable)
            otel.append((name, value))
    return otel


# -- the trace extension: a client's update ---------------------------------------------------


class _Clear:
    """A setting to drop, so that the model falls back to the global one (JSON null)."""


CLEAR: Final = _Clear()


@dataclass(slots=True)
class SettingUpdate:
    """The settings one request changes; absent ones are None, cleared ones :data:`CLEAR`."""

    level: TraceLevel | _Clear | None = None
    rate: int | _Clear | None = None
    count: int | _Clear | None = None
    log_frequency: int | _Clear | None = None


#: the settings a client may change (``trace_file`` is refused, as Triton does)
_UPDATABLE: Final = ("trace_level", "trace_rate", "trace_count", "log_frequency")


def parse_update(settings: Mapping[str, Sequence[str] | None], grpc: bool) -> SettingUpdate:
    """A client's settings (None or an empty list clears) as an update; TritonError if bad.

    Values are lists of strings (``trace_level``) or one string; Triton's messages.
    """
    from triton_core.errors import unsupported

    if "trace_file" in settings:
        raise unsupported("trace file location can not be updated through network protocol")
    for key in settings:
        if key not in _UPDATABLE:
            raise invalid_arg(
                f"trace setting '{key}' can not be updated (settable: {', '.join(_UPDATABLE)})"
            )
    update = SettingUpdate()
    if "trace_level" in settings:
        update.level = _level_update(settings["trace_level"])
    if "trace_rate" in settings:
        update.rate = _number_update(settings["trace_rate"], "trace_rate", 0, UINT32_MAX, grpc)
    if "trace_count" in settings:
        update.count = _number_update(
            settings["trace_count"], "trace_count", MIN_TRACE_COUNT, INT32_MAX, grpc
        )
    if "log_frequency" in settings:
        update.log_frequency = _number_update(
            settings["log_frequency"], "log_frequency", 0, UINT32_MAX, grpc
        )
    return update


def _level_update(values: Sequence[str] | None) -> TraceLevel | _Clear:
    if not values:
        return CLEAR
    level = TraceLevel.OFF
    for value in values:
        if value == "OFF":
            if len(values) != 1:
                raise invalid_arg("Expect only one trace level 'OFF' is specified")
        elif value == "TIMESTAMPS":
            level |= TraceLevel.TIMESTAMPS
        elif value == "TENSORS":
            level |= TraceLevel.TENSORS
        else:
            raise invalid_arg(
                f"Unable to parse 'trace_level', got: {value} (expected OFF, TIMESTAMPS or TENSORS)"
            )
    return level


def _number_update(
    values: Sequence[str] | None, name: str, low: int, high: int, grpc: bool
) -> int | _Clear:
    if not values:
        return CLEAR
    if len(values) != 1:
        raise invalid_arg(f"expect only 1 value for '{name}'")
    text = values[0]
    try:
        value = int(text.strip())
    except ValueError:
        raise invalid_arg(f"Unable to parse '{name}', got: {text}") from None
    if name == "trace_count" and MIN_TRACE_COUNT > value >= -INT32_MAX - 1:
        separator = ", got: " if grpc else ", got:"
        raise invalid_arg(
            f"Unable to parse '{name}'. Expecting value >= {MIN_TRACE_COUNT}{separator}{text}"
        )
    if not low <= value <= high:
        raise invalid_arg(
            f"Unable to parse '{name}', value is out of range [ {low}, {high} ], got: {text}"
        )
    return value


# -- the command line ---------------------------------------------------------------------

#: each deprecated ``--trace-*`` flag's setting of ``--trace-config``
DEPRECATED: Final = {
    "file": "--trace-config triton,file=<path>",
    "level": "--trace-config level=<OFF|TIMESTAMPS|TENSORS>",
    "rate": "--trace-config rate=<rate>",
    "count": "--trace-config count=<count>",
    "log_frequency": "--trace-config triton,log-frequency=<frequency>",
}


def from_arguments(args: argparse.Namespace) -> TraceConfig | None:
    """The trace settings of parsed flags (None when no trace flag is given); ValueError
    names a bad one. Each deprecated flag given logs a warning naming its replacement."""
    flags = TraceFlags(
        config=args.trace_config,
        file=args.trace_file,
        level=args.trace_level,
        rate=args.trace_rate,
        count=args.trace_count,
        log_frequency=args.trace_log_frequency,
    )
    for name, replacement in DEPRECATED.items():
        value = getattr(flags, name)
        if value is not None and value != []:
            flag = "--trace-" + name.replace("_", "-")
            logger.warning("'%s' has been deprecated: use '%s' instead", flag, replacement)
    if flags == TraceFlags():
        return None
    return parse_trace_flags(flags)
