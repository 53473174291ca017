"""Whose failure it is: plugin attribution for error messages, and logs that do not flood.

Every error that a plugin causes names the plugin (and its distribution where known) and the
exception type, so that an operator knows whom to ask. Failures that repeat per request or
per batch are logged once with their traceback, then counted.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

#: seconds between two summaries of a repeating failure
REPEAT_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class PluginOrigin:
    """The plugin behind a backend, cache or strategy, as error messages name it."""

    #: what the plugin provides: "backend", "cache", "batch strategy" ...
    kind: str
    #: the name a config selects it by
    name: str
    #: the plugin's registered name
    plugin: str
    #: the installed distribution and its version ("" when not installed as one)
    distribution: str = ""
    version: str = ""

    def __str__(self) -> str:
        where = f"plugin {self.plugin}"
        if self.distribution:
            where += f", {self.distribution} {self.version}".rstrip()
        return f"{self.kind} '{self.name}' ({where})"


def model_label(name: str, version: int | None = None, instance: str = "") -> str:
    """``model 'm' version 1 instance 'm_0'``, leaving out what is not known."""
    label = f"model '{name}'"
    if version is not None and version >= 0:
        label += f" version {version}"
    if instance:
        label += f" instance '{instance}'"
    return label


def exception_text(exc: BaseException) -> str:
    """``KeyError: 'x'``: the type as well as the message (a KeyError's is only its quotes)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def raised(where: str, origin: PluginOrigin | str, exc: BaseException, method: str = "") -> str:
    """``model 'm' version 1: backend 'x' (plugin p, dist 1.0) raised KeyError: 'x'``.

    ``method`` names the plugin method that raised, when that helps (``load_model``).
    """
    message = f"{where}: {origin} raised {exception_text(exc)}"
    return f"{message} in {method}()" if method else message


class RepeatedFailureLog:
    """Logs the first failure of each kind with its traceback, then only a count.

    A kind is whatever the caller groups by (an exception type, a method name). Repeats are
    summarised at most every ``interval`` seconds, so a failure on every request logs a line
    a minute, not a traceback per request. Safe to call from any thread.
    """

    def __init__(
        self,
        logger: logging.Logger,
        subject: str,
        *,
        level: int = logging.ERROR,
        interval: float = REPEAT_INTERVAL_S,
    ) -> None:
        self._logger = logger
        self._level = level
        self._subject = subject
        self._interval = interval
        self._lock = threading.Lock()
        #: kind -> [failures not yet reported, monotonic time of the last report]
        self._seen: dict[object, list[float]] = {}
        self.total = 0

    def failed(self, kind: object, message: str, exc: BaseException | None = None) -> None:
        """Record one failure; log it if it is the first of its kind or a summary is due."""
        now = time.monotonic()
        with self._lock:
            self.total += 1
            seen = self._seen.get(kind)
            if seen is None:
                self._seen[kind] = [0, now]
                first = True
                repeats = 0
            else:
                seen[0] += 1
                first = False
                repeats = int(seen[0])
                if now - seen[1] < self._interval:
                    return
                seen[0] = 0
                seen[1] = now
        if first:
            self._logger.log(
                self._level,
                "%s: %s (logged once; repeats are counted)",
                self._subject,
                message,
                exc_info=exc,
            )
        else:
            self._logger.log(
                self._level,
                "%s: %s (%d more time(s) since last reported)",
                self._subject,
                message,
                repeats,
            )
