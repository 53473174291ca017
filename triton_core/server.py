"""The server: the one data plane that every frontend (HTTP, gRPC, in-process) calls.

This is the Python counterpart of Triton's C API: start and stop it, ask for health and
metadata, and ``await server.infer(request)``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from time import monotonic_ns
from typing import TYPE_CHECKING, Any

from triton_core import __version__
from triton_core.cache.base import ResponseCache, request_key
from triton_core.config import ModelConfig, config_to_json
from triton_core.devices import gpu_count
from triton_core.errors import TritonError, internal, invalid_arg, unavailable, unsupported
from triton_core.failures import RepeatedFailureLog, exception_text
from triton_core.model import ModelRetired
from triton_core.plugins import PluginManager, create_plugin_manager
from triton_core.repository.loader import LoaderOptions, ModelLoader
from triton_core.repository.manager import ControlMode, ModelRepositoryManager
from triton_core.repository.sources import open_source
from triton_core.streaming import StreamSender
from triton_core.types import (
    InferenceRequest,
    InferenceResponse,
    ModelIndexEntry,
    ModelMetadata,
    ServerMetadata,
)

if TYPE_CHECKING:
    from triton_core.model import LoadedModel
    from triton_core.statistics import ModelStatistics

logger = logging.getLogger(__name__)

#: protocol extensions this server implements, in Triton's order
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "binary_tensor_data",
    "parameters",
    "statistics",
)


@dataclass(slots=True)
class ServerOptions:
    """Server settings; the CLI flags of ``triton-core serve`` map onto these."""

    #: local folders and ``s3://``, ``gs://``, ``as://`` locations
    model_repositories: list[Path | str]
    id: str = "triton"
    strict_readiness: bool = True
    exit_on_error: bool = True
    auto_complete_config: bool = True
    #: ``--backend-config`` settings by backend name ("" holds global ones)
    backend_options: dict[str, dict[str, str]] = field(default_factory=dict)
    model_load_thread_count: int = 4
    #: bucket bounds (ms) of per-model latency histograms; None records none
    latency_buckets_ms: tuple[float, ...] | None = None
    #: ``--cache-config``: the response cache's name and its settings
    cache: tuple[str, dict[str, str]] | None = None
    #: ``--model-control-mode``: none, poll or explicit
    model_control_mode: str = "none"
    #: ``--load-model``: models to load at start in explicit mode ("*": all)
    load_models: list[str] = field(default_factory=list)
    #: ``--repository-poll-secs``
    repository_poll_secs: float = 15.0
    #: where cloud repositories' models are copied (default: a temporary folder)
    repository_cache_dir: Path | None = None


class Server:
    """Loads a model repository and serves inference on it."""

    def __init__(self, options: ServerOptions, plugins: PluginManager | None = None) -> None:
        self.options = options
        self.plugins = plugins if plugins is not None else create_plugin_manager()
        self._models: ModelRepositoryManager | None = None
        self._loader: ModelLoader | None = None
        self._live = False
        self._accepting = False
        self._inflight = 0
        self._idle: asyncio.Event | None = None
        self._metadata = ServerMetadata(options.id, __version__, EXTENSIONS)
        #: the response cache, when ``--cache-config`` names one
        self.cache: ResponseCache | None = None
        #: a cache that raises is a miss, with a warning (rate-limited) naming it
        self._cache_failures: RepeatedFailureLog | None = None
        self._mode = ControlMode.NONE
        self._poller: asyncio.Task[None] | None = None

    @property
    def models(self) -> ModelRepositoryManager:
        if self._models is None:
            raise unavailable("Server is not started")
        return self._models

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the model repositories; raises if a model fails and ``exit_on_error`` is set."""
        loop = asyncio.get_running_loop()
        self.cache = self._create_cache()
        self._loader = ModelLoader(
            self.plugins.register_backends(),
            self.plugins.register_schedulers(),
            LoaderOptions(
                auto_complete_config=self.options.auto_complete_config,
                backend_options=self.options.backend_options,
                gpu_count=gpu_count(),
                latency_buckets_ms=self.options.latency_buckets_ms,
            ),
            loop,
            batch_strategies=self.plugins.register_batch_strategies(),
            server=self,
        )
        try:
            mode = ControlMode(self.options.model_control_mode)
        except ValueError:
            raise invalid_arg(
                f"unknown --model-control-mode '{self.options.model_control_mode}' "
                "(expected none, poll or explicit)"
            ) from None
        if self.options.load_models and mode is not ControlMode.EXPLICIT:
            raise invalid_arg("--load-model needs --model-control-mode=explicit")
        if "*" in self.options.load_models and len(self.options.load_models) > 1:
            raise invalid_arg("--load-model=* must be the only --load-model")
        self._mode = mode
        sources = [
            open_source(location, self.options.repository_cache_dir)
            for location in self.options.model_repositories
        ]
        self._models = ModelRepositoryManager(
            sources,
            self._loader,
            self.options.model_load_thread_count,
            self.plugins.register_repository_agents(),
        )
        self._live = True
        errors = await self._models.start(mode, list(self.options.load_models))
        if errors and self.options.exit_on_error:
            await self._models.unload_all()
            await self._models.finalize_agents()
            self._models.close()
            self._live = False
            raise TritonError(
                errors[0].status,
                f"failed to load all models ({len(errors)} failed); first error: "
                f"{errors[0].message}",
            )
        self._accepting = True
        if mode is ControlMode.POLL:
            self._poller = asyncio.create_task(self._poll_forever())
        await self.plugins.server_started(self)

    async def _poll_forever(self) -> None:
        interval = max(0.1, self.options.repository_poll_secs)
        while True:
            await asyncio.sleep(interval)
            try:
                await self.models.poll()
            except Exception:  # a bad poll must not end polling
                logger.exception("polling the model repository failed")

    def _create_cache(self) -> ResponseCache | None:
        if self.options.cache is None:
            return None
        name, settings = self.options.cache
        registration = self.plugins.register_caches().get(name)
        if registration is None:
            raise invalid_arg(
                f"--cache-config names cache '{name}', which no installed plugin provides"
            )
        try:
            cache = registration.value(dict(settings))
        except ValueError as exc:
            raise invalid_arg(str(exc)) from None
        self._cache_failures = RepeatedFailureLog(
            logger, f"response {registration.origin('cache')}", level=logging.WARNING
        )
        return cache

    async def stop(self, grace_seconds: float | None = None) -> bool:
        """Refuse new requests, let accepted ones finish, unload models and backends.

        ``grace_seconds`` bounds the whole stop (None: no bound). When it runs out, the
        instances still executing are aborted (:meth:`ModelInstance.abort`) and the stop
        returns False without waiting for them; True when everything stopped in time.
        """
        if self._models is None:
            return True
        loop = asyncio.get_running_loop()
        deadline = None if grace_seconds is None else loop.time() + max(0.0, grace_seconds)

        def remaining() -> float | None:
            return None if deadline is None else max(0.0, deadline - loop.time())

        self._accepting = False
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        await self.plugins.server_stopping(self)
        if self._inflight:
            self._idle = asyncio.Event()
            try:
                await asyncio.wait_for(self._idle.wait(), remaining())
            except TimeoutError:
                logger.warning("%d request(s) still running at shutdown", self._inflight)
        unload = asyncio.ensure_future(self._release_everything())
        try:
            await asyncio.wait_for(asyncio.shield(unload), remaining())
        except TimeoutError:
            self.abort()
            return False
        return True

    def abort(self) -> None:
        """End the work of every loaded model now: the stop deadline passed (any thread)."""
        if self._models is None:
            return
        count = self._models.abort_running()
        logger.error(
            "Exit timeout expired: aborted %d model version(s) and %d request(s) in flight",
            count,
            self._inflight,
        )

    async def _release_everything(self) -> None:
        assert self._models is not None
        await self._models.unload_all()
        await self._models.finalize_agents()
        self._models.close()
        if self.cache is not None:
            await self.cache.close()
        for backend in self._loader.backends() if self._loader else ():
            try:
                await asyncio.to_thread(backend.finalize)
            except Exception:
                logger.exception("finalizing backend '%s' failed", backend.name)
        self._live = False

    async def __aenter__(self) -> Server:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- health and metadata -------------------------------------------------------------------

    def is_live(self) -> bool:
        return self._live

    def is_ready(self) -> bool:
        if not (self._live and self._accepting):
            return False
        return self.models.all_ready() if self.options.strict_readiness else True

    def model_ready(self, name: str, version: int = -1) -> bool:
        """Whether a model (version) is ready; raises for a model the server does not know."""
        return self._accepting and self.models.is_ready(name, version)

    def metadata(self) -> ServerMetadata:
        return self._metadata

    def model_metadata(self, name: str, version: int = -1) -> ModelMetadata:
        model = self.models.get(name, version)
        versions = (
            (str(version),)
            if version >= 0
            else tuple(str(v) for v in self.models.ready_versions(name))
        )
        signature = model.signature
        return ModelMetadata(
            name, versions, model.platform, signature.input_metadata, signature.output_metadata
        )

    def model_config(self, name: str, version: int = -1) -> ModelConfig:
        return self.models.get(name, version).config

    def model_config_json(self, name: str, version: int = -1) -> dict[str, Any]:
        return config_to_json(self.model_config(name, version))

    def model_is_decoupled(self, name: str, version: int = -1) -> bool:
        return self.models.get(name, version).decoupled

    def statistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]:
        """Statistics of ready model versions: all models, one model, or one version.

        Raises INVALID_ARG for a model with no ready version (or a version that is not ready).
        """
        if not name:
            return [model.statistics for model in self.models.ready_models()]
        if version >= 0:
            if not self._safe_is_ready(name, version):
                raise invalid_arg(f"requested model version is not available for model '{name}'")
            return [self.models.get(name, version).statistics]
        try:
            versions = self.models.ready_versions(name)
        except TritonError:
            versions = []
        if not versions:
            raise invalid_arg(f"requested model '{name}' is not available")
        return [self.models.get(name, v).statistics for v in versions]

    def _safe_is_ready(self, name: str, version: int) -> bool:
        try:
            return self.models.is_ready(name, version)
        except TritonError:
            return False

    # -- model repository extension -----------------------------------------------------------

    def _check_explicit(self) -> None:
        if self._mode is not ControlMode.EXPLICIT:
            raise unavailable("explicit model load / unload is not allowed if polling is enabled")

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load or reload a model (explicit mode). ``config`` is a JSON ModelConfig that
        replaces the repository's; ``files`` (``<version>/<path>`` -> bytes) build the model
        from uploaded files. A failed reload leaves the loaded versions serving."""
        self._check_explicit()
        await self.models.load(name, config, files)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload a model (explicit mode); requests it accepted finish first."""
        self._check_explicit()
        await self.models.unload(name, unload_dependents)

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        return self.models.index(ready_only)

    def model(self, name: str, version: int = -1) -> LoadedModel:
        return self.models.get(name, version)

    # -- inference -----------------------------------------------------------------------------

    async def infer(self, request: InferenceRequest, *, nested: bool = False) -> InferenceResponse:
        """Validate a request, run it through its model's scheduler, and return the response.

        Raises :class:`TritonError` for an unknown model or version, invalid inputs, a
        stopping server, or a failed execution. ``nested=True`` marks a request made on
        behalf of one already accepted (an ensemble step): it still runs while the server
        drains its accepted requests at shutdown.
        """
        future = self.submit(request, nested=nested)
        try:
            return await future
        except (TritonError, asyncio.CancelledError):
            raise
        except Exception as exc:
            raise internal(
                f"inference on model '{request.model_name}' failed: {exception_text(exc)}"
            ) from exc

    def submit(
        self, request: InferenceRequest, *, nested: bool = False
    ) -> asyncio.Future[InferenceResponse]:
        """:meth:`infer` without a coroutine: validate and schedule now, answer in a future.

        For frontends that answer from a callback (no task per request). Invalid requests
        raise at once; a failed execution is the future's exception.
        """
        if not (self._accepting or nested):
            raise unavailable("Server is not accepting requests: it is shutting down")
        model = self.models.get(request.model_name, request.model_version)
        if model.decoupled:
            raise unsupported(
                f"model '{model.name}' is decoupled; use a streaming API for its responses"
            )
        received = monotonic_ns()
        self._inflight += 1
        future: asyncio.Future[InferenceResponse]
        try:
            if model.cacheable and self.cache is not None:
                future = asyncio.ensure_future(self._infer_cached(model, request, received))
            else:
                future = model.enqueue(request)
        except BaseException as exc:
            self._infer_done(model, received, exc)
            if isinstance(exc, TritonError | asyncio.CancelledError):
                raise
            raise internal(
                f"inference on model '{model.name}' failed: {exception_text(exc)}"
            ) from exc
        future.add_done_callback(lambda done: self._infer_done(model, received, done))
        return future

    def _infer_done(
        self,
        model: LoadedModel,
        received: int,
        outcome: asyncio.Future[InferenceResponse] | BaseException,
    ) -> None:
        """Statistics and the count in flight, once a request is answered (or failed)."""
        self._inflight -= 1
        if self._idle is not None and not self._inflight:
            self._idle.set()
        if isinstance(outcome, asyncio.Future):
            if outcome.cancelled():
                return  # the client went away: neither a success nor a failure
            error = outcome.exception()
        else:
            error = outcome
        elapsed = monotonic_ns() - received
        if error is None:
            model.statistics.record_success(elapsed)
        elif isinstance(error, TritonError):
            model.statistics.record_failure(elapsed, error.failure_reason)
        elif isinstance(error, Exception):
            model.statistics.record_failure(elapsed, "OTHER")
            logger.error("inference on model '%s' failed: %r", model.name, error)

    async def _infer_cached(
        self, model: LoadedModel, request: InferenceRequest, received: int
    ) -> InferenceResponse:
        """A cache hit skips execution; a miss executes and keeps a successful response."""
        cache = self.cache
        assert cache is not None
        model.signature.validate(request)
        key = request_key(model.name, model.version, request)
        try:
            cached = await cache.lookup(key)
        except Exception as exc:
            self._cache_failed("lookup", exc, "a miss")
            cached = None
        looked_up = monotonic_ns()
        if cached is not None:
            model.statistics.record_cache_hit(looked_up - received)
            return replace(cached, id=request.id, outputs=list(cached.outputs))
        try:
            future = model.submit(request)
        except ModelRetired:  # reloaded while we looked in the cache: use the new version
            model = self.models.get(request.model_name, request.model_version)
            model.signature.validate(request)
            future = model.submit(request)
        response = await future
        inserting = monotonic_ns()
        try:
            await cache.insert(key, replace(response, id="", outputs=list(response.outputs)))
        except Exception as exc:
            self._cache_failed("insert", exc, "not kept")
        model.statistics.record_cache_miss(looked_up - received + monotonic_ns() - inserting)
        return response

    def _cache_failed(self, method: str, exc: Exception, outcome: str) -> None:
        assert self._cache_failures is not None
        message = f"{method}() raised {exception_text(exc)}; the response is {outcome}"
        self._cache_failures.failed((method, type(exc)), message, exc)

    async def infer_stream(
        self, request: InferenceRequest, *, nested: bool = False
    ) -> AsyncIterator[InferenceResponse]:
        """All responses to a request as the model produces them; the last has ``final``.

        A decoupled model may answer any number of times; any other model answers once. When
        the caller stops iterating early (the client went away), the request is marked
        cancelled, which the model sees through ``response_sender.is_cancelled()``.
        ``nested`` as for :meth:`infer` (a decoupled ensemble step).
        """
        if not (self._accepting or nested):
            raise unavailable("Server is not accepting requests: it is shutting down")
        model = self.models.get(request.model_name, request.model_version)
        if not model.decoupled:
            yield await self.infer(request, nested=nested)
            return
        received = monotonic_ns()
        statistics = model.statistics
        version = model.version
        signature = model.signature
        sender = StreamSender(
            asyncio.get_running_loop(),
            request,
            lambda req, resp, instance: signature.finish_one(req, resp, version, instance),
            version,
        )
        request.response_sender = sender
        self._inflight += 1
        finished = False
        try:
            model.enqueue(request).add_done_callback(sender.on_execute_done)
            async for response in sender.responses():
                yield response
            finished = True
        except TritonError as error:
            statistics.record_failure(monotonic_ns() - received, error.failure_reason)
            raise
        finally:
            if not finished:
                sender.cancel()
            self._inflight -= 1
            if self._idle is not None and not self._inflight:
                self._idle.set()
        statistics.record_success(monotonic_ns() - received)
