"""``triton-core``: ``serve`` a model repository, or list the installed ``plugins``.

Flag names and defaults follow ``tritonserver`` where it has them; boolean flags accept
Triton's ``--flag=true|false`` form as well as a bare ``--flag``.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from triton_core import __version__, allocator
from triton_core.frontends import cloud
from triton_core.frontends.base import Frontend, FrontendSettings
from triton_core.frontends.grpc import limits as grpc_limits
from triton_core.frontends.restricted import API_GROUPS, GRPC_HEADER_PREFIX, parse_restrictions
from triton_core.frontends.runner import (
    FrontendOptions,
    build_frontends,
    check_frontends,
    run_on_event_loop,
    serve,
)
from triton_core.frontends.tls import TlsOptions
from triton_core.logsettings import LOG, HeldRecords, LogSettings, plugin_logger_names
from triton_core.metrics import MetricsOptions
from triton_core.plugins import PluginManager, create_plugin_manager
from triton_core.scheduling import inline
from triton_core.scheduling.rate_limiter import MODES as RATE_LIMIT_MODES
from triton_core.scheduling.rate_limiter import parse_resource
from triton_core.server import Server, ServerOptions
from triton_core.shared_memory import registry as shm_registry
from triton_core.statistics import DEFAULT_LATENCY_BUCKETS_MS
from triton_core.tracing import settings as trace_settings
from triton_core.triton_flags import (
    PLUGIN_DIRECTORY_FLAGS,
    log_flags_without_effect,
    plugin_directories,
    verbose_level,
)
from triton_core.triton_flags import add_arguments as add_triton_flags

if TYPE_CHECKING:
    from triton_core.frontends.http.codec import JsonLimits
    from triton_core.frontends.http.protocol import HttpLimits

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got '{text}'")


def _add_bool(parser: argparse.ArgumentParser, flag: str, default: bool | None, help: str) -> None:
    parser.add_argument(
        flag, type=_bool, nargs="?", const=True, default=default, metavar="BOOL", help=help
    )


def _backend_config(text: str) -> tuple[str, str, str]:
    """``<backend>,<key>=<value>`` or a global ``<key>=<value>``."""
    backend, _, setting = text.rpartition(",")
    key, sep, value = setting.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(
            f"--backend-config expects <backend>,<key>=<value> or <key>=<value>, got '{text}'"
        )
    return backend, key, value


def _positive(
    kind: type[int] | type[float], maximum: float | None = None
) -> Callable[[str], int | float]:
    """An argparse type: a number > 0 (and <= ``maximum``), refused otherwise."""

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


def _add_http_limits(parser: argparse.ArgumentParser) -> None:
    """What one HTTP client may make the server hold or wait for (docs/security.md)."""
    seconds, count = _positive(float), _positive(int)
    for flag, kind, default, help in (
        ("--http-header-timeout-secs", seconds, 10.0, "408 when a request's headers take longer"),
        ("--http-body-timeout-secs", seconds, 30.0, "408 when a body owed stalls this long"),
        ("--http-keepalive-timeout-secs", seconds, 75.0, "close connections idle this long"),
        ("--http-max-header-size", count, 16384, "bytes of URL and headers (414/431 beyond)"),
        ("--http-max-header-count", count, 100, "headers in one request (431 beyond)"),
        ("--http-max-connections", count, 1024, "open connections (503 and close beyond)"),
        (
            "--http-max-buffered-input",
            count,
            1 << 30,
            "bytes of request bodies held at once, over all connections (503 beyond)",
        ),
        ("--http-max-json-elements", count, 1 << 18, "JSON values, BYTES elements (400 beyond)"),
        # orjson refuses more than 1024 levels; the decoder's recursion stays far below that
        ("--http-max-json-depth", _positive(int, 256), 32, "JSON nesting depth (400 beyond)"),
    ):
        parser.add_argument(flag, type=kind, default=default, help=help)


def _http_limits(args: argparse.Namespace) -> tuple[HttpLimits, JsonLimits]:
    """The HTTP limit flags as the frontend's limits (imported here: only ``serve`` needs them)."""
    from triton_core.frontends.http.codec import JsonLimits
    from triton_core.frontends.http.protocol import HttpLimits

    limits = HttpLimits(
        header_timeout=args.http_header_timeout_secs,
        body_timeout=args.http_body_timeout_secs,
        max_header_size=args.http_max_header_size,
        max_header_count=args.http_max_header_count,
        max_connections=args.http_max_connections,
        max_body_size=args.http_max_input_size,
        max_buffered_input=args.http_max_buffered_input,
    )
    return limits, JsonLimits(args.http_max_json_elements, args.http_max_json_depth)


