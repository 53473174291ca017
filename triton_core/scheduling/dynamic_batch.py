"""The dynamic batcher (built-in plugin): many small requests become few large executions.

Batches are formed on the event loop only when an instance is free, so under load the queue
grows while instances work and the next batch takes everything compatible that waited.

Around that sit Triton's queue policies: one FIFO per priority level (level 1 first), a
bounded queue per level that rejects at once when full, and queue timeouts enforced by a
timer of their own, so a request whose time is up is answered while a batch is still
executing, not when an instance next looks at the queue. A model that configures none of
them pays for none of them: the request path stays one append and, when an instance is
free, one scan of the queue's front.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any

from triton_core.errors import Status, TritonError
from triton_core.plugins.failures import RepeatedFailureLog, exception_text
from triton_core.plugins.hookspecs import hookimpl
from triton_core.protos.model_config_pb2 import ModelQueuePolicy
from triton_core.scheduling.base import Scheduler, SchedulerContext

if TYPE_CHECKING:
    from triton_core.plugins.registry import SchedulerRegistry
    from triton_core.scheduling.strategy import BatchStrategy
    from triton_core.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

#: timers may fire up to this early (uvloop's timers have a resolution of one millisecond)
TIMER_SLACK = 0.001
#: heap entries of requests that left the queue are dropped when the heap outgrows this
_MIN_COMPACT = 1024


class _Pending:
    """One queued request."""

    __slots__ = (
        "arrival",
        "batch_size",
        "batched",
        "expiry",
        "future",
        "inner",
        "level",
        "request",
        "shape_key",
    )

    def __init__(
        self,
        request: InferenceRequest,
        future: asyncio.Future[InferenceResponse],
        batch_size: int,
        shape_key: tuple,
        arrival: float,
        level: _Level,
    ) -> None:
        self.request = request
        #: the client's future; done early when the client goes away or the request is rejected
        self.future = future
        self.batch_size = batch_size
        self.shape_key = shape_key
        self.arrival = arrival
        self.level = level
        #: loop time when its queue timeout expires; 0.0 for none (or no longer queued)
        self.expiry = 0.0
        #: taken into a batch (still in its deque until the deque's front is trimmed)
        self.batched = False
        #: with preserve_ordering: the future the instance resolves, copied out in order
        self.inner: asyncio.Future[InferenceResponse] | None = None


class _Level:
    """One priority level: its FIFO, the requests its timeout moved back, and its policy."""

    __slots__ = (
        "_timeout",
        "allow_override",
        "delay_expired",
        "delayed",
        "max_size",
        "number",
        "queue",
    )

    def __init__(self, number: int, policy: ModelQueuePolicy) -> None:
        #: 1 is the highest priority; 0 when the model has no priority levels
        self.number = number
        self.queue: deque[_Pending] = deque()
        #: requests whose timeout expired under the DELAY action: served after ``queue``
        self.delayed: deque[_Pending] = deque()
        self.max_size = policy.max_queue_size
        self.allow_override = policy.allow_timeout_override
        self.delay_expired = policy.timeout_action == ModelQueuePolicy.DELAY
        self._timeout = policy.default_timeout_microseconds / 1e6

    @property
    def has_timeouts(self) -> bool:
        return self._timeout > 0 or self.allow_override

    def timeout_for(self, request: InferenceRequest) -> float:
        """Seconds ``request`` may wait at this level; 0.0 for no limit.

        A request's own ``timeout`` counts only where the policy allows an override, and
        only to shorten the wait. Unlike Triton, it also applies when the policy sets no
        default timeout (Triton then ignores it): "no limit" is the longest wait of all.
        """
        timeout = self._timeout
        if self.allow_override and request.timeout_us:
            requested = request.timeout_us / 1e6
            if not timeout or requested < timeout:
                timeout = requested
        return timeout

    def live_count(self) -> int:
        """Requests still waiting here (not yet batched, answered or cancelled)."""
        return sum(
            1
            for queue in (self.queue, self.delayed)
            for pending in queue
            if not (pending.batched or pending.future.done())
        )

    def purge(self) -> int:
        """Drop requests that no longer wait (cancelled, rejected); return how many wait."""
        self.queue = deque(p for p in self.queue if not (p.batched or p.future.done()))
        self.delayed = deque(p for p in self.delayed if not (p.batched or p.future.done()))
        return len(self.queue) + len(self.delayed)

    def describe(self) -> str:
        return f"priority level {self.number}" if self.number else "its queue"


class DynamicBatcher(Scheduler):
    """``dynamic_batching``: preferred batch sizes, max queue delay, shape-compatible batches,
    priority levels, queue policies, preserve_ordering and custom batch strategies."""

    def __init__(self, context: SchedulerContext) -> None:
        config = context.config
        batching = config.dynamic_batching
        self._model = context.model_name
        self._pool = context.pool
        self._loop = context.loop
        self._statistics = context.statistics
        self._max_batch = max(1, config.max_batch_size)
        self._preferred = sorted(set(batching.preferred_batch_size)) or [self._max_batch]
        self._preferred_set = frozenset(self._preferred)
        self._delay = batching.max_queue_delay_microseconds / 1e6
        self._ragged = frozenset(t.name for t in config.input if t.allow_ragged_batch)
        self._strategy: BatchStrategy | None = context.batch_strategy
        #: a strategy that raises is logged once per method and exception type, then counted
        self._strategy_failures = RepeatedFailureLog(
            logger, f"batch strategy of model '{self._model}'"
        )
        self._levels, self._default_level = _build_levels(batching)
        self._single = len(self._levels) == 1
        self._timeouts = any(level.has_timeouts for level in self._levels)
        self._ordered = batching.preserve_ordering
        #: with preserve_ordering: requests in arrival order, until their response is released
        self._order: deque[_Pending] = deque()
        #: (expiry, sequence, request) for queued requests with a timeout
        self._expiries: list[tuple[float, int, _Pending]] = []
        self._sequence = itertools.count()
        self._compact_at = _MIN_COMPACT
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._expiry_when = 0.0
        self._free = self._pool.size
        self._timer: asyncio.TimerHandle | None = None
        self._timer_when = 0.0
        self._flushing = False
        self._pool.on_batch_done = self._instance_freed

    # -- accepting -----------------------------------------------------------------------------

    def enqueue(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        loop = self._loop
        future: asyncio.Future[InferenceResponse] = loop.create_future()
        level = self._default_level if self._single else self._level_of(request.priority)
        if (
            level.max_size
            and len(level.queue) + len(level.delayed) >= level.max_size
            and level.purge() >= level.max_size  # full even without the cancelled ones
        ):
            future.set_exception(self._queue_full(level))
            return future
        batch_size, shape_key = self._describe(request)
        now = loop.time()
        pending = _Pending(request, future, batch_size, shape_key, now, level)
        if self._ordered:
            pending.inner = loop.create_future()
            self._order.append(pending)
        level.queue.append(pending)
        if self._free:
            self._dispatch()
        if self._timeouts and not pending.batched:
            self._start_timeout(pending, now)
        return future

    def _level_of(self, priority: int) -> _Level:
        # 0 (unset) and levels the model does not have go to the default level, as in Triton.
        if 0 < priority <= len(self._levels):
            return self._levels[priority - 1]
        return self._default_level

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

    def _queue_full(self, level: _Level) -> TritonError:
        return TritonError(
            Status.UNAVAILABLE,
            f"Exceeds maximum queue size: model '{self._model}' already has "
            f"{level.max_size} request(s) waiting at {level.describe()} "
            f"(max_queue_size {level.max_size})",
            reason="REJECTED",
        )

    # -- queue timeouts ------------------------------------------------------------------------

    def _start_timeout(self, pending: _Pending, now: float) -> None:
        timeout = pending.level.timeout_for(pending.request)
        if not timeout:
            return
        pending.expiry = now + timeout
        heap = self._expiries
        if len(heap) >= self._compact_at:
            # Entries of requests that left the queue linger until their expiry; drop them.
            heap[:] = [entry for entry in heap if _still_waiting(entry[2])]
            heapq.heapify(heap)
            self._compact_at = max(_MIN_COMPACT, 4 * len(heap))
        heapq.heappush(heap, (pending.expiry, next(self._sequence), pending))
        if self._expiry_timer is None or pending.expiry < self._expiry_when:
            self._arm_expiry(pending.expiry)

    def _arm_expiry(self, when: float) -> None:
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        self._expiry_when = when
        self._expiry_timer = self._loop.call_at(when, self._on_expiry)

    def _on_expiry(self) -> None:
        """Reject (or move back) every queued request whose timeout has expired."""
        self._expiry_timer = None
        heap = self._expiries
        now = self._loop.time()
        rejected = False
        while heap and heap[0][0] <= now + TIMER_SLACK:
            pending = heapq.heappop(heap)[2]
            if not _still_waiting(pending):
                continue
            pending.expiry = 0.0
            level = pending.level
            if level.delay_expired:
                # DELAY: behind every request that has not expired, at the same level.
                level.queue.remove(pending)
                level.delayed.append(pending)
            else:
                pending.future.set_exception(self._timed_out(pending, now))
                rejected = True
        while heap and not _still_waiting(heap[0][2]):
            heapq.heappop(heap)  # batched or answered: no reason to wake up for it
        if heap:
            self._arm_expiry(heap[0][0])
        if rejected and self._ordered:
            self._release()

    def _timed_out(self, pending: _Pending, now: float) -> TritonError:
        waited_us = int((now - pending.arrival) * 1e6)
        return TritonError(
            Status.UNAVAILABLE,
            f"Request timeout expired: the request to model '{self._model}' waited "
            f"{waited_us} us in the queue without being scheduled",
            reason="REJECTED",
        )

    # -- forming batches -----------------------------------------------------------------------

    def _instance_freed(self) -> None:
        self._free += 1
        if self._ordered:
            self._release()
        self._dispatch()

    def _on_timer(self) -> None:
        self._timer = None
        if self._free:
            self._dispatch(timer_fired=True)
        if self._ordered:
            self._release()  # the request that waited may have been cancelled meanwhile

    def _dispatch(self, timer_fired: bool = False) -> None:
        while self._free:
            head = self._head()
            if head is None:
                return
            chosen, size, closed_by = self._candidates(head)
            target = self._target_size(size)
            if self._should_wait(chosen, target, closed_by, timer_fired):
                return
            self._submit(chosen, target, self._reason(target, closed_by))

    def _head(self) -> _Pending | None:
        """The oldest waiting request of the highest non-empty priority level."""
        for level in self._levels:
            for queue in (level.queue, level.delayed):
                while queue:
                    pending = queue[0]
                    if not pending.future.done():
                        return pending
                    queue.popleft()  # cancelled or rejected while it waited
        return None

    def _candidates(self, head: _Pending) -> tuple[list[_Pending], int, str | None]:
        """Requests that can join ``head``'s batch, in priority then arrival order.

        Returns them, their total batch size, and why the batch should not wait for more
        (None when waiting could make it fuller).
        """
        chosen: list[_Pending] = []
        size = 0
        key = head.shape_key
        limit = self._max_batch
        strategy = self._strategy
        state = self._new_batch_state() if strategy is not None else None
        others = False
        for level in self._levels:
            for queue in (level.queue, level.delayed):
                for pending in queue:
                    if pending.shape_key != key:
                        others = others or not pending.future.done()
                        continue
                    if pending.future.done():
                        continue
                    if size + pending.batch_size > limit and chosen:
                        return chosen, size, "max_batch_size"
                    # The first request always joins, so a strategy cannot stall the queue.
                    if strategy is not None and not self._include(pending, state) and chosen:
                        return chosen, size, "batch_strategy"
                    chosen.append(pending)
                    size += pending.batch_size
                    if size == limit:
                        return chosen, size, "max_batch_size"
        # Requests of another shape wait behind this batch: send it rather than hold them up
        # for the delay (Triton, too, sends a batch when the next request does not fit it).
        return chosen, size, "incompatible_shape" if others else None

    def _new_batch_state(self) -> Any:
        assert self._strategy is not None
        try:
            return self._strategy.new_batch()
        except Exception as exc:
            self._strategy_failed("new_batch", exc)
            return None

    def _include(self, pending: _Pending, state: Any) -> bool:
        assert self._strategy is not None
        try:
            return bool(self._strategy.include(pending.request, state))
        except Exception as exc:
            # A broken strategy closes the batch; it must not lose or stall requests.
            self._strategy_failed("include", exc)
            return False

    def _strategy_failed(self, method: str, exc: Exception) -> None:
        strategy = type(self._strategy).__name__
        message = f"{strategy}.{method}() raised {exception_text(exc)}; batches still form"
        self._strategy_failures.failed((method, type(exc)), message, exc)

    def _target_size(self, available: int) -> int:
        """The batch size to send: the largest preferred size that fits, else all of it."""
        fitting = [size for size in self._preferred if size <= available]
        return fitting[-1] if fitting else available

    def _should_wait(
        self, chosen: list[_Pending], target: int, closed_by: str | None, timer_fired: bool
    ) -> bool:
        """Whether to hold the batch for more requests (arming the delay timer if so)."""
        if (
            closed_by is not None
            or self._delay <= 0
            or self._flushing
            or target >= self._max_batch
            or target in self._preferred_set
        ):
            return False
        # No request in the batch waits longer than the delay (a lower priority level may
        # hold an older request than the head).
        due = min(pending.arrival for pending in chosen) + self._delay
        # A timer may fire a little early; never wait another timer period for that.
        if self._loop.time() + (TIMER_SLACK if timer_fired else 0.0) >= due:
            return False
        if self._timer is None or due < self._timer_when:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_when = due
            self._timer = self._loop.call_at(due, self._on_timer)
        return True

    def _reason(self, size: int, closed_by: str | None) -> str:
        """Why a batch of ``size`` goes now, for the batch-dispatch metric."""
        if size >= self._max_batch:
            return "max_batch_size"
        if size in self._preferred_set:
            return "preferred_batch_size"
        if closed_by is not None:  # the next request would not fit, has another shape, or
            return closed_by  # the strategy said no
        if self._flushing:
            return "shutdown"
        # otherwise the oldest request has waited max_queue_delay, or no delay is set
        return "max_queue_delay" if self._delay > 0 else "instance_free"

    def _submit(self, chosen: list[_Pending], target: int, reason: str) -> None:
        requests: list[InferenceRequest] = []
        futures: list[asyncio.Future[InferenceResponse]] = []
        size = 0
        ordered = self._ordered
        for pending in chosen:
            if size and size + pending.batch_size > target:
                break
            pending.batched = True
            pending.expiry = 0.0
            requests.append(pending.request)
            futures.append(pending.inner if ordered else pending.future)  # type: ignore[arg-type]
            size += pending.batch_size
        self._remove_batched(len(requests))
        self._free -= 1
        self._statistics.record_dispatch(reason)
        self._pool.submit(requests, futures)

    def _remove_batched(self, count: int) -> None:
        """Take ``count`` batched requests out of the queues (usually their fronts)."""
        for level in self._levels:
            for delayed in (False, True):
                queue = level.delayed if delayed else level.queue
                while queue and count:
                    front = queue[0]
                    if front.batched:
                        count -= 1
                    elif not front.future.done():
                        break
                    queue.popleft()
                if count and queue:
                    # Requests of another shape were skipped: the batch is not a prefix.
                    kept: deque[_Pending] = deque()
                    for pending in queue:
                        if pending.batched:
                            count -= 1
                        else:
                            kept.append(pending)
                    if delayed:
                        level.delayed = kept
                    else:
                        level.queue = kept
                if not count:
                    return

    # -- preserve_ordering ---------------------------------------------------------------------

    def _release(self) -> None:
        """Answer finished requests in arrival order, up to the first one still running.

        Called when a batch finishes, after rejections and when the delay timer fires. The
        oldest waiting request is always the head of the next batch (only DELAY and priority
        levels reorder, and neither goes with preserve_ordering), so a request that holds
        others back is executing, or waits for a free instance or for the delay: each of
        those ends in a call here, even if its client went away meanwhile.
        """
        order = self._order
        while order:
            pending = order[0]
            outer = pending.future
            inner = pending.inner
            assert inner is not None
            if not outer.done():
                if not inner.done():
                    return
                error = inner.exception()
                if error is None:
                    outer.set_result(inner.result())
                else:
                    outer.set_exception(error)
            elif not inner.done():
                # The client went away; still retrieve a later error so asyncio does not log it.
                inner.add_done_callback(_retrieve)
            order.popleft()

    # -- state and shutdown --------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return sum(level.live_count() for level in self._levels)

    async def stop(self) -> None:
        self._flushing = True  # no more waiting for fuller batches
        while self._head() is not None:
            self._dispatch()
            await asyncio.sleep(0.001)
        await self._pool.drain()
        if self._ordered:
            self._release()
        for timer in (self._timer, self._expiry_timer):
            if timer is not None:
                timer.cancel()
        self._timer = self._expiry_timer = None
        await asyncio.to_thread(self._pool.stop)


def _build_levels(batching: Any) -> tuple[list[_Level], _Level]:
    """The priority levels of a ``dynamic_batching`` config, and the default one."""
    levels = batching.priority_levels
    if not levels:
        level = _Level(0, batching.default_queue_policy)
        return [level], level
    overrides = batching.priority_queue_policy
    built = [
        _Level(n, overrides.get(n, batching.default_queue_policy)) for n in range(1, levels + 1)
    ]
    return built, built[batching.default_priority_level - 1]


def _still_waiting(pending: _Pending) -> bool:
    return pending.expiry != 0.0 and not pending.batched and not pending.future.done()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


@hookimpl
def triton_register_schedulers(registry: SchedulerRegistry) -> None:
    registry.add("dynamic_batching", DynamicBatcher)
