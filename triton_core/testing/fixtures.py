"""The fixtures of the ``triton_core.testing`` pytest plugin."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from triton_core.testing.inprocess import InProcessServer, PluginSpec, plugin_manager
from triton_core.testing.process import ServerProcess
from triton_core.testing.repository import ModelRepository

if TYPE_CHECKING:
    import tritonclient.grpc
    import tritonclient.http

Repository = os.PathLike[str] | str


@pytest.fixture
def triton_plugins() -> Sequence[PluginSpec]:
    """The plugins the servers register (besides the built-ins), with autoload off.

    Override it to test your plugin::

        @pytest.fixture
        def triton_plugins():
            return [triton_core_mybackend.plugin]

    Left empty, in-process servers have the built-ins only and ``serve`` processes load the
    installed plugins.
    """
    return []


@pytest.fixture
def model_repository(tmp_path: Path) -> ModelRepository:
    """An empty model repository under ``tmp_path``; ``.add_model(...)`` fills it."""
    return ModelRepository(tmp_path / "model_repository")


@pytest.fixture
def triton_server_factory(
    model_repository: Repository, triton_plugins: Sequence[PluginSpec]
) -> Iterator[Callable[..., InProcessServer]]:
    """``triton_server_factory(*, repository=None, plugins=None, **options)``: a started
    in-process server (``options`` are ``ServerOptions`` fields), stopped after the test.

    ``repository`` defaults to ``model_repository``, ``plugins`` to ``triton_plugins``.
    """
    servers: list[InProcessServer] = []

    def start(
        *,
        repository: Repository | None = None,
        plugins: Sequence[PluginSpec] | None = None,
        **options: Any,
    ) -> InProcessServer:
        manager = plugin_manager(triton_plugins if plugins is None else plugins)
        server = InProcessServer([repository or model_repository], manager, **options)
        server.start()
        servers.append(server)
        return server

    yield start
    unstopped = [server for server in servers if not server.stop()]
    assert not unstopped, f"{len(unstopped)} in-process server(s) overran their stop"


@pytest.fixture
def triton_server(triton_server_factory: Callable[..., InProcessServer]) -> InProcessServer:
    """A started in-process server over ``model_repository`` with ``triton_plugins``.

    Write the repository before the server starts: request ``model_repository`` first, or
    fill it in a fixture of your own that this one depends on.
    """
    return triton_server_factory()


@pytest.fixture
def triton_process_factory(
    model_repository: Repository, triton_plugins: Sequence[PluginSpec], tmp_path: Path
) -> Iterator[Callable[..., ServerProcess]]:
    """``triton_process_factory(*args, repository=None, plugins=None, env=None,
    ready_path="/v2/health/ready")``: a real ``triton-core serve`` process, ready.

    ``args`` are further ``serve`` flags; ``repository`` defaults to ``model_repository``,
    ``plugins`` to ``triton_plugins``.

    At teardown each process the test did not stop itself is stopped and must exit with 0;
    a test that expects another exit code calls ``stop()`` and checks it.
    """
    processes: list[ServerProcess] = []

    def start(
        *args: str,
        repository: Repository | None = None,
        plugins: Sequence[PluginSpec] | None = None,
        env: dict[str, str] | None = None,
        ready_path: str = "/v2/health/ready",
    ) -> ServerProcess:
        chosen = triton_plugins if plugins is None else plugins
        modules = [plugin[1] if isinstance(plugin, tuple) else plugin for plugin in chosen]
        process = ServerProcess(
            [repository or model_repository],
            *args,
            plugins=modules,  # type: ignore[arg-type]
            env=env,
            workdir=tmp_path / f"triton_process_{len(processes)}",
        )
        processes.append(process)
        process.wait_ready(path=ready_path)
        return process

    yield start
    failures = []
    for process in processes:
        if not process.stopped:
            code = process.stop()
            if code != 0:
                failures.append(f"exit code {code}:\n{process.log()[-4000:]}")
    assert not failures, "\n".join(failures)


@pytest.fixture
def triton_process(triton_process_factory: Callable[..., ServerProcess]) -> ServerProcess:
    """A ready ``triton-core serve`` process over ``model_repository``."""
    return triton_process_factory()


@pytest.fixture
def triton_http_client(
    triton_process: ServerProcess,
) -> Iterator[tritonclient.http.InferenceServerClient]:
    """The stock ``tritonclient.http`` client, connected to ``triton_process``."""
    yield from _closed_after(triton_process.http_client())


@pytest.fixture
def triton_grpc_client(
    triton_process: ServerProcess,
) -> Iterator[tritonclient.grpc.InferenceServerClient]:
    """The stock ``tritonclient.grpc`` client, connected to ``triton_process``."""
    yield from _closed_after(triton_process.grpc_client())


def _closed_after(client: Any) -> Iterator[Any]:
    try:
        yield client
    finally:
        client.close()
