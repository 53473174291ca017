"""Run the server with its HTTP and gRPC frontends on one event loop until a signal arrives."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NoReturn

from triton_core.errors import TritonError
from triton_core.frontends.cloud import (
    Endpoint,
    SageMakerOptions,
    VertexAiOptions,
    check_port_collisions,
    vertex_ai_refused,
)
from triton_core.frontends.common import listen_socket
from triton_core.frontends.grpc.limits import DEFAULT_LIMITS, GrpcLimits
from triton_core.frontends.header_forwarding import HeaderForwarder
from triton_core.frontends.restricted import Restrictions
from triton_core.frontends.tls import TlsOptions
from triton_core.metrics import MetricsOptions
from triton_core.server import Server
from triton_core.threads import OffloadThreads

if TYPE_CHECKING:
    from triton_core.frontends.http.codec import JsonLimits
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.http.protocol import HttpLimits
    from triton_core.frontends.http.server import HttpServer

logger = logging.getLogger("triton_core")


@dataclass(slots=True)
class FrontendOptions:
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    #: limits and timeouts of every HTTP/1.1 client (docs/security.md), metrics included;
    #: None: the defaults
    http_limits: HttpLimits | None = None
    #: caps on the JSON of HTTP requests; None: the defaults
    http_json_limits: JsonLimits | None = None
    http_keepalive_timeout_secs: float = 75.0
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    #: "http2" (the built-in transport) or "grpcio" (grpc.aio)
    grpc_transport: str = "http2"
    grpc_limits: GrpcLimits = DEFAULT_LIMITS
    allow_metrics: bool = True
    #: None: the HTTP address, as Triton does
    metrics_address: str | None = None
    metrics_port: int = 8002
    metrics: MetricsOptions = field(default_factory=MetricsOptions)
    #: seconds the whole stop may take after a stop signal: draining the frontends, requests
    #: in flight, unloading; what still runs then is aborted and the process exits (code 1)
    exit_timeout_secs: float = 30.0
    #: ``--http-use-ssl*`` / ``--grpc-use-ssl*``; the metrics endpoint stays plain HTTP
    http_tls: TlsOptions = field(default_factory=lambda: TlsOptions("--http"))
    grpc_tls: TlsOptions = field(default_factory=lambda: TlsOptions("--grpc"))
    #: ``--http-restricted-api`` / ``--grpc-restricted-protocol``, by API group
    http_restrictions: Restrictions = field(default_factory=dict)
    grpc_restrictions: Restrictions = field(default_factory=dict)
    #: ``--ports-file``: where to write the bound ports as JSON once every frontend listens
    ports_file: str | None = None
    #: ``--allow-sagemaker`` / ``--allow-vertex-ai`` and their settings (off by default)
    sagemaker: SageMakerOptions = field(default_factory=SageMakerOptions)
    vertex_ai: VertexAiOptions = field(default_factory=VertexAiOptions)
    #: ``--reuse-http-port`` / ``--reuse-grpc-port``: SO_REUSEPORT on the listening sockets
    reuse_http_port: bool = False
    reuse_grpc_port: bool = False
    #: ``--grpc-infer-response-compression-level``: none, low, medium or high
    grpc_compression_level: str = "none"
    #: ``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: matching
    #: request headers become request parameters; None: none are
    http_header_forward_pattern: re.Pattern[str] | None = None
    grpc_header_forward_pattern: re.Pattern[str] | None = None
    #: ``--http-thread-count``: threads that decode large HTTP infer bodies off the event
    #: loop (SageMaker and Vertex AI have their own, from their options); None: 2
    http_thread_count: int | None = None
    #: ``--grpc-infer-thread-count``: threads that inflate compressed gRPC requests; None: 2
    grpc_infer_thread_count: int | None = None
    #: ``--grpc-infer-allocation-pool-size``: buffers of large gRPC request messages kept
    #: for reuse; None: Triton's 8
    grpc_allocation_pool_size: int | None = None
    #: ``--workers``: every listener sets SO_REUSEPORT, so that the workers share its port
    reuse_port: bool = False
    #: builds the ``/metrics`` app instead of the one-process app (``--workers``)
    metrics_app_factory: Callable[[Server, MetricsOptions], ASGIApp] | None = None


def _check_ports(options: FrontendOptions) -> None:
    """tritonserver's rule: no two enabled endpoints on one address and port."""
    endpoints = []
    if options.allow_http:
        endpoints.append(Endpoint("HTTP", options.http_address, options.http_port))
    if options.allow_grpc:
        endpoints.append(Endpoint("GRPC", options.grpc_address, options.grpc_port))
    if options.allow_metrics:
        address = options.metrics_address or options.http_address
        endpoints.append(Endpoint("metrics", address, options.metrics_port))
    sagemaker, vertex_ai = options.sagemaker, options.vertex_ai
    if sagemaker.allow:
        endpoints.append(
            Endpoint("SageMaker", sagemaker.address, sagemaker.port, sagemaker.safe_port_range)
        )
    if vertex_ai.allow:
        endpoints.append(Endpoint("Vertex AI", vertex_ai.address, vertex_ai.port))
    check_port_collisions(endpoints)


