"""The ``tritonserver`` flags beyond the core set, so that a Triton command line starts unchanged.

Each is parsed with Triton's syntax and default. Those with a meaning here are honoured (see
docs/compatibility.md); those without one are accepted and, when given, named in one INFO line
at start saying why they have no effect. A malformed value is refused, naming the flag.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from triton_core import host_policy
from triton_core.devices import gpu_count
from triton_core.logsettings import LOG_FORMATS
from triton_core.re2_patterns import compile_re2

logger = logging.getLogger(__name__)

#: ``--grpc-infer-response-compression-level``: Triton's levels
COMPRESSION_LEVELS: Final = ("none", "low", "medium", "high")

#: Triton's default plugin folders: skipped when absent
DEFAULT_BACKEND_DIRECTORY: Final = "/opt/tritonserver/backends"
DEFAULT_REPOAGENT_DIRECTORY: Final = "/opt/tritonserver/repoagents"
DEFAULT_CACHE_DIRECTORY: Final = "/opt/tritonserver/caches"

#: the flags that take a count, with the least each accepts
_COUNT_FLAGS: Final = {
    "--http-thread-count": 1,
    "--grpc-infer-allocation-pool-size": 0,
    "--buffer-manager-thread-count": 0,
    "--pinned-memory-pool-byte-size": 0,
}
#: Triton's bounds of --grpc-infer-thread-count
GRPC_INFER_THREADS: Final = (2, 128)
#: flags about GPUs: no effect here (the backends manage GPU memory themselves)
GPU_ONLY: Final = (
    "--cuda-memory-pool-byte-size",
    "--cuda-virtual-address-size",
    "--min-supported-compute-capability",
    "--model-load-gpu-limit",
    "--enable-peer-access",
)


def _bad(flag: str, detail: str) -> argparse.ArgumentTypeError:
    # argparse names the flag before the detail: "argument --flag: <detail>"
    return argparse.ArgumentTypeError(detail)


def _integer(flag: str, minimum: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise _bad(flag, f"Invalid option value. Got {text}") from None
        if minimum is not None and value < minimum:
            raise _bad(flag, f"must be at least {minimum}, got {text}")
        return value

    return parse


def _number(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _bad(flag, f"Invalid option value. Got {text}") from None
        if not value > 0 or value == float("inf"):
            raise _bad(flag, f"must be a finite number more than 0, got {text}")
        return value

    return parse


def _pair(flag: str, first: type, second: type) -> Callable[[str], tuple[Any, Any]]:
    """``<first>:<second>``, as Triton's ParsePairOption."""

    def parse(text: str) -> tuple[Any, Any]:
        left, sep, right = text.partition(":")
        try:
            if not sep:
                raise ValueError
            return first(left), second(right)
        except ValueError:
            raise _bad(
                flag,
                f"Cannot parse pair option due to incorrect number of inputs. {flag} argument "
                f"requires format <first>:<second>. Found: {text}",
            ) from None

    return parse


