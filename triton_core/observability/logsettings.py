"""The server's log: Triton's line layouts, level switches and verbose levels, set at run time.

One :class:`LogControl` per process (:data:`LOG`), as Triton has one logger: the CLI configures
it from ``--log-*`` and the logging extension (``/v2/logging``, gRPC ``LogSettings``) reads and
changes it. Verbose output is scoped: only the ``triton_core`` logger tree and the loggers of
registered plugins log below INFO, never third-party libraries.

Verbose level ``n`` shows records down to logging level ``DEBUG - (n - 1)``: ``logger.debug`` is
verbose level 1, ``logger.log(DEBUG - 1, ...)`` level 2, and so on.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any, Final, TextIO

#: ``--log-format`` values: Triton's two, and one JSON object per line beyond Triton
LOG_FORMATS: Final = ("default", "ISO8601", "json")
#: Triton's switch: ``0`` logs messages as they are instead of JSON-escaped
ESCAPE_ENV: Final = "TRITON_SERVER_ESCAPE_LOG_MESSAGES"
#: the logger tree of the core itself
CORE_LOGGER: Final = "triton_core"

_LEVEL_LETTERS: Final = {logging.WARNING: "W", logging.ERROR: "E", logging.CRITICAL: "E"}


@dataclass(frozen=True, slots=True)
class LogSettings:
    """What ``--log-*`` sets and the logging extension reports, with Triton's defaults."""

    #: "" logs to the console (INFO to stdout, WARNING and ERROR to stderr, as Triton)
    file: str = ""
    info: bool = True
    warning: bool = True
    error: bool = True
    verbose: int = 0
    format: str = "default"

    def as_extension(self) -> dict[str, Any]:
        """The logging extension's answer, with Triton's keys in Triton's order."""
        return {
            "log_file": self.file,
            "log_info": self.info,
            "log_warning": self.warning,
            "log_error": self.error,
            "log_verbose_level": self.verbose,
            "log_format": self.format,
        }


def _verbose_threshold(verbose: int) -> int:
    """The lowest logging level that verbose level ``verbose`` shows."""
    return logging.INFO if verbose <= 0 else max(1, logging.DEBUG - (verbose - 1))


class TritonFormatter(logging.Formatter):
    """Triton's layouts: ``default`` ``I1201 21:51:19.123456 1234 server.py:123] "msg"``,
    ``ISO8601`` ``2026-12-01T21:51:19Z I 1234 server.py:123] "msg"`` (UTC, as Triton), and
    ``json``. Messages are JSON-escaped as Triton does, so no client-chosen text (a model
    name with a newline) can forge a log line; ``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0`` turns
    that off.
    """

    def __init__(self, layout: str = "default", escape: bool = True) -> None:
        super().__init__()
        self.layout = layout
        self.escape = escape

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            message = f"{message}\n{record.exc_text}"
        if self.layout == "json":
            return self._json(record, message)
        text = json.dumps(message, ensure_ascii=False) if self.escape else message
        letter = _LEVEL_LETTERS.get(record.levelno, "I")  # Triton logs verbose lines as I
        seconds = int(record.created)
        utc = time.gmtime(seconds)
        where = f"{record.process} {record.filename}:{record.lineno}]"
        if self.layout == "ISO8601":
            return f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', utc)} {letter} {where} {text}"
        micros = int((record.created - seconds) * 1_000_000)
        return f"{letter}{time.strftime('%m%d %H:%M:%S', utc)}.{micros:06d} {where} {text}"

    def _json(self, record: logging.LogRecord, message: str) -> str:
        seconds = int(record.created)
        micros = int((record.created - seconds) * 1_000_000)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
        level = record.levelname if record.levelno >= logging.INFO else "VERBOSE"
        return json.dumps(
            {
                "timestamp": f"{stamp}.{micros:06d}Z",
                "level": level,
                "pid": record.process,
                "file": record.filename,
                "line": record.lineno,
                "logger": record.name,
                "message": message,
            },
            ensure_ascii=False,
        )


