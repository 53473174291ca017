"""Run the server with its frontends on one event loop until a signal arrives.

The frontends are plugins (:mod:`triton_core.frontends.base`); the options here are those of
the built-in ones and of the run itself (exit timeout, ports file, ``--workers``).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import threading
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from triton_core.errors import TritonError
from triton_core.frontends.base import Frontend, FrontendSettings
from triton_core.frontends.cloud import check_port_collisions
from triton_core.frontends.options import FrontendOptions
from triton_core.server.core import Server

if TYPE_CHECKING:
    from triton_core.plugins.manager import PluginManager

logger = logging.getLogger("triton_core")


#: files the server keeps open besides HTTP connections (gRPC, models, logs), a guess
_OTHER_FILES: Final = 256


def raise_open_files_limit(connections: int = 0) -> int:
    """Raise the soft limit on open files to the hard one (each connection holds one), and
    warn when it leaves too few for ``connections``; the limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            logger.warning(
                "could not raise the open files limit from %d to %d: %s", soft, target, exc
            )
        else:
            logger.info("raised the open files limit (RLIMIT_NOFILE) from %d to %d", soft, target)
            soft = target
    if soft != resource.RLIM_INFINITY and soft < connections + _OTHER_FILES:
        logger.warning(
            "the open files limit (%d) is too low for --http-max-connections %d: connections "
            "will be refused by the system before the server's limit",
            soft,
            connections,
        )
    return soft


def build_frontends(plugins: PluginManager, settings: FrontendSettings) -> list[Frontend]:
    """The frontends that the registered factories build from ``settings``, in the order
    their plugins were registered, the built-ins first (those their flags leave off are
    absent)."""
    frontends = []
    # pluggy calls the last registered plugin first
    for registration in reversed(list(plugins.register_frontends())):
        frontend = registration.value(settings)
        if frontend is not None:
            frontends.append(frontend)
    return frontends


def check_frontends(frontends: Sequence[Frontend]) -> None:
    """Refuse two endpoints on one port and each frontend's bad settings (ValueError)."""
    check_port_collisions([endpoint for frontend in frontends for endpoint in frontend.endpoints()])
    for frontend in frontends:
        frontend.check()


async def serve(
    server: Server, options: FrontendOptions, frontends: Sequence[Frontend] | None = None
) -> int:
    """Start the server and its frontends; return the exit code once a signal stops them.

    ``frontends``: those to run; None: those the server's plugins build from ``options``.
    """
    if frontends is None:
        frontends = build_frontends(server.plugins, FrontendSettings(options))
    check_frontends(frontends)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    # one process listens before loading models, so that a port in use fails at once; a
    # worker (reuse_port) only once its models are loaded, or it would take connections
    # that wait for them while the other workers are free
    if not options.reuse_port:
        await _listen(server, frontends, reuse_port=False)
    try:
        await server.start()
    except TritonError as error:
        logger.error("%s", error.message)
        await _stop_frontends(frontends, 0.0)
        return 1
    try:
        if options.reuse_port:
            await _listen(server, frontends, reuse_port=True)
        for frontend in frontends:
            await frontend.start(server)
    except (OSError, ValueError, RuntimeError) as exc:
        logger.error("%s", exc)
        await _stop_frontends(frontends, 0.0)
        await server.stop(options.exit_timeout_secs)
        return 1
    logger.info("Started server process [%d]", os.getpid())
    # what start-up made (modules, configs, a frontend's tokenizer) lives as long as the
    # process: out of the collector's full passes, which otherwise scan it all and stall the
    # event loop (100-200 ms each with transformers imported, as the OpenAI frontend does).
    # Only reference cycles among it are never freed (a start-up model unloaded later)
    gc.collect()
    gc.freeze()
    if options.ports_file:
        ports: dict[str, int] = {}
        for frontend in frontends:
            ports.update(frontend.ports())
        write_ports_file(options.ports_file, ports)

    await stop.wait()
    logger.info("Stopping: no new requests; waiting for requests in flight to finish")
    deadline = loop.time() + options.exit_timeout_secs
    watchdog = _ExitWatchdog(server, options.exit_timeout_secs + WATCHDOG_MARGIN_SECS)

    def remaining() -> float:
        return max(0.0, deadline - loop.time())

    await _stop_frontends(frontends, remaining())
    if not await server.stop(remaining()):
        _exit_now(1, "Exit timeout expired. Exiting immediately.")
    watchdog.cancel()
    logger.info("Stopped")
    return 0


async def _listen(server: Server, frontends: Sequence[Frontend], *, reuse_port: bool) -> None:
    """Bind every frontend's ports; on a failure, release those already bound."""
    try:
        for frontend in frontends:
            await frontend.listen(server, reuse_port)
    except BaseException:
        await _stop_frontends(frontends, 0.0)
        raise


async def _stop_frontends(frontends: Sequence[Frontend], timeout: float) -> None:
    """Drain every frontend at once within ``timeout``; one that fails is logged."""
    waits = [frontend.stop(timeout) for frontend in frontends]
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*waits, return_exceptions=True), timeout + 1.0
        )
    except TimeoutError:
        results = [TimeoutError("the frontends did not stop before the exit timeout")]
    for result in results:
        if isinstance(result, BaseException):
            logger.warning("a frontend did not stop cleanly: %r", result)


def write_ports_file(path: str, ports: dict[str, int]) -> None:
    """Write ``{"http": port, "grpc": port, "metrics": port}`` (the endpoints that listen).

    Written to a temporary name and renamed, so that a reader sees the whole file or none.
    """
    temporary = f"{path}.{os.getpid()}.tmp"
    with open(temporary, "w") as handle:
        json.dump(ports, handle)
    os.replace(temporary, path)


#: how long past --exit-timeout-secs the watchdog lets a stop run before it ends the process
WATCHDOG_MARGIN_SECS: Final = 2.0


class _ExitWatchdog:
    """Ends the process if a stop overruns its deadline even though the loop cannot act.

    The stop path aborts late work itself; this thread covers an event loop that a plugin
    blocks (so no deadline on the loop can fire): it aborts the model instances (killing
    stub processes) and exits.
    """

    def __init__(self, server: Server, seconds: float) -> None:
        self._server = server
        self._timer = threading.Timer(seconds, self._expired)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        self._timer.cancel()

    def _expired(self) -> None:
        try:
            self._server.abort()
        finally:
            _exit_now(1, "Exit timeout expired and the event loop is not responding. Exiting.")


def _exit_now(code: int, message: str) -> NoReturn:
    """Exit at once: threads still in a hung ``execute`` cannot be joined or interrupted."""
    logger.error("%s", message)
    logging.shutdown()  # flush the log before the process goes
    os._exit(code)


def run_on_event_loop(coroutine: Coroutine[Any, Any, int]) -> int:
    """Run the serving coroutine to its end on uvloop (asyncio's loop where uvloop is
    missing); its exit code."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)
