"""SageMaker's ``/ping``, ``/invocations`` and multi-model routes (``--allow-sagemaker``), as
a built-in plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core.frontends.base import Endpoint, FrontendSettings
from triton_core.frontends.builtin.cloud import decode_threads, http_limits_of, v2_app
from triton_core.frontends.builtin.http_endpoint import HttpEndpointFrontend
from triton_core.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.plugins.registry import FrontendRegistry


class SageMakerFrontend(HttpEndpointFrontend):
    service = "Sagemaker HTTPService"

    def __init__(self, options: FrontendOptions) -> None:
        sagemaker = options.sagemaker
        super().__init__(
            options,
            Endpoint("SageMaker", sagemaker.address, sagemaker.port, sagemaker.safe_port_range),
        )

    def build_app(self, server: ServerAPI) -> ASGIApp:
        from triton_core.frontends.http.sagemaker import SageMakerApp

        options = self.options
        limits = http_limits_of(options)
        threads = decode_threads(options.sagemaker.thread_count, "sagemaker-infer")
        return SageMakerApp(
            server, v2_app(server, limits), options.sagemaker, threads=threads, **limits
        )


def _create(settings: FrontendSettings) -> SageMakerFrontend | None:
    return SageMakerFrontend(settings.options) if settings.options.sagemaker.allow else None


@hookimpl
def triton_register_frontends(registry: FrontendRegistry) -> None:
    registry.add("sagemaker", _create)
