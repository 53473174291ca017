from __future__ import annotations

import pytest

from tests.plugins import numpy_backend
from triton_core import hookimpl
from triton_core.plugins import DISABLE_ENV, create_plugin_manager


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
    with pytest.raises(ValueError, match="already registered by plugin 'numpy'"):
        plugins.register_backends()


def test_entry_points_are_discovered():
    # The ONNX plugin is installed in the test environment through its entry point.
    plugins = create_plugin_manager()
    assert "onnxruntime" in plugins.register_backends()
