"""The plugin manager: hookspecs, built-in plugins, then entry points, with a typed facade."""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from triton_core.plugins import hookspecs
from triton_core.plugins.failures import exception_text
from triton_core.plugins.hookspecs import NAME
from triton_core.plugins.migration import warn_internal_imports
from triton_core.plugins.registry import (
    BackendRegistry,
    BatchStrategyRegistry,
    CacheRegistry,
    FrontendRegistry,
    Registry,
    RepositoryAgentRegistry,
    SchedulerRegistry,
)

if TYPE_CHECKING:
    import argparse
    from importlib.metadata import Distribution, EntryPoint

    from pluggy import HookImpl

    from triton_core.frontends.server_api import ServerAPI

logger = logging.getLogger(__name__)

#: built-in plugins: (plugin name, module path), registered before entry points
DEFAULT_PLUGINS: tuple[tuple[str, str], ...] = (
    ("default_scheduler", "triton_core.scheduling.default"),
    ("dynamic_batcher", "triton_core.scheduling.dynamic_batch"),
    ("sequence_batcher", "triton_core.scheduling.sequence"),
    ("ensemble_scheduler", "triton_core.scheduling.ensemble"),
    ("local_cache", "triton_core.cache.local"),
    ("http_frontend", "triton_core.frontends.builtin.http"),
    ("grpc_frontend", "triton_core.frontends.builtin.grpc"),
    ("metrics_frontend", "triton_core.frontends.builtin.metrics"),
    ("sagemaker_frontend", "triton_core.frontends.builtin.sagemaker"),
    ("vertex_ai_frontend", "triton_core.frontends.builtin.vertex_ai"),
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
    #: why it failed to import ("" for a plugin that works)
    broken: str = ""


def disabled_from_env() -> list[str]:
    return [name.strip() for name in os.environ.get(DISABLE_ENV, "").split(",") if name.strip()]


def env_module_paths() -> list[str]:
    """Module paths listed in ``TRITON_CORE_PLUGINS``."""
    return [path.strip() for path in os.environ.get(PLUGINS_ENV, "").split(",") if path.strip()]


def create_plugin_manager(
    disabled: Iterable[str] = (),
    *,
    autoload: bool | None = None,
    extra_plugins: Iterable[tuple[str, object]] = (),
    directories: Iterable[tuple[str, Path]] = (),
) -> PluginManager:
    """Build a plugin manager: hookspecs, built-ins, ``extra_plugins``, then entry points.

    ``disabled`` (plus ``TRITON_CORE_DISABLE_PLUGINS``) names plugins to block; blocking an
    essential built-in is an error. ``autoload=None`` follows
    ``TRITON_CORE_DISABLE_PLUGIN_AUTOLOAD``. Modules listed in ``TRITON_CORE_PLUGINS`` are
    registered after ``extra_plugins``, under their path, or under the entry point's name
    when an installed plugin is that module (so it is registered once).

    ``directories``: (flag, folder) pairs (``--backend-directory`` ...) whose Python modules
    and packages are registered too, under their module names, after ``TRITON_CORE_PLUGINS``.

    A plugin that fails to import is logged by name with the ``--disable-plugin`` hint and
    left out: only the models that need it fail, and :attr:`PluginManager.broken` says why.
    """
    extra_plugins = list(extra_plugins)
    directories = list(directories)
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
    for name, plugin in extra_plugins:
        if not pm.is_blocked(name):
            pm.register(plugin, name=name)
    # read even without autoload: a plugin registered by module path keeps its installed name
    entry_points = _entry_points()
    broken: dict[str, str] = {}
    env_names = _register_env_modules(pm, entry_points, broken)
    from_folders: dict[str, str] = {}
    for flag, folder in directories:
        from_folders.update(_register_directory(pm, flag, folder, broken))
    if autoload:
        _import_entry_points(pm, entry_points, broken)
        pm.load_setuptools_entrypoints(NAME)
    pm.check_pending()
    built_in = {name for name, _ in DEFAULT_PLUGINS} | {name for name, _ in extra_plugins}
    for name, plugin in pm.list_name_plugin():
        if name not in built_in:
            warn_internal_imports(name, plugin, whole_package=name in entry_points)
    installed = {
        name: (dist.metadata["Name"], dist.version)
        for name, (_, dist) in entry_points.items()
        if pm.get_plugin(name) is not None
    }
    backend_folders = [folder for flag, folder in directories if flag == "--backend-directory"]
    return PluginManager(pm, broken, env_names, from_folders, installed, backend_folders)


def installed_name(module_path: str) -> str:
    """The name a plugin module is installed under (its entry point's), else its path: how
    the testing kit names the plugins it registers, as ``serve`` names them."""
    for name, (entry_point, _) in _entry_points().items():
        if entry_point.value == module_path:
            return name
    return module_path


def _entry_points() -> dict[str, tuple[EntryPoint, Distribution]]:
    """The ``triton_core`` entry points by name (the first of a name wins, as in pluggy)."""
    found: dict[str, tuple[EntryPoint, Distribution]] = {}
    for dist in importlib.metadata.distributions():
        for entry_point in dist.entry_points:
            if entry_point.group == NAME and entry_point.name not in found:
                found[entry_point.name] = (entry_point, dist)
    return found


def _register_env_modules(
    pm: pluggy.PluginManager,
    entry_points: dict[str, tuple[EntryPoint, Distribution]],
    broken: dict[str, str],
) -> set[str]:
    """Register ``TRITON_CORE_PLUGINS`` modules; returns the names they are registered under."""
    installed_as = {entry_point.value: name for name, (entry_point, _) in entry_points.items()}
    names = set()
    for path in env_module_paths():
        name = installed_as.get(path, path)
        if pm.is_blocked(name) or pm.get_plugin(name) is not None:
            continue
        try:
            module = importlib.import_module(path)
        except Exception as exc:
            _report_broken(broken, name, f"{PLUGINS_ENV} module {path}", exc)
            continue
        if not pm.is_registered(module):
            pm.register(module, name=name)
            names.add(name)
    return names


def directory_modules(folder: Path) -> list[tuple[str, Path]]:
    """(module name, path) of each module (``name.py``) and package (``name/__init__.py``)
    in ``folder``, by name; names starting with ``_`` or ``.`` are left out."""
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(("_", ".")):
            continue
        if entry.is_file() and entry.suffix == ".py" and entry.stem.isidentifier():
            found.append((entry.stem, entry))
        elif entry.is_dir() and entry.name.isidentifier() and (entry / "__init__.py").is_file():
            found.append((entry.name, entry / "__init__.py"))
    return found


def _register_directory(
    pm: pluggy.PluginManager, flag: str, folder: Path, broken: dict[str, str]
) -> dict[str, str]:
    """Import and register the modules of a plugin folder; {registered name: the flag}."""
    names = {}
    for name, path in directory_modules(folder):
        if pm.is_blocked(name) or pm.get_plugin(name) is not None:
            continue
        where = f"{flag} {folder}, {path.relative_to(folder)}"
        try:
            module = _import_file(name, path)
        except Exception as exc:
            _report_broken(broken, name, where, exc)
            continue
        pm.register(module, name=name)
        names[name] = f"{flag} {folder}"
        logger.info("registered plugin '%s' from %s", name, where)
    return names


def _import_file(name: str, path: Path) -> ModuleType:
    """Import ``path`` as the top-level module ``name`` (a package keeps its submodules)."""
    loaded = sys.modules.get(name)
    if loaded is not None:
        raise ImportError(f"a module '{name}' is already imported from {loaded.__file__}")
    spec = importlib.util.spec_from_file_location(
        name,
        path,
        submodule_search_locations=[str(path.parent)] if path.stem == "__init__" else None,
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _import_entry_points(
    pm: pluggy.PluginManager,
    entry_points: dict[str, tuple[EntryPoint, Distribution]],
    broken: dict[str, str],
) -> None:
    """Import each entry point before pluggy does: one that fails is reported and blocked."""
    for name, (entry_point, dist) in entry_points.items():
        if pm.is_blocked(name) or pm.get_plugin(name) is not None:
            continue
        try:
            entry_point.load()
        except Exception as exc:
            where = f"{dist.metadata['Name']} {dist.version}, entry point {entry_point.value}"
            _report_broken(broken, name, where, exc)
            pm.set_blocked(name)


def _report_broken(broken: dict[str, str], name: str, where: str, exc: Exception) -> None:
    broken[name] = f"{where}: {exception_text(exc)}"
    logger.error(
        "plugin '%s' (%s) failed to import: %s; going on without it (pass --disable-plugin %s "
        "to leave it out)",
        name,
        where,
        exception_text(exc),
        name,
        exc_info=exc,
    )


class PluginManager:
    """Typed calls onto the hooks; see :mod:`triton_core.plugins.hookspecs` for their contracts."""

    def __init__(
        self,
        pm: pluggy.PluginManager,
        broken: dict[str, str] | None = None,
        env_plugins: Iterable[str] = (),
        folder_plugins: dict[str, str] | None = None,
        installed: dict[str, tuple[str, str]] | None = None,
        backend_directories: Iterable[Path] = (),
    ) -> None:
        self.pm = pm
        #: the ``--backend-directory`` folders (see :attr:`BackendRegistry.directories`)
        self.backend_directories = tuple(backend_directories)
        #: (distribution, version) of the plugins registered under an entry point's name
        self.installed = dict(installed or {})
        #: plugins that failed to import, by plugin name: why
        self.broken: dict[str, str] = dict(broken or {})
        #: plugins registered from ``TRITON_CORE_PLUGINS``
        self.env_plugins = frozenset(env_plugins)
        #: plugins imported from ``--backend-directory`` and the like: the flag and folder
        self.folder_plugins = dict(folder_plugins or {})

    def _fill(self, hook_name: str, registry: Registry[Any]) -> None:
        # One call through pluggy, so wrappers and tryfirst/trylast apply as documented; the
        # registry names each addition's plugin from the hookimpl running at that moment.
        registry.broken.update(self.broken)
        registry.distributions.update(self.distributions())
        hook = getattr(self.pm.hook, hook_name)
        registry.attribute_with(_RunningHookimpl(hook.get_hookimpls()).plugin_name)
        hook(registry=registry)

    def distributions(self) -> dict[str, tuple[str, str]]:
        """(distribution, version) of each plugin installed through an entry point;
        ``TRITON_CORE_PLUGINS`` stands for the distribution of the plugins it names."""
        names = {id(plugin): name for name, plugin in self.pm.list_name_plugin()}
        found = {
            names[id(plugin)]: (dist.project_name, dist.version)
            for plugin, dist in self.pm.list_plugin_distinfo()
            if id(plugin) in names
        }
        for name, distribution in self.installed.items():
            found.setdefault(name, distribution)
        for name in self.env_plugins:
            found.setdefault(name, (PLUGINS_ENV, ""))
        for name, where in self.folder_plugins.items():
            found.setdefault(name, (where, ""))
        return found

    def register_backends(self) -> BackendRegistry:
        registry = BackendRegistry()
        registry.directories = self.backend_directories
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

    def register_frontends(self) -> FrontendRegistry:
        registry = FrontendRegistry()
        self._fill("triton_register_frontends", registry)
        return registry

    def add_serve_arguments(self, parser: argparse._ArgumentGroup) -> None:
        """Let every plugin add its ``serve`` flags to ``parser``."""
        self.pm.hook.triton_add_serve_arguments(parser=parser)

    async def server_started(self, server: ServerAPI) -> None:
        await _await_all(self.pm.hook.triton_server_started(server=server))

    async def server_stopping(self, server: ServerAPI) -> None:
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
            ("frontend", self.register_frontends()),
        ):
            for registration in registry:
                provides.setdefault(registration.plugin, []).append(f"{kind}:{registration.name}")
        distributions = self.distributions()
        infos = []
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked
                continue
            distribution, version = distributions.get(
                name, ("triton-core (built-in)", _core_version())
            )
            infos.append(
                PluginInfo(name, distribution, version or "-", tuple(provides.get(name, ())))
            )
        for name, why in sorted(self.broken.items()):
            infos.append(PluginInfo(name, "-", "-", (), broken=why))
        return infos

    def blocked(self) -> list[str]:
        """Plugins left out by ``--disable-plugin`` (not those that failed to import)."""
        return sorted(
            name
            for name, plugin in self.pm.list_name_plugin()
            if plugin is None and name not in self.broken
        )


class _RunningHookimpl:
    """Names the plugin whose hookimpl is running, found on the call stack.

    pluggy runs every hookimpl of a hook within one call; a registry asks this, while one of
    them calls ``add``, which plugin it belongs to. The frame of a hookimpl (or of a
    ``wrapper=True`` hookimpl's generator) runs that function's code; a method's frame must
    also hold the plugin as ``self``, since instances of one class share the code.
    """

    def __init__(self, impls: Iterable[HookImpl]) -> None:
        self._owners: dict[CodeType, list[tuple[object, str]]] = {}
        for impl in impls:
            code = getattr(impl.function, "__code__", None)
            if code is not None:
                bound_to = getattr(impl.function, "__self__", None)
                self._owners.setdefault(code, []).append((bound_to, impl.plugin_name))

    def plugin_name(self) -> str:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            for bound_to, plugin_name in self._owners.get(frame.f_code, ()):
                if bound_to is None or bound_to is _first_argument(frame):
                    return plugin_name
            frame = frame.f_back
        return "<unknown>"


def _first_argument(frame: FrameType) -> object:
    code = frame.f_code
    return frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None


async def _await_all(results: list[Any]) -> None:
    for result in results:
        if inspect.isawaitable(result):
            await result


def _core_version() -> str:
    from triton_core import __version__

    return __version__