def build_parser(plugins: PluginManager | None = None) -> argparse.ArgumentParser:
    """The command line; ``plugins`` add their ``serve`` flags to it."""
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
    serve_cmd.add_argument(
        "--model-repository",
        "--model-store",
        action="append",
        required=True,
        dest="model_repository",
        metavar="PATH",
        help="model repository: a folder, or s3://, gs://, as:// (repeatable)",
    )
    serve_cmd.add_argument(
        "--model-control-mode",
        type=str.lower,  # Triton takes any case: Triton's QA passes EXPLICIT
        choices=["none", "poll", "explicit"],
        default="none",
        help="none: load all at start; poll: follow repository changes; explicit: load/unload API",
    )
    serve_cmd.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="model to load at start in explicit mode (repeatable; '*' loads all)",
    )
    serve_cmd.add_argument("--repository-poll-secs", type=float, default=15.0)
    serve_cmd.add_argument("--id", default="triton", help="server name in server metadata")
    _add_bool(serve_cmd, "--strict-readiness", True, "ready only when every model is ready")
    _add_bool(serve_cmd, "--exit-on-error", True, "exit when a model fails to load at start-up")
    _add_bool(
        serve_cmd,
        "--disable-auto-complete-config",
        False,
        "do not complete configs from the models themselves",
    )
    _add_bool(serve_cmd, "--strict-model-config", False, "deprecated alias of the above")
    serve_cmd.add_argument(
        "--backend-config",
        action="append",
        default=[],
        type=_backend_config,
        metavar="BACKEND,KEY=VALUE",
        help="a backend setting (repeatable); KEY=VALUE alone applies to every backend",
    )
    serve_cmd.add_argument(
        "--cache-config",
        action="append",
        default=[],
        type=_backend_config,
        metavar="CACHE,KEY=VALUE",
        help="response cache setting, e.g. local,size=1048576 (repeatable)",
    )
    serve_cmd.add_argument(
        "--response-cache-byte-size",
        type=int,
        default=None,
        help="deprecated: same as --cache-config local,size=BYTES",
    )
    serve_cmd.add_argument("--model-load-thread-count", type=int, default=4)
    _add_rate_limit_flags(serve_cmd)
    serve_cmd.add_argument("--exit-timeout-secs", type=float, default=30.0)
    _add_bool(
        serve_cmd,
        "--allow-client-shm",
        False,
        "let clients register shared-memory regions and use them in requests",
    )
    serve_cmd.add_argument(
        "--shm-max-regions",
        type=int,
        default=shm_registry.DEFAULT_MAX_REGIONS,
        help="most shared-memory regions registered at once",
    )
    serve_cmd.add_argument(
        "--shm-max-total-byte-size",
        type=int,
        default=shm_registry.DEFAULT_MAX_TOTAL_BYTE_SIZE,
        help="most bytes of all registered shared-memory regions together",
    )
    serve_cmd.add_argument(
        "--workers",
        default="1",
        metavar="N|auto",
        help="server processes sharing the ports, under gunicorn (auto: one per CPU; "
        "1: this process alone); see docs/scale-out.md",
    )
    serve_cmd.add_argument(
        "--memory-trim-threshold",
        type=int,
        default=allocator.DEFAULT_TRIM_THRESHOLD,
        metavar="BYTES",
        help="freed memory kept for reuse rather than returned to the system, so that large "
        "tensors do not fault in fresh pages each request (glibc; 0: its default)",
    )
    serve_cmd.add_argument(
        "--inline-execution-budget-us",
        type=int,
        default=inline.DEFAULT_BUDGET_US,
        metavar="MICROSECONDS",
        help="a small batch of a model whose recent executions each took at most this long "
        "runs on the event loop when its instances are idle, saving two thread hand-offs "
        "(backends that allow it: onnxruntime on CPU); 0: always on instance threads",
    )
    _add_bool(serve_cmd, "--allow-http", True, "serve HTTP/REST")
    serve_cmd.add_argument("--http-address", default="0.0.0.0")
    serve_cmd.add_argument("--http-port", type=int, default=8000)
    serve_cmd.add_argument("--http-max-input-size", type=int, default=1 << 26)
    _add_http_limits(serve_cmd)
    _add_bool(serve_cmd, "--allow-grpc", True, "serve gRPC")
    serve_cmd.add_argument("--grpc-address", default="0.0.0.0")
    serve_cmd.add_argument("--grpc-port", type=int, default=8001)
    serve_cmd.add_argument(
        "--grpc-transport",
        choices=("http2", "grpcio"),
        default="http2",
        help="http2: the built-in HTTP/2 transport (faster); grpcio: grpc.aio",
    )
    _add_tls_flags(serve_cmd, "http", "HTTP")
    _add_tls_flags(serve_cmd, "grpc", "gRPC")
    _add_restriction_flags(serve_cmd)
    grpc_limits.add_arguments(serve_cmd, _bool)
    _add_bool(serve_cmd, "--allow-metrics", True, "serve Prometheus metrics")
    serve_cmd.add_argument("--metrics-address", default=None, help="default: --http-address")
    serve_cmd.add_argument("--metrics-port", type=int, default=8002)
    serve_cmd.add_argument(
        "--metrics-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="counter_latencies=<bool> (true), histogram_latencies=<bool> (false), "
        "summary_latencies=<bool> (false), summary_quantiles=<q>:<error>,...",
    )
    _add_bool(serve_cmd, "--allow-cpu-metrics", True, "report CPU utilisation and memory")
    _add_bool(serve_cmd, "--allow-gpu-metrics", True, "report GPU metrics through NVML")
    serve_cmd.add_argument(
        "--log-verbose",
        type=verbose_level,
        default=0,
        metavar="LEVEL",
        help="verbose logging when > 0 (true/false stand for 1/0, as in Triton)",
    )
    _add_bool(serve_cmd, "--log-info", True, "log informational messages")
    cloud.add_arguments(serve_cmd, _bool)
    add_triton_flags(serve_cmd, _bool)
    serve_cmd.add_argument(
        "--ports-file",
        default=None,
        metavar="PATH",
        help="once every endpoint listens, write their ports to PATH as JSON "
        '({"http": 8000, "grpc": 8001, "metrics": 8002}); with port 0 the system picks them',
    )

    trace_settings.add_arguments(serve_cmd)
    if plugins is not None:
        plugins.add_serve_arguments(serve_cmd.add_argument_group("flags of plugins"))

    commands.add_parser("plugins", help="list the installed plugins and what they provide")
    return parser


