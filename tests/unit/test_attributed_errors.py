"""Errors say whose they are: the plugin, its distribution and the exception type.

Misbehaving plugins are real plugins registered on a real plugin manager (inline classes, or
a distribution on ``sys.path`` whose entry point fails to import); the server keeps serving
the models that do not need them.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.plugins import numpy_backend
from tests.support import numpy_plugins, write_broken_distribution, write_numpy_model
from triton_core import InferenceRequest, Server, ServerOptions, Status, Tensor, TritonError
from triton_core.cache.base import CacheStatistics, ResponseCache
from triton_core.plugins.failures import RepeatedFailureLog
from triton_core.plugins.hookspecs import hookimpl
from triton_core.plugins.manager import PLUGINS_ENV, create_plugin_manager
from triton_core.scheduling.strategy import BatchStrategy


def int32_request(model: str) -> InferenceRequest:
    data = np.arange(4, dtype=np.int32).reshape(1, 4)
    return InferenceRequest(model, {n: Tensor(n, "INT32", data) for n in ("INPUT0", "INPUT1")})


class RaisingBackend(numpy_backend.NumpyBackend):
    """The numpy backend with a bug where the config's parameter ``bug`` says."""

    name = "buggy"
    platforms = ()

    def auto_complete_config(self, config, model_path: Path) -> None:  # type: ignore[no-untyped-def]
        if config.parameters["bug"].string_value == "auto_complete":
            raise KeyError("x")

    def load_model(self, context):  # type: ignore[no-untyped-def]
        if context.config.parameters["bug"].string_value == "load":
            raise ZeroDivisionError("division by zero")
        return super().load_model(context)


class BuggyPlugin:
    @hookimpl
    def triton_register_backends(self, registry) -> None:  # type: ignore[no-untyped-def]
        registry.add(RaisingBackend)


def write_buggy_model(repo: Path, name: str, bug: str) -> None:
    write_numpy_model(
        repo, name, extra=f'parameters {{ key: "bug" value {{ string_value: "{bug}" }} }}'
    )
    config = repo / name / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "numpy"', 'backend: "buggy"'))


@pytest.mark.parametrize(
    ("bug", "message"),
    [
        (
            "auto_complete",
            "model 'm': backend 'buggy' (plugin buggy) raised KeyError: 'x' in "
            "auto_complete_config()",
        ),
        (
            "load",
            "model 'm' version 1: backend 'buggy' (plugin buggy) raised ZeroDivisionError: "
            "division by zero in load_model()",
        ),
    ],
)
async def test_load_failures_name_the_plugin_and_exception_with_one_traceback(
    tmp_path, caplog, bug: str, message: str
) -> None:
    write_buggy_model(tmp_path, "m", bug)
    write_numpy_model(tmp_path, "fine")
    plugins = create_plugin_manager(
        autoload=False, extra_plugins=[("numpy", numpy_backend), ("buggy", BuggyPlugin())]
    )
    server = Server(ServerOptions([tmp_path], exit_on_error=False), plugins)
    with caplog.at_level(logging.ERROR):
        await server.start()
    try:
        [entry] = [e for e in server.repository_index() if e.name == "m"]
        assert entry.state == "UNAVAILABLE" and message in entry.reason
        tracebacks = [r for r in caplog.records if r.exc_info and message in r.getMessage()]
        assert len(tracebacks) == 1
        response = await server.infer(int32_request("fine"))
        assert response.model_name == "fine"
    finally:
        await server.stop()