class _SeverityGate(logging.Filter):
    """Drops the severities that ``--log-info/--log-warning/--log-error`` switch off and
    verbose records above the verbose level."""

    def __init__(self, control: LogControl) -> None:
        super().__init__()
        self._control = control

    def filter(self, record: logging.LogRecord) -> bool:
        settings = self._control.settings
        level = record.levelno
        if level >= logging.ERROR:
            return settings.error
        if level >= logging.WARNING:
            return settings.warning
        if level >= logging.INFO:
            return settings.info
        return level >= _verbose_threshold(settings.verbose)


class _ConsoleHandler(logging.Handler):
    """Triton's console: INFO and verbose lines to stdout, WARNING and ERROR to stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        stream: TextIO = sys.stderr if record.levelno >= logging.WARNING else sys.stdout
        try:
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


class LogControl:
    """The process's log settings, the handler that applies them, and the loggers they scope."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.settings = LogSettings()
        self._handler: logging.Handler | None = None
        self._formatter = TritonFormatter(escape=os.environ.get(ESCAPE_ENV) != "0")
        self._scoped: set[str] = {CORE_LOGGER}

    def configure(self, settings: LogSettings, plugin_loggers: Iterable[str] = ()) -> None:
        """Install the handler on the root logger (replacing any) and apply ``settings``.

        Raises OSError when the log file cannot be opened (append mode, as Triton).
        """
        handler: logging.Handler
        if settings.file:
            handler = logging.FileHandler(settings.file, mode="a", encoding="utf-8")
        else:
            handler = _ConsoleHandler()
        handler.setFormatter(self._formatter)
        handler.addFilter(_SeverityGate(self))
        root = logging.getLogger()
        with self._lock:
            for old in list(root.handlers):
                root.removeHandler(old)
                old.close()
            root.addHandler(handler)
            # third-party libraries log INFO and above; their debug output is never wanted
            root.setLevel(logging.INFO)
            self._handler = handler
            self._scoped.update(plugin_loggers)
        self.apply(settings)

    def scope(self, logger_names: Iterable[str]) -> None:
        """Add loggers that ``--log-verbose`` reaches (those of plugins registered later)."""
        with self._lock:
            self._scoped.update(logger_names)
        self.apply(self.settings)

    def apply(self, settings: LogSettings) -> None:
        with self._lock:
            self.settings = settings
            self._formatter.layout = settings.format
            threshold = _verbose_threshold(settings.verbose)
            for name in self._scoped:
                logging.getLogger(name).setLevel(threshold)

    def update(self, **changes: Any) -> LogSettings:
        """Change some settings (``LogSettings`` field names); the settings now."""
        settings = replace(self.settings, **changes)
        self.apply(settings)
        return settings


#: the process's log (Triton's global logger)
LOG: Final = LogControl()


def plugin_logger_names(plugins: Iterable[object]) -> set[str]:
    """The top-level package names of plugin objects (modules, classes or instances)."""
    names = set()
    for plugin in plugins:
        if isinstance(plugin, ModuleType):
            module = plugin.__name__
        else:
            module = getattr(plugin, "__module__", None) or type(plugin).__module__
        names.add(module.split(".")[0])
    return names


class HeldRecords(logging.Handler):
    """Holds what is logged before the log settings are known (plugin discovery runs before
    the command line is parsed, since plugins add flags), to :meth:`replay` once they are."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._core_level = logging.NOTSET

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> HeldRecords:
        core = logging.getLogger(CORE_LOGGER)
        self._core_level = core.level
        core.setLevel(logging.INFO)  # the core's INFO lines are kept, as once configured
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        logging.getLogger().removeHandler(self)
        logging.getLogger(CORE_LOGGER).setLevel(self._core_level)

    def replay(self) -> None:
        """Log the held records again through the handlers configured now (without any:
        Python's last resort, which prints warnings and errors to stderr)."""
        records, self.records = self.records, []
        for record in records:
            logger = logging.getLogger(record.name)
            if logger.isEnabledFor(record.levelno):
                logger.handle(record)
