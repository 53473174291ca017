"""The values of flags, in ``tritonserver``'s syntax: each parser returns the value or raises
``argparse.ArgumentTypeError`` with the reason (argparse names the flag before it:
``argument --flag: <reason>``)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import Any

from triton_core.frontends.re2_patterns import compile_re2
from triton_core.scheduling.rate_limiter import parse_resource
from triton_core.server import host_policy

#: a flag's value parser, as argparse's ``type``
Parser = Callable[[str], Any]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def backend_config(text: str) -> tuple[str, str, str]:
    """``<backend>,<key>=<value>`` or a global ``<key>=<value>``."""
    backend, _, setting = text.rpartition(",")
    key, sep, value = setting.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(
            f"--backend-config expects <backend>,<key>=<value> or <key>=<value>, got '{text}'"
        )
    return backend, key, value


def positive(
    kind: type[int] | type[float], maximum: float | None = None
) -> Callable[[str], int | float]:
    """A number > 0 (and <= ``maximum``), refused otherwise."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
        if not math.isfinite(value) or value <= 0 or (maximum is not None and value > maximum):
            bound = f" and at most {maximum}" if maximum is not None else ""
            raise argparse.ArgumentTypeError(
                f"must be a finite number more than 0{bound}, got '{text}'"
            )
        return value

    return parse


def rate_limit_resource(text: str) -> tuple[str, int, int]:
    try:
        return parse_resource(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _int(text: str, refusal: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(refusal) from None


def integer(minimum: int | None = None) -> Callable[[str], int]:
    """An integer (at least ``minimum``), with Triton's words for one that is not."""

    def parse(text: str) -> int:
        value = _int(text, f"Invalid option value. Got {text}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {text}")
        return value

    return parse


def finite_positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid option value. Got {text}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number more than 0, got {text}")
    return value


def pair(flag: str, first: type, second: type) -> Callable[[str], tuple[Any, Any]]:
    """``<first>:<second>``, as Triton's ParsePairOption."""

    def parse(text: str) -> tuple[Any, Any]:
        left, sep, right = text.partition(":")
        try:
            if not sep:
                raise ValueError
            return first(left), second(right)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"Cannot parse pair option due to incorrect number of inputs. {flag} argument "
                f"requires format <first>:<second>. Found: {text}"
            ) from None

    return parse


def verbose_level(text: str) -> int:
    """``--log-verbose``: a level of 0 or more; ``true``/``false`` are 1/0 (Triton's
    ParseIntBoolOption)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    return integer(0)(text)


def config_name(text: str) -> str:
    # a file name inside the model's configs/ folder, never a path out of it
    if any(c.isspace() for c in text) or "/" in text or text in (".", ".."):
        raise argparse.ArgumentTypeError(
            f"must be a file name without spaces or '/' (configs/<name>.pbtxt), got '{text}'"
        )
    return text


#: Triton's bounds of --grpc-infer-thread-count
GRPC_INFER_THREADS = (2, 128)


def grpc_infer_threads(text: str) -> int:
    value = integer()(text)
    low, high = GRPC_INFER_THREADS
    if not low <= value <= high:  # Triton's words (with its underscores)
        raise argparse.ArgumentTypeError(
            f"invalid argument for --grpc_infer_thread_count. Must be in the range {low} to {high}."
        )
    return value


def response_pool_size(text: str) -> int:
    value = integer()(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(
            "Error: --grpc-max-response-pool-size must be greater than 0."
        )
    return value


def host_policy_setting(text: str) -> tuple[str, str, str]:
    name, sep, setting = text.partition(",")
    key, eq, value = setting.partition("=")
    if not sep or not eq or not name:
        raise argparse.ArgumentTypeError(
            "expects <policy_name>,<setting>=<value> with setting numa-node or cpu-cores, "
            f"got '{text}'"
        )
    if key not in host_policy.SETTINGS:  # Triton's words
        raise argparse.ArgumentTypeError(
            f"Unsupported host policy setting '{key}' is specified, supported settings are "
            "'numa-node', 'cpu-cores'"
        )
    what = f"--host-policy '{name}' {key}"
    try:  # the value's form now; whether the CPUs exist when the server starts
        if key == "cpu-cores":
            host_policy.cpu_list(value, what)
        elif not value.isdigit():
            raise ValueError(f"{what}: must be a node number, got '{value}'")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name, key, value


def header_pattern(text: str) -> re.Pattern[str]:
    """A header pattern in RE2's syntax, case-insensitive unless it turns that off (Triton's
    ``(?i)`` prefix) and searched anywhere in the name (RE2::PartialMatch)."""
    try:
        return compile_re2(text, re.IGNORECASE)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid regular expression '{text}': {exc}") from None


def choice(flag: str, choices: tuple[str, ...], lower: bool = False) -> Callable[[str], str]:
    """One of ``choices`` (compared in lower case when ``lower``), with the flag's name."""

    def parse(text: str) -> str:
        value = text.lower() if lower else text
        if value not in choices:
            raise argparse.ArgumentTypeError(
                f"invalid argument for {flag}: '{text}' (expected {', '.join(choices)})"
            )
        return value

    return parse


def parse_port(text: str) -> int:
    value = _int(text, f"expected a port number, got '{text}'")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got '{text}'")
    return value


def port_range(text: str) -> tuple[int, int]:
    """``<integer>-<integer>``, as tritonserver parses ``--sagemaker-safe-port-range``."""
    low, sep, high = text.partition("-")
    try:
        if not sep:
            raise ValueError
        bounds = int(low), int(high)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sagemaker-safe-port-range expects <integer>-<integer>, got '{text}'"
        ) from None
    if bounds[0] > bounds[1]:
        raise argparse.ArgumentTypeError(
            f"--sagemaker-safe-port-range: the first port must not exceed the second, got '{text}'"
        )
    return bounds


def thread_count(text: str) -> int:
    value = _int(text, f"expected an integer, got '{text}'")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got '{text}'")
    return value
