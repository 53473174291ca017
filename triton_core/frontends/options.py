"""The settings of the built-in frontends and of the run (exit timeout, ports file,
``--workers``): what ``serve``'s flags set (``triton_core/flags/``) and every frontend factory
gets as ``FrontendSettings.options``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from triton_core.frontends.cloud import SageMakerOptions, VertexAiOptions
from triton_core.frontends.grpc.limits import DEFAULT_LIMITS, GrpcLimits
from triton_core.frontends.restricted import Restrictions
from triton_core.frontends.tls import TlsOptions
from triton_core.observability.metrics_options import MetricsOptions

if TYPE_CHECKING:
    from triton_core.frontends.http.codec import JsonLimits
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.http.protocol import HttpLimits
    from triton_core.frontends.server_api import ServerAPI

__all__ = ["FrontendOptions"]


@dataclass(slots=True)
class FrontendOptions:
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    #: limits and timeouts of every HTTP/1.1 client (docs/security.md), metrics included;
    #: None: the defaults
    http_limits: HttpLimits | None = None
    #: caps on the JSON of HTTP requests; None: the defaults
    http_json_limits: JsonLimits | None = None
    http_keepalive_timeout_secs: float = 75.0
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    #: "http2" (the built-in transport) or "grpcio" (grpc.aio)
    grpc_transport: str = "http2"
    grpc_limits: GrpcLimits = DEFAULT_LIMITS
    allow_metrics: bool = True
    #: None: the HTTP address, as Triton does
    metrics_address: str | None = None
    metrics_port: int = 8002
    metrics: MetricsOptions = field(default_factory=MetricsOptions)
    #: seconds the whole stop may take after a stop signal: draining the frontends, requests
    #: in flight, unloading; what still runs then is aborted and the process exits (code 1)
    exit_timeout_secs: float = 30.0
    #: ``--http-use-ssl*`` / ``--grpc-use-ssl*``; the metrics endpoint stays plain HTTP
    http_tls: TlsOptions = field(default_factory=lambda: TlsOptions("--http"))
    grpc_tls: TlsOptions = field(default_factory=lambda: TlsOptions("--grpc"))
    #: ``--http-restricted-api`` / ``--grpc-restricted-protocol``, by API group
    http_restrictions: Restrictions = field(default_factory=dict)
    grpc_restrictions: Restrictions = field(default_factory=dict)
    #: ``--ports-file``: where to write the bound ports as JSON once every frontend listens
    ports_file: str | None = None
    #: ``--allow-sagemaker`` / ``--allow-vertex-ai`` and their settings (off by default)
    sagemaker: SageMakerOptions = field(default_factory=SageMakerOptions)
    vertex_ai: VertexAiOptions = field(default_factory=VertexAiOptions)
    #: ``--reuse-http-port`` / ``--reuse-grpc-port``: SO_REUSEPORT on the listening sockets
    reuse_http_port: bool = False
    reuse_grpc_port: bool = False
    #: ``--grpc-infer-response-compression-level``: none, low, medium or high
    grpc_compression_level: str = "none"
    #: ``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: matching
    #: request headers become request parameters; None: none are
    http_header_forward_pattern: re.Pattern[str] | None = None
    grpc_header_forward_pattern: re.Pattern[str] | None = None
    #: ``--http-thread-count``: threads that decode large HTTP infer bodies off the event
    #: loop (SageMaker and Vertex AI have their own, from their options); None: 2
    http_thread_count: int | None = None
    #: ``--grpc-infer-thread-count``: threads that inflate compressed gRPC requests; None: 2
    grpc_infer_thread_count: int | None = None
    #: ``--grpc-infer-allocation-pool-size``: buffers of large gRPC request messages kept
    #: for reuse; None: Triton's 8
    grpc_allocation_pool_size: int | None = None
    #: ``--workers``: every listener sets SO_REUSEPORT, so that the workers share its port
    reuse_port: bool = False
    #: builds the ``/metrics`` app instead of the one-process app (``--workers``)
    metrics_app_factory: Callable[[ServerAPI, MetricsOptions], ASGIApp] | None = None
