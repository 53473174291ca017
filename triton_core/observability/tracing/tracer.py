"""The tracer: which requests are traced, and where their timestamps go.

As Triton's ``TraceManager``: one global setting and optional per-model settings that fall
back to it field by field; a frontend asks :meth:`Tracer.sample` for a trace per request;
only a sampled request carries a
:class:`~triton_core.observability.tracing.trace.Trace`, so the cost of tracing when it is
off is one attribute check (:attr:`Tracer.enabled`) per request.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from triton_core.errors import invalid_arg
from triton_core.observability.tracing.settings import (
    CLEAR,
    OPENTELEMETRY,
    TRITON,
    SettingUpdate,
    TraceConfig,
    TraceLevel,
)

if TYPE_CHECKING:
    from triton_core.observability.tracing.otel import OtelExporter
    from triton_core.observability.tracing.trace import Trace

logger = logging.getLogger(__name__)

#: with ``log_frequency`` 0, traces held in memory past this many bytes go to the file at
#: once rather than at shutdown (Triton holds them all: a client could make that unbounded)
SPILL_BYTES = 16 << 20
_FIELDS = ("level", "rate", "count", "log_frequency")


class TraceFile:
    """The trace file: one JSON array written as traces come, closed at shutdown, and the
    indexed files ``<file>.<n>`` that ``log_frequency`` and ``trace_count`` write.

    Writes happen in order on one thread of their own, never on the event loop.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._handle: TextIO | None = None
        self._index = itertools.count()
        self._writer: ThreadPoolExecutor | None = None
        self._closed = False

    def append(self, records: str) -> None:
        """Add records (comma-separated JSON objects) to the main file."""
        self._submit(self._append, records)

    def save_indexed(self, records: str) -> None:
        """Write records to the next ``<file>.<index>`` as one JSON array."""
        self._submit(self._write_new, f"{self.path}.{next(self._index)}", records)

    def flush(self) -> None:
        """Wait until every write so far is done."""
        if self._writer is not None:
            self._writer.submit(lambda: None).result()

    def close(self) -> None:
        """Finish the main file's array; wait for every write. Later traces are dropped."""
        self._closed = True
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.submit(self._close_main)
            writer.shutdown(wait=True)

    def _submit(self, write: Callable[..., None], *args: str) -> None:
        if self._closed:  # a request that finished after the stop: the file is complete
            logger.warning("a trace finished after the trace file was closed: not written")
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(1, thread_name_prefix="trace-file")
        self._writer.submit(write, *args)

    def _append(self, records: str) -> None:
        try:
            if self._handle is None:
                self._handle = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
                self._handle.write("[")
            else:
                self._handle.write(",")
            self._handle.write(records)
            self._handle.flush()
        except OSError as exc:
            logger.error("failed creating trace file: %s", exc)

    @staticmethod
    def _write_new(name: str, records: str) -> None:
        try:
            with open(name, "w", encoding="utf-8") as handle:
                handle.write("[" + records + "]")
        except OSError as exc:
            logger.error("failed creating trace file: %s", exc)

    def _close_main(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.write("]")
                handle.close()
            except OSError as exc:
                logger.error("failed closing trace file: %s", exc)


class TraceSetting:
    """One setting in force (global, or one model's): its values, which of them were given
    (the others follow the fallback), and its sampling state."""

    def __init__(
        self,
        values: dict[str, int],
        specified: frozenset[str],
        file: TraceFile,
        mode: str,
    ) -> None:
        self.level = TraceLevel(values["level"])
        self.rate = values["rate"]
        self.count = values["count"]
        self.log_frequency = values["log_frequency"]
        self.specified = specified
        self.file = file
        self.mode = mode
        self._seen = 0
        self._created = 0
        self._collected = 0
        self._records: list[str] = []
        self._held_bytes = 0
        self._retired = False
        self._lock = threading.Lock()
        if self.level is TraceLevel.OFF:
            self.invalid_reason = "tracing is disabled"
        elif self.rate == 0:
            self.invalid_reason = "sample rate must be non-zero"
        elif mode == TRITON and not file.path:
            self.invalid_reason = "trace file name is not given"
        else:
            self.invalid_reason = ""

    def values(self) -> dict[str, int]:
        return {
            "level": int(self.level),
            "rate": self.rate,
            "count": self.count,
            "log_frequency": self.log_frequency,
        }

    @property
    def valid(self) -> bool:
        return not self.invalid_reason and self.count != 0

    def sample(self, force: bool = False) -> bool:
        """Whether this request is traced: 1 in ``rate``, while ``count`` lasts (as Triton)."""
        hit = False
        with self._lock:
            if self.rate != 0:
                if not self.valid and not force:
                    return False
                self._seen += 1
                hit = self._seen % self.rate == 0
                if hit and self.count > 0:
                    self.count -= 1
                    self._created += 1
                elif hit and self.count == 0:
                    hit = False
                elif hit:
                    self._created += 1
        return hit or force

    def write(self, records: str) -> None:
        """One finished trace (its records, all its ids): to the file as the settings say."""
        with self._lock:
            self._records.append(records)
            self._held_bytes += len(records)
            self._collected += 1
            counted_out = self.count == 0 and self._collected >= self._created
            frequency = self.log_frequency
            if counted_out or (frequency and len(self._records) >= frequency):
                self._flush(indexed=True)
            elif self._retired or (not frequency and self._held_bytes > SPILL_BYTES):
                self._flush(indexed=bool(frequency))

    def retire(self) -> None:
        """Replaced by a new setting (or shutting down): write what it still holds."""
        with self._lock:
            self._retired = True
            self._flush(indexed=self.log_frequency != 0)

    def _flush(self, indexed: bool) -> None:
        if not self._records:
            return
        records = ",".join(self._records)
        self._records, self._held_bytes = [], 0
        if indexed:
            self.file.save_indexed(records)
        else:
            self.file.append(records)


@dataclass(frozen=True, slots=True)
class TraceSettingsView:
    """The settings in force for a model (or globally), as the trace extension reports them."""

    level: TraceLevel
    rate: int
    count: int
    log_frequency: int
    file: str
    mode: str
    #: the mode's own settings (opentelemetry: url, resource, bsp_*), in the order given
    extra: tuple[tuple[str, str], ...]

    def as_strings(self) -> dict[str, list[str]]:
        """Each setting as a list of strings, in Triton's order (gRPC's SettingValue)."""
        levels = [name for name in ("TIMESTAMPS", "TENSORS") if self.level & TraceLevel[name]]
        settings: dict[str, list[str]] = {
            "trace_level": levels or ["OFF"],
            "trace_rate": [str(self.rate)],
            "trace_count": [str(self.count)],
        }
        if self.mode == TRITON:
            settings["log_frequency"] = [str(self.log_frequency)]
            settings["trace_file"] = [self.file]
        settings["trace_mode"] = [self.mode]
        for key, value in self.extra:
            settings.setdefault(key, []).append(value)
        return settings


class Tracer:
    """The trace settings in force, and the traces they sample."""

    def __init__(self, config: TraceConfig | None = None) -> None:
        self.config = config = config or TraceConfig()
        _check_mode_level(config.mode, config.level, "--trace-config level=TENSORS")
        self.file = TraceFile(config.file)
        values = {
            "level": int(config.level),
            "rate": config.rate,
            "count": config.count,
            "log_frequency": config.log_frequency,
        }
        self._default = TraceSetting(values, frozenset(), self.file, config.mode)
        self._global = TraceSetting(values, frozenset(), self.file, config.mode)
        self._models: dict[str, TraceSetting] = {}
        #: models whose setting follows the global one in some field
        self._following: set[str] = set()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False
        self.exporter: OtelExporter | None = None
        #: False while no setting traces anything: frontends skip sampling altogether
        self.enabled = False
        self._update_enabled()

    @property
    def mode(self) -> str:
        return self.config.mode

    def start(self) -> None:
        """Set up the OpenTelemetry exporter (opentelemetry mode); raises if it cannot."""
        if self.config.mode == OPENTELEMETRY and self.exporter is None:
            from triton_core.observability.tracing.otel import OtelExporter

            self.exporter = OtelExporter(self.config)

    def close(self) -> None:
        """Write every trace still held and close the file; flush exported spans.

        Blocks (file writes, the last export): call it off the event loop. Only the first
        call does anything, so a stop that overruns may call it again without waiting.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.enabled = False
            settings = [self._global, *self._models.values()]
        for setting in settings:
            setting.retire()
        self.file.close()
        if self.exporter is not None:
            self.exporter.shutdown()
            self.exporter = None

    # -- the trace extension ------------------------------------------------------------

    def settings(self, model: str = "") -> TraceSettingsView:
        setting = self._setting_of(model)
        extra = tuple(
            (key, value) for key, value in self.config.otel if setting.mode == OPENTELEMETRY
        )
        return TraceSettingsView(
            setting.level,
            setting.rate,
            setting.count,
            setting.log_frequency,
            setting.file.path,
            setting.mode,
            extra,
        )

    def update(self, model: str, update: SettingUpdate) -> None:
        """Change the global settings (model "") or a model's; INVALID_ARG for a setting that
        would trace nothing (no file, rate 0) unless it turns tracing off, as Triton."""
        with self._lock:
            self._update(model, update)
            if not model:
                for name in list(self._following):
                    self._update(name, SettingUpdate())
            self._update_enabled()

    def _update(self, model: str, update: SettingUpdate) -> None:
        current = self._models.get(model) if model else self._global
        fallback = self._global if model else self._default
        values = fallback.values()
        specified = set()
        for name in _FIELDS:
            new = getattr(update, name)
            if new is CLEAR:
                continue
            if new is not None:
                values[name] = int(new)
                specified.add(name)
            elif current is not None and name in current.specified:
                values[name] = current.values()[name]
                specified.add(name)
        if model:
            if not specified:
                self._following.discard(model)
                old = self._models.pop(model, None)
                if old is not None:
                    old.retire()
                return
            # every field given: the model no longer follows the global setting (the file
            # never counts as given here: it cannot be changed over the network)
            self._following.add(model)
        setting = TraceSetting(values, frozenset(specified), self.file, self.config.mode)
        try:
            _check_mode_level(setting.mode, setting.level, "trace_level TENSORS")
        except ValueError as exc:
            raise invalid_arg(str(exc)) from None
        if not setting.valid and setting.level is not TraceLevel.OFF and setting.count != 0:
            raise invalid_arg(f"Attempting to set invalid trace setting :{setting.invalid_reason}")
        if model:
            self._models[model] = setting
        else:
            self._global = setting
        if current is not None:
            current.retire()

    def _setting_of(self, model: str) -> TraceSetting:
        setting = self._models.get(model) if model else None
        return setting if setting is not None else self._global

    def _update_enabled(self) -> None:
        settings = [self._global, *self._models.values()]
        self.enabled = any(setting.level is not TraceLevel.OFF for setting in settings)

    # -- sampling ---------------------------------------------------------------------------

    def sample(self, model: str, traceparent: str | None = None) -> Trace | None:
        """A new trace for a request to ``model``, or None when this one is not traced.

        In opentelemetry mode a valid W3C ``traceparent`` forces sampling and the trace
        continues it, as Triton does.
        """
        setting = self._models.get(model) or self._global
        if setting.level is TraceLevel.OFF:
            return None
        parent = None
        if setting.mode == OPENTELEMETRY and traceparent and self.exporter is not None:
            parent = self.exporter.extract(traceparent)
        if not setting.sample(force=parent is not None):
            return None
        from triton_core.observability.tracing.trace import Trace

        trace = Trace.new(self.next_id, setting)
        if setting.mode == OPENTELEMETRY:
            from triton_core.observability.tracing.otel import OtelSpans

            assert self.exporter is not None
            trace.spans = OtelSpans(self.exporter, trace, parent)
        return trace

    def next_id(self) -> int:
        return next(self._ids)


def _check_mode_level(mode: str, level: TraceLevel, what: str) -> None:
    """Triton's opentelemetry tracer records no tensors: refuse the level rather than drop it."""
    if mode == OPENTELEMETRY and level & TraceLevel.TENSORS:
        raise ValueError(f"{what} is not supported in opentelemetry trace mode")
