"""The server: the one data plane that every frontend (HTTP, gRPC, in-process) calls.

This is the Python counterpart of Triton's C API: start and stop it, ask for health and
metadata, and ``await server.infer(request)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from time import monotonic_ns
from typing import TYPE_CHECKING, Any

from triton_core import __version__
from triton_core.backends.streaming import ResponsePool, StreamSender
from triton_core.cache.base import ResponseCache, request_key
from triton_core.config import ModelConfig, config_to_json
from triton_core.errors import TritonError, internal, invalid_arg, unavailable, unsupported
from triton_core.observability.custom_metrics import CustomMetrics
from triton_core.observability.tracing import TraceConfig, Tracer
from triton_core.plugins.failures import RepeatedFailureLog, exception_text
from triton_core.plugins.manager import PluginManager, create_plugin_manager
from triton_core.repository.loader import LoaderOptions, ModelLoader
from triton_core.repository.manager import ControlMode, ModelRepositoryManager
from triton_core.repository.sources import LocalSource, open_source
from triton_core.scheduling import inline
from triton_core.scheduling.rate_limiter import MODES as RATE_LIMIT_MODES
from triton_core.scheduling.rate_limiter import OFF as RATE_LIMIT_OFF
from triton_core.scheduling.rate_limiter import RateLimiter
from triton_core.scheduling.runtime import SchedulingRuntime
from triton_core.server import host_policy
from triton_core.server.model import ModelRetired
from triton_core.shared_memory import tensors as shm_tensors
from triton_core.shared_memory.cuda import cuda_support
from triton_core.shared_memory.region import CudaRegionStatus, RegionKind, SystemRegionStatus
from triton_core.shared_memory.registry import SharedMemoryOptions, SharedMemoryRegistry
from triton_core.tensors import buffer_manager
from triton_core.tensors.devices import gpu_count
from triton_core.types import (
    InferenceRequest,
    InferenceResponse,
    ModelIndexEntry,
    ModelMetadata,
    ServerMetadata,
)

if TYPE_CHECKING:
    from triton_core.observability.statistics import ModelStatistics
    from triton_core.observability.tracing import Trace
    from triton_core.server.model import LoadedModel

logger = logging.getLogger(__name__)

#: protocol extensions this server implements, in Triton's order
EXTENSIONS = (
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
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
    #: ``--trace-config``: the trace settings the server starts with (None: tracing off)
    trace: TraceConfig | None = None
    #: ``--allow-client-shm`` and the bounds on registered shared-memory regions
    shared_memory: SharedMemoryOptions = field(default_factory=SharedMemoryOptions)

    #: ``summary_latencies`` in ``--metrics-config``: per-model latency summaries
    latency_summaries: bool = False
    #: ``--model-config-name``: load ``<model>/configs/<name>.pbtxt`` where it exists
    model_config_name: str = ""
    #: ``--model-load-retry-count``: more tries of a version load that fails
    model_load_retry_count: int = 0
    #: ``--model-namespacing``: a model name may be in several repositories
    model_namespacing: bool = False

    #: ``--rate-limit``: "off" or "execution_count"
    rate_limit: str = "off"
    #: ``--rate-limit-resource``: (name, count, device or -1 for every device)
    rate_limit_resources: list[tuple[str, int, int]] = field(default_factory=list)
    #: ``--buffer-manager-thread-count``: threads for large tensor copies (0: inline)
    buffer_manager_thread_count: int = 0
    #: ``--host-policy``: (policy name, setting, value) as given
    host_policies: list[tuple[str, str, str]] = field(default_factory=list)
    #: ``--inline-execution-budget-us``: short batches run on the event loop (0: never)
    inline_execution_budget_us: int = inline.DEFAULT_BUDGET_US


def _extensions() -> tuple[str, ...]:
    """:data:`EXTENSIONS`, with ``cuda_shared_memory`` after the system one where this
    process can open CUDA IPC handles (Triton built with GPU support lists it)."""
    if not cuda_support().available:
        return EXTENSIONS
    at = EXTENSIONS.index("system_shared_memory") + 1
    return (*EXTENSIONS[:at], "cuda_shared_memory", *EXTENSIONS[at:])


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
        #: of those, the requests models made on behalf of others (BLS, ensemble steps)
        self._nested = 0
        self._idle: asyncio.Event | None = None
        self._metadata = ServerMetadata(options.id, __version__, _extensions())
        #: the response cache, when ``--cache-config`` names one
        self.cache: ResponseCache | None = None
        #: a cache that raises is a miss, with a warning (rate-limited) naming it
        self._cache_failures: RepeatedFailureLog | None = None
        self._mode = ControlMode.NONE
        self._poller: asyncio.Task[None] | None = None
        #: metric families models create at run time (pb_utils.MetricFamily), on /metrics
        self.custom_metrics = CustomMetrics()
        #: the trace extension's settings; frontends sample requests from it
        self.tracer = Tracer(options.trace)
        #: the shared-memory regions clients registered
        self.shared_memory = SharedMemoryRegistry(options.shared_memory)

    @property
    def models(self) -> ModelRepositoryManager:
        if self._models is None:
            raise unavailable("Server is not started")
        return self._models

    # -- lifecycle -----------------------------------------------------------------------------

    def _create_rate_limiter(self) -> RateLimiter | None:
        mode = self.options.rate_limit
        if mode not in RATE_LIMIT_MODES:
            raise invalid_arg(f"unknown --rate-limit '{mode}' (expected off or execution_count)")
        if mode == RATE_LIMIT_OFF:
            return None
        return RateLimiter(self.options.rate_limit_resources)

    def _host_policies(self) -> dict[str, frozenset[int]]:
        try:
            return host_policy.resolve(self.options.host_policies)
        except ValueError as exc:
            raise invalid_arg(str(exc)) from None

    async def start(self) -> None:
        """Load the model repositories; raises if a model fails and ``exit_on_error`` is set."""
        loop = asyncio.get_running_loop()
        try:
            self.tracer.start()
        except ValueError as exc:
            raise invalid_arg(str(exc)) from None
        self.cache = self._create_cache()
        buffer_manager.set_thread_count(self.options.buffer_manager_thread_count)
        backends = self.plugins.register_backends()
        runtime = SchedulingRuntime(
            self.plugins.register_schedulers(),
            loop,
            batch_strategies=self.plugins.register_batch_strategies(),
            rate_limiter=self._create_rate_limiter(),
            server=self,
            inline_budget_us=self.options.inline_execution_budget_us,
        )
        self._loader = ModelLoader(
            backends,
            runtime,
            LoaderOptions(
                auto_complete_config=self.options.auto_complete_config,
                backend_options=self.options.backend_options,
                gpu_count=gpu_count(),
                latency_buckets_ms=self.options.latency_buckets_ms,
                latency_summaries=self.options.latency_summaries,
                model_config_name=self.options.model_config_name,
                model_load_retry_count=self.options.model_load_retry_count,
                response_cache=self.cache is not None,
                host_policies=self._host_policies(),
            ),
            loop,
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
            namespacing=self.options.model_namespacing,
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
            # what was traced is written even when the stop overruns; a last span export
            # to a collector that does not answer is not waited for
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.to_thread(self.tracer.close), 1.0)
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
        self.shared_memory.close()
        if self.cache is not None:
            await self.cache.close()
        for backend in self._loader.backends() if self._loader else ():
            try:
                await asyncio.to_thread(backend.finalize)
            except Exception:
                logger.exception("finalizing backend '%s' failed", backend.name)
        await asyncio.to_thread(self.tracer.close)
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

    async def check_ready(self) -> bool:
        """:meth:`is_ready`, then with strict readiness the instances' own checks of every
        ready model version (a Python model's ``is_ready()``, its stub's health): the answer
        of the server-ready endpoints, as Triton 2.7x's. Never on the inference path."""
        if not self.is_ready():
            return False
        if not self.options.strict_readiness:
            return True
        for model in self.models.ready_models():
            try:
                await model.pool.check_ready()
            except TritonError as error:
                logger.debug(
                    "Model '%s' version %d is in READY lifecycle state but failed runtime "
                    "readiness check during server readiness evaluation: %s",
                    model.name,
                    model.version,
                    error.message,
                )
                return False
        return True

    @property
    def requests_in_flight(self) -> int:
        """Clients' inference requests accepted and not answered yet, on every model; the
        requests models make on their behalf (BLS calls, ensemble steps) are not counted."""
        return self._inflight - self._nested

    @property
    def nested_requests_in_flight(self) -> int:
        """Requests models made on behalf of others (BLS calls, ensemble steps) and not
        answered yet."""
        return self._nested

    def model_ready(self, name: str, version: int = -1) -> bool:
        """Whether a model (version) is ready; a model the server does not know is not (as
        Triton answers on both protocols)."""
        if not self._accepting:
            return False
        try:
            return self.models.is_ready(name, version)
        except TritonError:
            return False

    async def check_model_ready(self, name: str, version: int = -1) -> bool:
        """:meth:`model_ready`, then the instances' own checks (a Python model's
        ``is_ready()``): the answer of the model-ready endpoints, as Triton's."""
        if not self.model_ready(name, version):
            return False
        model = self.models.get(name, version)
        try:
            await model.pool.check_ready()
        except TritonError as error:
            logger.debug(
                "Model '%s' version %d is not ready: %s", name, model.version, error.message
            )
            return False
        return True

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
                # as Triton: a model with no ready version is named as such first
                if not self._safe_is_ready(name, -1):
                    raise invalid_arg(f"requested model '{name}' is not available")
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

    def register_model_repository(self, path: str, mapping: dict[str, str] | None = None) -> None:
        """Serve the models of one more repository folder (explicit mode); ``mapping`` (model
        name -> subfolder) serves subfolders under other names. Load them with
        :meth:`load_model`. Triton's RegisterModelRepository."""
        self.models.register(path, mapping or {}, self._mode is ControlMode.EXPLICIT)

    def unregister_model_repository(self, path: str) -> None:
        """Forget a repository added by :meth:`register_model_repository`; its loaded models
        keep serving until unloaded."""
        self.models.unregister(path, self._mode is ControlMode.EXPLICIT)

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        return self.models.index(ready_only)

    def model_version_path(self, name: str, version: int = -1) -> Path | None:
        """The folder of a ready model version in a local model repository
        (``<repository>/<model>/<version>``), for a frontend that reads a file kept beside the
        model, as the OpenAI frontend reads ``multi_lora.json``. ``version`` -1 is the version
        serving version-less requests. None for a model from a cloud repository or built from
        uploaded files: it has no such folder. Raises Triton's errors for a model (version)
        that is not ready."""
        model = self.models.get(name, version)
        record = self.models.record(name)
        uploaded = record.override is not None and record.override.folder is not None
        if uploaded or record.folder is None or not isinstance(record.source, LocalSource):
            return None
        return record.folder / str(model.version)

    def model(self, name: str, version: int = -1) -> LoadedModel:
        return self.models.get(name, version)

    # -- shared-memory extension ---------------------------------------------------------------

    def check_client_shm(self) -> None:
        """Raise UNSUPPORTED (Triton's message) unless clients may register regions."""
        self.shared_memory.check_allowed()

    def register_system_shared_memory(
        self, name: str, key: str, byte_size: int, offset: int = 0
    ) -> None:
        """Register ``byte_size`` bytes at ``offset`` of the POSIX shared-memory object ``key``
        as region ``name`` (needs ``allow_client_shm``)."""
        self.shared_memory.register_system(name, key, byte_size, offset)

    def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        """Register ``byte_size`` bytes of device memory on ``device_id`` that a client exported
        as the CUDA IPC handle ``raw_handle`` (64 bytes) as region ``name``; INVALID_ARG, with
        the reason, where this server cannot open CUDA handles."""
        self.shared_memory.register_cuda(name, raw_handle, device_id, byte_size)

    def system_shared_memory_status(self, name: str = "") -> list[SystemRegionStatus]:
        """Every registered system region, or the one named (NOT_FOUND if unknown)."""
        return self.shared_memory.status_of(SystemRegionStatus, RegionKind.SYSTEM, name)

    def unregister_system_shared_memory(self, name: str = "") -> None:
        """Unregister one system region (all when ``name`` is empty); requests using it
        finish with it."""
        self.shared_memory.unregister(RegionKind.SYSTEM, name)

    def cuda_shared_memory_status(self, name: str = "") -> list[CudaRegionStatus]:
        """Every registered CUDA region, or the one named (NOT_FOUND if unknown)."""
        return self.shared_memory.status_of(CudaRegionStatus, RegionKind.CUDA, name)

    def unregister_cuda_shared_memory(self, name: str = "") -> None:
        """Unregister one CUDA region (all when ``name`` is empty)."""
        self.shared_memory.unregister(RegionKind.CUDA, name)

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
        if request.shared_memory is not None:
            return self._submit_shared_memory(request, nested)
        trace = request.trace
        try:
            model = self.models.get(request.model_name, request.model_version)
        except TritonError:
            if trace is not None:
                trace.request_end()
            raise
        if model.decoupled:
            raise unsupported(
                f"model '{model.name}' is decoupled; use a streaming API for its responses"
            )
        if trace is not None:
            _trace_start(trace, model, request)
        received = monotonic_ns()
        self._inflight += 1
        self._nested += nested
        future: asyncio.Future[InferenceResponse]
        try:
            if model.cacheable and self.cache is not None:
                future = asyncio.ensure_future(self._infer_cached(model, request, received))
            else:
                future = model.enqueue(request)
        except BaseException as exc:
            self._infer_done(model, received, exc, nested)
            if trace is not None:
                trace.request_end()
            if isinstance(exc, TritonError | asyncio.CancelledError):
                raise
            raise internal(
                f"inference on model '{model.name}' failed: {exception_text(exc)}"
            ) from exc
        future.add_done_callback(lambda done: self._infer_done(model, received, done, nested))
        if trace is not None:
            future.add_done_callback(lambda done: _trace_end(trace, done))
        request.answer = future  # the backend's request.is_cancelled() reads it
        return future

    def _submit_shared_memory(
        self, request: InferenceRequest, nested: bool
    ) -> asyncio.Future[InferenceResponse]:
        """:meth:`submit` for a request with tensors in shared memory: inputs become views
        first, outputs are written into their regions once it is answered."""
        model = self.models.get(request.model_name, request.model_version)  # unknown first
        # CUDA tensors stay on the device for instances that take them, unless something
        # on the way reads their values on the host (the response cache, a traced request)
        device = (
            model.device_inputs
            and request.trace is None
            and not (model.cacheable and self.cache is not None)
        )
        resolved, use = shm_tensors.resolve(self.shared_memory, request, device=device)
        try:
            future = self.submit(resolved, nested=nested)
        except BaseException:
            use.release()
            raise
        # callbacks, not a task: no coroutine to run per request on the way back
        answer: asyncio.Future[InferenceResponse] = asyncio.get_running_loop().create_future()
        future.add_done_callback(lambda done: shm_tensors.answer_in_regions(answer, use, done))
        # released however the answer ends (after an offloaded write); a client that went
        # away cancels the answer, and with it the inference
        answer.add_done_callback(lambda _: use.release())
        answer.add_done_callback(lambda ended: future.cancel() if ended.cancelled() else None)
        return answer

    def _infer_done(
        self,
        model: LoadedModel,
        received: int,
        outcome: asyncio.Future[InferenceResponse] | BaseException,
        nested: bool = False,
    ) -> None:
        """Statistics and the count in flight, once a request is answered (or failed)."""
        self._inflight -= 1
        self._nested -= nested
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
            if error.counts_as_success:
                model.statistics.record_success(elapsed)
            else:
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
            kept = shm_tensors.owned_outputs(response)
            await cache.insert(key, replace(kept, id="", outputs=list(kept.outputs)))
        except Exception as exc:
            self._cache_failed("insert", exc, "not kept")
        model.statistics.record_cache_miss(looked_up - received + monotonic_ns() - inserting)
        return response

    def _cache_failed(self, method: str, exc: Exception, outcome: str) -> None:
        assert self._cache_failures is not None
        message = f"{method}() raised {exception_text(exc)}; the response is {outcome}"
        self._cache_failures.failed((method, type(exc)), message, exc)

    async def infer_stream(
        self,
        request: InferenceRequest,
        *,
        nested: bool = False,
        pool: ResponsePool | None = None,
    ) -> AsyncIterator[InferenceResponse]:
        """All responses to a request as the model produces them; the last has ``final``.

        A decoupled model may answer any number of times; any other model answers once. When
        the caller stops iterating early (the client went away), the request is marked
        cancelled, which the model sees through ``response_sender.is_cancelled()``.
        ``nested`` as for :meth:`infer` (a decoupled ensemble step). With a ``pool``, each
        response yielded holds one of its credits until the caller releases it (once
        written); a decoupled model's sender waits for room (``--grpc-max-response-pool-size``).
        """
        if not (self._accepting or nested):
            raise unavailable("Server is not accepting requests: it is shutting down")
        model = self.models.get(request.model_name, request.model_version)
        if not model.decoupled:
            response = await self.infer(request, nested=nested)
            if pool is not None:
                pool.take()
            yield response
            return
        if request.shared_memory is not None:
            streamed = self._stream_shared_memory(request, pool)
            async with contextlib.aclosing(streamed) as responses:
                async for response in responses:
                    yield response
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
            pool,
        )
        request.response_sender = sender
        self._inflight += 1
        self._nested += nested
        finished = False
        trace = request.trace
        if trace is not None:
            _trace_start(trace, model, request)
        # the stream's latency metrics: its responses with outputs, when the first and the
        # last so far left (a flag-only final is not a response of its own)
        sent = 0
        first_ns: int | None = None
        last_ns = 0
        try:
            model.enqueue(request).add_done_callback(sender.on_execute_done)
            async for response in sender.responses():
                if response.outputs or not response.final:
                    now = monotonic_ns()
                    if sent:
                        statistics.record_response_interval(now - last_ns)
                    else:
                        first_ns = now - received
                    sent += 1
                    last_ns = now
                yield response
            finished = True
        except TritonError as error:
            if error.counts_as_success:
                statistics.record_success(monotonic_ns() - received)
            else:
                statistics.record_failure(monotonic_ns() - received, error.failure_reason)
            raise
        finally:
            if trace is not None:
                trace.request_end()
            if not finished:
                sender.cancel()
            elif pool is not None:
                pool.close()  # the final response is out: no sender may wait any more
            self._inflight -= 1
            self._nested -= nested
            if self._idle is not None and not self._inflight:
                self._idle.set()
        statistics.record_success(monotonic_ns() - received, first_ns)
        statistics.record_responses(sent)

    async def _stream_shared_memory(
        self, request: InferenceRequest, pool: ResponsePool | None
    ) -> AsyncGenerator[InferenceResponse, None]:
        """:meth:`infer_stream` with inputs from shared memory, each response's outputs
        written into their regions (each response overwrites the one before, as in Triton)."""
        resolved, use = shm_tensors.resolve(self.shared_memory, request)
        try:
            stream = self.infer_stream(resolved, pool=pool)
            assert isinstance(stream, AsyncGenerator)
            async with contextlib.aclosing(stream) as responses:
                async for response in responses:
                    await shm_tensors.write_outputs(use, response)
                    yield response
        finally:
            use.release()


def _trace_start(trace: Trace, model: LoadedModel, request: InferenceRequest) -> None:
    """REQUEST_START, the inputs (TENSORS level) and QUEUE_START: the request is queued next."""
    trace.request_start(model.name, model.version, request.id)
    trace.tensors("TENSOR_QUEUE_INPUT", request.inputs.values())
    trace.timestamp("QUEUE_START")


def _trace_end(trace: Trace, done: asyncio.Future[InferenceResponse]) -> None:
    """The outputs (TENSORS level) and REQUEST_END of a traced request."""
    if not done.cancelled() and done.exception() is None:
        trace.tensors("TENSOR_BACKEND_OUTPUT", done.result().outputs)
    trace.request_end()
