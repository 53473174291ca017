"""``triton-core``: ``serve`` a model repository, or list the installed ``plugins``.

The flags of ``serve`` and where their values go are one table, :mod:`triton_core.flags`;
this module parses the command line and runs what it asks for.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from triton_core import __version__
from triton_core.flags.build import (
    ServeOptions,
    add_serve_arguments,
    early_flags,
    log_settings,
    serve_options,
)
from triton_core.flags.plugin_folders import plugin_directories
from triton_core.frontends.base import Frontend, FrontendSettings
from triton_core.frontends.runner import (
    build_frontends,
    check_frontends,
    run_on_event_loop,
    serve,
)
from triton_core.observability.logsettings import LOG, HeldRecords, plugin_logger_names
from triton_core.plugins.manager import PluginManager, create_plugin_manager
from triton_core.server.core import Server
from triton_core.tensors import allocator

logger = logging.getLogger("triton_core")


def build_parser(
    plugins: PluginManager | None = None, environ: Mapping[str, str] = os.environ
) -> argparse.ArgumentParser:
    """The command line; ``plugins`` add their ``serve`` flags to it. The flags of ``serve``
    are those of the table (:mod:`triton_core.flags`); ``environ`` sets some defaults."""
    parser = argparse.ArgumentParser(
        prog="triton-core", description="An inference server that speaks Triton's protocol."
    )
    parser.add_argument("--version", action="version", version=f"triton-core {__version__}")
    parser.add_argument(
        "--disable-plugin",
        action="append",
        default=[],
        metavar="NAME",
        help="do not load this plugin (repeatable; also TRITON_CORE_DISABLE_PLUGINS=a,b)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser("serve", help="serve a model repository over HTTP and gRPC")
    add_serve_arguments(serve_cmd, environ)
    if plugins is not None:
        plugins.add_serve_arguments(serve_cmd.add_argument_group("flags of plugins"))
    commands.add_parser("plugins", help="list the installed plugins and what they provide")
    return parser


def _run_serve(
    args: argparse.Namespace, plugins: PluginManager | ValueError, held: HeldRecords
) -> int:
    log = log_settings(args)
    try:
        LOG.configure(log)
    except OSError as exc:
        print(f"error: --log-file: cannot open '{log.file}': {exc}", file=sys.stderr)
        return 2
    held.replay()
    if isinstance(plugins, ValueError):
        logger.error("%s", plugins)
        return 2
    LOG.scope(plugin_logger_names(plugins.pm.get_plugins()))
    try:
        options = serve_options(args)
        frontend_list = build_frontends(plugins, FrontendSettings(options.frontends, args))
        check_frontends(frontend_list)
    except ValueError as exc:
        logger.error("%s", exc)
        return 2
    allocator.keep_freed_memory(options.run.memory_trim_threshold)
    workers = _worker_count(options.run.workers)
    if workers is None:
        return 2
    # Every request crosses from the event loop to an instance thread and back, each
    # side taking the GIL. With CPython's 5 ms switch interval a thread back from a native
    # call (a model's run, a socket write) can wait that long behind a busy loop; 0.5 ms
    # keeps the hand-offs short (bench/frontend_bar.py: +2-10% at c=4).
    sys.setswitchinterval(SWITCH_INTERVAL_SECS)
    if workers > 1:
        return _run_workers(workers, options, plugins, frontend_list)
    server = Server(options.server, plugins)
    try:
        return run_on_event_loop(serve(server, options.frontends, frontend_list))
    except (OSError, ValueError) as exc:
        logger.error("%s", exc)
        return 1


#: the serving process's GIL switch interval (see ``_run_serve``)
SWITCH_INTERVAL_SECS = 0.0005


def _worker_count(text: str) -> int | None:
    """``--workers``: the count, or None (and the reason logged) when it is not one."""
    if text == "1":
        return 1  # the single process: gunicorn is not even imported
    from triton_core.workers.supervisor import worker_count

    try:
        return worker_count(text)
    except ValueError as exc:
        logger.error("%s", exc)
        return None


def _run_workers(
    workers: int, options: ServeOptions, plugins: PluginManager, frontend_list: list[Frontend]
) -> int:
    """``--workers N``: N servers on the same ports, under gunicorn."""
    from triton_core.workers.server import WorkerServer, WorkerSettings
    from triton_core.workers.supervisor import WorkerPlan, run_workers

    if options.server.shared_memory.allow_client_shm:
        # each worker holds its own regions: a request could reach a worker that does
        # not know the region its client registered through another
        logger.error(
            "--allow-client-shm=true cannot be used with --workers %d: shared-memory "
            "regions are registered with one worker process",
            workers,
        )
        return 2
    server_options = options.server

    def build_server(settings: WorkerSettings) -> WorkerServer:
        return WorkerServer(server_options, plugins, settings)

    level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    plan = WorkerPlan(build_server, options.frontends, frontend_list, workers, log_level=level)
    return run_workers(plan)


def _run_plugins(plugins: PluginManager | ValueError, held: HeldRecords) -> int:
    held.replay()
    if isinstance(plugins, ValueError):
        print(f"error: {plugins}", file=sys.stderr)
        return 2
    rows = [("NAME", "DISTRIBUTION", "VERSION", "PROVIDES")]
    for info in plugins.describe():
        provides = f"BROKEN: {info.broken}" if info.broken else ", ".join(info.provides) or "-"
        rows.append((info.name, info.distribution, info.version, provides))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False))
            + "  "
            + row[3]
        )
    blocked = plugins.blocked()
    if blocked:
        print(f"disabled: {', '.join(blocked)}")
    return 0


def _discover_plugins(argv: list[str]) -> PluginManager | ValueError:
    """The plugins, found before the command line is parsed (they add flags to it): only
    ``--disable-plugin`` and the plugin folder flags are read here."""
    early = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    early.add_argument("command", nargs="?")
    early.add_argument("--disable-plugin", action="append", default=[])
    for flag in early_flags():
        early.add_argument(*flag.names, dest=flag.dest, default=None)
    known, _ = early.parse_known_args(argv)
    try:
        folders = plugin_directories(known) if known.command == "serve" else []
        return create_plugin_manager(known.disable_plugin, directories=folders)
    except ValueError as exc:
        return exc


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    with HeldRecords() as held:
        plugins = _discover_plugins(argv)
    parser = build_parser(plugins if isinstance(plugins, PluginManager) else None)
    try:
        args = parser.parse_args(argv)
    except SystemExit:
        held.replay()  # a plugin that failed to import says why its flags are unknown
        raise
    if args.command == "plugins":
        return _run_plugins(plugins, held)
    return _run_serve(args, plugins, held)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
