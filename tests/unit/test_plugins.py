from __future__ import annotations

import pytest

from tests.plugins import numpy_backend
from triton_core import hookimpl
from triton_core.plugins.manager import DISABLE_ENV, create_plugin_manager


def test_builtins_register_like_third_party_plugins():
    plugins = create_plugin_manager(autoload=False, extra_plugins=[("numpy", numpy_backend)])
    schedulers = plugins.register_schedulers()
    assert schedulers.get("default").plugin == "default_scheduler"
    backends = plugins.register_backends()
    entry = backends.get("numpy")
    assert entry.plugin == "numpy" and backends.backend_for_platform("numpy_test") == "numpy"
    names = {info.name: info for info in plugins.describe()}
    assert names["numpy"].provides == ("backend:numpy", "platform:numpy_test")
    assert names["default_scheduler"].distribution == "triton-core (built-in)"


def test_disable_plugin_blocks_it(monkeypatch):
    monkeypatch.setenv(DISABLE_ENV, "numpy")
    plugins = create_plugin_manager(autoload=False, extra_plugins=[("numpy", numpy_backend)])
    assert "numpy" not in plugins.register_backends()
    assert plugins.blocked() == ["numpy"]


def test_essential_plugins_cannot_be_disabled():
    with pytest.raises(ValueError, match="essential"):
        create_plugin_manager(["default_scheduler"], autoload=False)


def test_a_second_plugin_claiming_a_name_must_say_replace():
    class Clash:
        @hookimpl
        def triton_register_backends(self, registry):
            registry.add(numpy_backend.NumpyBackend)

    plugins = create_plugin_manager(
        autoload=False, extra_plugins=[("numpy", numpy_backend), ("clash", Clash())]
    )
    # pluggy calls the last registered plugin first: 'clash' holds the name when 'numpy' asks.
    with pytest.raises(
        ValueError, match="'numpy' from plugin 'numpy' is already registered by plugin 'clash'"
    ):
        plugins.register_backends()


def test_entry_points_are_discovered():
    # The ONNX plugin is installed in the test environment through its entry point.
    plugins = create_plugin_manager()
    assert "onnxruntime" in plugins.register_backends()


class _Recorder:
    """A plugin that registers one cache named after itself and logs when its hook runs."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    @hookimpl
    def triton_register_caches(self, registry):
        self.log.append(self.name)
        registry.add(self.name, dict)


def _caches_registered_by(*plugins: tuple[str, object]):
    return create_plugin_manager(autoload=False, extra_plugins=plugins).register_caches()


def test_tryfirst_and_trylast_order_the_hookimpls_as_pluggy_documents():
    log: list[str] = []

    class First(_Recorder):
        @hookimpl(tryfirst=True)
        def triton_register_caches(self, registry):
            super().triton_register_caches(registry)

    class Last(_Recorder):
        @hookimpl(trylast=True)
        def triton_register_caches(self, registry):
            super().triton_register_caches(registry)

    caches = _caches_registered_by(
        ("first", First("first", log)),
        ("plain_a", _Recorder("plain_a", log)),
        ("last", Last("last", log)),
        ("plain_b", _Recorder("plain_b", log)),
    )
    # tryfirst before the rest, trylast after it, plain ones last registered first
    assert log == ["first", "plain_b", "plain_a", "last"]
    assert {name: caches.get(name).plugin for name in log} == {name: name for name in log}


def test_a_wrapper_hookimpl_runs_around_every_other_plugin():
    seen: dict[str, list[str]] = {}

    class Wrapper:
        @hookimpl(wrapper=True)
        def triton_register_caches(self, registry):
            seen["before"] = registry.names()
            result = yield
            seen["after"] = registry.names()
            registry.add("local", dict, replace=True)
            return result

    caches = _caches_registered_by(("wrapper", Wrapper()), ("other", _Recorder("other", [])))
    assert seen == {"before": [], "after": ["local", "other"]}
    assert caches.get("local").plugin == "wrapper"
    assert caches.get("other").plugin == "other"


def test_a_replacement_wins_whichever_plugin_runs_first():
    class Replacer:
        @hookimpl(trylast=True)
        def triton_register_schedulers(self, registry):
            registry.add("default", dict, replace=True)

    class EarlyReplacer:
        @hookimpl(tryfirst=True)
        def triton_register_schedulers(self, registry):
            registry.add("default", dict, replace=True)

    for name, plugin in (("late", Replacer()), ("early", EarlyReplacer())):
        plugins = create_plugin_manager(autoload=False, extra_plugins=[(name, plugin)])
        schedulers = plugins.register_schedulers()
        assert schedulers.get("default").plugin == name
        assert schedulers.get("dynamic_batching").plugin == "dynamic_batcher"


def test_a_registration_from_a_helper_is_attributed_to_the_calling_hookimpl():
    def register_through_a_helper(registry):
        registry.add("helper_made", dict)

    class UsesHelper:
        @hookimpl
        def triton_register_caches(self, registry):
            register_through_a_helper(registry)

    caches = _caches_registered_by(("uses_helper", UsesHelper()))
    assert caches.get("helper_made").plugin == "uses_helper"


def test_a_plugin_importing_core_internals_is_named_with_the_public_replacement(tmp_path, caplog):
    folder = tmp_path / "plugin_dir"
    folder.mkdir()
    (folder / "old_cache.py").write_text(
        "import triton_core\n"
        "from triton_core import hookimpl\n"
        "from triton_core.cache.base import ResponseCache\n"
        "def helper():\n"
        "    import triton_core.protos.model_config_pb2 as pb\n"
        "    from triton_core.testing import ServerProcess\n"
    )
    (folder / "clean.py").write_text("from triton_core import hookimpl, ResponseCache\n")
    with caplog.at_level("WARNING", logger="triton_core.plugins.migration"):
        create_plugin_manager(autoload=False, directories=[("--plugin-dir", folder)])
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("plugin 'old_cache' imports triton_core.cache.base (")
    assert f"{folder / 'old_cache.py'}:3" in warnings[0]
    assert warnings[0].endswith("use triton_core.ResponseCache, CacheStatistics, response_size")
    assert "triton_core.protos.model_config_pb2" in warnings[1] and ":5)" in warnings[1]
    assert "DataType" in warnings[1]


def test_the_testing_kit_names_an_installed_plugin_as_serve_does(monkeypatch):
    """Registered by module (triton_core.testing, TRITON_CORE_PLUGINS) or by entry point,
    an installed plugin has its entry point's name and its distribution."""
    import importlib

    from triton_core.plugins.manager import PLUGINS_ENV
    from triton_core.testing.inprocess import plugin_manager

    module = importlib.import_module("triton_core_example_numpy.plugin")
    in_process = {info.name: info for info in plugin_manager([module]).describe()}
    assert "triton_core_example_numpy.plugin" not in in_process
    assert in_process["example_numpy"].distribution == "triton-core-example-numpy"
    assert in_process["example_numpy"].version == "0.1.0"

    monkeypatch.setenv(PLUGINS_ENV, "triton_core_example_numpy.plugin")
    from_env = create_plugin_manager(autoload=False)
    assert "example_numpy" in dict(from_env.pm.list_name_plugin())
    assert create_plugin_manager(["example_numpy"], autoload=False).blocked() == ["example_numpy"]