def _rate_limit_resource(text: str) -> tuple[str, int, int]:
    try:
        return parse_resource(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_rate_limit_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rate-limit",
        type=str.lower,  # any case, as Triton
        choices=RATE_LIMIT_MODES,
        default="off",
        help="execution_count: an instance runs a batch only while it holds the resources of "
        "its instance group's rate_limiter; off (default): instances run whenever free",
    )
    parser.add_argument(
        "--rate-limit-resource",
        type=_rate_limit_resource,
        action="append",
        default=[],
        metavar="NAME:COUNT[:DEVICE]",
        help="how many of a rate-limiter resource exist (per device, or on DEVICE); without "
        "it, the largest count any instance asks for (repeatable)",
    )


def _add_tls_flags(parser: argparse.ArgumentParser, prefix: str, name: str) -> None:
    """``--<prefix>-use-ssl`` and the rest, as tritonserver's ``--grpc-use-ssl`` family."""
    _add_bool(parser, f"--{prefix}-use-ssl", False, f"serve {name} over TLS (1.2 or newer)")
    _add_bool(
        parser,
        f"--{prefix}-use-ssl-mutual",
        False,
        f"serve {name} over TLS and require client certificates (implies --{prefix}-use-ssl)",
    )
    parser.add_argument(f"--{prefix}-server-cert", metavar="PEM", help="server certificate")
    parser.add_argument(f"--{prefix}-server-key", metavar="PEM", help="server private key")
    parser.add_argument(
        f"--{prefix}-root-cert",
        metavar="PEM",
        help=f"CA that signs client certificates (with --{prefix}-use-ssl-mutual)",
    )
    parser.add_argument(
        f"--{prefix}-ssl-handshake-timeout-secs",
        type=float,
        default=None,
        metavar="SECONDS",
        help="close a connection whose TLS handshake takes longer (default 10)",
    )


def _add_restriction_flags(parser: argparse.ArgumentParser) -> None:
    groups = ", ".join(API_GROUPS)
    parser.add_argument(
        "--http-restricted-api",
        action="append",
        default=[],
        metavar="API[,API...]:KEY=VALUE",
        help=f"answer these APIs only with header KEY: VALUE (repeatable; APIs: {groups})",
    )
    parser.add_argument(
        "--grpc-restricted-protocol",
        action="append",
        default=[],
        metavar="API[,API...]:KEY=VALUE",
        help=f"answer these RPCs only with metadata triton-grpc-protocol-KEY: VALUE "
        f"(repeatable; APIs: {groups})",
    )


