"""The server's ``/metrics`` app, built once per server and shared by the endpoints that
answer ``GET /metrics`` (the metrics port, Vertex AI, the OpenAI frontend)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI

__all__ = ["metrics_app"]

#: the ``/metrics`` app of each server: the metrics and Vertex AI endpoints share it
_APPS: weakref.WeakKeyDictionary[ServerAPI, ASGIApp] = weakref.WeakKeyDictionary()


def metrics_app(server: ServerAPI, options: FrontendOptions) -> ASGIApp:
    """The server's ``/metrics`` app, built once (``options.metrics_app_factory`` builds a
    ``--workers`` process's, which sums every worker's)."""
    app = _APPS.get(server)
    if app is None:
        from triton_core.observability.metrics import create_metrics_app, create_registry

        factory = options.metrics_app_factory
        if factory is not None:
            app = factory(server, options.metrics)
        else:
            app = create_metrics_app(create_registry(server, options.metrics))  # type: ignore[arg-type]
        _APPS[server] = app
    return app
