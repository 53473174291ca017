"""Run the server with its HTTP and gRPC frontends on one event loop until a signal arrives."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from dataclasses import dataclass

from triton_core.errors import TritonError
from triton_core.server import Server

logger = logging.getLogger("triton_core")


@dataclass(slots=True)
class FrontendOptions:
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    http_max_input_size: int = 1 << 26
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    #: seconds to let requests in flight finish after a stop signal
    exit_timeout_secs: float = 30.0


def _bind(address: str, port: int, what: str) -> socket.socket:
    host = address.removeprefix("ipv6:").strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"failed to bind the {what} endpoint to {address}:{port}: {exc}") from exc
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _check_ports(options: FrontendOptions) -> None:
    if (
        options.allow_http
        and options.allow_grpc
        and options.http_port == options.grpc_port
        and options.http_port != 0
    ):
        raise ValueError(
            f"the HTTP and gRPC endpoints cannot share port {options.http_port}; "
            "change --http-port or --grpc-port"
        )


async def serve(server: Server, options: FrontendOptions) -> int:
    """Start the server and its frontends; return the exit code once a signal stops them."""
    _check_ports(options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    http_socket = (
        _bind(options.http_address, options.http_port, "HTTP") if options.allow_http else None
    )
    try:
        await server.start()
    except TritonError as error:
        logger.error("%s", error.message)
        if http_socket is not None:
            http_socket.close()
        return 1
    http_server, http_task = None, None
    if http_socket is not None:
        http_server, http_task = _start_http(server, options, http_socket)
        logger.info("Started HTTPService at %s:%d", options.http_address, options.http_port)
    grpc_server = None
    if options.allow_grpc:
        from triton_core.frontends.grpc.server import create_grpc_server

        grpc_server = create_grpc_server(server, options.grpc_address, options.grpc_port)
        await grpc_server.start()
        logger.info(
            "Started GRPCInferenceService at %s:%d", options.grpc_address, options.grpc_port
        )

    await stop.wait()
    logger.info("Stopping: no new requests; waiting for requests in flight to finish")
    waits = []
    if grpc_server is not None:
        waits.append(grpc_server.stop(options.exit_timeout_secs))
    if http_server is not None and http_task is not None:
        http_server.should_exit = True
        waits.append(asyncio.wait_for(http_task, options.exit_timeout_secs + 1))
    results = await asyncio.gather(*waits, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            logger.warning("a frontend did not stop cleanly: %r", result)
    await server.stop(options.exit_timeout_secs)
    logger.info("Stopped")
    return 0


def _start_http(server: Server, options: FrontendOptions, sock: socket.socket):  # type: ignore[no-untyped-def]
    import contextlib

    import uvicorn

    class _QuietSignalsServer(uvicorn.Server):
        # Signals belong to serve(): it stops the frontends in order.
        def capture_signals(self):  # type: ignore[no-untyped-def,override]
            return contextlib.nullcontext()

    from triton_core.frontends.http.app import create_app

    app = create_app(server, max_input_size=options.http_max_input_size)
    config = uvicorn.Config(
        app,
        loop="none",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_config=None,
        timeout_graceful_shutdown=options.exit_timeout_secs,
        timeout_keep_alive=75,
    )
    http_server = _QuietSignalsServer(config)
    task = asyncio.create_task(http_server.serve(sockets=[sock]))
    return http_server, task
