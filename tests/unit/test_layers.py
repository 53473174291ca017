"""The layers of the core: the repository imports nothing from scheduling.

The repository loads models; scheduling serves them. The loader reaches scheduling only
through the ``ModelRuntime`` the server hands it (``triton_core/repository/runtime.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import triton_core

CORE = Path(triton_core.__file__).parent
REPOSITORY = CORE / "repository"
SCHEDULING = "triton_core.scheduling"


def _resolve(node: ast.ImportFrom, path: Path, root: Path) -> str:
    """The absolute module a ``from ... import`` names (relative ones resolved from ``root``,
    the folder that holds the package)."""
    if not node.level:
        return node.module or ""
    package = path.relative_to(root).with_suffix("").parts[: -node.level]
    return ".".join([*package, node.module] if node.module else package)


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, at any depth (TYPE_CHECKING too);
    ``from a import b`` counts as both ``a`` and ``a.b``, as ``b`` may be a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(node, path, root)
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def scheduling_imports(path: Path, root: Path = CORE.parent) -> list[str]:
    return [
        f"{path.name}:{line}: {module}"
        for line, module in imported_modules(path, root)
        if module == SCHEDULING or module.startswith(SCHEDULING + ".")
    ]


def test_the_repository_imports_no_scheduler():
    sources = sorted(REPOSITORY.glob("*.py"))
    assert {"loader.py", "manager.py", "ensembles.py"} <= {path.name for path in sources}
    found = [entry for path in sources for entry in scheduling_imports(path)]
    assert not found, "the repository imports scheduling:\n" + "\n".join(found)


def test_the_check_finds_every_form_of_import(tmp_path):
    package = tmp_path / "triton_core" / "repository"
    package.mkdir(parents=True)
    source = package / "module.py"
    source.write_text(
        "import triton_core.scheduling.executor\n"
        "from triton_core import scheduling\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from triton_core.scheduling.base import Scheduler\n"
        "def late():\n"
        "    from ..scheduling import ensemble\n"
        "from triton_core.scheduler_notes import x\n"
        "from triton_core.repository import layout\n"
    )
    found = scheduling_imports(source, tmp_path)
    assert sorted(found) == [
        "module.py:1: triton_core.scheduling.executor",
        "module.py:2: triton_core.scheduling",
        "module.py:5: triton_core.scheduling.base",
        "module.py:5: triton_core.scheduling.base.Scheduler",
        "module.py:7: triton_core.scheduling",
        "module.py:7: triton_core.scheduling.ensemble",
    ]
