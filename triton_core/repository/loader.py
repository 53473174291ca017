"""Turning a model folder into loaded model versions: config, backend, instances, scheduler."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from triton_core.backends.contract import (
    Backend,
    BackendModel,
    InstanceSpec,
    ModelContext,
    ModelInstance,
)
from triton_core.config import (
    CONFIG_FILENAME,
    ModelConfig,
    instance_kind_name,
    normalize,
    read_config_file,
    validate,
)
from triton_core.config.audit import audit
from triton_core.errors import TritonError, internal, invalid_arg
from triton_core.observability.statistics import ModelStatistics
from triton_core.plugins.failures import exception_text, model_label, raised
from triton_core.plugins.registry import BackendRegistry
from triton_core.repository.agent_set import AgentSet
from triton_core.repository.ensembles import (
    EnsembleMembers,
    EnsembleModel,
    is_ensemble,
    plan_ensemble,
    validate_ensemble_config,
)
from triton_core.repository.layout import is_within, select_versions, version_folders
from triton_core.repository.runtime import ModelRuntime, VersionParts, discard
from triton_core.server.host_policy import run_this_thread_on
from triton_core.server.model import LoadedModel, ModelSignature
from triton_core.server.warmup import build_samples
from triton_core.tensors.ragged import validate_batch_io

if TYPE_CHECKING:
    from triton_core.backends.services import ModelServices

logger = logging.getLogger(__name__)

#: the one metric family whose buckets a model's ``model_metrics`` may set (Triton's)
LATENCY_HISTOGRAM = "nv_inference_first_response_histogram_ms"


@dataclass(frozen=True, slots=True)
class LoaderOptions:
    auto_complete_config: bool = True
    #: ``--backend-config`` settings by backend name ("" holds global ones)
    backend_options: dict[str, dict[str, str]] = field(default_factory=dict)
    gpu_count: int = 0
    #: histogram buckets (ms) for request latencies; None records no histogram
    latency_buckets_ms: tuple[float, ...] | None = None
    #: ``summary_latencies`` in ``--metrics-config``: record latency summaries
    latency_summaries: bool = False
    #: ``--model-config-name``: load ``configs/<name>.pbtxt`` where a model has it
    model_config_name: str = ""
    #: ``--model-load-retry-count``: how many more times a failed version load is tried
    model_load_retry_count: int = 0
    #: a response cache is configured (``--cache-config``)
    response_cache: bool = False
    #: ``--host-policy``: each policy's CPUs, by name
    host_policies: dict[str, frozenset[int]] = field(default_factory=dict)


@dataclass(slots=True)
class PreparedModel:
    """A model's complete config and the version folders its policy selects."""

    config: ModelConfig
    #: None for an ensemble: it has no backend
    backend: Backend | None
    model_dir: Path
    versions: dict[int, Path]
    #: the repository agents that saw this load's LOAD (the manager fills it in)
    agents: AgentSet = field(default_factory=AgentSet)
    #: an ensemble's composing models, for its plan (the manager fills it in)
    members: EnsembleMembers | None = None


#: the folder of a model's alternative configs (``--model-config-name``)
CUSTOM_CONFIG_FOLDER = "configs"


