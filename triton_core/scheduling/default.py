"""The default scheduler (built-in plugin): every request is its own batch, in arrival order."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from triton_core.plugins.hookspecs import hookimpl
from triton_core.scheduling.base import Scheduler, SchedulerContext

if TYPE_CHECKING:
    from triton_core.plugins.registry import SchedulerRegistry
    from triton_core.types import InferenceRequest, InferenceResponse


class DefaultScheduler(Scheduler):
    """One queue per model; as many requests execute at once as the model has instances."""

    def __init__(self, context: SchedulerContext) -> None:
        self._pool = context.pool
        self._create_future = context.loop.create_future

    def enqueue(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        future: asyncio.Future[InferenceResponse] = self._create_future()
        self._pool.submit([request], [future])
        return future

    @property
    def pending_count(self) -> int:
        pool = self._pool
        return max(0, pool.outstanding - (pool.size - pool.idle_count))

    async def stop(self) -> None:
        await self._pool.drain()
        await asyncio.to_thread(self._pool.stop)


@hookimpl
def triton_register_schedulers(registry: SchedulerRegistry) -> None:
    registry.add("default", DefaultScheduler)
