"""Prometheus metrics with Triton's names on ``--metrics-port``, as a built-in plugin."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core.frontends.base import Endpoint, FrontendSettings
from triton_core.frontends.builtin.http_endpoint import HttpEndpointFrontend
from triton_core.frontends.builtin.metrics_app import metrics_app
from triton_core.plugins.hookspecs import hookimpl

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.plugins.registry import FrontendRegistry


class MetricsFrontend(HttpEndpointFrontend):
    """``--allow-metrics``: ``GET /metrics`` on ``--metrics-address``:``--metrics-port``."""

    service = "Metrics Service"

    def __init__(self, options: FrontendOptions) -> None:
        address = options.metrics_address or options.http_address
        super().__init__(options, Endpoint("metrics", address, options.metrics_port))

    def build_app(self, server: ServerAPI) -> ASGIApp:
        return metrics_app(server, self.options)


def _create(settings: FrontendSettings) -> MetricsFrontend | None:
    return MetricsFrontend(settings.options) if settings.options.allow_metrics else None


@hookimpl
def triton_register_frontends(registry: FrontendRegistry) -> None:
    registry.add("metrics", _create)
