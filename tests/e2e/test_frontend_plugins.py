"""Frontends are plugins: the built-ins are dropped with ``--disable-plugin`` like any
other, a plugin adds ``serve`` flags, and what plugin discovery logs before the command line
is parsed still reaches the configured log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import ServerProcess

grpcclient = pytest.importorskip("tritonclient.grpc")

FAILING = "tests.plugins.failing_frontend"


def test_a_built_in_frontend_is_dropped_by_its_plugin_name(tmp_path: Path) -> None:
    env = {"TRITON_CORE_DISABLE_PLUGINS": "http_frontend,sagemaker_frontend"}
    with ServerProcess([tmp_path], env=env) as server:
        ports = server.ports
        assert "http" not in ports
        assert set(ports) == {"grpc", "metrics"}
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            assert client.is_server_ready()
        assert "Started HTTPService" not in server.log()
        assert server.stop() == 0


def test_a_plugin_flag_reaches_its_frontend_and_a_failed_start_exits_1(tmp_path: Path) -> None:
    env = {"TRITON_CORE_PLUGINS": FAILING}
    server = ServerProcess(
        [tmp_path], "--failing-frontend-message", "no such tokenizer: /x", env=env
    )
    code = server.process.wait(timeout=120)
    server.stop()
    assert code == 1, server.log()[-4000:]
    assert "no such tokenizer: /x" in server.log()


def test_without_its_flag_a_plugin_frontend_stays_off(tmp_path: Path) -> None:
    with ServerProcess([tmp_path], env={"TRITON_CORE_PLUGINS": FAILING}) as server:
        server.wait_ready()
        assert server.stop() == 0


def test_a_broken_plugin_is_reported_in_the_configured_log_format(tmp_path: Path) -> None:
    env = {"TRITON_CORE_PLUGINS": "tests.plugins.no_such_plugin_module"}
    with ServerProcess([tmp_path], "--log-format", "ISO8601", env=env) as server:
        server.wait_ready()
        assert server.stop() == 0
    line = next(
        line for line in server.log().splitlines() if "tests.plugins.no_such_plugin_module" in line
    )
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ E ", line), line


def test_the_flag_of_a_broken_plugin_is_refused_with_the_reason(tmp_path: Path) -> None:
    env = {"TRITON_CORE_PLUGINS": "tests.plugins.no_such_plugin_module"}
    server = ServerProcess([tmp_path], "--failing-frontend-message", "x", env=env)
    code = server.process.wait(timeout=60)
    server.stop()
    log = server.log()
    assert code == 2
    assert "unrecognized arguments: --failing-frontend-message" in log
    assert "plugin 'tests.plugins.no_such_plugin_module'" in log and "failed to import" in log