class ModelLoader:
    """Builds :class:`LoadedModel` objects; one per server, shared by all repositories.

    It makes a version's config, backend model and instances; ``runtime`` (the server's
    scheduling) puts them in a pool behind a scheduler.
    """

    def __init__(
        self,
        backends: BackendRegistry,
        runtime: ModelRuntime,
        options: LoaderOptions,
        loop: asyncio.AbstractEventLoop,
        server: ModelServices | None = None,
    ) -> None:
        self._backends = backends
        self._runtime = runtime
        self._server = server
        self._options = options
        self._loop = loop
        self._backend_objects: dict[str, Backend] = {}

    @property
    def options(self) -> LoaderOptions:
        return self._options

    # -- config --------------------------------------------------------------------------------

    def prepare(
        self, name: str, model_dir: Path, root: Path, config: ModelConfig | None = None
    ) -> PreparedModel:
        """Auto-complete, normalise and validate a model's config (blocking I/O).

        ``config`` is the config as written (see :func:`read_model_config`) or a load
        request's override; None reads it from ``model_dir``.
        """
        if not is_within(model_dir, root):
            raise invalid_arg(f"model '{name}' resolves outside the model repository {root}")
        if config is None:
            config = read_model_config(name, model_dir, self._options.model_config_name)
        else:
            copy = ModelConfig()
            copy.CopyFrom(config)
            config = copy
            if config.name and config.name != name:
                raise invalid_arg(
                    f"model name '{config.name}' in the config override does not match the "
                    f"model name '{name}'"
                )
        config.name = name
        available = version_folders(model_dir, root)
        if is_ensemble(config):
            return self._prepare_ensemble(config, model_dir, available)
        backend = self._resolve_backend(config, available)
        if not config.default_model_filename:
            config.default_model_filename = backend.default_model_filename
        if not config.platform and backend.platforms and not config.backend:
            config.platform = backend.platforms[0]
        if not config.backend:
            config.backend = backend.name
        selected = select_versions(config.version_policy, list(available), name)
        if self._options.auto_complete_config:
            newest = available[selected[-1]] / config.default_model_filename
            with self._plugin_call(model_label(name), backend.name, "auto_complete_config"):
                backend.auto_complete_config(config, newest)
        audit(config, backend.config_fields, backend.name)
        self._warn_server_side_off(config)
        gpu_count = self._options.gpu_count
        with self._plugin_call(model_label(name), backend.name, "runs_on_gpus"):
            auto_on_gpus = gpu_count > 0 and backend.runs_on_gpus()
        normalize(
            config,
            default_cpu_instance_count=backend.default_cpu_instance_count,
            gpu_count=gpu_count,
            auto_on_gpus=auto_on_gpus,
        )
        validate(config, gpu_count=gpu_count)
        validate_batch_io(config)
        return PreparedModel(config, backend, model_dir, {v: available[v] for v in selected})

    def _resolve_backend(self, config: ModelConfig, versions: dict[int, Path]) -> Backend:
        name = config.backend
        if not name and config.platform:
            name = self._backends.backend_for_platform(config.platform) or ""
            if not name:
                raise invalid_arg(
                    f"model '{config.name}' uses platform '{config.platform}' but no installed "
                    f"backend plugin provides it (known platforms: "
                    f"{', '.join(sorted(self._backends.platforms())) or 'none'})"
                    + _broken_hint(self._backends.broken)
                )
        if not name:
            name = self._detect_backend(config, versions)
        return self._backend(name, config.name)

    def _detect_backend(self, config: ModelConfig, versions: dict[int, Path]) -> str:
        # Like Triton: with neither platform nor backend, look for a known default file name.
        if versions:
            newest = versions[max(versions)]
            for entry in self._backends:
                filename = config.default_model_filename or entry.value.default_model_filename
                if (newest / filename).exists():
                    return entry.name
        raise invalid_arg(
            f"unable to determine the backend of model '{config.name}': its config names no "
            "'backend' or 'platform' and its newest version folder holds no default model file "
            f"of an installed backend ({', '.join(self._backends.names()) or 'none installed'})"
            + _broken_hint(self._backends.broken)
        )

    def _backend(self, name: str, model: str) -> Backend:
        backend = self._backend_objects.get(name)
        if backend is not None:
            return backend
        registration = self._backends.get(name)
        if registration is None:
            raise invalid_arg(
                f"model '{model}' uses backend '{name}' but no installed plugin provides it "
                f"(installed backends: {', '.join(self._backends.names()) or 'none'})"
                + _broken_hint(self._backends.broken)
            )
        options = {**self._options.backend_options.get("", {})}
        options.update(self._options.backend_options.get(name, {}))
        with self._plugin_call(model_label(model), name, "__init__"):
            backend = registration.value(options)
        self._backend_objects[name] = backend
        return backend

    def backends(self) -> list[Backend]:
        return list(self._backend_objects.values())

    def backend_origin(self, name: str) -> str:
        """``backend 'x' (plugin p, dist 1.0)``: who provides a backend, for error messages."""
        registration = self._backends.get(name)
        return str(registration.origin("backend")) if registration else f"backend '{name}'"

    @contextmanager
    def _plugin_call(self, where: str, backend: str, method: str) -> Iterator[None]:
        """Errors from a backend's method say whose they are.

        A TritonError keeps its status and message, with the backend and plugin added; any
        other exception becomes INTERNAL naming them and its type, its traceback logged here.
        """
        try:
            yield
        except TritonError as error:
            origin = self.backend_origin(backend)
            message = f"{error.message} (raised by {origin} in {method}())"
            raise TritonError(error.status, message, reason=error.reason) from error
        except Exception as exc:
            message = raised(where, self.backend_origin(backend), exc, method)
            logger.error("%s", message, exc_info=exc)
            raise internal(message) from exc

    # -- versions ------------------------------------------------------------------------------

    def load_version(self, prepared: PreparedModel, version: int) -> LoadedModel:
        """Load one version: backend model, instances, worker threads, scheduler (blocking)."""
        if prepared.backend is None:
            return self._load_ensemble(prepared, version)
        config = prepared.config
        version_dir = prepared.versions[version]
        context = ModelContext(
            name=config.name,
            version=version,
            config=config,
            model_dir=prepared.model_dir,
            version_dir=version_dir,
            model_path=version_dir / config.default_model_filename,
            backend_options=dict(prepared.backend.options),
            server=self._server,
            loop=self._loop,
        )
        serve = self._runtime.serving(config)
        signature = ModelSignature(config)
        signature.labels = self._read_labels(config, prepared.model_dir)
        backend_name = prepared.backend.name
        signature.origin = self.backend_origin(backend_name)
        samples = build_samples(config, prepared.model_dir, signature)
        where = model_label(config.name, version)
        specs = instance_specs(config, self._options.host_policies)
        with self._plugin_call(where, backend_name, "load_model"):
            backend_model = prepared.backend.load_model(context)
        instances = self._create_instances(backend_model, specs, backend_name, where)
        parts = VersionParts(
            config,
            version,
            prepared.model_dir,
            signature,
            self._statistics(config, version),
            backend_model,
            specs,
            instances,
            samples,
        )
        return serve(parts)

    def _create_instances(
        self, backend_model: BackendModel, specs: list[InstanceSpec], backend: str, where: str
    ) -> list[ModelInstance]:
        """Every instance the config asks for; on a failure the ones made are finalized."""
        instances: list[ModelInstance] = []
        try:
            for spec in specs:
                with self._plugin_call(where, backend, "create_instance"):
                    instances.append(_create_instance(backend_model, spec))
        except Exception:
            discard(instances, backend_model)
            raise
        return instances

    # -- ensembles: no backend and no instances; the scheduler calls the composing models ------

    def _prepare_ensemble(
        self, config: ModelConfig, model_dir: Path, available: dict[int, Path]
    ) -> PreparedModel:
        selected = select_versions(config.version_policy, list(available), config.name)
        audit(config)
        self._warn_server_side_off(config)
        normalize(config, gpu_count=self._options.gpu_count)
        validate(config, gpu_count=self._options.gpu_count)
        validate_ensemble_config(config)
        return PreparedModel(config, None, model_dir, {v: available[v] for v in selected})

    def _load_ensemble(self, prepared: PreparedModel, version: int) -> LoadedModel:
        """An ensemble version; its composing models must be loaded (the manager sees to it)."""
        config = prepared.config
        serve = self._runtime.serving(config)
        if prepared.members is None:
            raise internal(f"ensemble '{config.name}' was prepared without its members")
        signature = ModelSignature(config)
        signature.labels = self._read_labels(config, prepared.model_dir)
        plan = plan_ensemble(config, prepared.members)
        statistics = self._statistics(config, version)
        no_instances: list[ModelInstance] = []
        return serve(
            VersionParts(
                config,
                version,
                prepared.model_dir,
                signature,
                statistics,
                EnsembleModel(),
                specs=[],
                instances=no_instances,
                samples=[],
                ensemble=plan,
            )
        )

    def _statistics(self, config: ModelConfig, version: int) -> ModelStatistics:
        return ModelStatistics(
            config.name, version, self._latency_buckets(config), self._options.latency_summaries
        )

    def _warn_server_side_off(self, config: ModelConfig) -> None:
        """Fields that need a server setting too, set while it is off: a warning each."""
        off = []
        rate_limited = any(group.HasField("rate_limiter") for group in config.instance_group)
        if rate_limited and not self._runtime.rate_limiting:
            off.append(("instance_group.rate_limiter", "--rate-limit is off"))
        if config.response_cache.enable and not self._options.response_cache:
            off.append(("response_cache", "the server has no --cache-config"))
        for field_path, why in off:
            logger.warning(
                "model '%s': config field '%s' has no effect: %s", config.name, field_path, why
            )

    def _latency_buckets(self, config: ModelConfig) -> tuple[float, ...] | None:
        """The request-latency histogram's buckets: the server's, or the model's own
        ``model_metrics`` ones, as Triton; None when latency histograms are off."""
        buckets = self._options.latency_buckets_ms
        for control in config.model_metrics.metric_control:
            family = control.metric_identifier.family
            if family != LATENCY_HISTOGRAM:
                logger.warning(
                    "Metric family '%s' in 'metric_identifier' is not a customizable metric "
                    "in Triton core.",
                    family,
                )
            elif buckets is None:
                logger.warning(
                    "model '%s': model_metrics buckets of '%s' have no effect: latency "
                    "histograms are off (--metrics-config histogram_latencies=true)",
                    config.name,
                    family,
                )
            else:
                buckets = tuple(control.histogram_options.buckets)
        return buckets

    @staticmethod
    def _read_labels(config: ModelConfig, model_dir: Path) -> dict[str, list[str]]:
        labels = {}
        for output in config.output:
            if not output.label_filename:
                continue
            path = model_dir / output.label_filename
            if not is_within(path, model_dir):
                raise invalid_arg(
                    f"label file '{output.label_filename}' of output '{output.name}' of model "
                    f"'{config.name}' is outside the model folder"
                )
            try:
                labels[output.name] = path.read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise invalid_arg(
                    f"cannot read label file '{output.label_filename}' of model "
                    f"'{config.name}': {exc}"
                ) from None
        return labels


