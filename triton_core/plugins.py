"""The plugin manager: hookspecs, built-in plugins, then entry points, with a typed facade."""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pluggy

from triton_core import hookspecs
from triton_core.hookspecs import NAME
from triton_core.registry import (
    BackendRegistry,
    BatchStrategyRegistry,
    CacheRegistry,
    Registry,
    RepositoryAgentRegistry,
    SchedulerRegistry,
)

if TYPE_CHECKING:
    from triton_core.server import Server

#: built-in plugins: (plugin name, module path), registered before entry points
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("default_scheduler", "triton_core.scheduling.default"),
    ("dynamic_batcher", "triton_core.scheduling.dynamic_batch"),
    ("sequence_batcher", "triton_core.scheduling.sequence"),
    ("ensemble_scheduler", "triton_core.scheduling.ensemble"),
    ("local_cache", "triton_core.cache.local"),
)
#: built-ins that ``--disable-plugin`` may not block: the server cannot run without them
ESSENTIAL_PLUGINS: frozenset[str] = frozenset({"default_scheduler"})

#: comma-separated plugin names to block, like ``--disable-plugin``
DISABLE_ENV = "TRITON_CORE_DISABLE_PLUGINS"
#: set to 1 to skip entry-point discovery (built-ins only)
NO_AUTOLOAD_ENV = "TRITON_CORE_DISABLE_PLUGIN_AUTOLOAD"
#: comma-separated module paths to register as plugins without packaging them
PLUGINS_ENV = "TRITON_CORE_PLUGINS"


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """What ``triton-core plugins`` prints for one plugin."""

    name: str
    distribution: str
    version: str
    provides: tuple[str, ...]


def disabled_from_env() -> list[str]:
    return [name.strip() for name in os.environ.get(DISABLE_ENV, "").split(",") if name.strip()]


def modules_from_env() -> list[tuple[str, object]]:
    """Plugins named by module path in ``TRITON_CORE_PLUGINS`` (registered under that path)."""
    paths = [path.strip() for path in os.environ.get(PLUGINS_ENV, "").split(",")]
    return [(path, importlib.import_module(path)) for path in paths if path]


def create_plugin_manager(
    disabled: Iterable[str] = (),
    *,
    autoload: bool | None = None,
    extra_plugins: Iterable[tuple[str, object]] = (),
) -> PluginManager:
    """Build a plugin manager: hookspecs, built-ins, ``extra_plugins``, then entry points.

    ``disabled`` (plus ``TRITON_CORE_DISABLE_PLUGINS``) names plugins to block; blocking an
    essential built-in is an error. ``autoload=None`` follows
    ``TRITON_CORE_DISABLE_PLUGIN_AUTOLOAD``. Modules listed in ``TRITON_CORE_PLUGINS`` are
    registered after ``extra_plugins``.
    """
    blocked = set(disabled) | set(disabled_from_env())
    essential = blocked & ESSENTIAL_PLUGINS
    if essential:
        raise ValueError(f"plugin(s) {sorted(essential)} are essential and cannot be disabled")
    if autoload is None:
        autoload = os.environ.get(NO_AUTOLOAD_ENV, "") not in ("1", "true", "yes")

    pm = pluggy.PluginManager(NAME)
    pm.add_hookspecs(hookspecs)
    for name in blocked:
        pm.set_blocked(name)
    for name, module_path in DEFAULT_PLUGINS:
        if not pm.is_blocked(name):
            pm.register(importlib.import_module(module_path), name=name)
    for name, plugin in [*extra_plugins, *modules_from_env()]:
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    if autoload:
        pm.load_setuptools_entrypoints(NAME)
    pm.check_pending()
    return PluginManager(pm)


class PluginManager:
    """Typed calls onto the hooks; see :mod:`triton_core.hookspecs` for their contracts."""

    def __init__(self, pm: pluggy.PluginManager, broken: dict[str, str] | None = None) -> None:
        self.pm = pm
        #: entry points that failed to import, by plugin name: why
        self.broken: dict[str, str] = dict(broken or {})

    def _fill(self, hook_name: str, registry: Registry[Any]) -> None:
        # In registration order (built-ins first), each with a view that records the plugin.
        registry.broken.update(self.broken)
        distributions = self.distributions()
        for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
            view = registry.for_plugin(
                impl.plugin_name, distributions.get(impl.plugin_name, ("", ""))
            )
            impl.function(registry=view)

    def distributions(self) -> dict[str, tuple[str, str]]:
        """(distribution, version) of each plugin installed through an entry point."""
        names = {id(plugin): name for name, plugin in self.pm.list_name_plugin()}
        return {
            names[id(plugin)]: (dist.project_name, dist.version)
            for plugin, dist in self.pm.list_plugin_distinfo()
            if id(plugin) in names
        }

    def register_backends(self) -> BackendRegistry:
        registry = BackendRegistry()
        self._fill("triton_register_backends", registry)
        return registry

    def register_schedulers(self) -> SchedulerRegistry:
        registry = SchedulerRegistry()
        self._fill("triton_register_schedulers", registry)
        return registry

    def register_batch_strategies(self) -> BatchStrategyRegistry:
        registry = BatchStrategyRegistry()
        self._fill("triton_register_batch_strategies", registry)
        return registry

    def register_caches(self) -> CacheRegistry:
        registry = CacheRegistry()
        self._fill("triton_register_caches", registry)
        return registry

    def register_repository_agents(self) -> RepositoryAgentRegistry:
        registry = RepositoryAgentRegistry()
        self._fill("triton_register_repository_agents", registry)
        return registry

    async def server_started(self, server: Server) -> None:
        await _await_all(self.pm.hook.triton_server_started(server=server))

    async def server_stopping(self, server: Server) -> None:
        await _await_all(self.pm.hook.triton_server_stopping(server=server))

    def describe(self) -> list[PluginInfo]:
        """Every registered plugin with its distribution and what it registers."""
        backends = self.register_backends()
        provides: dict[str, list[str]] = {}
        for entry in backends:
            provides.setdefault(entry.plugin, []).append(f"backend:{entry.name}")
        for platform, backend in sorted(backends.platforms().items()):
            owner = backends.get(backend)
            if owner is not None:
                provides.setdefault(owner.plugin, []).append(f"platform:{platform}")
        for kind, registry in (
            ("scheduler", self.register_schedulers()),
            ("batch_strategy", self.register_batch_strategies()),
            ("cache", self.register_caches()),
            ("repository_agent", self.register_repository_agents()),
        ):
            for entry in registry:
                provides.setdefault(entry.plugin, []).append(f"{kind}:{entry.name}")
        dists = {id(plugin): dist for plugin, dist in self.pm.list_plugin_distinfo()}
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked
                continue
            dist = dists.get(id(plugin))
            infos.append(
                PluginInfo(
                    name=name,
                    distribution=dist.project_name if dist else "triton-core (built-in)",
                    version=dist.version if dist else _core_version(),
                    provides=tuple(provides.get(name, ())),
                )
            )
        return infos

    def blocked(self) -> list[str]:
        return sorted(name for name, plugin in self.pm.list_name_plugin() if plugin is None)


async def _await_all(results: list[Any]) -> None:
    for result in results:
        if inspect.isawaitable(result):
            await result


def _core_version() -> str:
    from triton_core import __version__

    return __version__
