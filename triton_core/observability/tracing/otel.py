"""``--trace-config mode=opentelemetry``: spans exported over OTLP/HTTP, as Triton's tracer
makes them.

A traced request gives a root span ``InferRequest`` (frontend events: ``HTTP_RECV_START``
... or ``GRPC_WAITREAD_START`` ..., ``INFER_RESPONSE_COMPLETE``, ``*_SEND_*``), a span named
after the model (``REQUEST_START``, ``QUEUE_START``, ``REQUEST_END``; attributes
``triton.model_name``, ``triton.model_version``, ``triton.trace_id``,
``triton.trace_parent_id``, ``triton.request_id``) and under it a ``compute`` span
(``COMPUTE_START`` ... ``COMPUTE_END``). A child trace's model span (ensemble step, BLS
call) is a child of its parent's model span. Spans are of kind SERVER, from the tracer
``triton-server``. The OpenTelemetry SDK is imported here only: the core does not need it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from triton_core.observability.tracing.settings import DEFAULT_OTLP_URL, TraceConfig

if TYPE_CHECKING:
    from triton_core.observability.tracing.trace import Trace

TRACER_NAME = "triton-server"
ROOT_SPAN = "InferRequest"
_INSTALL = (
    "--trace-config mode=opentelemetry needs the OpenTelemetry SDK: "
    "pip install 'triton-core[otel]' (opentelemetry-sdk, opentelemetry-exporter-otlp-proto-http)"
)


class OtelExporter:
    """The tracer provider, its batch span processor and OTLP/HTTP exporter."""

    def __init__(self, config: TraceConfig) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace import SpanKind, set_span_in_context
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError as exc:
            raise ValueError(f"{_INSTALL} ({exc})") from None
        self._kind = SpanKind.SERVER
        self._in_context = set_span_in_context
        self._propagator = TraceContextTextMapPropagator()
        queue_size = int(config.otel_value("bsp_max_queue_size", "2048"))
        batch_size = int(config.otel_value("bsp_max_export_batch_size", "512"))
        if batch_size > queue_size:
            raise ValueError(
                "--trace-config opentelemetry,bsp_max_export_batch_size "
                f"({batch_size}) must be at most bsp_max_queue_size ({queue_size})"
            )
        self._processor = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=config.otel_value("url", DEFAULT_OTLP_URL)),
            max_queue_size=queue_size,
            schedule_delay_millis=float(config.otel_value("bsp_schedule_delay", "5000")),
            max_export_batch_size=batch_size,
        )
        self._provider = TracerProvider(resource=Resource.create(config.otel_resources()))
        self._provider.add_span_processor(self._processor)
        self.tracer = self._provider.get_tracer(TRACER_NAME)

    def extract(self, traceparent: str) -> Any:
        """The context of a valid W3C ``traceparent``, else None."""
        from opentelemetry.trace import get_current_span

        context = self._propagator.extract({"traceparent": traceparent})
        if not get_current_span(context).get_span_context().is_valid:
            return None
        return context

    def start_span(self, name: str, parent: Any, start_ns: int) -> Any:
        """A SERVER span under ``parent`` (a span, a context or None) from ``start_ns``."""
        context = parent
        if parent is not None and not _is_context(parent):
            context = self._in_context(parent)
        return self.tracer.start_span(name, context=context, kind=self._kind, start_time=start_ns)

    def inject(self, span: Any) -> str:
        """Triton's trace context of a span: ``{"traceparent": "00-<trace>-<span>-<flags>"}``."""
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=self._in_context(span))
        return "{" + ",".join(f'"{key}":"{value}"' for key, value in carrier.items()) + "}"

    def shutdown(self) -> None:
        """Export what is queued, then stop."""
        self._provider.shutdown()


def _is_context(value: Any) -> bool:
    from opentelemetry.context import Context

    return isinstance(value, Context)


class OtelSpans:
    """The spans of one trace, opened and closed as its timestamps come."""

    __slots__ = ("_exporter", "_model", "_offset", "_parent", "_root", "_trace")

    def __init__(self, exporter: OtelExporter, trace: Trace, parent: Any = None) -> None:
        self._exporter = exporter
        self._trace = trace
        # span times are wall-clock; the pipeline's are monotonic (as Triton's time offset)
        self._offset = time.time_ns() - time.monotonic_ns()
        self._parent = parent
        self._root: Any = None
        self._model: Any = None
        if trace.parent is None:
            self._root = exporter.start_span(ROOT_SPAN, parent, time.time_ns())

    def child(self, trace: Trace) -> OtelSpans:
        spans = OtelSpans.__new__(OtelSpans)
        spans._exporter = self._exporter
        spans._trace = trace
        spans._offset = self._offset
        spans._parent = self._model if self._model is not None else self._root
        spans._root = None
        spans._model = None
        return spans

    def context(self) -> str:
        span = self._model if self._model is not None else self._root
        return "" if span is None else self._exporter.inject(span)

    def event(self, name: str, ns: int) -> None:
        span = self._model if self._model is not None else self._root
        if span is not None:
            span.add_event(name, timestamp=ns + self._offset)

    def request_start(self, ns: int) -> None:
        trace = self._trace
        parent = self._root if trace.parent is None else self._parent
        span = self._exporter.start_span(trace.model_name, parent, ns + self._offset)
        span.set_attribute("triton.model_name", trace.model_name)
        span.set_attribute("triton.model_version", trace.model_version)
        span.set_attribute("triton.trace_id", trace.id)
        span.set_attribute("triton.trace_parent_id", trace.parent_id)
        if trace.request_id:
            span.set_attribute("triton.request_id", trace.request_id)
        span.add_event("REQUEST_START", timestamp=ns + self._offset)
        self._model = span

    def compute(self, start: int, input_end: int, output_start: int, end: int) -> None:
        offset = self._offset
        span = self._exporter.start_span("compute", self._model, start + offset)
        span.add_event("COMPUTE_START", timestamp=start + offset)
        span.add_event("COMPUTE_INPUT_END", timestamp=input_end + offset)
        span.add_event("COMPUTE_OUTPUT_START", timestamp=output_start + offset)
        span.add_event("COMPUTE_END", timestamp=end + offset)
        span.end(end_time=end + offset)

    def request_end(self) -> None:
        """REQUEST_END was recorded on the model span: it ends; the root speaks again."""
        model, self._model = self._model, None
        if model is not None:
            model.end()

    def end(self) -> None:
        model, self._model = self._model, None
        if model is not None:  # the request never reached REQUEST_END
            model.end()
        root, self._root = self._root, None
        if root is not None:
            root.end()
