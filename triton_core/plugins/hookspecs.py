"""Every hook specification of triton-core, grouped by when it runs.

A plugin is a module or object with functions named like the hooks below, marked with
``triton_core.hookimpl``. Plugins are found in the ``triton_core`` entry-point group; the core's
own defaults are built-in plugins registered the same way (see :mod:`triton_core.plugins.manager`).

Hooks run on the cold path only (start-up, model load, shutdown). Per-request work goes through
the objects that registration hooks hand to the server (backends, schedulers).

Every hook is called through pluggy, in pluggy's order: the last registered plugin first (the
built-ins last), ``tryfirst``/``trylast`` hookimpls moved to the front or back, and
``wrapper=True`` hookimpls around the rest. A registry attributes each addition to the plugin
whose hookimpl made it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import argparse

    from triton_core.frontends.server_api import ServerAPI
    from triton_core.plugins.registry import (
        BackendRegistry,
        BatchStrategyRegistry,
        CacheRegistry,
        FrontendRegistry,
        RepositoryAgentRegistry,
        SchedulerRegistry,
    )

#: project name: the pluggy project, the entry-point group and the hook prefix's owner
NAME = "triton_core"

hookspec = pluggy.HookspecMarker(NAME)
hookimpl = pluggy.HookimplMarker(NAME)


# -- registration: called once per plugin manager, when the server is built ---------------------


@hookspec
def triton_register_backends(registry: BackendRegistry) -> None:
    """Register backends: the classes that load and execute models of a backend or platform.

    Called once when a :class:`~triton_core.Server` is created, for every plugin.
    Call ``registry.add(BackendClass)``; the class's ``name`` (e.g. ``"onnxruntime"``) and
    ``platforms`` (e.g. ``("onnxruntime_onnx",)``) are the names a ``config.pbtxt`` selects it
    by. Registering a name that another plugin registered is an error unless
    ``replace=True``. Returns nothing.
    """


@hookspec
def triton_register_schedulers(registry: SchedulerRegistry) -> None:
    """Register schedulers: how a model's requests become executions on its instances.

    Called once when a :class:`~triton_core.Server` is created, for every plugin.
    Call ``registry.add(name, factory)`` where ``factory(context)`` returns a
    :class:`~triton_core.Scheduler`. The core picks the scheduler by the
    model config's scheduling choice: ``"default"`` (none set), ``"dynamic_batching"``,
    ``"sequence_batching"`` or ``"ensemble_scheduling"``. Returns nothing.
    """


@hookspec
def triton_register_batch_strategies(registry: BatchStrategyRegistry) -> None:
    """Register custom batching strategies: which pending requests join a batch being formed.

    Called once when a :class:`~triton_core.Server` is created, for every plugin.
    Call ``registry.add(name, factory)`` where ``factory(config)`` gets the model's config and
    returns a :class:`~triton_core.BatchStrategy`. A model with
    ``dynamic_batching`` selects one by the config parameter ``batch_strategy`` (Triton's
    custom batching, ``TRITON_BATCH_STRATEGY_PATH``, by name). Returns nothing.
    """


@hookspec
def triton_register_caches(registry: CacheRegistry) -> None:
    """Register response caches.

    Called once when a :class:`~triton_core.Server` is created, for every plugin.
    Call ``registry.add(name, factory)`` where ``factory(settings)`` gets the
    ``--cache-config <name>,<key>=<value>`` settings as a dict of strings and returns a
    :class:`~triton_core.ResponseCache`. Returns nothing.
    """


@hookspec
def triton_register_repository_agents(registry: RepositoryAgentRegistry) -> None:
    """Register repository agents: actions on a model's files at load and unload.

    Called once when a :class:`~triton_core.Server` is created, for every plugin.
    Call ``registry.add(name, factory)`` where ``factory()`` returns a
    :class:`~triton_core.RepositoryAgent`. A model lists the agents it uses,
    in order, in ``model_repository_agents { agents [ { name: "<name>" ... } ] }``. Returns
    nothing.
    """


@hookspec
def triton_register_frontends(registry: FrontendRegistry) -> None:
    """Register frontends: ``registry.add("name", factory)``.

    Called once per ``triton-core serve`` (and by anything else that builds the frontends),
    for every plugin. ``factory(settings)`` gets a
    :class:`~triton_core.frontends.base.FrontendSettings` and returns a
    :class:`~triton_core.frontends.base.Frontend`, or None when its flags leave it off.
    ``triton-core serve`` runs every frontend it gets; the built-in HTTP, gRPC, metrics,
    SageMaker and Vertex AI frontends are registered the same way (``--disable-plugin
    http_frontend`` drops one). Returns nothing.
    """


@hookspec
def triton_add_serve_arguments(parser: argparse._ArgumentGroup) -> None:
    """Add flags to ``triton-core serve`` (``parser.add_argument("--openai-port", ...)``).

    Called once, before the command line is parsed, with an argument group of the ``serve``
    command; what was parsed reaches frontend factories as ``settings.arguments``. Flags
    must not clash with the core's or another plugin's (argparse refuses a clash). Returns
    nothing.
    """


# -- server lifecycle --------------------------------------------------------------------------


@hookspec
def triton_server_started(server: ServerAPI) -> None:
    """The server has loaded its model repository and is about to accept requests;
    ``server`` offers what the frontends use (:class:`~.frontends.server_api.ServerAPI`).

    Called once per :meth:`Server.start`, on the event loop thread, for every plugin; a plugin
    may start background work here. Returns nothing (a coroutine returned is awaited).
    """


@hookspec
def triton_server_stopping(server: ServerAPI) -> None:
    """The server has stopped accepting requests and is about to unload its models.

    Called once per :meth:`Server.stop`, for every plugin, in reverse registration order.
    Returns nothing (a coroutine returned is awaited).
    """
