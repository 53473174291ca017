"""The KServe v2 HTTP/REST frontend with Triton's extensions, as a built-in plugin."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from triton_core.frontends.base import Endpoint, FrontendSettings
from triton_core.frontends.builtin.http_endpoint import HttpEndpointFrontend
from triton_core.frontends.header_forwarding import forwarder
from triton_core.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.plugins.registry import FrontendRegistry


class HttpFrontend(HttpEndpointFrontend):
    """``--allow-http``: inference, health, metadata, repository, statistics, shared memory,
    logging and trace on ``--http-address``:``--http-port``."""

    def __init__(self, options: FrontendOptions) -> None:
        super().__init__(options, Endpoint("HTTP", options.http_address, options.http_port))
        self._tls: ssl.SSLContext | None = None

    def check(self) -> None:
        self.options.http_tls.check()
        self._tls = self.options.http_tls.server_context(["http/1.1"])

    def reuse_own_port(self) -> bool:
        return self.options.reuse_http_port

    def ssl_context(self) -> ssl.SSLContext | None:
        return self._tls

    async def listen(self, server: ServerAPI, reuse_port: bool) -> None:
        from triton_core.frontends.http.listener import http_limits
        from triton_core.frontends.runner import raise_open_files_limit

        raise_open_files_limit(http_limits(self.options).max_connections)
        await super().listen(server, reuse_port)

    def build_app(self, server: ServerAPI) -> ASGIApp:
        # imported here: the HTTP frontend's modules load only when it serves
        from triton_core.frontends.http.codec import DEFAULT_JSON_LIMITS
        from triton_core.frontends.http.decoding import set_decode_threads
        from triton_core.frontends.http.fast_path import create_asgi_app
        from triton_core.frontends.http.listener import http_limits

        options = self.options
        if options.http_thread_count is not None:
            set_decode_threads(options.http_thread_count)
        return create_asgi_app(
            server,
            max_input_size=http_limits(options).max_body_size,
            restrictions=options.http_restrictions,
            json_limits=options.http_json_limits or DEFAULT_JSON_LIMITS,
            header_forwarder=forwarder(options.http_header_forward_pattern),
        )


def _create(settings: FrontendSettings) -> HttpFrontend | None:
    return HttpFrontend(settings.options) if settings.options.allow_http else None


@hookimpl
def triton_register_frontends(registry: FrontendRegistry) -> None:
    registry.add("http", _create)
