"""A frontend that serves one ASGI app on one HTTP/1.1 port: the base of the HTTP, metrics,
SageMaker and Vertex AI frontends."""

from __future__ import annotations

import logging
import socket
import ssl
from abc import abstractmethod
from typing import TYPE_CHECKING

from triton_core.frontends.base import Endpoint, Frontend
from triton_core.frontends.common import listen_socket

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.http.server import HttpServer
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI

logger = logging.getLogger("triton_core")


class HttpEndpointFrontend(Frontend):
    """Listens on ``endpoint`` and serves :meth:`build_app` there once the models load."""

    #: what the start line calls it: "Started <service> at <address>:<port>"
    service = "HTTPService"

    def __init__(self, options: FrontendOptions, endpoint: Endpoint) -> None:
        self.options = options
        self.endpoint = endpoint
        self.name = endpoint.name
        self._sock: socket.socket | None = None
        self._listener: HttpServer | None = None

    def endpoints(self) -> list[Endpoint]:
        return [self.endpoint]

    def reuse_own_port(self) -> bool:
        """SO_REUSEPORT on the listening socket asked for by this endpoint's own flag."""
        return False

    def ssl_context(self) -> ssl.SSLContext | None:
        return None

    def error_body(self, status: int, message: str) -> bytes:
        """The JSON body of the refusals that the HTTP protocol answers before the app sees
        the request (413 body too large, 431 headers, 408 deadlines, 503 connections):
        Triton's ``{"error": message}``; an endpoint with an error document of its own
        overrides it."""
        from triton_core.frontends.http.protocol import triton_error_body

        return triton_error_body(status, message)

    def metrics_app(self, server: ServerAPI) -> ASGIApp:
        """The server's ``/metrics`` app, the one ``--metrics-port`` serves, for an endpoint
        that answers ``GET /metrics`` too."""
        from triton_core.frontends.builtin.metrics_app import metrics_app

        return metrics_app(server, self.options)

    @abstractmethod
    def build_app(self, server: ServerAPI) -> ASGIApp:
        """The ASGI app served on this endpoint (the models are loaded)."""

    async def listen(self, server: ServerAPI, reuse_port: bool) -> None:
        endpoint = self.endpoint
        self._sock = listen_socket(
            endpoint.address, endpoint.port, endpoint.name, reuse_port or self.reuse_own_port()
        )

    async def start(self, server: ServerAPI) -> None:
        from triton_core.frontends.http.listener import start_http_listener

        assert self._sock is not None, "listen() comes before start()"
        app = self.build_app(server)
        tls = self.ssl_context()
        self._listener = start_http_listener(app, self._sock, self.options, tls, self.error_body)
        logger.info(
            "Started %s at %s:%d%s",
            self.service,
            self.endpoint.address,
            self._sock.getsockname()[1],
            " (TLS)" if tls else "",
        )

    def ports(self) -> dict[str, int]:
        # the port the system chose when the flag asked for port 0
        return {} if self._sock is None else {self.endpoint.key: self._sock.getsockname()[1]}

    async def stop(self, timeout: float) -> None:
        if self._listener is not None:
            await self._listener.stop(timeout)
        elif self._sock is not None:  # never started: the models failed to load
            self._sock.close()
