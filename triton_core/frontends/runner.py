"""Run the server with its HTTP and gRPC frontends on one event loop until a signal arrives."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from dataclasses import dataclass, field
from typing import Final

from triton_core.errors import TritonError
from triton_core.frontends.common import listen_socket
from triton_core.metrics import MetricsOptions
from triton_core.server import Server

logger = logging.getLogger("triton_core")


@dataclass(slots=True)
class FrontendOptions:
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    http_max_input_size: int = 1 << 26
    #: limits and timeouts of every HTTP/1.1 client (docs/security.md), metrics included
    http_header_timeout_secs: float = 10.0
    http_body_timeout_secs: float = 30.0
    http_keepalive_timeout_secs: float = 75.0
    http_max_header_size: int = 16384
    http_max_header_count: int = 100
    http_max_connections: int = 1024
    http_max_json_elements: int = 1 << 18
    http_max_json_depth: int = 32
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    #: "http2" (the built-in transport) or "grpcio" (grpc.aio)
    grpc_transport: str = "http2"
    allow_metrics: bool = True
    #: None: the HTTP address, as Triton does
    metrics_address: str | None = None
    metrics_port: int = 8002
    metrics: MetricsOptions = field(default_factory=MetricsOptions)
    #: seconds to let requests in flight finish after a stop signal
    exit_timeout_secs: float = 30.0


def _check_ports(options: FrontendOptions) -> None:
    ports = []
    if options.allow_http:
        ports.append(("HTTP", options.http_port, "--http-port"))
    if options.allow_grpc:
        ports.append(("gRPC", options.grpc_port, "--grpc-port"))
    if options.allow_metrics:
        ports.append(("metrics", options.metrics_port, "--metrics-port"))
    seen: dict[int, tuple[str, str]] = {}
    for name, port, flag in ports:
        if port and port in seen:
            other, other_flag = seen[port]
            raise ValueError(
                f"the {other} and {name} endpoints cannot share port {port}; "
                f"change {other_flag} or {flag}"
            )
        seen[port] = (name, flag)


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


def _http_limits(options: FrontendOptions):  # type: ignore[no-untyped-def]
    from triton_core.frontends.http.protocol import HttpLimits

    return HttpLimits(
        header_timeout=options.http_header_timeout_secs,
        body_timeout=options.http_body_timeout_secs,
        max_header_size=options.http_max_header_size,
        max_header_count=options.http_max_header_count,
        max_connections=options.http_max_connections,
        max_body_size=options.http_max_input_size,
    )


async def serve(server: Server, options: FrontendOptions) -> int:
    """Start the server and its frontends; return the exit code once a signal stops them."""
    _check_ports(options)
    raise_open_files_limit(options.http_max_connections if options.allow_http else 0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    sockets = {}
    if options.allow_http:
        sockets["HTTP"] = listen_socket(options.http_address, options.http_port, "HTTP")
    metrics_address = options.metrics_address or options.http_address
    if options.allow_metrics:
        sockets["metrics"] = listen_socket(metrics_address, options.metrics_port, "metrics")
    try:
        await server.start()
    except TritonError as error:
        logger.error("%s", error.message)
        for sock in sockets.values():
            sock.close()
        return 1
    uvicorn_servers = []
    if "HTTP" in sockets:
        from triton_core.frontends.http.codec import JsonLimits
        from triton_core.frontends.http.fast_path import create_asgi_app

        json_limits = JsonLimits(options.http_max_json_elements, options.http_max_json_depth)
        app = create_asgi_app(
            server, max_input_size=options.http_max_input_size, json_limits=json_limits
        )
        uvicorn_servers.append(_start_uvicorn(app, sockets["HTTP"], options))
        logger.info("Started HTTPService at %s:%d", options.http_address, options.http_port)
    if "metrics" in sockets:
        from triton_core.metrics import create_metrics_app, create_registry

        app = create_metrics_app(create_registry(server, options.metrics))
        uvicorn_servers.append(_start_uvicorn(app, sockets["metrics"], options))
        logger.info("Started Metrics Service at %s:%d", metrics_address, options.metrics_port)
    grpc_server = None
    if options.allow_grpc:
        from triton_core.frontends.grpc.server import create_grpc_server

        grpc_server = create_grpc_server(
            server,
            options.grpc_address,
            options.grpc_port,
            transport=options.grpc_transport,  # type: ignore[arg-type]
        )
        await grpc_server.start()
        logger.info(
            "Started GRPCInferenceService at %s:%d", options.grpc_address, options.grpc_port
        )

    await stop.wait()
    logger.info("Stopping: no new requests; waiting for requests in flight to finish")
    waits = []
    if grpc_server is not None:
        waits.append(grpc_server.stop(options.exit_timeout_secs))
    for uvicorn_server, task in uvicorn_servers:
        uvicorn_server.should_exit = True
        waits.append(asyncio.wait_for(task, options.exit_timeout_secs + 1))
    results = await asyncio.gather(*waits, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            logger.warning("a frontend did not stop cleanly: %r", result)
    await server.stop(options.exit_timeout_secs)
    logger.info("Stopped")
    return 0


def _start_uvicorn(app, sock: socket.socket, options: FrontendOptions):  # type: ignore[no-untyped-def]
    import contextlib

    import uvicorn

    from triton_core.frontends.http.protocol import HttpProtocol

    class _QuietSignalsServer(uvicorn.Server):
        # Signals belong to serve(): it stops the frontends in order.
        def capture_signals(self):  # type: ignore[no-untyped-def,override]
            return contextlib.nullcontext()

    config = uvicorn.Config(
        app,
        loop="none",
        # uvicorn's httptools protocol: one write per answer, infer by callbacks, limits;
        # not uvicorn's limit_concurrency, which keeps accepting and holding connections
        http=HttpProtocol.with_limits(_http_limits(options)),
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=options.exit_timeout_secs,
        timeout_keep_alive=options.http_keepalive_timeout_secs,
    )
    http_server = _QuietSignalsServer(config)
    task = asyncio.create_task(http_server.serve(sockets=[sock]))
    return http_server, task
