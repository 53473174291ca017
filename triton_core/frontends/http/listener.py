"""Serve an ASGI app on a listening socket with the HTTP/1.1 protocol of
:mod:`triton_core.frontends.http.protocol`: the HTTP, metrics, SageMaker and Vertex AI
endpoints each run one listener."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    import uvicorn

    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.http.protocol import HttpLimits
    from triton_core.frontends.runner import FrontendOptions


def http_limits(options: FrontendOptions) -> HttpLimits:
    """The HTTP/1.1 limits and timeouts of every listener (the defaults when not set)."""
    # imported here: the HTTP protocol's modules load only when a listener serves
    from triton_core.frontends.http.protocol import HttpLimits

    return options.http_limits or HttpLimits()


class HttpListener:
    """One endpoint being served; :meth:`stop` drains it."""

    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None]) -> None:
        self._server = server
        self._task = task

    async def stop(self, timeout: float) -> None:
        """Stop accepting; requests in flight have ``timeout`` seconds to finish."""
        # a float works: uvicorn waits with asyncio (its annotation says int)
        self._server.config.timeout_graceful_shutdown = timeout  # type: ignore[assignment]
        self._server.should_exit = True
        await self._task


class _UvicornStartLines(logging.Filter):
    """Drops the line each uvicorn server logs as it starts: the process has several (HTTP,
    metrics, cloud endpoints) and the runner says it once for all of them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Started server process")


def _drop_uvicorn_start_lines() -> None:
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(known, _UvicornStartLines) for known in uvicorn_log.filters):
        uvicorn_log.addFilter(_UvicornStartLines())


def start_http_listener(
    app: ASGIApp,
    sock: socket.socket,
    options: FrontendOptions,
    ssl_context: ssl.SSLContext | None = None,
    error_body: Callable[[int, str], bytes] | None = None,
) -> HttpListener:
    """Serve ``app`` on the listening ``sock``, with the HTTP limits of ``options``;
    ``error_body`` shapes the refusals the protocol answers itself (default: Triton's
    ``{"error": message}``)."""
    import uvicorn

    from triton_core.frontends.http.protocol import HttpProtocol

    handshake_timeout = options.http_tls.handshake_timeout_secs

    class _QuietSignalsServer(uvicorn.Server):
        # Signals belong to serve(): it stops the frontends in order.
        def capture_signals(self) -> contextlib.AbstractContextManager[None]:  # type: ignore[override]
            return contextlib.nullcontext()

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            if ssl_context is None or not sockets:
                await super().startup(sockets=sockets)
                return
            # uvicorn's create_server passes no TLS handshake timeout: listen here instead
            await super().startup(sockets=[])
            config, state = self.config, self.server_state
            app_state = self.lifespan.state
            self.servers.append(
                await asyncio.get_running_loop().create_server(
                    lambda: config.http_protocol_class(  # type: ignore[call-arg]
                        config=config, server_state=state, app_state=app_state
                    ),
                    sock=sockets[0],
                    ssl=ssl_context,
                    ssl_handshake_timeout=handshake_timeout,
                    backlog=config.backlog,
                )
            )

    config = uvicorn.Config(
        app,
        loop="none",
        # uvicorn's httptools protocol: one write per answer, infer by callbacks, limits;
        # not uvicorn's limit_concurrency, which keeps accepting and holding connections
        http=HttpProtocol.with_limits(http_limits(options), error_body),
        lifespan="off",
        # no WebSocket, as Triton: an upgrade request is answered as HTTP whatever websocket
        # library is installed (uvicorn's "auto" would switch protocols when it finds one)
        ws="none",
        access_log=False,
        log_config=None,
        # uvicorn annotates int but waits with asyncio, so fractions of a second work
        timeout_graceful_shutdown=options.exit_timeout_secs,  # type: ignore[arg-type]
        timeout_keep_alive=options.http_keepalive_timeout_secs,  # type: ignore[arg-type]
    )
    http_server = _QuietSignalsServer(config)
    _drop_uvicorn_start_lines()
    task = asyncio.create_task(http_server.serve(sockets=[sock]))
    return HttpListener(http_server, task)