#: files the server keeps open besides HTTP connections (gRPC, models, logs), a guess
_OTHER_FILES: Final = 256


def raise_open_files_limit(connections: int = 0) -> int:
    """Raise the soft limit on open files to the hard one (each connection holds one), and
    warn when it leaves too few for ``connections``; the limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logger.warning(
                "could not raise the open files limit from %d to %d: %s", soft, target, exc
            )
        else:
            logger.info("raised the open files limit (RLIMIT_NOFILE) from %d to %d", soft, target)
            soft = target
    if soft != resource.RLIM_INFINITY and soft < connections + _OTHER_FILES:
        logger.warning(
            "the open files limit (%d) is too low for --http-max-connections %d: connections "
            "will be refused by the system before the server's limit",
            soft,
            connections,
        )
    return soft


def _http_limits(options: FrontendOptions) -> HttpLimits:
    # imported here: the HTTP frontend's modules load only when it serves
    from triton_core.frontends.http.protocol import HttpLimits

    return options.http_limits or HttpLimits()


async def serve(server: Server, options: FrontendOptions) -> int:
    """Start the server and its frontends; return the exit code once a signal stops them."""
    _check_ports(options)
    http_ssl = _check_tls(options)
    http_limits = _http_limits(options)
    raise_open_files_limit(http_limits.max_connections if options.allow_http else 0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # one process listens before loading models, so that a port in use fails at once; a
    # worker (reuse_port) only once its models are loaded, or it would take connections
    # that wait for them while the other workers are free
    sockets = {} if options.reuse_port else _listen(options)
    try:
        await server.start()
    except TritonError as error:
        logger.error("%s", error.message)
        for sock in sockets.values():
            sock.close()
        return 1
    if options.reuse_port:
        sockets = _listen(options)
    try:
        vertex_ai_model = _vertex_ai_model(server, options.vertex_ai)
    except ValueError as exc:
        logger.error("%s", exc)
        for sock in sockets.values():
            sock.close()
        await server.stop(options.exit_timeout_secs)
        return 1
    http_servers = []
    if "HTTP" in sockets:
        from triton_core.frontends.http.app import set_decode_threads
        from triton_core.frontends.http.codec import DEFAULT_JSON_LIMITS
        from triton_core.frontends.http.fast_path import create_asgi_app

        if options.http_thread_count is not None:
            set_decode_threads(options.http_thread_count)
        app = create_asgi_app(
            server,
            max_input_size=http_limits.max_body_size,
            restrictions=options.http_restrictions,
            json_limits=options.http_json_limits or DEFAULT_JSON_LIMITS,
            header_forwarder=_forwarder(options.http_header_forward_pattern),
        )
        http_servers.append(_start_http_server(app, sockets["HTTP"], options, http_ssl))
        logger.info(
            "Started HTTPService at %s:%d%s",
            options.http_address,
            _port_of(sockets["HTTP"]),
            " (TLS)" if http_ssl else "",
        )
    metrics_app = None
    if "metrics" in sockets:
        from triton_core.metrics import create_metrics_app, create_registry

        if options.metrics_app_factory is not None:
            metrics_app = options.metrics_app_factory(server, options.metrics)
        else:
            metrics_app = create_metrics_app(create_registry(server, options.metrics))
        http_servers.append(_start_http_server(metrics_app, sockets["metrics"], options))
        logger.info(
            "Started Metrics Service at %s:%d",
            options.metrics_address or options.http_address,
            _port_of(sockets["metrics"]),
        )
    http_servers += _start_cloud(server, options, sockets, metrics_app, vertex_ai_model)
    grpc_server = None
    if options.allow_grpc:
        from triton_core.frontends.grpc.server import create_grpc_server

        grpc_server = create_grpc_server(
            server,
            options.grpc_address,
            options.grpc_port,
            reuse_port=options.reuse_port or options.reuse_grpc_port,
            compression_level=options.grpc_compression_level,
            header_forwarder=_forwarder(options.grpc_header_forward_pattern),
            transport=options.grpc_transport,  # type: ignore[arg-type]
            restrictions=options.grpc_restrictions,
            tls=options.grpc_tls,
            limits=options.grpc_limits,
            infer_threads=options.grpc_infer_thread_count,
            allocation_pool=options.grpc_allocation_pool_size,
        )
        await grpc_server.start()
        grpc_port: int = grpc_server.port  # type: ignore[union-attr]  # both transports set it
        logger.info(
            "Started GRPCInferenceService at %s:%d%s",
            options.grpc_address,
            grpc_port,
            " (TLS)" if options.grpc_tls.enabled else "",
        )
    logger.info("Started server process [%d]", os.getpid())
    if options.ports_file:
        ports = {name.lower(): _port_of(sock) for name, sock in sockets.items()}
        if grpc_server is not None:
            ports["grpc"] = grpc_port
        write_ports_file(options.ports_file, ports)

    await stop.wait()
    logger.info("Stopping: no new requests; waiting for requests in flight to finish")
    deadline = loop.time() + options.exit_timeout_secs
    watchdog = _ExitWatchdog(server, options.exit_timeout_secs + WATCHDOG_MARGIN_SECS)

    def remaining() -> float:
        return max(0.0, deadline - loop.time())

    waits: list[Awaitable[None]] = []
    if grpc_server is not None:
        waits.append(grpc_server.stop(remaining()))
    for http_server in http_servers:
        waits.append(http_server.stop(remaining()))
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*waits, return_exceptions=True), remaining() + 1.0
        )
    except TimeoutError:
        results = [TimeoutError("the frontends did not stop before the exit timeout")]
    for result in results:
        if isinstance(result, BaseException):
            logger.warning("a frontend did not stop cleanly: %r", result)
    if not await server.stop(remaining()):
        _exit_now(1, "Exit timeout expired. Exiting immediately.")
    watchdog.cancel()
    logger.info("Stopped")
    return 0


def _listen(options: FrontendOptions) -> dict[str, socket.socket]:
    """The listening sockets of the HTTP, metrics and cloud endpoints, by name."""
    sockets = {}
    if options.allow_http:
        sockets["HTTP"] = listen_socket(
            options.http_address,
            options.http_port,
            "HTTP",
            options.reuse_port or options.reuse_http_port,
        )
    if options.allow_metrics:
        metrics_address = options.metrics_address or options.http_address
        sockets["metrics"] = listen_socket(
            metrics_address, options.metrics_port, "metrics", options.reuse_port
        )
    _listen_cloud(options, sockets)
    return sockets


def _listen_cloud(options: FrontendOptions, sockets: dict[str, socket.socket]) -> None:
    """Bind the SageMaker and Vertex AI ports (their settings checked first)."""
    sagemaker, vertex_ai = options.sagemaker, options.vertex_ai
    if vertex_ai.allow:
        vertex_ai.check_routes()
    for key, name, endpoint in (
        ("sagemaker", "SageMaker", sagemaker),
        ("vertex_ai", "Vertex AI", vertex_ai),
    ):
        if not endpoint.allow:
            continue
        sockets[key] = listen_socket(endpoint.address, endpoint.port, name, options.reuse_port)


def _vertex_ai_model(server: Server, vertex_ai: VertexAiOptions) -> str:
    """The model Vertex AI's predict route runs, once the models are loaded ("" when off)."""
    if not vertex_ai.allow:
        return ""
    from triton_core.frontends.http.vertex_ai import default_model

    try:
        return default_model(server, vertex_ai.default_model)
    except ValueError as exc:
        raise vertex_ai_refused(str(exc)) from None


