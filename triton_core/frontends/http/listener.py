"""Serve an ASGI app on a listening socket with the project's HTTP/1.1 server
(:mod:`triton_core.frontends.http.server`): the HTTP, metrics, SageMaker and Vertex AI
endpoints each run one listener."""

from __future__ import annotations

import socket
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.http.protocol import ErrorBody, HttpLimits
    from triton_core.frontends.http.server import HttpServer
    from triton_core.frontends.options import FrontendOptions


def http_limits(options: FrontendOptions) -> HttpLimits:
    """The HTTP/1.1 limits and timeouts of every listener (the defaults when not set)."""
    # imported here: the HTTP protocol's modules load only when a listener serves
    from triton_core.frontends.http.protocol import HttpLimits

    return options.http_limits or HttpLimits()


def start_http_listener(
    app: ASGIApp,
    sock: socket.socket,
    options: FrontendOptions,
    ssl_context: ssl.SSLContext | None = None,
    error_body: ErrorBody | None = None,
) -> HttpServer:
    """Serve ``app`` on the listening ``sock`` with the HTTP limits of ``options``;
    ``await server.stop(seconds)`` drains it. ``error_body`` shapes the refusals the
    protocol answers itself (default: Triton's ``{"error": message}``)."""
    from triton_core.frontends.http.server import HttpServer

    keep_alive = options.http_keepalive_timeout_secs
    server = HttpServer(app, http_limits(options), keep_alive, error_body)
    server.start(sock, ssl_context, options.http_tls.handshake_timeout_secs)
    return server