def config_path_of(model_dir: Path, config_name: str = "") -> Path:
    """``configs/<config_name>.pbtxt`` when ``--model-config-name`` is set and the model has
    that file, else ``config.pbtxt`` (Triton's rule)."""
    if config_name:
        custom = model_dir / CUSTOM_CONFIG_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            if not is_within(custom, model_dir):
                raise invalid_arg(
                    f"config '{CUSTOM_CONFIG_FOLDER}/{config_name}.pbtxt' of model "
                    f"'{model_dir.name}' resolves outside the model folder"
                )
            return custom
    return model_dir / CONFIG_FILENAME


def read_model_config(
    name: str, model_dir: Path, config_name: str = "", mapped: bool = False
) -> ModelConfig:
    """The config as written in its file (an empty one when there is none).

    ``mapped``: the folder is served under the name a registered repository maps to it,
    which replaces the config's (as Triton does); otherwise the two must match.
    """
    config_path = config_path_of(model_dir, config_name)
    config = read_config_file(config_path) if config_path.is_file() else ModelConfig()
    if mapped:
        config.name = name
    elif config.name and config.name != name:
        raise invalid_arg(
            f"model name '{config.name}' in {config_path} does not match its folder name '{name}'"
        )
    return config


def instance_specs(
    config: ModelConfig, host_policies: Mapping[str, frozenset[int]] | None = None
) -> list[InstanceSpec]:
    """The instances a normalised config asks for, named ``<group>_<index>`` like Triton,
    with the CPUs of their group's ``host_policy`` (one of ``host_policies``, by name)."""
    specs = []
    for group in config.instance_group:
        kind = instance_kind_name(group.kind)
        devices = list(group.gpus) if kind == "GPU" else [0]
        cpus = _policy_cpus(config.name, group.name, group.host_policy, host_policies or {})
        index = 0
        for device in devices:
            for _ in range(group.count):
                name = f"{group.name}_{index}"
                specs.append(
                    InstanceSpec(
                        name, kind, device, group.name, group.passive, group.host_policy, cpus
                    )
                )
                index += 1
    return specs