async def test_execute_exceptions_name_the_instance_plugin_and_type_and_log_once(
    tmp_path, caplog
) -> None:
    write_numpy_model(tmp_path, "keys", kind="key_error")
    async with Server(ServerOptions([tmp_path]), numpy_plugins()) as server:
        with caplog.at_level(logging.ERROR):
            for _ in range(5):
                with pytest.raises(TritonError) as info:
                    await server.infer(int32_request("keys"))
    assert info.value.status is Status.INTERNAL
    assert info.value.message == (
        "model 'keys' version 1 instance 'keys_0_0': backend 'numpy' (plugin numpy) raised "
        "KeyError: 'x'"
    )
    logged = [r for r in caplog.records if "raised KeyError" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None


class FlakyCache(ResponseCache):
    """Raises on every lookup and insert, as a cache whose server is down would."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.calls = 0

    async def lookup(self, key: bytes):  # type: ignore[no-untyped-def]
        self.calls += 1
        raise ConnectionError("cache server is down")

    async def insert(self, key: bytes, response) -> None:  # type: ignore[no-untyped-def]
        self.calls += 1
        raise ConnectionError("cache server is down")

    def statistics(self) -> CacheStatistics:
        return CacheStatistics()


class FlakyCachePlugin:
    @hookimpl
    def triton_register_caches(self, registry) -> None:  # type: ignore[no-untyped-def]
        registry.add("flaky", FlakyCache)


async def test_a_failing_cache_is_a_miss_with_one_warning_naming_it(tmp_path, caplog) -> None:
    write_numpy_model(tmp_path, "cached", extra="response_cache { enable: true }")
    plugins = create_plugin_manager(
        autoload=False, extra_plugins=[("numpy", numpy_backend), ("flaky", FlakyCachePlugin())]
    )
    options = ServerOptions([tmp_path], cache=("flaky", {}))
    async with Server(options, plugins) as server:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                response = await server.infer(int32_request("cached"))
                np.testing.assert_array_equal(response.output("OUTPUT0").data, [[0, 1, 2, 3]])
        assert server.cache is not None and server.cache.calls == 6
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "response cache 'flaky' (plugin flaky): lookup() raised ConnectionError: cache server is "
        "down; the response is a miss (logged once; repeats are counted)",
        "response cache 'flaky' (plugin flaky): insert() raised ConnectionError: cache server is "
        "down; the response is not kept (logged once; repeats are counted)",
    ]


@pytest.fixture
def broken_distribution(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    root = write_broken_distribution(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    yield root
    sys.modules.pop("broken_plugin_module", None)


def test_a_plugin_that_fails_to_import_is_reported_by_name_and_left_out(
    broken_distribution, caplog
) -> None:
    with caplog.at_level(logging.ERROR):
        plugins = create_plugin_manager(extra_plugins=[("numpy", numpy_backend)])
    why = "triton-core-broken 0.3, entry point broken_plugin_module: ModuleNotFoundError"
    assert why in plugins.broken["broken"]
    [record] = [r for r in caplog.records if "failed to import" in r.getMessage()]
    assert "plugin 'broken'" in record.getMessage()
    assert "--disable-plugin broken" in record.getMessage() and record.exc_info is not None
    infos = {info.name: info for info in plugins.describe()}
    assert why in infos["broken"].broken and "broken" not in plugins.blocked()
    assert "numpy" in plugins.register_backends()  # the others still register


@pytest.mark.parametrize("selector", ['backend: "brokenbackend"', 'platform: "broken_platform"'])
async def test_a_model_whose_backend_is_missing_names_the_plugin_that_failed(
    broken_distribution, tmp_path, selector: str
) -> None:
    repo = tmp_path / "models"
    write_numpy_model(repo, "fine")
    write_numpy_model(repo, "needs_broken")
    config = repo / "needs_broken" / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "numpy"', selector))
    plugins = create_plugin_manager(extra_plugins=[("numpy", numpy_backend)])
    async with Server(ServerOptions([repo], exit_on_error=False), plugins) as server:
        [entry] = [e for e in server.repository_index() if e.name == "needs_broken"]
        assert "plugin(s) that failed to import and may provide it: broken: " in entry.reason
        assert (await server.infer(int32_request("fine"))).model_name == "fine"


def test_an_env_plugin_that_is_also_installed_is_registered_once(monkeypatch) -> None:
    monkeypatch.setenv(PLUGINS_ENV, "triton_core_onnx.plugin, tests.plugins.numpy_backend")
    plugins = create_plugin_manager()
    infos = {info.name: info for info in plugins.describe()}
    # named and attributed as installed, whichever way it was registered
    assert (infos["onnx"].distribution, infos["onnx"].version) == ("triton-core-onnx", "0.1.0")
    assert infos["tests.plugins.numpy_backend"].distribution == PLUGINS_ENV
    assert "onnxruntime" in plugins.register_backends()
    origin = plugins.register_backends().get("numpy")
    assert origin is not None
    assert str(origin.origin("backend")) == (
        "backend 'numpy' (plugin tests.plugins.numpy_backend, TRITON_CORE_PLUGINS)"
    )


class RaisingStrategy(BatchStrategy):
    def __init__(self, config) -> None:  # type: ignore[no-untyped-def]
        self.calls = 0

    def new_batch(self) -> None:
        return None

    def include(self, request: InferenceRequest, state: object) -> bool:
        self.calls += 1
        raise ValueError("no budget")


class RaisingStrategyPlugin:
    @hookimpl
    def triton_register_batch_strategies(self, registry) -> None:  # type: ignore[no-untyped-def]
        registry.add("raising", RaisingStrategy)


async def test_a_raising_batch_strategy_is_logged_once_and_batches_still_form(
    tmp_path, caplog
) -> None:
    extra = (
        "dynamic_batching { }\n"
        'parameters { key: "batch_strategy" value { string_value: "raising" } }'
    )
    write_numpy_model(tmp_path, "strategic", extra=extra)
    plugins = create_plugin_manager(
        autoload=False,
        extra_plugins=[("numpy", numpy_backend), ("raising", RaisingStrategyPlugin())],
    )
    async with Server(ServerOptions([tmp_path]), plugins) as server:
        with caplog.at_level(logging.ERROR):
            for _ in range(4):
                response = await server.infer(int32_request("strategic"))
                np.testing.assert_array_equal(response.output("OUTPUT0").data, [[0, 1, 2, 3]])
    logged = [r for r in caplog.records if "RaisingStrategy.include()" in r.getMessage()]
    assert [r.getMessage() for r in logged] == [
        "batch strategy of model 'strategic': RaisingStrategy.include() raised ValueError: no "
        "budget; batches still form (logged once; repeats are counted)"
    ]
    assert logged[0].exc_info is not None


def test_repeated_failures_are_summarised_with_a_count(caplog) -> None:
    failures = RepeatedFailureLog(logging.getLogger("test"), "model 'm'", interval=0.0)
    with caplog.at_level(logging.ERROR):
        for _ in range(3):
            failures.failed(KeyError, "raised KeyError: 'x'", KeyError("x"))
        failures.failed(ValueError, "raised ValueError", ValueError())
    assert [r.getMessage() for r in caplog.records] == [
        "model 'm': raised KeyError: 'x' (logged once; repeats are counted)",
        "model 'm': raised KeyError: 'x' (1 more time(s) since last reported)",
        "model 'm': raised KeyError: 'x' (1 more time(s) since last reported)",
        "model 'm': raised ValueError (logged once; repeats are counted)",
    ]
    assert [r.exc_info is not None for r in caplog.records] == [True, False, False, True]
    assert failures.total == 4


async def test_a_backends_own_load_error_keeps_its_status_and_gains_the_plugin(tmp_path) -> None:
    extra = 'parameters { key: "fail_load" value { string_value: "yes" } }'
    write_numpy_model(tmp_path, "m", extra=extra)
    server = Server(ServerOptions([tmp_path], exit_on_error=False), numpy_plugins())
    async with server:
        [entry] = server.repository_index()
    assert entry.reason == (
        "numpy backend was told to fail loading 'm' (raised by backend 'numpy' (plugin numpy) "
        "in load_model())"
    )
