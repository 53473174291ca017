"""Instance pools: where a batch leaves the scheduler for a model's instances and comes back.

:class:`InstancePool` is what schedulers use: they hand it batches, it runs them on the
version's instances and answers the batches' futures on the event loop. It runs batches in
one of two ways, each a subclass in a module of its own:
:class:`~triton_core.scheduling.threaded_pool.ThreadedInstancePool` (a worker thread per
instance) and :class:`~triton_core.scheduling.event_driven_pool.EventDrivenInstancePool`
(instances that execute in another process, handed batches on the event loop);
:func:`~triton_core.scheduling.runtime.pool_class` picks the one a model's instances need.
What both share is here: the answers, rate limiting, warm-up, execute timeouts and stopping.

With ``--rate-limit execution_count`` each instance gets its own queue and a batch goes to
an instance only once the server's rate limiter granted it its resources (warm-up too);
with it off (the default) the pool has no limiter and none of that code runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import TYPE_CHECKING

from triton_core.errors import Status, TritonError
from triton_core.observability.statistics import ExecutionTimes, ModelStatistics
from triton_core.plugins.failures import RepeatedFailureLog, model_label, raised
from triton_core.scheduling.inline import InlineGate
from triton_core.scheduling.timeouts import ExecuteWatch

if TYPE_CHECKING:
    from triton_core.backends.contract import ModelInstance
    from triton_core.scheduling.rate_limiter import InstanceSlot, RateLimiter, ResourceMap
    from triton_core.server.warmup import Warmup
    from triton_core.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

#: turns one batch's raw backend responses into final ones (checks, names, ids, output
#: selection); the third argument is the name of the instance that executed the batch
ResponseFinisher = Callable[
    [Sequence["InferenceRequest"], Sequence["InferenceResponse"], str],
    list["InferenceResponse | TritonError"],
]

Batch = tuple[list["InferenceRequest"], list["asyncio.Future[InferenceResponse]"]]


class InstancePool(ABC):
    """The instances of one model version: schedulers hand it batches, it runs them and
    answers their futures on the event loop. Create one with
    :func:`~triton_core.scheduling.runtime.pool_class`.

    Each pool writes out its own ``submit`` and ``submit_to`` (their first checks are the
    same) so that a batch goes to its instance with no extra call.
    """

    def __init__(
        self,
        instances: Sequence[ModelInstance],
        names: Sequence[str],
        loop: asyncio.AbstractEventLoop,
        finish: ResponseFinisher,
        model_name: str,
        statistics: ModelStatistics | None = None,
        *,
        origin: str = "",
        execute_timeout: float | None = None,
        warmup: Warmup | None = None,
        limiter: RateLimiter | None = None,
        limits: Sequence[tuple[int, ResourceMap]] = (),
        prepare: Callable[[list[InferenceRequest]], None] | None = None,
        passive: Sequence[ModelInstance] = (),
        cpus: Sequence[frozenset[int] | None] = (),
        inline_budget_us: int = 0,
    ) -> None:
        self.instances = list(instances)
        #: per instance: the CPUs its thread runs on (``host_policy``); empty: any
        self._cpus = list(cpus)
        #: instances of ``passive`` groups: loaded, given no batches, finalized at stop
        self._passive = list(passive)
        self.names = list(names)
        self.statistics = statistics if statistics is not None else ModelStatistics(model_name, 0)
        self._loop = loop
        self._finish = finish
        self._model_name = model_name
        #: the backend and plugin the instances come from, for error messages
        self._origin = origin or "the backend"
        self._failures = RepeatedFailureLog(logger, f"model '{model_name}'")
        self._lock = threading.Lock()
        self._idle = len(self.instances)
        self._outstanding = 0  # batches submitted and not yet resolved (event loop only)
        self._drained: asyncio.Event | None = None
        #: called on the event loop after each batch's futures are resolved (an instance
        #: has become free): schedulers that form batches on demand hook in here
        self.on_batch_done: Callable[[], None] | None = None
        #: execute_timeout_secs: which instances ran past it (None: no timeout)
        self.watch = (
            ExecuteWatch(execute_timeout, model_name, self.instances, names, loop, self._abandon)
            if execute_timeout and self.instances
            else None
        )
        #: model_warmup: each instance runs the samples before its first batch
        self._warmup = warmup
        self._warmed: list[Future[None]] = [Future() for _ in self.instances] if warmup else []
        #: completes each formed batch before it runs (batch_input); None: nothing to do
        self._prepare = prepare
        #: some instance takes device tensors: the others get host copies (see _run)
        self.device_inputs = self._takes_device_tensors()
        #: --rate-limit execution_count: batches wait for an instance holding its resources
        self._limiter = limiter
        if limiter is not None:
            self._limit(limiter, limits)
        #: short batches run on the event loop (see triton_core.scheduling.inline)
        self._inline = (
            InlineGate(inline_budget_us, model_name)
            if inline_budget_us > 0
            and self.instances
            and all(instance.may_run_inline for instance in self.instances)
            and limiter is None
            and self.watch is None
            and not any(self._cpus)  # a host policy binds instances to their threads' CPUs
            else None
        )
        self._start()

    async def check_ready(self) -> None:
        """Every instance's own readiness check, in order; the first failure raises."""
        for instance in [*self.instances, *self._passive]:
            if instance.checks_readiness:
                await instance.check_ready()

    def _takes_device_tensors(self) -> bool:
        return any(getattr(i, "accepts_device_tensors", False) for i in self.instances)

    @abstractmethod
    def _start(self) -> None:
        """Set up what runs batches (threads, queues), once the common state is in place."""

    @property
    def size(self) -> int:
        return len(self.instances)

    @property
    def healthy(self) -> bool:
        """False once every instance ran past ``execute_timeout_secs`` and has not returned."""
        watch = self.watch
        return watch is None or watch.unhealthy_count < len(self.instances)

    @property
    def idle_count(self) -> int:
        """Instances not executing a batch right now (approximate, for schedulers' hints)."""
        return self._idle

    @abstractmethod
    def submit(
        self, requests: list[InferenceRequest], futures: list[asyncio.Future[InferenceResponse]]
    ) -> None:
        """Queue one batch; the next free instance executes it. Call on the event loop."""

    @abstractmethod
    def pin(self) -> None:
        """Give each instance its own queue, for schedulers that choose the instance.

        Call once, before the first batch (a scheduler's constructor may, off the loop);
        then submit with :meth:`submit_to` only. The sequence batcher does, so that a
        sequence stays on the instance (and thread) that holds its state.
        """

    @abstractmethod
    def submit_to(
        self,
        index: int,
        requests: list[InferenceRequest],
        futures: list[asyncio.Future[InferenceResponse]],
    ) -> None:
        """Queue one batch for instance ``index`` (after :meth:`pin`). Call on the event loop."""

    @property
    def outstanding(self) -> int:
        """Batches submitted and not yet answered."""
        return self._outstanding

    async def drain(self) -> None:
        """Wait until every submitted batch has been answered."""
        while self._outstanding:
            self._drained = asyncio.Event()
            await self._drained.wait()

    # -- rate limiting (event loop, except _limit) ---------------------------------------------

    def _limit(self, limiter: RateLimiter, limits: Sequence[tuple[int, ResourceMap]]) -> None:
        """Register the instances' needs (refused needs fail the load): the limiter, not the
        first free instance, picks who runs."""
        from triton_core.scheduling.rate_limiter import InstanceSlot

        self._slots = [
            InstanceSlot(partial(self._granted, index), needs, priority)
            for index, (priority, needs) in enumerate(limits)
        ]
        limiter.register(self._slots)
        #: instances waiting for their resources to warm up: called when granted
        self._grant_waiters: dict[int, Callable[[], None]] = {}
        self._limited_waiting: deque[Batch] = deque()
        self._limited_waiting_for: list[deque[Batch]] = [deque() for _ in self.instances]

    def _submit_limited(self, batch: Batch) -> None:
        """A batch for any instance, once one holds its resources."""
        self._limited_waiting.append(batch)
        self._stage_free()

    def _submit_limited_to(self, index: int, batch: Batch) -> None:
        assert self._limiter is not None
        self._limited_waiting_for[index].append(batch)
        self._limiter.stage(self._slots[index])

    def _stage_free(self) -> None:
        """Queue free instances for resources, as many as there are batches for any."""
        assert self._limiter is not None
        wanted = len(self._limited_waiting) - sum(1 for slot in self._slots if slot.staged)
        for slot in sorted(self._slots, key=_turns):
            if wanted <= 0:
                break
            if not slot.staged and not slot.holding:
                self._limiter.stage(slot)
                wanted -= 1

    def _granted(self, index: int) -> None:
        """Instance ``index`` holds its resources: it runs its own batch, else the next."""
        assert self._limiter is not None
        waiter = self._grant_waiters.pop(index, None)
        if waiter is not None:  # a warm-up holds the resources until it ends
            waiter()
            return
        own = self._limited_waiting_for[index]
        waiting = own or self._limited_waiting
        if not waiting:
            self._limiter.release(self._slots[index])
            return
        self._run_granted(index, waiting.popleft())

    @abstractmethod
    def _run_granted(self, index: int, batch: Batch) -> None:
        """Start ``batch`` on instance ``index``, which holds its resources."""

    def _limited_done(self, index: int) -> None:
        assert self._limiter is not None
        self._limiter.release(self._slots[index])
        if self._limited_waiting_for[index]:
            self._limiter.stage(self._slots[index])
        if self._limited_waiting:
            self._stage_free()

    def _wait_for_grant(self, index: int, granted: Callable[[], None]) -> None:
        assert self._limiter is not None
        self._grant_waiters[index] = granted
        self._limiter.stage(self._slots[index])

    # -- warm-up ---------------------------------------------------------------------------------

    def wait_warm(self) -> None:
        """Block until every instance ran the warm-up samples; raise the first failure.

        Call off the event loop (the loader's thread), before the scheduler sends batches.
        """
        for future in self._warmed:
            future.result()

    # -- answers -------------------------------------------------------------------------------

    def _failed(
        self, exc: BaseException, count: int, instance: str
    ) -> list[InferenceResponse | TritonError]:
        """A batch's failure for each of its requests.

        A TritonError is the backend's own answer and keeps its status and message; any other
        exception is a backend bug: INTERNAL, naming the model, instance, plugin and exception
        type, its traceback logged once per instance and kind, then counted.
        """
        if isinstance(exc, TritonError):
            exc.reason = exc.reason or "BACKEND"
            return [exc] * count
        where = model_label(self._model_name, self.statistics.version, instance)
        message = raised(where, self._origin, exc)
        self._failures.failed((instance, type(exc)), message, exc)
        return [TritonError(Status.INTERNAL, message, reason="BACKEND")] * count

    def _resolve(
        self,
        requests: list[InferenceRequest],
        futures: list[asyncio.Future[InferenceResponse]],
        results: list[InferenceResponse | TritonError],
        times: ExecutionTimes,
    ) -> None:
        if self.watch is not None and self.watch.abandoned and self.watch.late(futures):
            if self.on_batch_done is not None:
                self.on_batch_done()  # the instance is free again
            return
        self._outstanding -= 1
        if self._drained is not None and not self._outstanding:
            self._drained.set()
        try:
            if len(requests) == 1:
                request = requests[0]
                self.statistics.record_execution(request.batch_size, (request.queued_ns,), times)
            else:
                self.statistics.record_execution(
                    sum(request.batch_size for request in requests),
                    [request.queued_ns for request in requests],
                    times,
                )
        except Exception:  # statistics must never keep a response from its client
            logger.exception("recording statistics of model '%s' failed", self._model_name)
        for request, future, result in zip(requests, futures, results, strict=True):
            if request.trace is not None:
                request.trace.compute(times)
            if request.ensemble_steps is not None and not isinstance(result, TritonError):
                request.ensemble_steps.add(times.input_ns, times.infer_ns, times.output_ns)
            if future.done():
                continue
            if isinstance(result, TritonError):
                if result.reason is None:
                    result.reason = "BACKEND"
                future.set_exception(result)
            else:
                future.set_result(result)
        if self.on_batch_done is not None:
            self.on_batch_done()  # the scheduler may dispatch its next batch now

    # -- execute timeouts ----------------------------------------------------------------------

    def _abandon(
        self, index: int, futures: list[asyncio.Future[InferenceResponse]], error: TritonError
    ) -> None:
        """Fail a batch of instance ``index`` that ran past ``execute_timeout_secs`` (on the
        event loop), and the batches that now have no instance to run on."""
        assert self.watch is not None
        self._batch_gone()
        fail_futures(futures, error)
        limited = self._limiter is not None
        waiting = self._take_limited(index) if limited else self._take_waiting(index)
        if waiting:
            refused = self.watch.unhealthy_error(index if self._chooses_instances else None)
            for _, waiting_futures in waiting:
                self._batch_gone()
                fail_futures(waiting_futures, refused)

    @property
    @abstractmethod
    def _chooses_instances(self) -> bool:
        """Batches wait for a given instance (pinned or rate-limited), not for any."""

    @abstractmethod
    def _take_waiting(self, index: int) -> list[Batch]:
        """Batches queued for instance ``index`` alone, or for any, when none is healthy
        (without a rate limiter)."""

    def _all_unhealthy(self) -> bool:
        assert self.watch is not None
        return self.watch.unhealthy_count == len(self.instances)

    def _batch_gone(self) -> None:
        self._outstanding -= 1
        if self._drained is not None and not self._outstanding:
            self._drained.set()

    def _take_limited(self, index: int) -> list[Batch]:
        """A rate-limited pool's batches for instance ``index``, and for any instance
        when none is healthy (they wait for resources, not in an instance's queue)."""
        taken = list(self._limited_waiting_for[index])
        self._limited_waiting_for[index].clear()
        if self._all_unhealthy():
            taken += self._limited_waiting
            self._limited_waiting.clear()
        return taken

    # -- stopping ------------------------------------------------------------------------------

    def abort(self) -> None:
        """The stop deadline passed: each instance ends what it runs now (any thread)."""
        for instance in [*self.instances, *self._passive]:
            try:
                instance.abort()
            except Exception:
                logger.exception("aborting an instance of model '%s' failed", self._model_name)

    def _hung(self) -> set[int]:
        """Instances still in a call that ran past the timeout: a stop leaves them behind
        (their threads end with the process) and does not finalize them under that call."""
        watch = self.watch
        if watch is None:
            return set()
        watch.stop()
        hung = {index for index, unhealthy in enumerate(watch.unhealthy) if unhealthy}
        for index in sorted(hung):
            logger.warning(
                "model '%s' instance '%s' is still in a timed-out call; leaving it behind",
                self._model_name,
                self.names[index],
            )
        return hung

    def stop(self) -> None:
        """Let queued batches finish, then end the workers and finalize the instances."""
        if self._limiter is not None:
            self._limiter.unregister(self._slots)
        hung = self._stop_workers()
        for index, instance in enumerate([*self.instances, *self._passive]):
            if index in hung:
                continue
            try:
                instance.finalize()
            except Exception:
                logger.exception("finalizing an instance of model '%s' failed", self._model_name)

    @abstractmethod
    def _stop_workers(self) -> set[int]:
        """End what runs batches once the queued ones finished; the hung instances."""


def fail_futures(futures: list[asyncio.Future[InferenceResponse]], error: TritonError) -> None:
    """Fail each of a batch's futures not yet done with ``error``."""
    for future in futures:
        if not future.done():
            future.set_exception(error)


def _turns(slot: InstanceSlot) -> int:
    return max(slot.priority, 1) * slot.executions
