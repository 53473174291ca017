"""The modules that moved into the layers' packages: their old paths import for one release,
with a DeprecationWarning, as the same module objects; nothing of this repository uses them."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import triton_core
from triton_core.plugins import migration
from triton_core.plugins.migration import MOVED, InternalImport, MovedModuleFinder, moved_to

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _forget_old_paths():
    """Each test imports the old paths afresh, and leaves no alias behind."""
    before = set(sys.modules)
    attributes = set(vars(triton_core))
    yield
    for name in set(sys.modules) - before:
        if moved_to(name):
            del sys.modules[name]
    for name in set(vars(triton_core)) - attributes:
        if f"triton_core.{name}" in MOVED:
            delattr(triton_core, name)


def _import_warning(name: str):
    with pytest.warns(DeprecationWarning) as caught:
        module = importlib.import_module(name)
    assert len(caught) == 1
    return module, str(caught[0].message)


def test_an_old_path_imports_the_module_at_its_new_path_with_a_warning():
    from triton_core.tensors import dtypes

    old, message = _import_warning("triton_core.dtypes")
    assert old is dtypes
    assert message.startswith("triton_core.dtypes moved to triton_core.tensors.dtypes;")
    assert sys.modules["triton_core.dtypes"] is dtypes
    assert triton_core.dtypes is dtypes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert importlib.import_module("triton_core.dtypes") is dtypes  # warned once


def test_the_warning_points_at_the_importing_code():
    with pytest.warns(DeprecationWarning) as caught:
        exec(compile("import triton_core.devices", __file__, "exec"), {})
    assert caught[0].filename == __file__


def test_from_an_old_path_import_a_name():
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match="triton_core.backends.contract"):
        exec("from triton_core.backend import Backend, ModelInstance", namespace)
    assert namespace["Backend"] is triton_core.Backend
    assert namespace["ModelInstance"] is triton_core.ModelInstance


def test_from_triton_core_import_an_old_module():
    from triton_core.observability import statistics

    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match="triton_core.observability.statistics"):
        exec("from triton_core import statistics", namespace)
    assert namespace["statistics"] is statistics


def test_a_module_of_a_moved_package_is_the_same_object_and_loaded_once():
    from triton_core.backends.framework import config

    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match="triton_core.backends.framework"):
        exec("import triton_core.framework.config", namespace)
    assert namespace["triton_core"].framework.config is config
    assert sys.modules["triton_core.framework.config"] is config
    assert config.__name__ == "triton_core.backends.framework.config"
    with pytest.warns(DeprecationWarning) as caught:
        trace = importlib.import_module("triton_core.tracing.trace")
    assert trace is importlib.import_module("triton_core.observability.tracing.trace")
    assert [str(w.message).partition(";")[0] for w in caught] == [
        "triton_core.tracing moved to triton_core.observability.tracing",
        "triton_core.tracing.trace moved to triton_core.observability.tracing.trace",
    ]


def test_an_unknown_name_is_not_hijacked():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ModuleNotFoundError, match=r"'triton_core\.nonexistent'"):
            importlib.import_module("triton_core.nonexistent")
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("triton_core.backends.framework.nonexistent")
    finder = MovedModuleFinder()
    for name in ("triton_core", "triton_core.types", "triton_core.dtypes_x", "json", "dtypes"):
        assert finder.find_spec(name) is None, name
    assert "triton_core.nonexistent" not in sys.modules


def test_a_missing_module_of_a_moved_package_is_not_found():
    with pytest.warns(DeprecationWarning):
        importlib.import_module("triton_core.framework")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("triton_core.framework.nonexistent")


def test_the_finder_is_installed_once_and_first():
    migration.install_moved_module_finder()
    finders = [f for f in sys.meta_path if isinstance(f, MovedModuleFinder)]
    assert len(finders) == 1
    assert isinstance(sys.meta_path[0], MovedModuleFinder)


def test_every_moved_module_exists_at_its_new_path():
    for new in MOVED.values():
        assert importlib.util.find_spec(new) is not None, new
    assert not any(old in MOVED.values() for old in MOVED)


def test_the_packages_that_replaced_modules_keep_their_names():
    from triton_core import plugins, server
    from triton_core.plugins import manager
    from triton_core.server import core

    assert server.Server is core.Server is triton_core.Server
    assert server.ServerOptions is core.ServerOptions
    assert server.EXTENSIONS is core.EXTENSIONS
    assert plugins.create_plugin_manager is manager.create_plugin_manager
    assert plugins.PluginManager is triton_core.PluginManager
    assert plugins.PLUGINS_ENV == manager.PLUGINS_ENV
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = server.Nope


def test_the_start_up_scan_names_the_new_place():
    replacement = InternalImport(Path("p.py"), 1, "triton_core.backend").replacement()
    assert replacement == (
        "triton_core.Backend, BackendModel, ModelInstance, ModelContext "
        "(triton_core.backend moved to triton_core.backends.contract)"
    )
    framework = InternalImport(Path("p.py"), 1, "triton_core.framework.config").replacement()
    assert framework.endswith(
        "(triton_core.framework.config moved to triton_core.backends.framework.config)"
    )
    current = InternalImport(Path("p.py"), 1, "triton_core.tensors.dtypes").replacement()
    assert current.startswith("triton_core.NUMPY_DTYPES") and "moved" not in current


def test_the_start_up_scan_finds_old_modules_imported_from_triton_core(tmp_path):
    import types

    package = tmp_path / "oldplugin"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from triton_core import Tensor, hookimpl  # noqa\n"
        "from triton_core import dtypes, backend as contract\n"
        "from triton_core import (\n    Backend,\n    statistics,\n)\n"
    )
    module = types.ModuleType("oldplugin")
    module.__path__ = [str(package)]
    found = [(entry.line, entry.module) for entry in migration.internal_imports(module, False)]
    assert found == [
        (2, "triton_core.dtypes"),
        (2, "triton_core.backend"),
        (3, "triton_core.statistics"),
    ]


# -- nothing here uses an old path -------------------------------------------------------------


def test_the_core_and_its_public_names_import_without_a_deprecation_warning():
    code = (
        "import triton_core, triton_core.cli, triton_core.frontends.runner, triton_core.testing\n"
        "for name in triton_core.__all__:\n"
        "    getattr(triton_core, name)\n"
    )
    subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", code], check=True, cwd=ROOT
    )


def test_no_module_of_the_core_imports_an_old_path():
    """Every module of the core, imported with the old paths' warnings as errors (the
    deprecated ``triton_core.batching`` shim and ``__main__`` modules left out)."""
    code = (
        "import importlib, pkgutil, triton_core\n"
        "for info in pkgutil.walk_packages(triton_core.__path__, 'triton_core.'):\n"
        "    if info.name == 'triton_core.batching' or info.name.endswith('__main__'):\n"
        "        continue\n"
        "    try:\n"
        "        importlib.import_module(info.name)\n"
        "    except ModuleNotFoundError as error:\n"
        "        if (error.name or '').startswith('triton_core'):\n"
        "            raise\n"
    )
    old_paths = "error:triton_core.:DeprecationWarning"  # messages that start so: ours
    subprocess.run([sys.executable, "-W", old_paths, "-c", code], check=True, cwd=ROOT)


def _old_path_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module]
            if node.module == "triton_core":
                modules += [f"triton_core.{alias.name}" for alias in node.names]
        else:
            continue
        found += [f"{path}:{node.lineno}: {m}" for m in modules if moved_to(m)]
    return found


def test_the_repository_imports_no_old_path():
    """The core, the plugins, the examples, the tests and the benchmarks use the new paths
    (this file imports old ones by name, as strings)."""
    folders = ["triton_core", "plugins", "examples", "tests", "bench", "scripts"]
    sources = [p for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))]
    assert len(sources) > 100
    found = [
        entry for path in sources if "/." not in str(path) for entry in _old_path_imports(path)
    ]
    assert not found, "imports of old module paths:\n" + "\n".join(found)
