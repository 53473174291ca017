"""Pools and schedulers for loaded versions: the :class:`ModelRuntime` the server hands the
repository's loader (see :mod:`triton_core.repository.runtime`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from triton_core.backends.contract import EventDrivenInstance
from triton_core.config import EXECUTE_TIMEOUT_PARAMETER, scheduling_choice, timeout_parameter
from triton_core.errors import invalid_arg
from triton_core.plugins.registry import BatchStrategyRegistry, SchedulerRegistry
from triton_core.repository.ensembles import is_ensemble
from triton_core.scheduling.base import SchedulerContext
from triton_core.scheduling.event_driven_pool import EventDrivenInstancePool
from triton_core.scheduling.executor import InstancePool
from triton_core.scheduling.rate_limiter import RateLimiter, ResourceMap, slot_needs
from triton_core.scheduling.threaded_pool import ThreadedInstancePool
from triton_core.server.model import LoadedModel
from triton_core.server.warmup import Warmup
from triton_core.tensors.ragged import RaggedBatching

if TYPE_CHECKING:
    from collections.abc import Sequence

    from triton_core.backends.contract import InstanceSpec, ModelInstance
    from triton_core.backends.services import ModelServices
    from triton_core.plugins.registry import Registration, SchedulerFactory
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.repository.runtime import ServeVersion, VersionParts
    from triton_core.scheduling.base import Scheduler
    from triton_core.scheduling.strategy import BatchStrategy


def pool_class(instances: Sequence[ModelInstance]) -> type[InstancePool]:
    """The pool that runs ``instances``: from the event loop when every one of them runs
    event-driven now, else on worker threads (an empty pool too)."""
    if instances and all(
        isinstance(instance, EventDrivenInstance) and instance.event_driven
        for instance in instances
    ):
        return EventDrivenInstancePool
    return ThreadedInstancePool


class SchedulingRuntime:
    """Builds each loaded version's instance pool and scheduler; one per server."""

    def __init__(
        self,
        schedulers: SchedulerRegistry,
        loop: asyncio.AbstractEventLoop,
        batch_strategies: BatchStrategyRegistry | None = None,
        rate_limiter: RateLimiter | None = None,
        server: ModelServices | None = None,
        inline_budget_us: int = 0,
    ) -> None:
        self._schedulers = schedulers
        self._inline_budget_us = inline_budget_us
        self._batch_strategies = batch_strategies or BatchStrategyRegistry()
        self._loop = loop
        self._rate_limiter = rate_limiter
        self._server = server

    @property
    def rate_limiting(self) -> bool:
        return self._rate_limiter is not None

    def serving(self, config: ModelConfig) -> ServeVersion:
        factory = self._scheduler_factory(config)
        if is_ensemble(config):
            return lambda parts: self._serve_ensemble(parts, factory)
        strategy = self._batch_strategy(config)
        return lambda parts: self._serve(parts, factory, strategy)

    def _scheduler_factory(self, config: ModelConfig) -> Registration[SchedulerFactory]:
        choice = scheduling_choice(config)
        factory = self._schedulers.get(choice)
        if factory is None:
            kind = "ensemble" if is_ensemble(config) else "model"
            raise invalid_arg(
                f"{kind} '{config.name}' uses '{choice}' but no installed plugin provides "
                f"that scheduler (available: {', '.join(self._schedulers.names())})"
            )
        return factory

    def _serve(
        self,
        parts: VersionParts,
        factory: Registration[SchedulerFactory],
        strategy: BatchStrategy | None,
    ) -> LoadedModel:
        try:
            pool = self._instance_pool(parts)
        except Exception:  # the rate limiter refused the instances' resources
            parts.discard()
            raise
        try:
            pool.wait_warm()
            scheduler = factory.value(self._context(parts, pool, strategy))
        except Exception:
            # a failed warm-up or a scheduler that rejects the config must not leak the
            # threads and instances
            pool.stop()
            parts.backend_model.finalize()
            raise
        return _loaded(parts, pool, scheduler)

    def _serve_ensemble(
        self, parts: VersionParts, factory: Registration[SchedulerFactory]
    ) -> LoadedModel:
        # An empty pool keeps LoadedModel's shape: no instances, no threads.
        finish = _finisher(parts)
        pool = pool_class([])([], [], self._loop, finish, parts.config.name, parts.statistics)
        scheduler = factory.value(self._context(parts, pool, None))
        return _loaded(parts, pool, scheduler)

    def _context(
        self, parts: VersionParts, pool: InstancePool, strategy: BatchStrategy | None
    ) -> SchedulerContext:
        return SchedulerContext(
            parts.config.name,
            parts.version,
            parts.config,
            pool,
            self._loop,
            parts.statistics,
            batch_strategy=strategy,
            server=self._server,
            model_dir=parts.model_dir,
            ensemble=parts.ensemble,
        )

    def _instance_pool(self, parts: VersionParts) -> InstancePool:
        """The pool of the serving instances, with the warm-up, batch inputs and rate limits
        the config asks for; instances of passive groups only ride along to be finalized."""
        config, specs, instances = parts.config, parts.specs, parts.instances
        ragged = RaggedBatching.of(config)
        prepare = ragged.add_batch_inputs if ragged is not None and ragged.batch_inputs else None
        serving = [i for i, spec in enumerate(specs) if not spec.passive]
        warmup = (
            Warmup(config.name, parts.samples, parts.signature, parts.statistics, prepare)
            if parts.samples
            else None
        )
        serving_instances = [instances[i] for i in serving]
        return pool_class(serving_instances)(
            serving_instances,
            [specs[i].name for i in serving],
            self._loop,
            _finisher(parts),
            config.name,
            parts.statistics,
            origin=parts.signature.origin,
            execute_timeout=timeout_parameter(config, EXECUTE_TIMEOUT_PARAMETER),
            warmup=warmup,
            limiter=self._rate_limiter,
            limits=rate_limits(config, [specs[i] for i in serving]),
            prepare=prepare,
            passive=[instance for i, instance in enumerate(instances) if i not in serving],
            cpus=[specs[i].cpus for i in serving],
            inline_budget_us=self._inline_budget_us,
        )

    def _batch_strategy(self, config: ModelConfig) -> BatchStrategy | None:
        parameters = config.parameters
        if "batch_strategy" not in parameters:
            return None
        name = parameters["batch_strategy"].string_value
        registration = self._batch_strategies.get(name)
        if registration is None:
            raise invalid_arg(
                f"model '{config.name}' parameter 'batch_strategy' names '{name}', which no "
                f"installed plugin provides (available: "
                f"{', '.join(self._batch_strategies.names()) or 'none'})"
            )
        if not config.HasField("dynamic_batching"):
            raise invalid_arg(
                f"model '{config.name}' parameter 'batch_strategy' needs 'dynamic_batching'"
            )
        return registration.value(config)


def _finisher(parts: VersionParts):  # untyped: a decoupled batch resolves to None
    signature, version = parts.signature, parts.version

    def finish(requests, responses, instance):
        return signature.finish(requests, responses, version, instance)

    return finish


def _loaded(parts: VersionParts, pool: InstancePool, scheduler: Scheduler) -> LoadedModel:
    return LoadedModel(
        parts.config,
        parts.version,
        parts.signature,
        parts.backend_model,
        pool,
        scheduler,
        parts.statistics,
    )


def rate_limits(config: ModelConfig, specs: list[InstanceSpec]) -> list[tuple[int, ResourceMap]]:
    """Each instance's rate-limiter priority and resource needs, from its group."""
    groups = {group.name: group.rate_limiter for group in config.instance_group}
    return [
        (groups[spec.group_name].priority, slot_needs(groups[spec.group_name], spec.device_id))
        for spec in specs
    ]
