"""Vertex AI's predict and health routes (``--allow-vertex-ai``), as a built-in plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core.frontends.base import Endpoint, FrontendSettings
from triton_core.frontends.builtin.cloud import decode_threads, http_limits_of, v2_app
from triton_core.frontends.builtin.http_endpoint import HttpEndpointFrontend
from triton_core.frontends.builtin.metrics_app import metrics_app
from triton_core.frontends.cloud import vertex_ai_refused
from triton_core.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.plugins.registry import FrontendRegistry


class VertexAiFrontend(HttpEndpointFrontend):
    service = "Vertex AI HTTPService"

    def __init__(self, options: FrontendOptions) -> None:
        vertex_ai = options.vertex_ai
        super().__init__(options, Endpoint("Vertex AI", vertex_ai.address, vertex_ai.port))

    def check(self) -> None:
        self.options.vertex_ai.check_routes()

    def build_app(self, server: ServerAPI) -> ASGIApp:
        from triton_core.frontends.http.vertex_ai import VertexAiApp, default_model

        options = self.options
        vertex_ai = options.vertex_ai
        try:
            model = default_model(server, vertex_ai.default_model)
        except ValueError as exc:
            raise vertex_ai_refused(str(exc)) from None
        predict, health = vertex_ai.check_routes()
        limits = http_limits_of(options)
        return VertexAiApp(
            server,
            v2_app(server, limits),
            predict_route=predict,
            health_route=health,
            model_name=model,
            metrics_app=metrics_app(server, options) if options.allow_metrics else None,
            threads=decode_threads(vertex_ai.thread_count, "vertex-ai-infer"),
            **limits,
        )


def _create(settings: FrontendSettings) -> VertexAiFrontend | None:
    return VertexAiFrontend(settings.options) if settings.options.vertex_ai.allow else None


@hookimpl
def triton_register_frontends(registry: FrontendRegistry) -> None:
    registry.add("vertex_ai", _create)
