"""Name -> implementation registries that registration hooks fill.

Model configs select a backend or scheduler *by name*; the registries answer which plugin
provides it. Each entry remembers the plugin that added it, for ``triton-core plugins`` and
for error messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar

from triton_core.plugins.failures import PluginOrigin

if TYPE_CHECKING:
    from triton_core.backends.contract import Backend
    from triton_core.cache.base import ResponseCache
    from triton_core.frontends.base import FrontendFactory
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.repository.agents import RepositoryAgent
    from triton_core.scheduling.base import Scheduler, SchedulerContext
    from triton_core.scheduling.strategy import BatchStrategy

T = TypeVar("T")

#: names the plugin that is registering: called by a registry on each ``add``
PluginOfCaller = Callable[[], str]


def _unknown_plugin() -> str:
    return "<unknown>"


@dataclass(frozen=True, slots=True)
class Registration(Generic[T]):
    """One registered entry: its name, what was registered, and the plugin that did it."""

    name: str
    value: T
    plugin: str
    #: the installed distribution that holds the plugin, and its version ("" if none)
    distribution: str = ""
    version: str = ""

    def origin(self, kind: str) -> PluginOrigin:
        """Who provides this entry, as error messages name it."""
        return PluginOrigin(kind, self.name, self.plugin, self.distribution, self.version)


class Registry(Generic[T]):
    """Entries by name; a second plugin registering a taken name must say ``replace=True``.

    A registration made with ``replace=True`` wins over a plain one whichever of the two
    plugins runs first, so hook order (pluggy calls the last registered plugin first) never
    decides whether a replacement takes effect.
    """

    kind = "entry"

    def __init__(self) -> None:
        self._entries: dict[str, Registration[T]] = {}
        self._replaced: set[str] = set()
        self._plugin_of_caller: PluginOfCaller = _unknown_plugin
        #: (distribution, version) by plugin name, recorded in each registration
        self.distributions: dict[str, tuple[str, str]] = {}
        #: plugins that failed to import, by name: why (a model needing one says so)
        self.broken: dict[str, str] = {}

    def attribute_with(self, plugin_of_caller: PluginOfCaller) -> None:
        """Attribute each later addition to the plugin ``plugin_of_caller()`` names."""
        self._plugin_of_caller = plugin_of_caller

    def for_plugin(self, plugin: str) -> Self:
        """A view of this registry whose additions are attributed to ``plugin``."""
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._plugin_of_caller = lambda: plugin
        return view

    def _add(self, name: str, value: T, replace: bool) -> bool:
        """Add or replace ``name``; False when an earlier replacement keeps its place."""
        plugin = self._plugin_of_caller()
        existing = self._entries.get(name)
        if existing is not None and not replace:
            if name in self._replaced:
                return False
            raise ValueError(
                f"{self.kind} '{name}' from plugin '{plugin}' is already registered by "
                f"plugin '{existing.plugin}' (pass replace=True to override it)"
            )
        if replace:
            self._replaced.add(name)
        distribution, version = self.distributions.get(plugin, ("", ""))
        self._entries[name] = Registration(name, value, plugin, distribution, version)
        return True

    def get(self, name: str) -> Registration[T] | None:
        return self._entries.get(name)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __iter__(self) -> Iterator[Registration[T]]:
        return iter(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return name in self._entries


class BackendRegistry(Registry["type[Backend]"]):
    """Backends by backend name, with their platforms as aliases."""

    kind = "backend"

    def __init__(self) -> None:
        super().__init__()
        self._platforms: dict[str, str] = {}
        #: the ``--backend-directory`` folders: a plugin may serve backends it finds there
        #: (the Python plugin: Triton's Python-based backends, ``<folder>/<name>/model.py``)
        self.directories: tuple[Path, ...] = ()

    def add(self, backend: type[Backend], *, replace: bool = False) -> None:
        if not self._add(backend.name, backend, replace):
            return
        for platform in backend.platforms:
            self._platforms[platform] = backend.name

    def backend_for_platform(self, platform: str) -> str | None:
        return self._platforms.get(platform)

    def platforms(self) -> dict[str, str]:
        return dict(self._platforms)


SchedulerFactory = Callable[["SchedulerContext"], "Scheduler"]


class SchedulerRegistry(Registry[SchedulerFactory]):
    """Scheduler factories by scheduling choice (``default``, ``dynamic_batching`` ...)."""

    kind = "scheduler"

    def add(self, name: str, factory: SchedulerFactory, *, replace: bool = False) -> None:
        self._add(name, factory, replace)


BatchStrategyFactory = Callable[["ModelConfig"], "BatchStrategy"]


class BatchStrategyRegistry(Registry[BatchStrategyFactory]):
    """Custom batching strategies by name (config parameter ``batch_strategy``)."""

    kind = "batch strategy"

    def add(self, name: str, factory: BatchStrategyFactory, *, replace: bool = False) -> None:
        self._add(name, factory, replace)


CacheFactory = Callable[[dict[str, str]], "ResponseCache"]


class CacheRegistry(Registry[CacheFactory]):
    """Response caches by name (``--cache-config <name>,...``)."""

    kind = "cache"

    def add(self, name: str, factory: CacheFactory, *, replace: bool = False) -> None:
        self._add(name, factory, replace)


AgentFactory = Callable[[], "RepositoryAgent"]


class RepositoryAgentRegistry(Registry[AgentFactory]):
    """Repository agents by name (``model_repository_agents { agents [{name: ...}] }``)."""

    kind = "repository agent"

    def add(self, name: str, factory: AgentFactory, *, replace: bool = False) -> None:
        self._add(name, factory, replace)


class FrontendRegistry(Registry["FrontendFactory"]):
    """Frontend factories by name (``http``, ``grpc`` ...): ``triton-core serve`` runs
    every frontend whose factory returns one."""

    kind = "frontend"

    def add(self, name: str, factory: FrontendFactory, *, replace: bool = False) -> None:
        self._add(name, factory, replace)


def describe(registration: Registration[Any]) -> str:
    return f"{registration.name} (plugin {registration.plugin})"
