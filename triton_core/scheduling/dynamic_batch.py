"""The dynamic batcher (built-in plugin): many small requests become few large executions.

Batches are formed on the event loop only when an instance is free, so under load the queue
grows while instances work and the next batch takes everything compatible that waited.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING

from triton_core.hookspecs import hookimpl
from triton_core.scheduling.base import Scheduler, SchedulerContext

if TYPE_CHECKING:
    from triton_core.registry import SchedulerRegistry
    from triton_core.types import InferenceRequest, InferenceResponse


class _Pending:
    __slots__ = ("arrival", "batch_size", "future", "request", "shape_key")

    def __init__(self, request, future, batch_size, shape_key, arrival):  # type: ignore[no-untyped-def]
        self.request = request
        self.future = future
        self.batch_size = batch_size
        self.shape_key = shape_key
        self.arrival = arrival


class DynamicBatcher(Scheduler):
    """``dynamic_batching``: preferred batch sizes, max queue delay, shape-compatible batches."""

    def __init__(self, context: SchedulerContext) -> None:
        config = context.config
        batching = config.dynamic_batching
        self._pool = context.pool
        self._loop = context.loop
        self._statistics = context.statistics
        self._max_batch = max(1, config.max_batch_size)
        self._preferred = sorted(set(batching.preferred_batch_size)) or [self._max_batch]
        self._delay = batching.max_queue_delay_microseconds / 1e6
        self._ragged = frozenset(t.name for t in config.input if t.allow_ragged_batch)
        self._queue: deque[_Pending] = deque()
        self._free = self._pool.size
        self._timer: asyncio.TimerHandle | None = None
        self._pool.on_batch_done = self._instance_freed

    # -- accepting -----------------------------------------------------------------------------

    def enqueue(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        future: asyncio.Future[InferenceResponse] = self._loop.create_future()
        batch_size, shape_key = self._describe(request)
        self._queue.append(_Pending(request, future, batch_size, shape_key, self._loop.time()))
        if self._free:
            self._dispatch()
        return future

    def _describe(self, request: InferenceRequest) -> tuple[int, tuple]:
        # Requests batch together only when every non-batch dimension matches.
        batch_size = 1
        key = []
        for name, tensor in request.inputs.items():
            shape = tensor.data.shape
            if shape:
                batch_size = shape[0]
            if name not in self._ragged:
                key.append((name, shape[1:]))
        return batch_size, tuple(key)

    # -- forming batches -----------------------------------------------------------------------

    def _instance_freed(self) -> None:
        self._free += 1
        if self._queue:
            self._dispatch()

    def _on_timer(self) -> None:
        self._timer = None
        if self._free and self._queue:
            self._dispatch(deadline_passed=True)

    def _dispatch(self, deadline_passed: bool = False) -> None:
        queue = self._queue
        while self._free and queue:
            head = queue[0]
            if head.future.done():  # cancelled while waiting
                queue.popleft()
                continue
            chosen, size = self._candidates(head)
            target = self._target_size(size)
            waited = self._loop.time() - head.arrival
            if (
                target < self._max_batch
                and target not in self._preferred
                and self._delay > 0
                and not deadline_passed
                and waited < self._delay
            ):
                self._arm_timer(head.arrival + self._delay)
                return
            self._submit(chosen, target, self._reason(target))
            deadline_passed = False

    def _candidates(self, head: _Pending) -> tuple[list[_Pending], int]:
        chosen = []
        size = 0
        for pending in self._queue:
            if pending.shape_key != head.shape_key or pending.future.done():
                continue
            if size + pending.batch_size > self._max_batch:
                break
            chosen.append(pending)
            size += pending.batch_size
            if size == self._max_batch:
                break
        return chosen, size

    def _target_size(self, available: int) -> int:
        """The batch size to send: the largest preferred size that fits, else all of it."""
        fitting = [size for size in self._preferred if size <= available]
        return fitting[-1] if fitting else available

    def _reason(self, size: int) -> str:
        """Why a batch of ``size`` goes now, for the batch-dispatch metric."""
        if size >= self._max_batch:
            return "max_batch_size"
        if size in self._preferred:
            return "preferred_batch_size"
        # otherwise the oldest request has waited max_queue_delay, or no delay is set
        return "max_queue_delay" if self._delay > 0 else "instance_free"

    def _submit(self, chosen: list[_Pending], target: int, reason: str) -> None:
        requests, futures = [], []
        size = 0
        taken = set()
        for pending in chosen:
            if size and size + pending.batch_size > target:
                break
            requests.append(pending.request)
            futures.append(pending.future)
            taken.add(id(pending))
            size += pending.batch_size
        if len(taken) == len(self._queue):
            self._queue.clear()
        else:
            self._queue = deque(p for p in self._queue if id(p) not in taken)
        self._free -= 1
        self._statistics.record_dispatch(reason)
        self._pool.submit(requests, futures)

    def _arm_timer(self, when: float) -> None:
        if self._timer is None:
            self._timer = self._loop.call_at(when, self._on_timer)

    # -- state and shutdown --------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return len(self._queue)

    async def stop(self) -> None:
        while self._queue:
            self._dispatch(deadline_passed=True)
            await asyncio.sleep(0.001)
        await self._pool.drain()
        if self._timer is not None:
            self._timer.cancel()
        await asyncio.to_thread(self._pool.stop)


@hookimpl
def triton_register_schedulers(registry: SchedulerRegistry) -> None:
    registry.add("dynamic_batching", DynamicBatcher)