def _start_cloud(
    server: Server,
    options: FrontendOptions,
    sockets: dict[str, socket.socket],
    metrics_app: ASGIApp | None,
    vertex_ai_model: str,
) -> list[HttpServer]:
    """Serve the SageMaker and Vertex AI listeners, with the HTTP endpoint's limits and
    restrictions (as tritonserver applies its HTTP flags to them)."""
    if "sagemaker" not in sockets and "vertex_ai" not in sockets:
        return []
    from triton_core.frontends.http.app import create_app
    from triton_core.frontends.http.codec import DEFAULT_JSON_LIMITS
    from triton_core.frontends.http.sagemaker import SageMakerApp
    from triton_core.frontends.http.vertex_ai import VertexAiApp

    limits: dict[str, Any] = {
        "max_input_size": _http_limits(options).max_body_size,
        "restrictions": options.http_restrictions,
        "json_limits": options.http_json_limits or DEFAULT_JSON_LIMITS,
    }
    v2_app = create_app(server, **limits)
    started = []
    if "sagemaker" in sockets:
        threads = _cloud_threads(options.sagemaker.thread_count, "sagemaker-infer")
        app: ASGIApp = SageMakerApp(server, v2_app, options.sagemaker, threads=threads, **limits)
        started.append(_start_http_server(app, sockets["sagemaker"], options))
        logger.info(
            "Started Sagemaker HTTPService at %s:%d",
            options.sagemaker.address,
            _port_of(sockets["sagemaker"]),
        )
    if "vertex_ai" in sockets:
        predict, health = options.vertex_ai.check_routes()
        app = VertexAiApp(
            server,
            v2_app,
            predict_route=predict,
            health_route=health,
            model_name=vertex_ai_model,
            metrics_app=metrics_app,
            threads=_cloud_threads(options.vertex_ai.thread_count, "vertex-ai-infer"),
            **limits,
        )
        started.append(_start_http_server(app, sockets["vertex_ai"], options))
        logger.info(
            "Started Vertex AI HTTPService at %s:%d",
            options.vertex_ai.address,
            _port_of(sockets["vertex_ai"]),
        )
    return started


