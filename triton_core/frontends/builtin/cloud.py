"""What the SageMaker and Vertex AI frontends share: Triton's HTTP flags and the v2 app."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from triton_core.threads import OffloadThreads

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI


def http_limits_of(options: FrontendOptions) -> dict[str, Any]:
    """The HTTP endpoint's limits and restrictions, which tritonserver applies to the cloud
    endpoints too."""
    from triton_core.frontends.http.codec import DEFAULT_JSON_LIMITS
    from triton_core.frontends.http.listener import http_limits

    return {
        "max_input_size": http_limits(options).max_body_size,
        "restrictions": options.http_restrictions,
        "json_limits": options.http_json_limits or DEFAULT_JSON_LIMITS,
    }


def v2_app(server: ServerAPI, limits: dict[str, Any]) -> ASGIApp:
    """The KServe v2 app that a cloud endpoint hands the routes it does not own (infer
    through the one infer path, as on the HTTP endpoint)."""
    from triton_core.frontends.http.fast_path import create_asgi_app

    return create_asgi_app(server, **limits)


def decode_threads(count: int | None, name: str) -> OffloadThreads:
    """A cloud endpoint's decoding threads (``--sagemaker-thread-count``, ...)."""
    from triton_core.frontends.http.decoding import DEFAULT_DECODE_THREADS

    return OffloadThreads(count or DEFAULT_DECODE_THREADS, name)
