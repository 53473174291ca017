"""Plugins written against the core's internal modules: named at start, for one release.

The public API is ``triton_core`` (and ``triton_core.testing`` for tests). A plugin that
still imports an internal module (``triton_core.cache.base``, ``triton_core.protos`` ...)
works today, but those paths move without notice; the server says so once per plugin at
start, with the file, the line and what to import instead. The check reads the plugin's own
source files as text (no import, no parse), a bounded number of them.
"""

from __future__ import annotations

import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final

logger = logging.getLogger(__name__)

#: internal modules plugins of earlier releases imported -> what to use instead
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
    rb"|import[ \t]+(triton_core(?:\.\w+)+))",
    re.MULTILINE,
)


@dataclass(frozen=True, slots=True)
class InternalImport:
    """One import of an internal module, where it is."""

    path: Path
    line: int
    module: str

    def replacement(self) -> str:
        """What the public API offers instead."""
        for module, public in REPLACEMENTS.items():
            if self.module == module or self.module.startswith(module + "."):
                return public
        return "the names of triton_core (triton_core.__all__)"


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
            module = (match.group(1) or match.group(2)).decode()
            if module not in PUBLIC:
                found.append(InternalImport(path, text.count(b"\n", 0, match.start()) + 1, module))
    return found


def _source_files(module: ModuleType) -> list[Path]:
    if module.__name__ == "triton_core" or module.__name__.startswith("triton_core."):
        return []
    folders = [Path(entry) for entry in getattr(module, "__path__", ())]
    if not folders:
        return [Path(module.__file__)] if module.__file__ else []
    return sorted(path for folder in folders for path in folder.rglob("*.py"))


def warn_internal_imports(name: str, plugin: object, whole_package: bool) -> list[InternalImport]:
    """Log, once for the plugin registered as ``name``, each internal module it imports."""
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
