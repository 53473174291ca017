"""Request tracing: Triton's trace extension, trace files and OpenTelemetry spans."""

from __future__ import annotations

from triton_core.observability.tracing.settings import (
    OPENTELEMETRY,
    TRITON,
    SettingUpdate,
    TraceConfig,
    TraceFlags,
    TraceLevel,
    parse_trace_flags,
    parse_update,
)
from triton_core.observability.tracing.trace import Trace
from triton_core.observability.tracing.tracer import Tracer, TraceSettingsView

__all__ = [
    "OPENTELEMETRY",
    "TRITON",
    "SettingUpdate",
    "Trace",
    "TraceConfig",
    "TraceFlags",
    "TraceLevel",
    "TraceSettingsView",
    "Tracer",
    "parse_trace_flags",
    "parse_update",
]