def _tls_options(args: argparse.Namespace, prefix: str) -> TlsOptions:
    return TlsOptions(
        flag_prefix=f"--{prefix}",
        use_ssl=getattr(args, f"{prefix}_use_ssl"),
        use_ssl_mutual=getattr(args, f"{prefix}_use_ssl_mutual"),
        server_cert=getattr(args, f"{prefix}_server_cert"),
        server_key=getattr(args, f"{prefix}_server_key"),
        root_cert=getattr(args, f"{prefix}_root_cert"),
        handshake_timeout=getattr(args, f"{prefix}_ssl_handshake_timeout_secs"),
    )


def _log_settings(args: argparse.Namespace) -> LogSettings:
    return LogSettings(
        file=args.log_file,
        info=args.log_info,
        warning=args.log_warning,
        error=args.log_error,
        verbose=args.log_verbose,
        format=args.log_format,
    )


def _run_serve(
    args: argparse.Namespace, plugins: PluginManager | ValueError, held: HeldRecords
) -> int:
    try:
        LOG.configure(_log_settings(args))
    except OSError as exc:
        print(f"error: --log-file: cannot open '{args.log_file}': {exc}", file=sys.stderr)
        return 2
    held.replay()
    if isinstance(plugins, ValueError):
        logging.getLogger("triton_core").error("%s", plugins)
        return 2
    log_flags_without_effect(args)
    if args.inline_execution_budget_us < 0:
        logging.getLogger("triton_core").error("--inline-execution-budget-us must not be negative")
        return 2
    if args.memory_trim_threshold < 0:
        logging.getLogger("triton_core").error("--memory-trim-threshold must not be negative")
        return 2
    allocator.keep_freed_memory(args.memory_trim_threshold)
    backend_options: dict[str, dict[str, str]] = {}
    for backend, key, value in args.backend_config:
        backend_options.setdefault(backend, {})[key] = value
    LOG.scope(plugin_logger_names(plugins.pm.get_plugins()))
    try:
        metrics = MetricsOptions.parse(
            args.metrics_config, args.allow_cpu_metrics, args.metrics_interval_ms
        )
        metrics.allow_gpu_metrics = args.allow_gpu_metrics
        if args.pinned_memory_pool_byte_size is not None:
            metrics.pinned_memory_pool_bytes = args.pinned_memory_pool_byte_size
        http_restrictions = parse_restrictions(args.http_restricted_api, "--http-restricted-api")
        grpc_restrictions = parse_restrictions(
            args.grpc_restricted_protocol, "--grpc-restricted-protocol", GRPC_HEADER_PREFIX
        )
        limits = grpc_limits.from_arguments(args)
        shared_memory = shm_registry.SharedMemoryOptions(
            args.allow_client_shm, args.shm_max_regions, args.shm_max_total_byte_size
        )
        if args.grpc_transport == "grpcio":
            grpc_limits.grpcio_options(limits)  # refuses what grpcio cannot honour
            for flag in ("--grpc-infer-thread-count", "--grpc-infer-allocation-pool-size"):
                if getattr(args, flag[2:].replace("-", "_")) is not None:
                    raise ValueError(f"{flag} applies to --grpc-transport http2 only")
        repositories = cloud.model_repositories(args.model_repository)
        sagemaker, vertex_ai = cloud.options_from(args)
        trace = trace_settings.from_arguments(args)
    except ValueError as exc:
        logging.getLogger("triton_core").error("%s", exc)
        return 2
    cache = _cache_config(args.cache_config, args.response_cache_byte_size)
    if isinstance(cache, str):
        logging.getLogger("triton_core").error("%s", cache)
        return 2
    options = ServerOptions(
        model_repositories=repositories,
        id=args.id,
        strict_readiness=args.strict_readiness,
        exit_on_error=args.exit_on_error,
        auto_complete_config=not (args.disable_auto_complete_config or args.strict_model_config),
        backend_options=backend_options,
        model_load_thread_count=args.model_load_thread_count,
        latency_buckets_ms=DEFAULT_LATENCY_BUCKETS_MS if metrics.histogram_latencies else None,
        latency_summaries=metrics.summary_latencies,
        cache=cache,
        model_control_mode=args.model_control_mode,
        load_models=args.load_model,
        repository_poll_secs=args.repository_poll_secs,
        trace=trace,
        shared_memory=shared_memory,
        model_config_name=args.model_config_name,
        model_load_retry_count=args.model_load_retry_count,
        model_namespacing=args.model_namespacing,
        rate_limit=args.rate_limit,
        rate_limit_resources=args.rate_limit_resource,
        host_policies=args.host_policy or [],
        buffer_manager_thread_count=args.buffer_manager_thread_count or 0,
        inline_execution_budget_us=args.inline_execution_budget_us,
    )
    if args.rate_limit_resource and args.rate_limit == "off":
        logging.getLogger("triton_core").warning(
            "--rate-limit-resource has no effect: --rate-limit is off"
        )
    http_limits, json_limits = _http_limits(args)
    frontends = FrontendOptions(
        allow_http=args.allow_http,
        http_address=args.http_address,
        http_port=args.http_port,
        http_limits=http_limits,
        http_json_limits=json_limits,
        http_keepalive_timeout_secs=args.http_keepalive_timeout_secs,
        allow_grpc=args.allow_grpc,
        grpc_address=args.grpc_address,
        grpc_port=args.grpc_port,
        grpc_transport=args.grpc_transport,
        grpc_limits=limits,
        allow_metrics=args.allow_metrics,
        metrics_address=args.metrics_address,
        metrics_port=args.metrics_port,
        metrics=metrics,
        exit_timeout_secs=args.exit_timeout_secs,
        http_tls=_tls_options(args, "http"),
        grpc_tls=_tls_options(args, "grpc"),
        http_restrictions=http_restrictions,
        grpc_restrictions=grpc_restrictions,
        ports_file=args.ports_file,
        sagemaker=sagemaker,
        vertex_ai=vertex_ai,
        reuse_http_port=args.reuse_http_port,
        reuse_grpc_port=args.reuse_grpc_port,
        grpc_compression_level=args.grpc_infer_response_compression_level,
        http_header_forward_pattern=args.http_header_forward_pattern,
        grpc_header_forward_pattern=args.grpc_header_forward_pattern,
        http_thread_count=args.http_thread_count,
        grpc_infer_thread_count=args.grpc_infer_thread_count,
        grpc_allocation_pool_size=args.grpc_infer_allocation_pool_size,
    )
    try:
        frontend_list = build_frontends(plugins, FrontendSettings(frontends, args))
        check_frontends(frontend_list)
    except ValueError as exc:
        logging.getLogger("triton_core").error("%s", exc)
        return 2
    workers = _worker_count(args.workers)
    if workers is None:
        return 2
    # Every request crosses from the event loop to an instance thread and back, each
    # side taking the GIL. With CPython's 5 ms switch interval a thread back from a native
    # call (a model's run, a socket write) can wait that long behind a busy loop; 0.5 ms
    # keeps the hand-offs short (bench/frontend_bar.py: +2-10% at c=4).
    sys.setswitchinterval(SWITCH_INTERVAL_SECS)
    if workers > 1:
        if options.shared_memory.allow_client_shm:
            # each worker holds its own regions: a request could reach a worker that does
            # not know the region its client registered through another
            logging.getLogger("triton_core").error(
                "--allow-client-shm=true cannot be used with --workers %d: shared-memory "
                "regions are registered with one worker process",
                workers,
            )
            return 2
        return _run_workers(workers, options, plugins, frontends, frontend_list)
    server = Server(options, plugins)
    try:
        return run_on_event_loop(serve(server, frontends, frontend_list))
    except (OSError, ValueError) as exc:
        logging.getLogger("triton_core").error("%s", exc)
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
        logging.getLogger("triton_core").error("%s", exc)
        return None


