"""The server of one worker: answers as the whole set of workers where Triton's API expects
one server (readiness, statistics, explicit load and unload).

Only the control surface is overridden; inference is the plain :class:`Server`'s, so the
request path costs the same as with one process.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from triton_core.errors import TritonError, unavailable
from triton_core.observability.statistics import ModelStatistics
from triton_core.repository.manager import ControlMode
from triton_core.server.core import Server, ServerOptions
from triton_core.workers.control import ControlServer, WorkerError, WorkerGone, ask, peer_pids
from triton_core.workers.merge import statistics_to_json, sum_expositions, sum_statistics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from triton_core.plugins.manager import PluginManager

logger = logging.getLogger("triton_core.workers")

#: seconds a worker waits for a peer's readiness, statistics or metrics
QUERY_TIMEOUT_SECS: Final = 5.0


@dataclass(slots=True)
class WorkerSettings:
    #: the folder of the workers' control sockets (private to this server)
    folder: Path
    #: how many workers the server runs (``--workers``)
    workers: int
    #: seconds a load or unload may take on a peer before the request fails naming it
    load_timeout_secs: float


class WorkerServer(Server):
    """A :class:`Server` that is one of ``settings.workers`` identical processes."""

    def __init__(
        self, options: ServerOptions, plugins: PluginManager | None, settings: WorkerSettings
    ) -> None:
        super().__init__(options, plugins)
        self.settings = settings
        self.registry: CollectorRegistry | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the last explicit load or unload of each model, replayed by a worker that starts
        #: later (a replacement) so that it serves what its peers serve
        self._journal: dict[str, dict[str, Any]] = {}
        self._control = ControlServer(settings.folder, self._answer)
        #: whether start() completed: a worker that fails before cannot boot
        self.started = False
        self._started_event = threading.Event()

    # -- lifecycle -----------------------------------------------------------------------------

    def open_control(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._control.start()

    def close_control(self) -> None:
        self._control.close()

    async def start(self) -> None:
        await super().start()
        if self._mode is ControlMode.EXPLICIT:
            await self._catch_up()
        self.started = True
        self._started_event.set()

    async def stop(self, grace_seconds: float | None = None) -> bool:
        self.close_control()
        return await super().stop(grace_seconds)

    async def _catch_up(self) -> None:
        """Apply the explicit loads and unloads that the first started peer applied."""
        for pid in self._peers():
            try:
                answer = await asyncio.to_thread(self._ask, pid, {"op": "journal"})
            except WorkerGone:
                continue
            if not answer["started"]:
                continue  # booting too: it has seen nothing yet
            for name, entry in answer["journal"].items():
                logger.info(
                    "applying '%s' of model '%s' as the other workers did", entry["op"], name
                )
                try:
                    await self._apply(name, entry)
                except TritonError as error:
                    logger.error("model '%s': %s", name, error.message)
            return

    # -- one server to the outside -------------------------------------------------------------

    def _peers(self) -> list[int]:
        return peer_pids(self.settings.folder, os.getpid())

    def _ask(self, pid: int, request: dict[str, Any], timeout: float = QUERY_TIMEOUT_SECS) -> Any:
        return ask(self.settings.folder, pid, request, timeout)

    def _ask_all(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """Every live peer's answer; a peer that exited is skipped, one that fails raises."""
        answers = []
        for pid in self._peers():
            try:
                answers.append(self._ask(pid, request))
            except WorkerGone:
                continue
            except WorkerError as exc:
                raise unavailable(str(exc)) from None
        return answers

    def is_ready(self) -> bool:
        """Ready when this worker and every other one is: as many ready as ``--workers``."""
        if not super().is_ready():
            return False
        ready = 1
        for pid in self._peers():
            try:
                ready += bool(self._ask(pid, {"op": "ready"})["ready"])
            except WorkerError:
                continue
        return ready >= self.settings.workers

    def statistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]:
        local = super().statistics(name, version)
        others = self._ask_all({"op": "statistics", "name": name, "version": version})
        return sum_statistics(local, (answer["statistics"] for answer in others))

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        entry: dict[str, Any] = {"op": "load", "config": config}
        if files:
            entry["files"] = {path: base64.b64encode(data).decode() for path, data in files.items()}
        await super().load_model(name, config, files)
        self._record(name, entry)
        await self._broadcast(name, entry)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        entry = {"op": "unload", "dependents": unload_dependents}
        await super().unload_model(name, unload_dependents)
        self._record(name, entry)
        await self._broadcast(name, entry)

    def _record(self, name: str, entry: dict[str, Any]) -> None:
        self._journal.pop(name, None)
        self._journal[name] = entry  # last in order: replayed last

    async def _broadcast(self, name: str, entry: dict[str, Any]) -> None:
        """Apply a load or unload on every other worker before the request is answered."""
        pids = self._peers()
        request = {**entry, "op": "apply", "name": name, "action": entry["op"]}
        timeout = self.settings.load_timeout_secs
        results = await asyncio.gather(
            *(asyncio.to_thread(self._ask, pid, request, timeout) for pid in pids),
            return_exceptions=True,
        )
        failures = [
            str(result)
            for result in results
            if isinstance(result, BaseException) and not isinstance(result, WorkerGone)
        ]
        if failures:
            raise unavailable(
                f"{entry['op']} of model '{name}' did not complete on every worker: "
                + "; ".join(failures)
            )

    async def _apply(self, name: str, entry: dict[str, Any]) -> None:
        """A load or unload a peer forwards: applied here only, never forwarded again."""
        if entry["op"] == "load":
            files = entry.get("files")
            decoded = {path: base64.b64decode(data) for path, data in (files or {}).items()}
            await Server.load_model(self, name, entry.get("config"), decoded or None)
        else:
            await Server.unload_model(self, name, bool(entry.get("dependents")))
        self._record(name, entry)

    async def metrics_text(self, local: bytes) -> bytes:
        """``local`` (this worker's exposition) summed with every other worker's."""
        others = await asyncio.to_thread(self._ask_all, {"op": "metrics"})
        return sum_expositions(local, (answer["text"].encode() for answer in others))

    # -- answering peers (control thread) ------------------------------------------------------

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "ready":
            return {"ready": _retry(lambda: Server.is_ready(self))}
        if op == "statistics":
            return {"statistics": self._own_statistics(request["name"], request["version"])}
        if op == "metrics":
            return {"text": _retry(self._local_exposition).decode()}
        if op == "journal":
            return {"journal": _retry(lambda: dict(self._journal)), "started": self.started}
        if op == "apply":
            return self._apply_from_peer(request)
        raise ValueError(f"unknown control request '{op}'")

    def _own_statistics(self, name: str, version: int) -> list[dict[str, Any]]:
        """This worker's share: nothing while it starts, or for a model it does not serve
        (the asking worker answers for the model, as one server would)."""
        if not self.started:
            return []
        try:
            stats = _retry(lambda: Server.statistics(self, name, version))
        except TritonError:
            return []
        return [statistics_to_json(s) for s in stats]

    def _local_exposition(self) -> bytes:
        from triton_core.observability.metrics import exposition

        return exposition(self.registry) if self.registry is not None else b""

    def _apply_from_peer(self, request: dict[str, Any]) -> dict[str, Any]:
        # a worker still loading its models applies it once they are loaded (the request may
        # also reach it in the journal of its catch-up: then it is applied twice, harmlessly)
        timeout = self.settings.load_timeout_secs
        if self._loop is None or not self._started_event.wait(timeout):
            raise RuntimeError(f"this worker did not finish starting within {timeout:g}s")
        entry = {key: value for key, value in request.items() if key not in ("op", "name")}
        entry["op"] = entry.pop("action")
        future = asyncio.run_coroutine_threadsafe(self._apply(request["name"], entry), self._loop)
        future.result(self.settings.load_timeout_secs)
        return {}


def _retry(read: Any, attempts: int = 3) -> Any:
    """Read the event loop's counters from the control thread; a dict that grows while it
    is copied is read again."""
    for attempt in range(attempts):
        try:
            return read()
        except RuntimeError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")
