"""Plugins written against the core's internal modules: named at start, for one release; and
the modules that moved, importable at their old paths for one release.

The public API is ``triton_core`` (and ``triton_core.testing`` for tests). A plugin that
still imports an internal module (``triton_core.cache.base``, ``triton_core.protos`` ...)
works today, but those paths move without notice; the server says so once per plugin at
start, with the file, the line and what to import instead. The check reads the plugin's own
source files as text (no import, no parse), a bounded number of them.

The flat top-level modules moved into packages that show the layers (:data:`MOVED`). An
import of an old path (``import triton_core.dtypes``, ``from triton_core.backend import
Backend``, ``from triton_core import dtypes``) still works for one release: a finder that
``import triton_core`` installs warns (``DeprecationWarning``, naming the new path) and hands
out the module at its new path under the old name, the same object. ``triton_core.plugins``
and ``triton_core.server`` were modules and are now the packages that hold them: they keep
the names that were imported from them.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, NamedTuple, cast

if TYPE_CHECKING:
    from importlib.abc import Loader

# Importing triton_core imports this module (for the finder): what it imports here is what
# the interpreter has loaded already; logging is imported where the scan logs.

#: the modules that moved into the layers' packages: old path -> new path (a package's
#: modules move with it: ``triton_core.framework.config`` is
#: ``triton_core.backends.framework.config``)
MOVED: Final[dict[str, str]] = {
    "triton_core.hookspecs": "triton_core.plugins.hookspecs",
    "triton_core.registry": "triton_core.plugins.registry",
    "triton_core.migration": "triton_core.plugins.migration",
    "triton_core.failures": "triton_core.plugins.failures",
    "triton_core.backend": "triton_core.backends.contract",
    "triton_core.services": "triton_core.backends.services",
    "triton_core.streaming": "triton_core.backends.streaming",
    "triton_core.framework": "triton_core.backends.framework",
    "triton_core.dtypes": "triton_core.tensors.dtypes",
    "triton_core.ragged": "triton_core.tensors.ragged",
    "triton_core.classification": "triton_core.tensors.classification",
    "triton_core.device_tensors": "triton_core.tensors.device_tensors",
    "triton_core.devices": "triton_core.tensors.devices",
    "triton_core.allocator": "triton_core.tensors.allocator",
    "triton_core.buffer_manager": "triton_core.tensors.buffer_manager",
    "triton_core.model": "triton_core.server.model",
    "triton_core.outputs": "triton_core.server.outputs",
    "triton_core.warmup": "triton_core.server.warmup",
    "triton_core.host_policy": "triton_core.server.host_policy",
    "triton_core.statistics": "triton_core.observability.statistics",
    "triton_core.metrics": "triton_core.observability.metrics",
    "triton_core.custom_metrics": "triton_core.observability.custom_metrics",
    "triton_core.gpu_metrics": "triton_core.observability.gpu_metrics",
    "triton_core.logsettings": "triton_core.observability.logsettings",
    "triton_core.tracing": "triton_core.observability.tracing",
    "triton_core.re2_patterns": "triton_core.frontends.re2_patterns",
}

#: internal modules plugins of earlier releases imported (at their paths now: an old path is
#: looked up where it moved) -> what to use instead
REPLACEMENTS: Final[dict[str, str]] = {
    "triton_core.backends.contract": (
        "triton_core.Backend, BackendModel, ModelInstance, ModelContext"
    ),
    "triton_core.batching": "triton_core.BatchPlan(...).execute(requests, run)",
    "triton_core.cache.base": "triton_core.ResponseCache, CacheStatistics, response_size",
    "triton_core.tensors.dtypes": "triton_core.NUMPY_DTYPES, CONFIG_TO_WIRE, serialize_bytes ...",
    "triton_core.errors": "triton_core.TritonError, Status, invalid_arg ...",
    "triton_core.protos": "triton_core.ModelConfig, ModelInput, ModelOutput, DataType ...",
    "triton_core.plugins.registry": "triton_core.BackendRegistry, SchedulerRegistry ...",
    "triton_core.repository.agents": "triton_core.RepositoryAgent, AgentAction, AgentModel",
    "triton_core.scheduling.base": "triton_core.Scheduler, SchedulerContext",
    "triton_core.scheduling.strategy": "triton_core.BatchStrategy",
    "triton_core.types": "triton_core.InferenceRequest, InferenceResponse, Tensor ...",
}
#: the modules a plugin may import
PUBLIC: Final = frozenset({"triton_core", "triton_core.testing"})
#: a plugin package's files read at most, and bytes read of each
MAX_FILES: Final = 200
MAX_FILE_BYTES: Final = 1 << 20

_IMPORT: Final = re.compile(
    rb"^[ \t]*(?:from[ \t]+(triton_core(?:\.\w+)+)[ \t]+import"
    rb"|import[ \t]+(triton_core(?:\.\w+)+)"
    rb"|from[ \t]+triton_core[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+))",
    re.MULTILINE,
)


def moved_to(module: str) -> str | None:
    """Where ``module``, a path of an earlier release, is now (``None``: it did not move)."""
    if not module.startswith("triton_core."):
        return None
    head, dot, rest = module.partition(".")[2].partition(".")
    new = MOVED.get("triton_core." + head)
    return None if new is None else new + dot + rest


class _Alias:
    """Loads an old path as the module at its new path, with a DeprecationWarning (a loader
    by its methods: ``importlib.abc`` is not imported, as it costs more than the rest)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; the old path goes away in the next release "
            "(plugins: import the public names from triton_core)",
            DeprecationWarning,
            stacklevel=2,  # the importing code (the import system's frames are skipped)
        )
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran at its new path."""


class MovedModuleFinder:
    """Finds an old path of :data:`MOVED` (first on ``sys.meta_path``, so that a module of a
    moved package is never loaded a second time under its old name)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        new = moved_to(fullname)
        if new is None:
            return None
        if fullname not in MOVED and importlib.util.find_spec(new) is None:
            return None  # no such module in the moved package: the usual ModuleNotFoundError
        return importlib.machinery.ModuleSpec(fullname, cast("Loader", _Alias(new)))


