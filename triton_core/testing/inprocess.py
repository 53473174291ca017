"""A ``triton_core.Server`` running in the test's process, on an event loop of its own.

The server's loop runs in a thread, so tests need no asyncio plugin: a plain test calls
:meth:`InProcessServer.infer`; an async test (any runner, any loop) awaits
:meth:`InProcessServer.ainfer`. Whatever pytest-asyncio settings a project has, they do
not reach this loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Iterable
from types import ModuleType
from typing import Any, TypeVar

from triton_core.frontends.base import Frontend
from triton_core.plugins.manager import PluginManager, create_plugin_manager, installed_name
from triton_core.server.core import Server, ServerOptions
from triton_core.types import InferenceRequest, InferenceResponse

T = TypeVar("T")

#: a plugin to register: a module (named by its module path) or ``(name, plugin)``
PluginSpec = ModuleType | tuple[str, object]


def plugin_manager(plugins: Iterable[PluginSpec] = (), *, autoload: bool = False) -> PluginManager:
    """The built-ins plus exactly ``plugins``; installed plugins only with ``autoload``. A
    module is registered under its entry point's name when its distribution is installed
    (as ``serve`` registers it), else under its module path."""
    named = [
        plugin if isinstance(plugin, tuple) else (installed_name(plugin.__name__), plugin)
        for plugin in plugins
    ]
    return create_plugin_manager(autoload=autoload, extra_plugins=named)


class InProcessServer:
    """A started :class:`~triton_core.Server` on a daemon thread's event loop.

    ``server`` is the Server itself, for its synchronous methods (``model_ready``,
    ``model_metadata``, ``statistics``); run its coroutines with :meth:`run`.
    """

    def __init__(
        self,
        repositories: Iterable[os.PathLike[str] | str],
        plugins: PluginManager,
        **options: Any,
    ) -> None:
        self.options = ServerOptions([os.fspath(path) for path in repositories], **options)
        self._plugins = plugins
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="triton-core-server", daemon=True
        )
        self._server: Server | None = None
        self._frontends: list[Frontend] = []

    @property
    def server(self) -> Server:
        if self._server is None:
            raise RuntimeError("the server is not started")
        return self._server

    def start(self, timeout: float = 120.0) -> InProcessServer:
        """Load the repository; a load that fails the start raises its ``TritonError``."""
        self._thread.start()
        self._server = self.run(self._create(), timeout)
        try:
            self.run(self._server.start(), timeout)
        except BaseException:
            self._close_loop()
            raise
        return self

    async def _create(self) -> Server:
        return Server(self.options, self._plugins)  # made on the loop that will run it

    def run(self, awaitable: Awaitable[T], timeout: float | None = 60.0) -> T:
        """Run a coroutine on the server's loop (``server.load_model("m")``); its result."""
        future = asyncio.run_coroutine_threadsafe(_as_coroutine(awaitable), self._loop)
        return future.result(timeout)

    def infer(self, request: InferenceRequest, timeout: float | None = 60.0) -> InferenceResponse:
        """``Server.infer`` from any thread; a failed request raises its ``TritonError``."""
        return self.run(self.server.infer(request), timeout)

    async def ainfer(self, request: InferenceRequest) -> InferenceResponse:
        """``Server.infer`` awaited from another event loop (an async test's)."""
        coroutine = self.server.infer(request)
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return await asyncio.wrap_future(future)

    def serve_frontend(self, frontend: Frontend) -> dict[str, int]:
        """Run ``frontend`` on this server as ``serve`` runs it (check, listen, start) until
        :meth:`stop`; the ports it listens on, by endpoint key."""
        frontend.check()

        async def start() -> None:
            await frontend.listen(self.server, reuse_port=False)
            self._frontends.append(frontend)
            await frontend.start(self.server)

        self.run(start())
        return frontend.ports()

    def stop(self, grace_seconds: float = 30.0) -> bool:
        """Stop the frontends, the server and its loop; False when the stop overran
        ``grace_seconds``."""
        if not self._thread.is_alive():
            if not self._loop.is_closed() and not self._loop.is_running():
                self._loop.close()  # never started, or its start failed
            return True
        try:
            frontends, self._frontends = self._frontends, []
            for frontend in frontends:
                self.run(frontend.stop(grace_seconds), grace_seconds + 10.0)
            return self.run(self.server.stop(grace_seconds), grace_seconds + 10.0)
        finally:
            self._close_loop()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30.0)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> InProcessServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    # run_coroutine_threadsafe takes coroutines only; this also takes futures and tasks
    return await awaitable
