"""The KServe v2 gRPC frontend with Triton's extensions, as a built-in plugin."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from triton_core.frontends.base import Endpoint, Frontend, FrontendSettings
from triton_core.frontends.header_forwarding import forwarder
from triton_core.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.plugins.registry import FrontendRegistry

logger = logging.getLogger("triton_core")


class GrpcFrontend(Frontend):
    """``--allow-grpc``: GRPCInferenceService on ``--grpc-address``:``--grpc-port``, on the
    built-in HTTP/2 transport or grpc.aio (``--grpc-transport``)."""

    name = "GRPC"

    def __init__(self, options: FrontendOptions) -> None:
        self.options = options
        self.endpoint = Endpoint("GRPC", options.grpc_address, options.grpc_port)
        self._server: Any = None
        self._reuse_port = False

    def endpoints(self) -> list[Endpoint]:
        return [self.endpoint]

    def check(self) -> None:
        tls = self.options.grpc_tls
        tls.check()
        tls.server_context(["h2"])  # built again when it serves: refuse bad files now

    async def listen(self, server: ServerAPI, reuse_port: bool) -> None:
        self._reuse_port = reuse_port or self.options.reuse_grpc_port

    async def start(self, server: ServerAPI) -> None:
        # bound here, once the models are loaded, as tritonserver binds its gRPC port
        from triton_core.frontends.grpc.server import create_grpc_server

        options = self.options
        self._server = create_grpc_server(
            server,
            self.endpoint.address,
            self.endpoint.port,
            reuse_port=self._reuse_port,
            compression_level=options.grpc_compression_level,
            header_forwarder=forwarder(options.grpc_header_forward_pattern),
            transport=options.grpc_transport,  # type: ignore[arg-type]
            restrictions=options.grpc_restrictions,
            tls=options.grpc_tls,
            limits=options.grpc_limits,
            infer_threads=options.grpc_infer_thread_count,
            allocation_pool=options.grpc_allocation_pool_size,
        )
        await self._server.start()
        logger.info(
            "Started GRPCInferenceService at %s:%d%s",
            self.endpoint.address,
            self._server.port,
            " (TLS)" if options.grpc_tls.enabled else "",
        )

    def ports(self) -> dict[str, int]:
        return {} if self._server is None else {self.endpoint.key: self._server.port}

    async def stop(self, timeout: float) -> None:
        if self._server is not None:
            await self._server.stop(timeout)


def _create(settings: FrontendSettings) -> GrpcFrontend | None:
    return GrpcFrontend(settings.options) if settings.options.allow_grpc else None


@hookimpl
def triton_register_frontends(registry: FrontendRegistry) -> None:
    registry.add("grpc", _create)
