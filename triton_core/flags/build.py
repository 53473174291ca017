"""What the table makes: the flags of ``serve`` on an argparse parser, and the options that
the parsed flags fill (:class:`ServeOptions`)."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from triton_core.flags.model import (
    GPU_ONLY,
    NOT_SUPPORTED,
    OWNERS,
    READ_EARLY,
    Converter,
    Flag,
    FromEnv,
)
from triton_core.flags.parsers import parse_bool
from triton_core.flags.table import FLAGS
from triton_core.frontends.options import FrontendOptions
from triton_core.observability.logsettings import LogSettings
from triton_core.server.core import ServerOptions
from triton_core.tensors import allocator
from triton_core.tensors.devices import gpu_count

logger = logging.getLogger("triton_core")


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How ``serve`` runs the server, beyond the server and its frontends."""

    #: ``--workers``: "1", a count, or "auto"
    workers: str = "1"
    #: ``--memory-trim-threshold``: freed bytes glibc keeps for reuse
    memory_trim_threshold: int = allocator.DEFAULT_TRIM_THRESHOLD


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """Everything the flags of ``serve`` set."""

    log: LogSettings
    server: ServerOptions
    frontends: FrontendOptions
    run: RunOptions


_OPTION_TYPES: dict[str, type] = {
    "log": LogSettings,
    "server": ServerOptions,
    "frontends": FrontendOptions,
    "run": RunOptions,
}


def serve_flags() -> Iterator[Flag]:
    """The rows that ``serve`` parses: all but Triton's flags that are not supported."""
    for flag in FLAGS:
        if flag.triton is None or flag.triton.status != NOT_SUPPORTED:
            yield flag


def early_flags() -> list[Flag]:
    """The flags read before the command line is parsed (the plugin folders)."""
    return [flag for flag in serve_flags() if flag.into is READ_EARLY]


def add_serve_arguments(
    parser: argparse.ArgumentParser, environ: Mapping[str, str] = os.environ
) -> None:
    """Add every flag of the table to ``parser``, one argument group per section; the
    defaults that the environment sets are read from ``environ``."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for flag in serve_flags():
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(flag.group)
        try:
            options = _argparse_options(flag, environ)
        except ValueError as exc:  # a variable with a value the flag may not have
            parser.error(str(exc))
        groups[flag.group].add_argument(*flag.names, **options)


def _argparse_options(flag: Flag, environ: Mapping[str, str]) -> dict[str, Any]:
    default = flag.default.read(environ) if isinstance(flag.default, FromEnv) else flag.default
    required = flag.required
    options: dict[str, Any] = {
        "dest": flag.dest,
        "help": flag.help,
        "metavar": flag.metavar,
        "choices": flag.choices,
        "required": required.read(environ) if isinstance(required, FromEnv) else required,
        "type": flag.type,
        "default": default,
    }
    if flag.form == "bool":
        options.update(type=parse_bool, nargs="?", const=True, metavar="BOOL")
    elif flag.form == "repeat":
        # a fresh list each parse: argparse appends to the default's copy
        options.update(action="append", default=None if default is None else list(default))
    return options


def log_settings(args: argparse.Namespace) -> LogSettings:
    """The ``--log-*`` flags, read first: the logs of everything after go by them."""
    return LogSettings(**_fields(args, "log"))


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The options the parsed flags set; raises ValueError naming a flag that cannot work.

    Each flag given that has no effect here says so in one INFO line.
    """
    _say_without_effect(args)
    fields = {owner: _fields(args, owner) for owner in OWNERS}
    for converter in converters():
        for path, value in converter.build(args).items():
            owner, _, field = path.partition(".")
            fields[owner][field] = value
    return ServeOptions(**{owner: _OPTION_TYPES[owner](**fields[owner]) for owner in OWNERS})


def converters() -> list[Converter]:
    """The converters the table names, each once, in the table's order."""
    named = (flag.into for flag in serve_flags() if isinstance(flag.into, Converter))
    return list(dict.fromkeys(named))


def _fields(args: argparse.Namespace, owner: str) -> dict[str, Any]:
    """The fields of ``owner`` that flags set directly."""
    fields = {}
    for flag in serve_flags():
        if flag.field is not None and flag.field[0] == owner:
            fields[flag.field[1]] = getattr(args, flag.dest)
    return fields


def _say_without_effect(args: argparse.Namespace) -> None:
    given = [
        flag.name
        for flag in serve_flags()
        if flag.into is GPU_ONLY and getattr(args, flag.dest) is not None
    ]
    if not given:
        return
    gpus = gpu_count()
    reason = "the backends manage GPU memory themselves" if gpus else "this machine has no GPU"
    for name in given:
        logger.info("%s has no effect here: %s", name, reason)
