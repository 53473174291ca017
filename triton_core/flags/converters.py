"""The flags whose values make one option together (TLS, limits, metrics, cache ...) or are
checked against another flag: each :class:`Converter` here is named by the rows of the table
whose values it reads."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from typing import Any

from triton_core.flags.model import Converter
from triton_core.frontends import cloud
from triton_core.frontends.grpc import limits as grpc_limits
from triton_core.frontends.restricted import GRPC_HEADER_PREFIX, parse_restrictions
from triton_core.frontends.tls import TlsOptions
from triton_core.observability.metrics_options import MetricsOptions
from triton_core.observability.statistics import DEFAULT_LATENCY_BUCKETS_MS
from triton_core.observability.tracing import settings as trace_settings
from triton_core.shared_memory.registry import SharedMemoryOptions

logger = logging.getLogger("triton_core")

Fields = Mapping[str, Any]


def _repositories(args: argparse.Namespace) -> Fields:
    return {"server.model_repositories": cloud.model_repositories(args.model_repository)}


def _auto_complete(args: argparse.Namespace) -> Fields:
    given = args.disable_auto_complete_config or args.strict_model_config
    return {"server.auto_complete_config": not given}


def _backend_options(args: argparse.Namespace) -> Fields:
    options: dict[str, dict[str, str]] = {}
    for backend, key, value in args.backend_config:
        options.setdefault(backend, {})[key] = value
    return {"server.backend_options": options}


def _cache(args: argparse.Namespace) -> Fields:
    """The one cache that ``--cache-config`` names."""
    settings = args.cache_config
    names = {name for name, _, _ in settings}
    if args.response_cache_byte_size is not None:
        names.add("local")
        settings = [*settings, ("local", "size", str(args.response_cache_byte_size))]
    if not names:
        return {"server.cache": None}
    if len(names) > 1 or "" in names:
        raise ValueError(
            f"--cache-config must name one cache as <cache>,<key>=<value> (got {sorted(names)})"
        )
    return {"server.cache": (names.pop(), {key: value for _, key, value in settings})}


def _rate_limit_resources(args: argparse.Namespace) -> Fields:
    if args.rate_limit_resource and args.rate_limit == "off":
        logger.warning("--rate-limit-resource has no effect: --rate-limit is off")
    return {"server.rate_limit_resources": args.rate_limit_resource}


def _shared_memory(args: argparse.Namespace) -> Fields:
    options = SharedMemoryOptions(
        args.allow_client_shm, args.shm_max_regions, args.shm_max_total_byte_size
    )
    return {"server.shared_memory": options}


def _not_negative(flag: str, into: str) -> Converter:
    """The value as it is, refused below 0 (0 has a meaning: off, or the system's default)."""
    dest = flag.lstrip("-").replace("-", "_")

    def build(args: argparse.Namespace) -> Fields:
        value = getattr(args, dest)
        if value < 0:
            raise ValueError(f"{flag} must not be negative")
        return {into: value}

    return Converter(f"{flag} (not negative)", build)


def _http_limits(args: argparse.Namespace) -> Fields:
    # imported here: only a server that serves HTTP needs the frontend's modules
    from triton_core.frontends.http.codec import JsonLimits
    from triton_core.frontends.http.protocol import HttpLimits

    limits = HttpLimits(
        header_timeout=args.http_header_timeout_secs,
        body_timeout=args.http_body_timeout_secs,
        max_header_size=args.http_max_header_size,
        max_header_count=args.http_max_header_count,
        max_connections=args.http_max_connections,
        max_body_size=args.http_max_input_size,
        max_buffered_input=args.http_max_buffered_input,
    )
    json = JsonLimits(args.http_max_json_elements, args.http_max_json_depth)
    return {"frontends.http_limits": limits, "frontends.http_json_limits": json}


def _tls(prefix: str) -> Converter:
    """``--<prefix>-use-ssl`` and the rest, as tritonserver's ``--grpc-use-ssl`` family."""

    def build(args: argparse.Namespace) -> Fields:
        options = TlsOptions(
            flag_prefix=f"--{prefix}",
            use_ssl=getattr(args, f"{prefix}_use_ssl"),
            use_ssl_mutual=getattr(args, f"{prefix}_use_ssl_mutual"),
            server_cert=getattr(args, f"{prefix}_server_cert"),
            server_key=getattr(args, f"{prefix}_server_key"),
            root_cert=getattr(args, f"{prefix}_root_cert"),
            handshake_timeout=getattr(args, f"{prefix}_ssl_handshake_timeout_secs"),
        )
        return {f"frontends.{prefix}_tls": options}

    return Converter(f"--{prefix}-use-ssl and the rest", build)


def _http_restrictions(args: argparse.Namespace) -> Fields:
    restrictions = parse_restrictions(args.http_restricted_api, "--http-restricted-api")
    return {"frontends.http_restrictions": restrictions}


def _grpc_restrictions(args: argparse.Namespace) -> Fields:
    restrictions = parse_restrictions(
        args.grpc_restricted_protocol, "--grpc-restricted-protocol", GRPC_HEADER_PREFIX
    )
    return {"frontends.grpc_restrictions": restrictions}


def _grpc_limits(args: argparse.Namespace) -> Fields:
    limits = grpc_limits.from_arguments(args)
    if args.grpc_transport == "grpcio":
        grpc_limits.grpcio_options(limits)  # refuses what grpcio cannot honour
    return {"frontends.grpc_limits": limits}


def _http2_transport_only(args: argparse.Namespace) -> Fields:
    """The gRPC flags that only the built-in transport honours; refused with grpcio."""
    if args.grpc_transport == "grpcio":
        for flag in ("--grpc-infer-thread-count", "--grpc-infer-allocation-pool-size"):
            if getattr(args, flag[2:].replace("-", "_")) is not None:
                raise ValueError(f"{flag} applies to --grpc-transport http2 only")
    return {
        "frontends.grpc_infer_thread_count": args.grpc_infer_thread_count,
        "frontends.grpc_allocation_pool_size": args.grpc_infer_allocation_pool_size,
    }


def _metrics(args: argparse.Namespace) -> Fields:
    metrics = MetricsOptions.parse(
        args.metrics_config, args.allow_cpu_metrics, args.metrics_interval_ms
    )
    metrics.allow_gpu_metrics = args.allow_gpu_metrics
    if args.pinned_memory_pool_byte_size is not None:
        metrics.pinned_memory_pool_bytes = args.pinned_memory_pool_byte_size
    return {
        "frontends.metrics": metrics,
        "server.latency_buckets_ms": (
            DEFAULT_LATENCY_BUCKETS_MS if metrics.histogram_latencies else None
        ),
        "server.latency_summaries": metrics.summary_latencies,
    }


def _cloud(args: argparse.Namespace) -> Fields:
    sagemaker, vertex_ai = cloud.options_from(args)
    return {"frontends.sagemaker": sagemaker, "frontends.vertex_ai": vertex_ai}


def _trace(args: argparse.Namespace) -> Fields:
    return {"server.trace": trace_settings.from_arguments(args)}


REPOSITORIES = Converter("model repositories (or AIP_STORAGE_URI)", _repositories)
AUTO_COMPLETE = Converter("auto-complete config", _auto_complete)
BACKEND_OPTIONS = Converter("backend settings", _backend_options)
CACHE = Converter("response cache", _cache)
RATE_LIMIT_RESOURCES = Converter("rate-limiter resources", _rate_limit_resources)
SHARED_MEMORY = Converter("shared-memory regions", _shared_memory)
INLINE_BUDGET = _not_negative("--inline-execution-budget-us", "server.inline_execution_budget_us")
MEMORY_TRIM = _not_negative("--memory-trim-threshold", "run.memory_trim_threshold")
HTTP_LIMITS = Converter("HTTP limits", _http_limits)
HTTP_TLS = _tls("http")
GRPC_TLS = _tls("grpc")
HTTP_RESTRICTIONS = Converter("restricted HTTP APIs", _http_restrictions)
GRPC_RESTRICTIONS = Converter("restricted gRPC protocols", _grpc_restrictions)
GRPC_LIMITS = Converter("gRPC limits", _grpc_limits)
HTTP2_TRANSPORT_ONLY = Converter("gRPC threads of the http2 transport", _http2_transport_only)
METRICS = Converter("metrics", _metrics)
CLOUD = Converter("SageMaker and Vertex AI", _cloud)
TRACE = Converter("trace settings", _trace)
