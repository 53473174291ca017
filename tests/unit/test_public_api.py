"""The public API: one surface in ``triton_core``, the only one the repository's plugins use."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import triton_core
from tests.support import ROOT

#: the package code of every plugin in the repository (their tests may import anything)
PLUGIN_PACKAGES = (
    "plugins/onnx/triton_core_onnx",
    "plugins/torch/triton_core_torch",
    "plugins/tensorrt/triton_core_tensorrt",
    "plugins/python_model/triton_core_python",
    "plugins/python_model/triton_python_backend_utils.py",
    "plugins/repo_agents/triton_core_repo_agents",
    "plugins/redis_cache/triton_core_redis_cache",
    "plugins/openai/triton_core_openai",
    "tests/plugins/batch_strategy/triton_core_test_batch_strategy",
    "examples/plugin_numpy_backend/triton_core_example_numpy",
    "examples/plugin_ndjson_frontend/triton_core_example_ndjson",
)
#: out-of-tree plugins with their tests, as the guide tells a third party to write one
EXAMPLES = ("examples/plugin_numpy_backend", "examples/plugin_ndjson_frontend")
#: the modules a plugin may import from the core
PUBLIC_MODULES = frozenset({"triton_core", "triton_core.testing"})


def _is_core_module(name: str) -> bool:
    return name == "triton_core" or name.startswith("triton_core.")


def _is_core_tests_module(name: str) -> bool:
    return name == "tests" or name.startswith("tests.")


def core_imports(
    path: Path, is_core: Callable[[str], bool] = _is_core_module
) -> list[tuple[int, str]]:
    """(line, module) of every import of the core (``is_core``) in ``path``, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        found += [(node.lineno, module) for module in modules if is_core(module)]
    return found


def plugin_sources() -> list[Path]:
    sources = []
    for entry in PLUGIN_PACKAGES:
        path = ROOT / entry
        sources += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return sources


def test_the_plugins_import_only_the_public_api():
    sources = plugin_sources()
    assert len(sources) > 10, "the plugin packages moved: update PLUGIN_PACKAGES"
    private = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sources
        for line, module in core_imports(path)
        if module not in PUBLIC_MODULES
    ]
    assert not private, "plugins import core internals:\n" + "\n".join(private)


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_example_tests_use_triton_core_testing_not_the_core_tests(example):
    sources = sorted((ROOT / example / "tests").rglob("*.py"))
    assert sources, f"{example}/tests moved: update EXAMPLES"
    imported = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sources
        for line, module in [*core_imports(path), *core_imports(path, _is_core_tests_module)]
        if module not in PUBLIC_MODULES
    ]
    assert not imported, "the example's tests import private modules:\n" + "\n".join(imported)


def test_the_check_finds_a_private_import_wherever_it_is(tmp_path):
    source = tmp_path / "plugin.py"
    source.write_text(
        "from triton_core import Tensor\n"
        "import triton_core.testing\n"
        "def load():\n"
        "    import triton_core.tensors.dtypes as dtypes\n"
        "    from triton_core.protos import model_config_pb2\n"
        "from triton_core_onnx import backend\n"
        "from tests.support import ROOT\n"
    )
    assert core_imports(source) == [
        (1, "triton_core"),
        (2, "triton_core.testing"),
        (4, "triton_core.tensors.dtypes"),
        (5, "triton_core.protos"),
    ]
    assert core_imports(source, _is_core_tests_module) == [(7, "tests.support")]


def _type_checking_imports() -> dict[str, tuple[str, ...]]:
    """What type checkers see: the ``if TYPE_CHECKING:`` imports of ``triton_core``."""
    tree = ast.parse(Path(triton_core.__file__).read_text())
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    return {
        node.module: tuple(alias.name for alias in node.names)
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
    }


def test_type_checkers_see_every_name_loaded_on_use():
    assert _type_checking_imports() == triton_core._EXPORTS


def test_all_lists_every_public_name_and_each_resolves():
    exported = {name for names in triton_core._EXPORTS.values() for name in names}
    assert set(triton_core.__all__) == exported | {"__version__"}
    assert len(triton_core.__all__) == len(set(triton_core.__all__))
    for name in triton_core.__all__:
        assert getattr(triton_core, name) is not None, name
    assert set(triton_core.__all__) <= set(dir(triton_core))


def test_a_public_name_is_the_object_its_module_defines():
    from triton_core.errors import TritonError
    from triton_core.protos.model_config_pb2 import ModelConfig

    assert triton_core.TritonError is TritonError
    assert triton_core.ModelConfig is ModelConfig


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = triton_core.Nope
    with pytest.raises(ImportError):
        from triton_core import Nope  # noqa: F401


def test_importing_triton_core_loads_nothing_else_until_a_name_is_used():
    code = (
        "import sys, triton_core\n"
        "print(sorted(m for m in sys.modules if m.startswith('triton_core.')))\n"
        "from triton_core import hookimpl\n"
        "print('triton_core.server.core' in sys.modules, 'numpy' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    # the finder of the moved modules' old paths, and nothing else
    finder = "['triton_core.plugins', 'triton_core.plugins.migration']"
    assert result.stdout.splitlines() == [finder, "False False"]