def install_moved_module_finder() -> None:
    """Put :class:`MovedModuleFinder` first on ``sys.meta_path``, once."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())


def names_of_moved_module(
    package: str, module: str, names: tuple[str, ...]
) -> Callable[[str], Any]:
    """The ``__getattr__`` of a package that replaced a module of its name: ``names`` (what
    was imported from the module) loaded from ``module``, where they are now, on first use
    (so that importing one of the package's modules imports none of the others)."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    return __getattr__


class InternalImport(NamedTuple):
    """One import of an internal module, where it is."""

    path: Path
    line: int
    module: str

    def replacement(self) -> str:
        """What the public API offers instead (and where a moved module is now)."""
        moved = moved_to(self.module)
        current = moved or self.module
        public = "the names of triton_core (triton_core.__all__)"
        for module, names in REPLACEMENTS.items():
            if current == module or current.startswith(module + "."):
                public = names
                break
        return f"{public} ({self.module} moved to {moved})" if moved else public


def internal_imports(plugin: object, whole_package: bool) -> list[InternalImport]:
    """The internal imports in ``plugin``'s source files: the module's own (its folder for a
    package), or with ``whole_package`` every file of the top-level package it is in (an
    installed distribution's code); empty for anything that is not a module on disk."""
    if not isinstance(plugin, ModuleType):
        return []
    if whole_package:
        plugin = sys.modules.get(plugin.__name__.partition(".")[0], plugin)
    found = []
    for path in _source_files(plugin)[:MAX_FILES]:
        try:
            with path.open("rb") as source:
                text = source.read(MAX_FILE_BYTES)
        except OSError:
            continue
        for match in _IMPORT.finditer(text):
            line = text.count(b"\n", 0, match.start()) + 1
            found += [InternalImport(path, line, module) for module in _imported(match)]
    return found


def _imported(match: re.Match[bytes]) -> list[str]:
    """The internal modules one import names: ``from triton_core import a, b`` names those of
    its names that are moved modules (the others are the public API's)."""
    if match.group(3) is None:
        module = (match.group(1) or match.group(2)).decode()
        return [] if module in PUBLIC else [module]
    names = match.group(3).decode().strip("() \t\r\n").split(",")
    modules = ("triton_core." + name.split(" as ")[0].strip() for name in names)
    return [module for module in modules if module in MOVED]


def _source_files(module: ModuleType) -> list[Path]:
    if module.__name__ == "triton_core" or module.__name__.startswith("triton_core."):
        return []
    folders = [Path(entry) for entry in getattr(module, "__path__", ())]
    if not folders:
        return [Path(module.__file__)] if module.__file__ else []
    return sorted(path for folder in folders for path in folder.rglob("*.py"))


def warn_internal_imports(name: str, plugin: object, whole_package: bool) -> list[InternalImport]:
    """Log, once for the plugin registered as ``name``, each internal module it imports."""
    import logging

    logger = logging.getLogger(__name__)
    found = internal_imports(plugin, whole_package)
    for entry in found:
        logger.warning(
            "plugin '%s' imports %s (%s:%d), an internal module of triton-core that will stop "
            "working in the next release; use %s",
            name,
            entry.module,
            entry.path,
            entry.line,
            entry.replacement(),
        )
    return found