def _cloud_threads(count: int | None, name: str) -> OffloadThreads:
    """A cloud listener's decoding threads (``--sagemaker-thread-count``, ...)."""
    from triton_core.frontends.http.app import DEFAULT_DECODE_THREADS

    return OffloadThreads(count or DEFAULT_DECODE_THREADS, name)


def _forwarder(pattern: re.Pattern[str] | None) -> HeaderForwarder | None:
    return None if pattern is None else HeaderForwarder(pattern)


def _port_of(sock: socket.socket) -> int:
    # the port the system chose when the flag asked for port 0
    return sock.getsockname()[1]


def write_ports_file(path: str, ports: dict[str, int]) -> None:
    """Write ``{"http": port, "grpc": port, "metrics": port}`` (the endpoints that listen).

    Written to a temporary name and renamed, so that a reader sees the whole file or none.
    """
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as handle:
        json.dump(ports, handle)
    os.replace(temporary, path)


#: how long past --exit-timeout-secs the watchdog lets a stop run before it ends the process
WATCHDOG_MARGIN_SECS: Final = 2.0


class _ExitWatchdog:
    """Ends the process if a stop overruns its deadline even though the loop cannot act.

    The stop path aborts late work itself; this thread covers an event loop that a plugin
    blocks (so no deadline on the loop can fire): it aborts the model instances (killing
    stub processes) and exits.
    """

    def __init__(self, server: Server, seconds: float) -> None:
        self._server = server
        self._timer = threading.Timer(seconds, self._expired)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def _expired(self) -> None:
        try:
            self._server.abort()
        finally:
            _exit_now(1, "Exit timeout expired and the event loop is not responding. Exiting.")


def _exit_now(code: int, message: str) -> NoReturn:
    """Exit at once: threads still in a hung ``execute`` cannot be joined or interrupted."""
    logger.error("%s", message)
    logging.shutdown()  # flush the log before the process goes
    os._exit(code)


def _check_tls(options: FrontendOptions) -> ssl.SSLContext | None:
    """Refuse bad TLS flags or files before models load; the HTTP endpoint's SSLContext."""
    options.http_tls.check()
    options.grpc_tls.check()
    options.grpc_tls.server_context(["h2"])  # built again by the gRPC frontend
    return options.http_tls.server_context(["http/1.1"])


def run_on_event_loop(coroutine: Coroutine[Any, Any, int]) -> int:
    """Run the serving coroutine to its end on uvloop (asyncio's loop where uvloop is
    missing); its exit code."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


def _start_http_server(
    app: ASGIApp,
    sock: socket.socket,
    options: FrontendOptions,
    ssl_context: ssl.SSLContext | None = None,
) -> HttpServer:
    """Serve ``app`` on ``sock`` with the HTTP limits; ``await server.stop(seconds)`` drains it."""
    from triton_core.frontends.http.server import HttpServer

    server = HttpServer(app, _http_limits(options), options.http_keepalive_timeout_secs)
    server.start(sock, ssl_context, options.http_tls.handshake_timeout_secs)
    return server
