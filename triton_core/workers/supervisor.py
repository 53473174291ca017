"""``triton-core serve --workers N``: gunicorn's arbiter supervises N server processes.

gunicorn forks the workers, replaces one that dies, reloads them on SIGHUP and stops them on
SIGTERM; each worker runs the project's own serve loop (asyncio, its HTTP protocol, its gRPC
transport). The listeners are not gunicorn's: every worker binds the HTTP, gRPC and metrics
ports itself with SO_REUSEPORT, and the kernel spreads new connections over the workers.
The master only reserves the ports (resolving port 0) so that every worker binds the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import os
import queue
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.errors import HaltServer
from gunicorn.workers.base import Worker

from triton_core.errors import TritonError
from triton_core.frontends.runner import (
    WATCHDOG_MARGIN_SECS,
    FrontendOptions,
    run_on_event_loop,
    serve,
)
from triton_core.workers.control import WorkerError, ask, socket_path
from triton_core.workers.server import WorkerServer, WorkerSettings

if TYPE_CHECKING:
    from triton_core.frontends.base import Frontend
    from triton_core.frontends.http.fast_path import ASGIApp
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.observability.metrics_options import MetricsOptions

logger = logging.getLogger("triton_core.workers")

#: seconds a worker's event loop may go without a heartbeat before gunicorn replaces it
HEARTBEAT_TIMEOUT_SECS: Final = 120
#: seconds a new worker may take to become ready during a rolling reload
RELOAD_READY_TIMEOUT_SECS: Final = 600.0
#: gunicorn's exit code of a worker that could not boot (the arbiter then stops)
_BOOT_ERROR: Final = Arbiter.WORKER_BOOT_ERROR


@dataclass(slots=True)
class WorkerPlan:
    """What every worker runs."""

    #: builds the worker's server (in the worker, after the fork)
    build_server: Callable[[WorkerSettings], WorkerServer]
    options: FrontendOptions
    #: built in the master, before the fork: their endpoints hold the reserved ports
    frontends: list[Frontend]
    workers: int
    #: seconds a peer may take to apply an explicit load or unload
    load_timeout_secs: float = 300.0
    log_level: str = "info"


def worker_count(text: str) -> int:
    """``--workers``: a count from 1, or ``auto`` for the CPUs this process may use."""
    if text.strip().lower() == "auto":
        return (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count() or 1
        )
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"--workers expects a number or 'auto', got '{text}'") from None
    if not 1 <= count <= 1024:
        raise ValueError(f"--workers must be between 1 and 1024, got {count}")
    return count


def run_workers(plan: WorkerPlan) -> int:
    """Supervise ``plan.workers`` workers until a stop signal; the exit code."""
    master = os.getpid()
    folder = Path(tempfile.mkdtemp(prefix="triton-core-workers-"))  # mode 0700: ours only
    try:
        reserved = _reserve_ports(plan.frontends)
    except OSError as exc:
        logger.error("%s", exc)
        shutil.rmtree(folder, ignore_errors=True)
        return 1
    try:
        _Application(plan, folder, reserved).run()
    except SystemExit as stop:
        if os.getpid() != master:
            raise  # a worker leaving gunicorn's fork: its own exit code
        return stop.code if isinstance(stop.code, int) else 1
    finally:
        if os.getpid() == master:
            for sock in reserved:
                sock.close()
            shutil.rmtree(folder, ignore_errors=True)
    return 0


# -- ports -------------------------------------------------------------------------------------


def _reserve_ports(frontends: list[Frontend]) -> list[socket.socket]:
    """Bind (without listening) each frontend endpoint's port with SO_REUSEPORT and write
    the bound port into the endpoint: port 0 becomes the one port every worker binds, and a
    port that another program holds is refused here, naming the endpoint."""
    reserved: list[socket.socket] = []
    for endpoint in (endpoint for frontend in frontends for endpoint in frontend.endpoints()):
        try:
            sock = _reserve(endpoint.address, endpoint.port)
        except OSError as exc:
            for held in reserved:
                held.close()
            raise OSError(
                f"failed to bind the {endpoint.name} endpoint to "
                f"{endpoint.address}:{endpoint.port}: {exc}"
            ) from exc
        reserved.append(sock)
        endpoint.port = _port(sock)
        logger.info(
            "%s endpoint: %s:%d, shared by the workers",
            endpoint.name,
            endpoint.address,
            _port(sock),
        )
    return reserved


def _port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def _reserve(address: str, port: int) -> socket.socket:
    host = address.removeprefix("ipv6:").strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # first without SO_REUSEPORT: fails when anything else listens there, even a reuse-port
    # listener of another server, which the workers would otherwise silently share it with
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        port = probe.getsockname()[1]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


# -- gunicorn ----------------------------------------------------------------------------------


class _Application(BaseApplication):
    def __init__(self, plan: WorkerPlan, folder: Path, reserved: list[socket.socket]) -> None:
        self.plan = plan
        self.folder = folder
        self.reserved = reserved
        super().__init__()

    def load_config(self) -> None:
        exit_timeout = self.plan.options.exit_timeout_secs
        settings: dict[str, Any] = {
            "bind": [],  # the workers bind their own listeners (SO_REUSEPORT)
            "workers": self.plan.workers,
            "worker_class": ServeWorker,
            "timeout": HEARTBEAT_TIMEOUT_SECS,
            # the workers end their own stop at --exit-timeout-secs (plus their watchdog's
            # margin); gunicorn kills what is left just after
            "graceful_timeout": math.ceil(exit_timeout + WATCHDOG_MARGIN_SECS) + 1,
            "proc_name": "triton-core",
            "loglevel": self.plan.log_level,
            "post_fork": self._post_fork,
            "control_socket_disable": True,
        }
        for key, value in settings.items():
            if key in self.cfg.settings:
                self.cfg.set(key, value)

    def _post_fork(self, arbiter: Arbiter, worker: Worker) -> None:
        for sock in self.reserved:
            sock.close()

    def load(self) -> _Application:
        return self

    def run(self) -> None:
        _Arbiter(self).run()


class _Arbiter(Arbiter):
    """gunicorn's arbiter with a rolling reload and the server's exit codes."""

    def __init__(self, app: _Application) -> None:
        super().__init__(app)
        self.folder = app.folder
        self._stopping = False
        self._unclean_exits = 0

    def reload(self) -> None:
        """SIGHUP: replace the workers one at a time, each only once its successor is ready,
        so that the others keep serving throughout."""
        old = sorted(self.WORKERS.items(), key=lambda item: item[1].age)
        self.log.info("Reloading %d workers one by one", len(old))
        for pid, _ in old:
            if pid not in self.WORKERS:
                continue
            successor = self.spawn_worker()
            if not self._wait_ready(successor):
                self.log.error(
                    "Reload stopped: worker %s is not ready; worker %s keeps serving",
                    successor,
                    pid,
                )
                return
            self.kill_worker(pid, signal.SIGTERM)
            self._wait_exit(pid, self.cfg.graceful_timeout)
        self.log.info("Reloaded")

    def _wait_ready(self, pid: int) -> bool:
        deadline = time.monotonic() + RELOAD_READY_TIMEOUT_SECS
        while time.monotonic() < deadline:
            try:
                self.reap_workers()
            except HaltServer:
                # the successor could not start (a model that no longer loads): during a
                # reload the old workers keep serving instead of the server stopping
                return False
            if pid not in self.WORKERS:
                return False
            if self._stop_requested():
                self.log.info("A stop signal arrived during the reload")
                return False
            try:
                if ask(self.folder, pid, {"op": "ready"}, 1.0)["ready"]:
                    return True
            except WorkerError:
                pass  # not listening yet
            self._notify_all()
            time.sleep(0.1)
        return False

    def _stop_requested(self) -> bool:
        """Whether a stop signal waits in the arbiter's queue (left there to be handled)."""
        stops = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
        signals = self.SIG_QUEUE
        if isinstance(signals, list):  # gunicorn before 24
            return any(sig in stops for sig in signals)
        pending = []
        with contextlib.suppress(queue.Empty):
            while True:
                pending.append(signals.get_nowait())
        for sig in pending:
            signals.put_nowait(sig)
        return any(sig in stops for sig in pending)

    def _wait_exit(self, pid: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while pid in self.WORKERS and time.monotonic() < deadline:
            self.reap_workers()
            time.sleep(0.05)
        if pid in self.WORKERS:
            self.kill_worker(pid, signal.SIGKILL)

    def _notify_all(self) -> None:
        # the main loop is not running while a reload waits: nothing to murder meanwhile
        for worker in self.WORKERS.values():
            with contextlib.suppress(OSError, ValueError):
                worker.tmp.notify()

    def reap_workers(self) -> None:
        """Collect exited workers; a worker that could not boot stops the server."""
        try:
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if not pid:
                    return
                worker = self.WORKERS.pop(pid, None)
                if worker is None:
                    continue
                self._worker_exited(pid, status)
                worker.tmp.close()
                self.cfg.child_exit(self, worker)
                socket_path(self.folder, pid).unlink(missing_ok=True)
                if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _BOOT_ERROR:
                    raise HaltServer("Worker failed to boot.", _BOOT_ERROR)
        except ChildProcessError:
            return
        except OSError as exc:
            if exc.errno != errno.ECHILD:
                raise

    def _worker_exited(self, pid: int, status: int) -> None:
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            self.log.info("Worker %s exited", pid)
            return
        if os.WIFSIGNALED(status):
            how = f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
        else:
            how = f"exited with code {os.WEXITSTATUS(status)}"
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _BOOT_ERROR:
            self.log.error("Worker %s could not start: stopping the server", pid)
        elif self._stopping:
            self._unclean_exits += 1
            self.log.error("Worker %s %s while stopping", pid, how)
        else:
            self.log.error("Worker %s %s; starting another", pid, how)

    def stop(self, graceful: bool = True) -> None:
        self._stopping = True
        super().stop(graceful)

    def halt(self, reason: str | None = None, exit_status: int = 0) -> None:
        """Stop every worker; exit 0 when all drained in time, else 1 (as one process)."""
        self.stop()
        status = 1 if exit_status or self._unclean_exits else 0
        if reason is not None:
            self.log.error("Stopping: %s", reason)
        self.log.info("Shutting down: %s", self.master_name)
        self.cfg.on_exit(self)
        sys.exit(status)


class ServeWorker(Worker):
    """A gunicorn worker that runs the whole server: models, HTTP, gRPC, metrics."""

    def init_signals(self) -> None:
        super().init_signals()
        # a hang-up of the terminal or process group reaches the master, whose SIGHUP is a
        # rolling reload; a worker must not die of it
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def run(self) -> None:
        app: _Application = self.wsgi
        code = _serve_in_worker(self, app.plan, app.folder)
        sys.exit(code)


def _serve_in_worker(worker: ServeWorker, plan: WorkerPlan, folder: Path) -> int:
    settings = WorkerSettings(folder, plan.workers, plan.load_timeout_secs)
    try:
        server = plan.build_server(settings)
    except OSError as exc:
        logger.error("worker %d could not start: %s", os.getpid(), exc)
        return _BOOT_ERROR
    # the frontends were built in the master and read these when they listen and serve
    options = plan.options
    options.reuse_port = True
    options.metrics_app_factory = _metrics_app_factory

    async def main() -> int:
        loop = asyncio.get_running_loop()
        # gunicorn's fast stop (SIGQUIT, SIGINT) drains like SIGTERM: one stop path
        loop.add_signal_handler(signal.SIGQUIT, os.kill, os.getpid(), signal.SIGTERM)
        server.open_control(loop)
        heartbeat = asyncio.create_task(_heartbeat(worker))
        try:
            return await serve(server, options, plan.frontends)
        finally:
            heartbeat.cancel()
            server.close_control()

    try:
        code = run_on_event_loop(main())
    except (OSError, ValueError) as exc:
        logger.error("%s", exc)
        code = 1
    if code != 0 and not server.started:
        return _BOOT_ERROR
    return code


async def _heartbeat(worker: ServeWorker) -> None:
    """Tell the master this loop turns; stop when the master is gone."""
    period = max(0.5, worker.timeout / 2)
    while True:
        worker.notify()
        if os.getppid() != worker.ppid:
            logger.error(
                "the master process %d exited: stopping worker %d", worker.ppid, os.getpid()
            )
            os.kill(os.getpid(), signal.SIGTERM)
            return
        await asyncio.sleep(period)


def _metrics_app_factory(server: ServerAPI, options: MetricsOptions) -> ASGIApp:
    """``/metrics`` of the whole server: this worker's registry summed with the others'."""
    import falcon
    import falcon.asgi

    from triton_core.observability.metrics import CONTENT_TYPE, create_registry, exposition

    assert isinstance(server, WorkerServer)
    worker_server = server
    registry = server.registry = create_registry(server, options)

    class MetricsResource:
        async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
            try:
                text = await worker_server.metrics_text(exposition(registry))
            except TritonError as error:  # another worker did not answer: no partial sums
                resp.status = falcon.HTTP_503
                resp.content_type = falcon.MEDIA_TEXT
                resp.text = error.message
                return
            resp.content_type = CONTENT_TYPE
            resp.data = text

    app = falcon.asgi.App()
    app.add_route("/metrics", MetricsResource())
    return app
