"""``--log-*`` and the logging extension, on a real server with tritonclient.

The line patterns are those of Triton's own test of its log formats (qa/L0_logging).
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.plugins import log_plugin
from tests.support import ServerProcess, refused_start_log, serve_until_done

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")

DEFAULT_LINE = re.compile(
    r"(?P<level>\w)(?P<month>\d{2})(?P<day>\d{2}) (?P<timestamp>\d{2}:\d{2}:\d{2}\.\d{6}) "
    r"(?P<pid>\d+) (?P<file>[\w\.]+):(?P<line>\d+)] (?P<message>.*)"
)
ISO8601_LINE = re.compile(
    r"(?P<ISO8601_timestamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z) (?P<level>\w+) (?P<pid>\d+) "
    r"(?P<file>.+):(?P<line>\d+)] (?P<message>.*)"
)
PLUGIN_ENV = {"TRITON_CORE_PLUGINS": log_plugin.__name__}


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logging_models")
    onnx_builders.add_sub(root / "add" / "1" / "model.onnx", "FP32", 4)
    return root


def _wait_for(path: Path, text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        assert time.monotonic() < deadline, f"{text!r} not in {path} within {timeout}s:\n{content}"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def logged(repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """A server logging to a file that already holds a line (the file is appended to)."""
    log_file = tmp_path_factory.mktemp("logging") / "server.log"
    log_file.write_text("a line from before\n")
    process = ServerProcess(
        [repository],
        "--log-file", str(log_file),
        "--log-verbose", "1",
        "--grpc-infer-allocation-pool-size", "16",
        "--cuda-memory-pool-byte-size", "0:1024",
        env=PLUGIN_ENV,
    )  # fmt: skip
    for running in serve_until_done(process):
        _wait_for(log_file, log_plugin.WARNING_LINE)
        yield running, log_file


def test_log_file_is_appended_in_tritons_default_layout(logged: tuple) -> None:
    process, log_file = logged
    lines = log_file.read_text().splitlines()
    assert lines[0] == "a line from before"
    assert len(lines) > 3
    for line in lines[1:]:
        match = DEFAULT_LINE.fullmatch(line)
        assert match, line
        assert match["level"] in "IWE"
        assert int(match["pid"]) == process.process.pid
        # messages are JSON-escaped, as Triton escapes them
        assert json.loads(match["message"]), line
    assert any("Started HTTPService" in line for line in lines)
    # everything goes to the file, nothing to the console
    assert "Started HTTPService" not in process.log()


def test_flags_without_effect_say_so_once_at_start(logged: tuple) -> None:
    _, log_file = logged
    text = log_file.read_text()
    assert text.count("--cuda-memory-pool-byte-size has no effect here") == 1
    assert "--grpc-infer-allocation-pool-size has no effect" not in text  # it has one
    assert "--grpc-max-response-pool-size" not in text  # not given: not named


def test_the_start_is_logged_once(logged: tuple) -> None:
    """One line for the process, though HTTP and metrics each run a server of their own."""
    _, log_file = logged
    assert log_file.read_text().count("Started server process") == 1


def test_verbose_reaches_core_and_plugins_not_libraries(logged: tuple) -> None:
    _, log_file = logged
    text = log_file.read_text()
    assert log_plugin.PLUGIN_LINE in text
    assert log_plugin.LIBRARY_LINE not in text


def _send_too_many_headers(port: int) -> None:
    """A request the HTTP protocol refuses (431), which it logs at verbose level 1."""
    headers = "".join(f"X-Header-{index}: value\r\n" for index in range(150))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET /v2 HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 431")


def test_logging_extension_over_http_changes_the_log_at_run_time(logged: tuple) -> None:
    process, log_file = logged
    client = httpclient.InferenceServerClient(process.http_url)
    try:
        settings = client.get_log_settings()
        assert settings == {
            "log_file": str(log_file),
            "log_info": True,
            "log_warning": True,
            "log_error": True,
            "log_verbose_level": 1,
            "log_format": "default",
        }
        assert "logging" in client.get_server_metadata()["extensions"]

        settings = client.update_log_settings({"log_verbose_level": 0, "log_format": "ISO8601"})
        assert settings["log_verbose_level"] == 0 and settings["log_format"] == "ISO8601"
        _send_too_many_headers(process.http_port)
        settings = client.update_log_settings({"log_verbose_level": 1})
        _send_too_many_headers(process.http_port)
        text = _wait_for(log_file, "HTTP 431")
        assert text.count("HTTP 431") == 1  # only once verbose was on again
        last = text.splitlines()[-1]
        assert ISO8601_LINE.fullmatch(last), last

        # Triton's messages for what cannot be set, or not so
        for body, message in (
            ({"log_file": "/tmp/elsewhere"}, "log file location can not be updated"),
            ({"log_info": "yes"}, "attempt to access JSON non-boolean as boolean"),
            ({"log_verbose_level": -1}, "non-unsigned-integer as unsigned-integer"),
            ({"log_format": "XML"}, "invalid argument for --log_format, got: XML"),
        ):
            with pytest.raises(InferenceServerException, match=message):
                client.update_log_settings(body)
        assert client.get_log_settings()["log_format"] == "ISO8601"
    finally:
        client.update_log_settings({"log_format": "default", "log_verbose_level": 1})
        client.close()


def test_logging_extension_over_grpc(logged: tuple) -> None:
    process, log_file = logged
    client = grpcclient.InferenceServerClient(process.grpc_url)
    try:
        settings = client.get_log_settings(as_json=True)["settings"]
        assert settings["log_file"] == {"string_param": str(log_file)}
        assert settings["log_verbose_level"] == {"uint32_param": 1}
        settings = client.update_log_settings({"log_info": False}, as_json=True)["settings"]
        assert settings["log_info"] == {"bool_param": False}
        client.update_log_settings({"log_info": True})
        assert "logging" in client.get_server_metadata().extensions

        for settings, message in (
            ({"log_file": "/tmp/elsewhere"}, "log file location can not be updated"),
            ({"log_warning": None}, "expect boolean for 'log_warning'"),
            ({"log_format": "XML"}, "invalid argument for log_format, got: XML"),
        ):
            with pytest.raises(InferenceServerException, match=message):
                client.update_log_settings(settings)
    finally:
        client.close()


def test_log_switches_iso8601_and_restriction_on_the_console(repository: Path) -> None:
    process = ServerProcess(
        [repository],
        "--log-format", "ISO8601",
        "--log-warning=false",
        "--log-error", "true",
        "--http-restricted-api", "logging:admin-key=secret",
        "--grpc-restricted-protocol", "logging:admin-key=secret",
        env=PLUGIN_ENV,
    )  # fmt: skip
    try:
        process.wait_ready()
        http = httpclient.InferenceServerClient(process.http_url)
        grpc = grpcclient.InferenceServerClient(process.grpc_url)
        try:
            with pytest.raises(InferenceServerException, match="This API is restricted"):
                http.get_log_settings()
            with pytest.raises(InferenceServerException, match="This protocol is restricted"):
                grpc.get_log_settings()
            settings = http.get_log_settings(headers={"admin-key": "secret"})
            assert (settings["log_info"], settings["log_warning"]) == (True, False)
            metadata = {"triton-grpc-protocol-admin-key": "secret"}
            assert grpc.get_log_settings(headers=metadata, as_json=True)["settings"][
                "log_format"
            ] == {"string_param": "ISO8601"}
        finally:
            http.close()
            grpc.close()
    finally:
        code = process.stop()
    log = process.log()
    assert code == 0, log[-4000:]
    (started,) = [line for line in log.splitlines() if "Started HTTPService" in line]
    assert ISO8601_LINE.fullmatch(started), started
    assert log_plugin.WARNING_LINE not in log  # warnings were off
    assert log_plugin.PLUGIN_LINE not in log  # not verbose


def test_log_info_false_hides_info_lines_only(repository: Path) -> None:
    with ServerProcess([repository], "--log-info", "false", env=PLUGIN_ENV) as process:
        process.wait_ready()
        _wait_for(process.log_path, log_plugin.WARNING_LINE)
    log = process.log()
    assert "Started HTTPService" not in log
    assert re.search(r"^W\d{4} .*log_plugin: a warning", log, re.MULTILINE), log[-2000:]


def test_json_log_format(repository: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "server.jsonl"
    process = ServerProcess([repository], "--log-file", str(log_file), "--log-format", "json")
    try:
        process.wait_ready()
    finally:
        code = process.stop()
    assert code == 0, process.log()[-4000:]
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert {"timestamp", "level", "pid", "file", "line", "logger", "message"} <= set(records[0])
    assert any(record["message"].startswith("Started HTTPService") for record in records)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--log-format", "XML"], "argument --log-format: invalid argument for --log-format"),
        (["--log-verbose", "x"], "argument --log-verbose"),
        (["--log-file", "/nonexistent-dir/server.log"], "--log-file: cannot open"),
    ],
)
def test_malformed_log_flags_are_refused(repository: Path, flags: list[str], message: str) -> None:
    assert message in refused_start_log([repository], *flags)