def _run_workers(
    workers: int,
    options: ServerOptions,
    plugins: PluginManager,
    frontends: FrontendOptions,
    frontend_list: list[Frontend],
) -> int:
    """``--workers N``: N servers on the same ports, under gunicorn."""
    from triton_core.workers.server import WorkerServer, WorkerSettings
    from triton_core.workers.supervisor import WorkerPlan, run_workers

    def build_server(settings: WorkerSettings) -> WorkerServer:
        return WorkerServer(options, plugins, settings)

    level = logging.getLevelName(logging.getLogger().getEffectiveLevel()).lower()
    plan = WorkerPlan(build_server, frontends, frontend_list, workers, log_level=level)
    return run_workers(plan)


def _cache_config(
    settings: list[tuple[str, str, str]], byte_size: int | None
) -> tuple[str, dict[str, str]] | str | None:
    """The one cache that ``--cache-config`` names, or an error message."""
    names = {name for name, _, _ in settings}
    if byte_size is not None:
        names.add("local")
        settings = [*settings, ("local", "size", str(byte_size))]
    if not names:
        return None
    if len(names) > 1 or "" in names:
        return f"--cache-config must name one cache as <cache>,<key>=<value> (got {sorted(names)})"
    return names.pop(), {key: value for _, key, value in settings}


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
    for flag in PLUGIN_DIRECTORY_FLAGS:
        early.add_argument(flag, default=None)
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