def verbose_level(text: str) -> int:
    """``--log-verbose``: a level of 0 or more; ``true``/``false`` are 1/0 (Triton's
    ParseIntBoolOption)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return int(lowered == "true")
    return _integer("--log-verbose", 0)(text)


def _config_name(text: str) -> str:
    # a file name inside the model's configs/ folder, never a path out of it
    if any(c.isspace() for c in text) or "/" in text or text in (".", ".."):
        raise _bad(
            "--model-config-name",
            f"must be a file name without spaces or '/' (configs/<name>.pbtxt), got '{text}'",
        )
    return text


def _grpc_infer_threads(text: str) -> int:
    value = _integer("--grpc-infer-thread-count")(text)
    low, high = GRPC_INFER_THREADS
    if not low <= value <= high:  # Triton's words (with its underscores)
        raise _bad(
            "--grpc-infer-thread-count",
            f"invalid argument for --grpc_infer_thread_count. Must be in the range {low} to "
            f"{high}.",
        )
    return value


def _response_pool_size(text: str) -> int:
    value = _integer("--grpc-max-response-pool-size")(text)
    if value <= 0:
        raise _bad(
            "--grpc-max-response-pool-size",
            "Error: --grpc-max-response-pool-size must be greater than 0.",
        )
    return value


def _host_policy(text: str) -> tuple[str, str, str]:
    name, sep, setting = text.partition(",")
    key, eq, value = setting.partition("=")
    if not sep or not eq or not name:
        raise _bad(
            "--host-policy",
            "expects <policy_name>,<setting>=<value> with setting numa-node or cpu-cores, "
            f"got '{text}'",
        )
    if key not in host_policy.SETTINGS:  # Triton's words
        raise _bad(
            "--host-policy",
            f"Unsupported host policy setting '{key}' is specified, supported settings are "
            "'numa-node', 'cpu-cores'",
        )
    what = f"--host-policy '{name}' {key}"
    try:  # the value's form now; whether the CPUs exist when the server starts
        if key == "cpu-cores":
            host_policy.cpu_list(value, what)
        elif not value.isdigit():
            raise ValueError(f"{what}: must be a node number, got '{value}'")
    except ValueError as exc:
        raise _bad("--host-policy", str(exc)) from None
    return name, key, value


def _pattern(flag: str) -> Callable[[str], re.Pattern[str]]:
    """A header pattern in RE2's syntax, case-insensitive unless it turns that off (Triton's
    ``(?i)`` prefix) and searched anywhere in the name (RE2::PartialMatch)."""

    def parse(text: str) -> re.Pattern[str]:
        try:
            return compile_re2(text, re.IGNORECASE)
        except ValueError as exc:
            raise _bad(flag, f"invalid regular expression '{text}': {exc}") from None

    return parse


def _choice(flag: str, choices: tuple[str, ...], lower: bool = False) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.lower() if lower else text
        if value not in choices:
            raise _bad(
                flag, f"invalid argument for {flag}: '{text}' (expected {', '.join(choices)})"
            )
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    """Add the flags of this module to ``serve``."""
    _add_logging(parser, parse_bool)
    _add_repository(parser, parse_bool)
    _add_frontends(parser, parse_bool)
    _add_devices(parser, parse_bool)


def _bool_flag(
    parser: argparse.ArgumentParser,
    parse_bool: Callable[[str], bool],
    flag: str,
    default: bool | None,
    help: str,
) -> None:
    parser.add_argument(
        flag, type=parse_bool, nargs="?", const=True, default=default, metavar="BOOL", help=help
    )


def _add_logging(parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    _bool_flag(parser, parse_bool, "--log-warning", True, "log warnings")
    _bool_flag(parser, parse_bool, "--log-error", True, "log errors")
    parser.add_argument(
        "--log-format",
        type=_choice("--log-format", LOG_FORMATS),
        default="default",
        metavar="FORMAT",
        help="default (Triton's 'I1201 21:51:19.123456 PID file:line] msg'), ISO8601, or json "
        "(one object per line)",
    )
    parser.add_argument(
        "--log-file",
        default="",
        metavar="PATH",
        help="append every log line here (default: console)",
    )


def _add_repository(parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    parser.add_argument(
        "--model-config-name",
        type=_config_name,
        default="",
        metavar="NAME",
        help="load <model>/configs/NAME.pbtxt when it exists, else config.pbtxt",
    )
    parser.add_argument(
        "--model-load-retry-count",
        type=_integer("--model-load-retry-count", 0),
        default=0,
        metavar="N",
        help="retry a model load that fails N more times",
    )
    _bool_flag(
        parser,
        parse_bool,
        "--model-namespacing",
        False,
        "models of one name may live in several repositories",
    )
    for flag, default, what in (
        ("--backend-directory", DEFAULT_BACKEND_DIRECTORY, "backends"),
        ("--repoagent-directory", DEFAULT_REPOAGENT_DIRECTORY, "repository agents"),
        ("--cache-directory", DEFAULT_CACHE_DIRECTORY, "response caches"),
    ):
        parser.add_argument(
            flag,
            default=None,
            metavar="DIR",
            help=f"import the Python modules and packages here as plugins ({what}; default "
            f"{default}); skipped when absent",
        )


def _add_frontends(parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    for kind in ("http", "grpc"):
        _bool_flag(
            parser,
            parse_bool,
            f"--reuse-{kind}-port",
            False,
            "listen with SO_REUSEPORT, so several servers share the port",
        )
        parser.add_argument(
            f"--{kind}-header-forward-pattern",
            type=_pattern(f"--{kind}-header-forward-pattern"),
            default=None,
            metavar="REGEX",
            help="pass request headers whose names match as request parameters",
        )
    parser.add_argument(
        "--grpc-infer-response-compression-level",
        type=_choice("--grpc-infer-response-compression-level", COMPRESSION_LEVELS, lower=True),
        default="none",
        help="gzip inference responses: none, low, medium or high",
    )
    parser.add_argument(
        "--metrics-interval-ms",
        type=_number("--metrics-interval-ms"),
        default=2000.0,
        metavar="MS",
        help="how often the gauges (CPU, memory, pending requests) refresh",
    )
    for flag, minimum in _COUNT_FLAGS.items():
        parser.add_argument(flag, type=_integer(flag, minimum), default=None, metavar="N")
    parser.add_argument(
        "--grpc-infer-thread-count", type=_grpc_infer_threads, default=None, metavar="N"
    )
    parser.add_argument(
        "--grpc-max-response-pool-size",
        type=_response_pool_size,
        default=None,
        metavar="N",
        help="a streamed request's responses produced but not yet written, at most: its "
        "decoupled model's sender waits while N are (default: no limit)",
    )
    parser.add_argument(
        "--host-policy", type=_host_policy, action="append", default=None, metavar="NAME,KEY=VALUE"
    )


def _add_devices(parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    for flag in ("--cuda-memory-pool-byte-size", "--cuda-virtual-address-size"):
        parser.add_argument(
            flag, type=_pair(flag, int, int), action="append", default=None, metavar="GPU:BYTES"
        )
    parser.add_argument(
        "--min-supported-compute-capability",
        type=_number("--min-supported-compute-capability"),
        default=None,
        metavar="CC",
    )
    parser.add_argument(
        "--model-load-gpu-limit",
        type=_pair("--model-load-gpu-limit", int, float),
        action="append",
        default=None,
        metavar="DEVICE:FRACTION",
    )
    _bool_flag(parser, parse_bool, "--enable-peer-access", None, "(default: true)")


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


#: the plugin folder flags with Triton's defaults
_DIRECTORY_FLAGS: Final = (
    ("--backend-directory", DEFAULT_BACKEND_DIRECTORY),
    ("--repoagent-directory", DEFAULT_REPOAGENT_DIRECTORY),
    ("--cache-directory", DEFAULT_CACHE_DIRECTORY),
)
#: the flags that name plugin folders (read before the rest, to find the plugins' flags)
PLUGIN_DIRECTORY_FLAGS: Final = tuple(flag for flag, _ in _DIRECTORY_FLAGS)


def plugin_directories(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """(flag, folder) of each plugin folder to import.

    An absent folder is skipped, as Triton starts without it (a typical Triton command line
    names ``/opt/tritonserver/backends``): one line says so when the flag names it. A path
    that exists but is not a folder is refused (ValueError naming the flag).
    """
    found = []
    for flag, default in _DIRECTORY_FLAGS:
        given = getattr(args, _dest(flag))
        folder = Path(given or default)
        if not folder.exists():
            if given is not None:
                logger.warning(
                    "%s: '%s' does not exist; plugins are found through their entry points",
                    flag,
                    folder,
                )
            continue
        if not folder.is_dir():
            raise ValueError(f"{flag}: '{folder}' is not a directory")
        if (flag, folder) not in found:
            found.append((flag, folder))
    return found


def log_flags_without_effect(args: argparse.Namespace) -> None:
    """One INFO line per GPU flag given, saying why it does nothing here."""
    gpus = gpu_count()
    for flag in GPU_ONLY:
        if getattr(args, _dest(flag)) is None:
            continue
        if gpus:
            logger.info("%s has no effect here: the backends manage GPU memory themselves", flag)
        else:
            logger.info("%s has no effect here: this machine has no GPU", flag)
