"""Triton's log line layouts, message escaping, and which records the settings let through."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

from triton_core.observability.logsettings import (
    LogControl,
    LogSettings,
    TritonFormatter,
    _SeverityGate,
    plugin_logger_names,
)

#: 2026-12-01 21:51:19.123456 UTC
CREATED = 1796161879.123456


def record(
    message: str, level: int = logging.INFO, name: str = "triton_core.server.core"
) -> logging.LogRecord:
    item = logging.LogRecord(name, level, "/src/triton_core/server.py", 123, message, None, None)
    item.created = CREATED
    item.process = 4321
    return item


def test_default_layout_is_tritons() -> None:
    line = TritonFormatter("default").format(record("Started HTTPService at 0.0.0.0:8000"))
    assert line == 'I1201 21:51:19.123456 4321 server.py:123] "Started HTTPService at 0.0.0.0:8000"'


def test_iso8601_layout_is_tritons() -> None:
    line = TritonFormatter("ISO8601").format(record("failed", logging.ERROR))
    assert line == '2026-12-01T21:51:19Z E 4321 server.py:123] "failed"'


@pytest.mark.parametrize(("level", "letter"), [(logging.WARNING, "W"), (logging.DEBUG, "I")])
def test_level_letters(level: int, letter: str) -> None:
    assert TritonFormatter().format(record("m", level)).startswith(f"{letter}1201 ")


def test_a_message_cannot_forge_a_line() -> None:
    """A model name a client chose, with a newline and a fake line after it, stays one line."""
    forged = "model 'x\nE1201 00:00:00.000000 1 server.py:1] \"owned\"'"
    line = TritonFormatter().format(record(forged))
    assert "\n" not in line
    assert json.loads(line.split("] ", 1)[1]) == forged


def test_escaping_can_be_turned_off_as_in_triton() -> None:
    line = TritonFormatter(escape=False).format(record('a "quoted" word'))
    assert line.endswith('] a "quoted" word')


def test_json_layout_is_one_object_per_line() -> None:
    line = TritonFormatter("json").format(record("two\nlines", logging.DEBUG, "triton_core_onnx.x"))
    assert "\n" not in line
    assert json.loads(line) == {
        "timestamp": "2026-12-01T21:51:19.123456Z",
        "level": "VERBOSE",
        "pid": 4321,
        "file": "server.py",
        "line": 123,
        "logger": "triton_core_onnx.x",
        "message": "two\nlines",
    }


@pytest.fixture
def restored_levels() -> Iterator[None]:
    """LogControl sets logger levels process-wide: put them back for the other tests."""
    names = ("triton_core", "some_plugin")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.mark.usefixtures("restored_levels")
def test_settings_gate_severities_and_scope_verbose_levels() -> None:
    control = LogControl()
    control.scope(["some_plugin"])
    control.apply(LogSettings(verbose=2, warning=False))
    assert logging.getLogger("triton_core.server.core").isEnabledFor(logging.DEBUG - 1)
    assert logging.getLogger("some_plugin.module").isEnabledFor(logging.DEBUG)
    assert not logging.getLogger("some_plugin.module").isEnabledFor(logging.DEBUG - 2)
    gate = _SeverityGate(control)
    assert not gate.filter(record("w", logging.WARNING))
    assert gate.filter(record("e", logging.ERROR))
    assert gate.filter(record("v2", logging.DEBUG - 1))
    assert not gate.filter(record("v3", logging.DEBUG - 2))
    control.apply(LogSettings())
    assert not logging.getLogger("triton_core.server.core").isEnabledFor(logging.DEBUG)


def test_plugin_logger_names_are_top_level_packages() -> None:
    import triton_core.scheduling.default as module

    class Plugin:
        pass

    assert plugin_logger_names([module, Plugin()]) == {"triton_core", __name__.split(".")[0]}


def test_held_records_are_replayed_through_the_handlers_configured_later():
    import logging

    from triton_core.observability.logsettings import HeldRecords

    with HeldRecords() as held:
        logging.getLogger("triton_core.plugins.manager").info("held info")
        logging.getLogger("triton_core.plugins.manager").debug("held debug")
        logging.getLogger("some_library").warning("held warning")
    assert [r.getMessage() for r in held.records] == ["held info", "held warning"]
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    root = logging.getLogger()
    handler, level = Collect(), root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)  # configured later: INFO is off now
    try:
        held.replay()
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert seen == ["held warning"]
    assert held.records == []
