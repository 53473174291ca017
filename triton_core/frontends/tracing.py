"""What the frontends do for a traced request: sample it, and store their own timestamps.

Sampling happens once a request's model is known; a frontend calls this module only while
``Tracer.enabled``, so untraced servers pay one attribute check per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from time import monotonic_ns
from typing import TYPE_CHECKING

from triton_core.errors import TritonError, invalid_arg, unavailable
from triton_core.observability.tracing import OPENTELEMETRY, Tracer, parse_update

if TYPE_CHECKING:
    from triton_core.observability.tracing import Trace

#: the tracer of a server that has none (a test double): never enabled
TRACING_OFF = Tracer()


def tracer_of(server: object) -> Tracer:
    """The server's tracer, or one that is always off."""
    tracer = getattr(server, "tracer", None)
    return tracer if isinstance(tracer, Tracer) else TRACING_OFF


def traceparent(headers: Iterable[tuple[bytes | str, bytes | str]]) -> str | None:
    """The W3C ``traceparent`` header (HTTP) or metadata (gRPC), if any."""
    for name, value in headers:
        if name == b"traceparent" or name == "traceparent":
            return value.decode("latin-1") if isinstance(value, bytes) else value
    return None


def start_trace(
    tracer: Tracer,
    model_name: str,
    headers: Iterable[tuple[bytes | str, bytes | str]],
    received: Iterable[tuple[str, int]],
) -> Trace | None:
    """A trace for this request if it is sampled, with the frontend's receive timestamps."""
    parent = traceparent(headers) if tracer.mode == OPENTELEMETRY else None
    trace = tracer.sample(model_name, parent)
    if trace is not None:
        for name, ns in received:
            trace.timestamp(name, ns)
    return trace


def start_http_trace(
    tracer: Tracer,
    model_name: str,
    headers: Iterable[tuple[bytes | str, bytes | str]],
    receive_start: int,
) -> Trace | None:
    """:func:`start_trace` for an HTTP request whose body has just been read in full."""
    received = (("HTTP_RECV_START", receive_start), ("HTTP_RECV_END", monotonic_ns()))
    return start_trace(tracer, model_name, headers, received)


def sent(trace: Trace, prefix: str, send_start: int) -> None:
    """The answer is written: ``<prefix>_SEND_START`` / ``_END``, and the trace ends."""
    trace.timestamp(f"{prefix}_SEND_START", send_start)
    trace.timestamp(f"{prefix}_SEND_END", monotonic_ns())
    trace.end()


def trace_setting(
    server: object,
    model_name: str,
    update: Mapping[str, Sequence[str] | None] | None,
    grpc: bool = False,
) -> dict[str, list[str]]:
    """The trace extension (HTTP and gRPC): apply ``update`` (if any) to the global settings
    (``model_name`` "") or a ready model's, then report the settings in force."""
    tracer = getattr(server, "tracer", None)
    if not isinstance(tracer, Tracer):
        raise unavailable("the server does not support tracing")
    if model_name and not _is_ready(server, model_name):
        raise invalid_arg(f"Request for unknown model : {model_name}")
    if update:
        tracer.update(model_name, parse_update(update, grpc))
    return tracer.settings(model_name).as_strings()


def _is_ready(server: object, model_name: str) -> bool:
    try:
        return bool(server.model_ready(model_name))  # type: ignore[attr-defined]
    except TritonError:
        return False
