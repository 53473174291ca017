"""An ASGI app served over HTTP/1.1 on a listening socket, with :class:`~.protocol.HttpProtocol`,
and stopped gracefully: no new connections, idle ones closed, requests under way given until a
deadline to finish, then the rest aborted."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from email.utils import formatdate
from typing import TYPE_CHECKING, Final

from triton_core.frontends.http.protocol import ErrorBody, HttpLimits, HttpProtocol, Listener

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp

logger = logging.getLogger(__name__)

#: the listening socket's backlog (the listener is given an already listening socket; the
#: event loop listens again with this)
_BACKLOG: Final = 2048
#: seconds aborted connections and cancelled ASGI tasks get to end after the stop deadline
_ABORT_GRACE: Final = 1.0


class HttpServer:
    """Serves ``app`` on one listening socket with ``limits`` (one listener's connections).

    Every answer carries a ``date`` header (updated each second) and ``server: triton-core``.
    """

    def __init__(
        self,
        app: ASGIApp,
        limits: HttpLimits | None = None,
        keep_alive_timeout: float = 75.0,
        error_body: ErrorBody | None = None,
    ) -> None:
        """``error_body`` shapes the refusals the protocol answers itself (default:
        Triton's ``{"error": message}``)."""
        listener_options = {} if error_body is None else {"error_body": error_body}
        self.listener = Listener(
            app, limits or HttpLimits(), keep_alive_timeout, **listener_options
        )
        self._server: asyncio.AbstractServer | None = None
        self._starting: asyncio.Task[None] | None = None
        self._clock: asyncio.TimerHandle | None = None

    def start(
        self,
        sock: socket.socket,
        ssl_context: ssl.SSLContext | None = None,
        ssl_handshake_timeout: float | None = None,
    ) -> asyncio.Task[None]:
        """Serve ``sock`` (bound and listening) on the running loop; the task that begins it.

        A client that connects before the task has run waits in the socket's backlog.
        """
        self._tick()
        self._starting = asyncio.get_running_loop().create_task(
            self._serve(sock, ssl_context, ssl_handshake_timeout)
        )
        return self._starting

    async def _serve(
        self, sock: socket.socket, ssl_context: ssl.SSLContext | None, handshake: float | None
    ) -> None:
        listener = self.listener
        self._server = await asyncio.get_running_loop().create_server(
            lambda: HttpProtocol(listener),
            sock=sock,
            ssl=ssl_context,
            ssl_handshake_timeout=handshake if ssl_context is not None else None,
            backlog=_BACKLOG,
        )

    def _tick(self) -> None:
        """Keep the answers' date header current, from one second to the next."""
        now = time.time()
        date = formatdate(now, usegmt=True).encode()
        self.listener.default_lines = b"date: %b\r\nserver: triton-core\r\n" % date
        loop = asyncio.get_running_loop()
        self._clock = loop.call_later(1.0 - now % 1.0, self._tick)

    @property
    def connections(self) -> set[HttpProtocol]:
        """The open connections."""
        return self.listener.connections

    async def stop(self, timeout: float) -> None:
        """Stop accepting connections, close the idle ones, let the requests under way finish
        within ``timeout`` seconds (each connection closes after its answer), then abort the
        connections and cancel the app calls that remain."""
        listener = self.listener
        listener.stopping = True
        await self._stop_listening()
        for connection in list(listener.connections):
            connection.shutdown()
        drained = listener.drained()
        try:
            await asyncio.wait_for(asyncio.shield(drained), max(0.0, timeout))
        except TimeoutError:
            logger.warning(
                "HTTP: %d connection(s) and %d app call(s) still busy after %g s: aborted",
                len(listener.connections),
                len(listener.tasks),
                timeout,
            )
            for connection in list(listener.connections):
                connection.transport.abort()
            for task in list(listener.tasks):
                task.cancel()
            await asyncio.wait([drained], timeout=_ABORT_GRACE)
        finally:
            listener.deadlines.stop()
            if self._clock is not None:
                self._clock.cancel()

    async def _stop_listening(self) -> None:
        if self._starting is not None:
            try:
                await self._starting
            except Exception as exc:  # it never served: nothing to stop
                logger.warning("the HTTP server had not started: %r", exc)
        if self._server is not None:
            self._server.close()
