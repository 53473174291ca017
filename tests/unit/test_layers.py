"""The layers of the core: the repository imports nothing from scheduling, and no modules of
the core import each other in a circle.

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


# -- import circles ---------------------------------------------------------------------------


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at any depth (lazy and TYPE_CHECKING
    imports count: a type a module names is a dependency too); generated code left out."""
    root = package.parent
    paths = {
        _module_name(path, root): path
        for path in package.rglob("*.py")
        if "protos" not in path.relative_to(package).parts
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        for _, module in imported_modules(path, root):
            while module and module not in paths:
                module = module.rpartition(".")[0]
            # a package's __init__ is not a dependency of the modules inside it
            if module and module != name and not name.startswith(module + "."):
                targets.add(module)
        graph[name] = targets
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_the_core_has_no_import_circle():
    circles = import_circles(import_graph(CORE))
    assert not circles, "\n".join(" <-> ".join(circle) for circle in circles)


def test_the_circle_check_finds_a_circle_through_a_type_checking_import(tmp_path):
    package = tmp_path / "triton_core"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from triton_core import b\n")
    (package / "b.py").write_text("from triton_core.c import thing\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from triton_core.a import x\n"
    )
    (package / "d.py").write_text("import triton_core.a\n")
    assert import_circles(import_graph(package)) == [
        ["triton_core.a", "triton_core.b", "triton_core.c"]
    ]