def test_the_built_in_frontends_are_plugins_and_run_in_registration_order():
    from triton_core.frontends.base import FrontendSettings
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.runner import build_frontends

    plugins = create_plugin_manager(autoload=False)
    names = {info.name: info.provides for info in plugins.describe()}
    assert names["http_frontend"] == ("frontend:http",)
    assert names["grpc_frontend"] == ("frontend:grpc",)
    assert names["metrics_frontend"] == ("frontend:metrics",)
    options = FrontendOptions()
    options.sagemaker.allow = options.vertex_ai.allow = True
    frontends = build_frontends(plugins, FrontendSettings(options))
    assert [f.name for f in frontends] == ["HTTP", "GRPC", "metrics", "SageMaker", "Vertex AI"]
    options.allow_grpc = False
    assert "GRPC" not in [f.name for f in build_frontends(plugins, FrontendSettings(options))]


def test_a_disabled_built_in_frontend_is_not_built():
    from triton_core.frontends.base import FrontendSettings
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.runner import build_frontends

    plugins = create_plugin_manager(["http_frontend"], autoload=False)
    frontends = build_frontends(plugins, FrontendSettings(FrontendOptions()))
    assert [f.name for f in frontends] == ["GRPC", "metrics"]
    assert "http_frontend" in plugins.blocked()


def test_plugins_add_serve_flags_that_reach_frontend_settings():
    import argparse

    from triton_core.cli import build_parser
    from triton_core.frontends.base import FrontendSettings

    class Flags:
        @hookimpl
        def triton_add_serve_arguments(self, parser: argparse._ArgumentGroup) -> None:
            parser.add_argument("--openai-port", type=int, default=None)

    plugins = create_plugin_manager(autoload=False, extra_plugins=[("flags", Flags())])
    args = build_parser(plugins).parse_args(
        ["serve", "--model-repository", "/m", "--openai-port", "9000"]
    )
    settings = FrontendSettings(options=None, arguments=args)  # type: ignore[arg-type]
    assert settings.argument("openai_port") == 9000
    assert settings.argument("not_a_flag", "default") == "default"
    with pytest.raises(SystemExit):
        build_parser(create_plugin_manager(autoload=False)).parse_args(
            ["serve", "--model-repository", "/m", "--openai-port", "9000"]
        )