def _create_instance(backend_model: BackendModel, spec: InstanceSpec) -> ModelInstance:
    """``create_instance``, on the CPUs of the spec's host policy: the threads and processes
    a backend starts for the instance (a runtime's thread pool, a process) inherit them."""
    if spec.cpus is None:
        return backend_model.create_instance(spec)
    before = os.sched_getaffinity(0)
    run_this_thread_on(spec.cpus)
    try:
        return backend_model.create_instance(spec)
    finally:
        os.sched_setaffinity(0, before)


def _policy_cpus(
    model: str, group: str, policy: str, host_policies: Mapping[str, frozenset[int]]
) -> frozenset[int] | None:
    if not policy:
        return None
    cpus = host_policies.get(policy)
    if cpus is None:
        given = ", ".join(f"'{name}'" for name in sorted(host_policies)) or "none"
        raise invalid_arg(
            f"model '{model}' instance_group '{group}': 'host_policy' names '{policy}', which "
            f"no --host-policy defines (defined: {given})"
        )
    return cpus


def load_error(exc: BaseException, model: str) -> TritonError:
    """A load failure as a TritonError whose message names the model."""
    if isinstance(exc, TritonError):
        return exc
    return internal(f"failed to load model '{model}': {exception_text(exc)}")


def _broken_hint(broken: dict[str, str]) -> str:
    """Names the plugins that failed to import: the backend may be one of theirs."""
    if not broken:
        return ""
    failures = "; ".join(f"{name}: {why}" for name, why in sorted(broken.items()))
    return f"; plugin(s) that failed to import and may provide it: {failures}"
