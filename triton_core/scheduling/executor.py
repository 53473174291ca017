"""Model instances on worker threads: where a batch leaves the event loop and comes back.

Each instance owns one thread that takes batches from a queue shared by the model's
instances, so a free instance picks up the next batch. The event loop is woken once per
finished batch, not once per request.

Instances that execute in another process (:class:`~triton_core.EventDrivenInstance`, e.g.
Python models) get no thread: the pool hands them batches on the event loop with
``begin_execute`` and they answer through a callback on the loop, so a batch costs no
thread hop and no GIL hand-over. Such an instance may hold a second batch while one runs
(``max_batches_in_flight``): it goes on to the next without waiting for the loop. The
dynamic and sequence batchers still hand over one batch per instance at a time.

:class:`InstancePool` is what schedulers use; :class:`ThreadedInstancePool` and
:class:`EventDrivenInstancePool` are its two ways of running batches, and
:func:`pool_class` picks the one a model's instances need.

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
from queue import Empty, SimpleQueue
from time import monotonic_ns, thread_time_ns
from typing import TYPE_CHECKING

from triton_core.backend import EventDrivenInstance
from triton_core.errors import Status, TritonError
from triton_core.failures import RepeatedFailureLog, model_label, raised
from triton_core.host_policy import format_cpus, run_this_thread_on
from triton_core.scheduling.inline import InlineGate
from triton_core.scheduling.timeouts import ExecuteWatch
from triton_core.statistics import ExecutionTimes, ModelStatistics
from triton_core.streaming import note_instance
from triton_core.threads import name_native_thread
from triton_core.types import release_leases, request_to_host

if TYPE_CHECKING:
    from triton_core.backend import ModelInstance
    from triton_core.scheduling.rate_limiter import InstanceSlot, RateLimiter, ResourceMap
    from triton_core.types import InferenceRequest, InferenceResponse
    from triton_core.warmup import Warmup

logger = logging.getLogger(__name__)

#: turns one batch's raw backend responses into final ones (checks, names, ids, output
#: selection); the third argument is the name of the instance that executed the batch
ResponseFinisher = Callable[
    [Sequence["InferenceRequest"], Sequence["InferenceResponse"], str],
    list["InferenceResponse | TritonError"],
]

Batch = tuple[list["InferenceRequest"], list["asyncio.Future[InferenceResponse]"]]

#: tells an instance thread to serve its own queue from now on (see InstancePool.pin)
_PIN: Batch = ([], [])


def pool_class(instances: Sequence[ModelInstance]) -> type[InstancePool]:
    """The pool that runs ``instances``: from the event loop when every one of them runs
    event-driven now, else on worker threads (an empty pool too)."""
    if instances and all(
        isinstance(instance, EventDrivenInstance) and instance.event_driven
        for instance in instances
    ):
        return EventDrivenInstancePool
    return ThreadedInstancePool


class InstancePool(ABC):
    """The instances of one model version: schedulers hand it batches, it runs them and
    answers their futures on the event loop. Create one with :func:`pool_class`.

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
        _fail(futures, error)
        limited = self._limiter is not None
        waiting = self._take_limited(index) if limited else self._take_waiting(index)
        if waiting:
            refused = self.watch.unhealthy_error(index if self._chooses_instances else None)
            for _, waiting_futures in waiting:
                self._batch_gone()
                _fail(waiting_futures, refused)

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


class ThreadedInstancePool(InstancePool):
    """Each instance runs batches on its own thread, taking them from a queue shared by
    the model's instances, so a free instance picks up the next batch."""

    def _start(self) -> None:
        self._queue: SimpleQueue[Batch | None] = SimpleQueue()
        #: batches the loop put in the shared queue, and those the threads took from a queue
        self._submitted = 0
        self._taken = 0
        #: small batches that wait for the instances to be idle, to run inline
        self._inline_waiting: deque[Batch] = deque()
        #: one queue per instance after pin() (sequence batching), or with a rate limiter
        self._pinned: list[SimpleQueue[Batch | None]] | None = (
            [SimpleQueue() for _ in self.instances] if self._limiter is not None else None
        )
        self._threads = [
            threading.Thread(
                target=self._run, args=(index, instance), name=f"instance:{name}", daemon=True
            )
            for index, (instance, name) in enumerate(zip(self.instances, self.names, strict=True))
        ]
        for thread in self._threads:
            thread.start()

    def submit(
        self, requests: list[InferenceRequest], futures: list[asyncio.Future[InferenceResponse]]
    ) -> None:
        watch = self.watch
        if watch is not None and watch.unhealthy_count == len(self.instances):
            _fail(futures, watch.unhealthy_error())
            return
        self._outstanding += 1
        if self._limiter is not None:
            self._submit_limited((requests, futures))
            return
        inline = self._inline
        # the dynamic batcher forms batches as instances free up: they go to its threads
        if inline is not None and self.on_batch_done is None and inline.allows(requests):
            if self._all_idle():
                self._run_inline(requests, futures)
            else:  # runs inline once the threads' batches are answered (see _resolve_thread)
                self._inline_waiting.append((requests, futures))
            return
        if self._inline_waiting:  # they go first, to the threads: none waits behind this one
            self._to_threads(self._inline_waiting)
        self._submitted += 1
        self._queue.put((requests, futures))

    def _to_threads(self, batches: deque[Batch]) -> None:
        while batches:
            self._submitted += 1
            self._queue.put(batches.popleft())

    def _all_idle(self) -> bool:
        """No instance executes and none is about to: every batch put in the shared queue
        was taken (``_taken`` first: a thread counts it after marking itself busy)."""
        return self._taken == self._submitted and self._idle == len(self.instances)

    def _resolve_thread(
        self,
        requests: list[InferenceRequest],
        futures: list[asyncio.Future[InferenceResponse]],
        results: list[InferenceResponse | TritonError],
        times: ExecutionTimes,
    ) -> None:
        """Answer a batch an instance thread ran; then, once every instance is idle, run
        the batches waiting to run inline. They wait only for batches already queued: a
        batch for the threads sends them to the threads first."""
        self._resolve(requests, futures, results, times)
        waiting = self._inline_waiting
        if waiting and self._all_idle():
            while waiting:
                self._run_inline(*waiting.popleft())

    def _run_inline(
        self, requests: list[InferenceRequest], futures: list[asyncio.Future[InferenceResponse]]
    ) -> None:
        """Execute the batch on the event loop with instance 0, which is idle."""
        assert self._inline is not None
        cpu_start = thread_time_ns()
        results, times = self._execute(self.instances[0], self.names[0], requests)
        self._inline.record_inline(thread_time_ns() - cpu_start)
        self._resolve(requests, futures, results, times)

    def pin(self) -> None:
        if self._pinned is not None:
            return
        self._inline = None  # a batch stays on its instance's thread
        self._pinned = [SimpleQueue() for _ in self.instances]
        # Each thread takes exactly one _PIN: after taking it, it reads only its own queue.
        for _ in self._threads:
            self._queue.put(_PIN)

    def submit_to(
        self,
        index: int,
        requests: list[InferenceRequest],
        futures: list[asyncio.Future[InferenceResponse]],
    ) -> None:
        watch = self.watch
        if watch is not None and watch.unhealthy[index]:
            _fail(futures, watch.unhealthy_error(index))
            return
        if self._limiter is not None:
            self._outstanding += 1
            self._submit_limited_to(index, (requests, futures))
            return
        assert self._pinned is not None, "pin() the pool before submit_to()"
        self._outstanding += 1
        self._pinned[index].put((requests, futures))

    def _run_granted(self, index: int, batch: Batch) -> None:
        assert self._pinned is not None
        self._pinned[index].put(batch)

    @property
    def _chooses_instances(self) -> bool:
        return self._pinned is not None

    def _take_waiting(self, index: int) -> list[Batch]:
        if self._pinned is not None:
            return _take_all(self._pinned[index])
        return _take_all(self._queue) if self._all_unhealthy() else []

    def _warm_up(self, index: int, warmup: Warmup) -> None:
        """Instance ``index``'s warm-up on its thread, holding its rate-limiter resources
        (as Triton sends warm-up through the rate limiter)."""
        instance, name = self.instances[index], self.names[index]
        if self._limiter is None:
            warmup.run(instance, name)
            return
        granted = threading.Event()
        self._loop.call_soon_threadsafe(self._wait_for_grant, index, granted.set)
        granted.wait()
        try:
            warmup.run(instance, name)
        finally:
            self._loop.call_soon_threadsafe(self._limited_done, index)

    def _run(self, index: int, instance: ModelInstance) -> None:
        name = self.names[index]
        queue = self._queue
        inline = self._inline
        resolve = self._resolve if inline is None else self._resolve_thread
        call_soon = self._loop.call_soon_threadsafe
        watch = self.watch
        name_native_thread(name)  # the instance's name where the system shows threads
        cpus = self._cpus[index] if self._cpus else None
        if cpus is not None:
            try:
                run_this_thread_on(cpus)
            except OSError as exc:
                logger.error(
                    "model '%s' instance '%s': cannot run on CPUs %s: %s",
                    self._model_name,
                    name,
                    format_cpus(cpus),
                    exc,
                )
        try:
            instance.thread_started()
        except Exception:
            logger.exception("model '%s': an instance's thread set-up failed", self._model_name)
        warmup = self._warmup
        if warmup is not None:
            _settle(self._warmed[index], lambda: self._warm_up(index, warmup))
        if self._pinned is not None and self._limiter is not None:
            queue = self._pinned[index]
        while True:
            batch = queue.get()
            if batch is None:
                return
            if batch is _PIN:
                assert self._pinned is not None
                queue = self._pinned[index]
                continue
            with self._lock:
                self._idle -= 1
                self._taken += 1
            requests, futures = batch
            if requests and requests[0].response_sender is not None:  # decoupled
                note_instance(requests, name)
            if watch is not None:
                watch.began(index, futures)
            if inline is None:
                results, times = self._execute(instance, name, requests)
            else:
                cpu_start = thread_time_ns()
                results, times = self._execute(instance, name, requests)
                inline.record(thread_time_ns() - cpu_start)
            if watch is not None:
                watch.ended(index, futures)
            with self._lock:
                self._idle += 1
            try:
                if self._limiter is not None:
                    call_soon(self._limited_done, index)
                call_soon(resolve, requests, futures, results, times)
            except RuntimeError:  # loop closed during shutdown
                return

    def _execute(
        self, instance: ModelInstance, name: str, requests: list[InferenceRequest]
    ) -> tuple[list[InferenceResponse | TritonError], ExecutionTimes]:
        """One batch on ``instance``: its results and times."""
        start = monotonic_ns()
        infer_start = infer_end = start
        device_inputs = self.device_inputs
        try:
            # device tensors go to an instance that takes them, one request at a time (a
            # batch of several is gathered in host memory); anything else gets host copies
            if device_inputs and (
                not getattr(instance, "accepts_device_tensors", False) or len(requests) > 1
            ):
                for request in requests:
                    request_to_host(request)
            if self._prepare is not None:
                self._prepare(requests)
            infer_start = monotonic_ns()
            responses = instance.execute(requests)
            infer_end = monotonic_ns()
            results = self._finish(requests, responses, name)
        except Exception as exc:  # a backend bug must fail the batch, not the thread
            results = self._failed(exc, len(requests), name)
        if device_inputs:
            release_leases(requests)
        end = monotonic_ns()
        times = ExecutionTimes(
            start, infer_start - start, infer_end - infer_start, max(0, end - infer_end)
        )
        return results, times

    def _stop_workers(self) -> set[int]:
        queues = self._pinned or [self._queue] * len(self._threads)
        for queue in queues:
            queue.put(None)
        hung = self._hung()
        for index, thread in enumerate(self._threads):
            if index not in hung:
                thread.join()
        return hung


class EventDrivenInstancePool(InstancePool):
    """Event-driven instances, with no threads: batches are handed to them on the event
    loop and wait here for a free instance; each may hold ``max_batches_in_flight``."""

    def _takes_device_tensors(self) -> bool:
        return False  # batches are begun on the event loop: no place to copy to host

    def _start(self) -> None:
        driven = [i for i in self.instances if isinstance(i, EventDrivenInstance)]
        if len(driven) != len(self.instances):
            raise TypeError("not every instance is event-driven: use pool_class() for the pool")
        self._driven = driven
        #: batches each instance holds, and how many it may hold
        self._busy = [0] * len(driven)
        self._depth = [max(1, instance.max_batches_in_flight) for instance in driven]
        self._waiting: deque[Batch] = deque()
        #: one queue per instance after pin() (sequence batching)
        self._waiting_for: list[deque[Batch]] | None = None

    def submit(
        self, requests: list[InferenceRequest], futures: list[asyncio.Future[InferenceResponse]]
    ) -> None:
        watch = self.watch
        if watch is not None and watch.unhealthy_count == len(self.instances):
            _fail(futures, watch.unhealthy_error())
            return
        self._outstanding += 1
        if self._limiter is not None:
            self._submit_limited((requests, futures))
            return
        index = self._least_busy()
        if index is None:
            self._waiting.append((requests, futures))
        else:
            self._begin(index, (requests, futures))

    def _least_busy(self) -> int | None:
        """An idle instance, else one that may take another batch, else None."""
        busy = self._busy
        best = None
        unhealthy = self.watch.unhealthy if self.watch is not None else None
        for index, held in enumerate(busy):
            if unhealthy is not None and unhealthy[index]:
                continue
            if not held:
                return index
            if held < self._depth[index] and (best is None or held < busy[best]):
                best = index
        return best

    def pin(self) -> None:
        if self._waiting_for is None:
            self._waiting_for = [deque() for _ in self.instances]

    def submit_to(
        self,
        index: int,
        requests: list[InferenceRequest],
        futures: list[asyncio.Future[InferenceResponse]],
    ) -> None:
        watch = self.watch
        if watch is not None and watch.unhealthy[index]:
            _fail(futures, watch.unhealthy_error(index))
            return
        if self._limiter is not None:
            self._outstanding += 1
            self._submit_limited_to(index, (requests, futures))
            return
        assert self._waiting_for is not None, "pin() the pool before submit_to()"
        self._outstanding += 1
        if self._busy[index]:
            self._waiting_for[index].append((requests, futures))
        else:
            self._begin(index, (requests, futures))

    def _begin(self, index: int, batch: Batch) -> None:
        """Hand a batch to event-driven instance ``index`` (on the event loop)."""
        self._busy[index] += 1
        if self._busy[index] == 1:
            self._idle -= 1
        requests, futures = batch
        if requests and requests[0].response_sender is not None:
            note_instance(requests, self.names[index])
        start = monotonic_ns()
        watch = self.watch
        if watch is not None:
            watch.began(index, futures)

        def done(
            result: Sequence[InferenceResponse] | BaseException | None,
            times: ExecutionTimes | None = None,
        ) -> None:
            end = monotonic_ns()
            name = self.names[index]
            if watch is not None:
                watch.ended(index, futures)
            if isinstance(result, BaseException):
                results = self._failed(result, len(requests), name)
            else:
                try:
                    results = self._finish(requests, result, name)  # type: ignore[arg-type]
                except Exception as exc:  # fails the batch, as on a thread
                    results = self._failed(exc, len(requests), name)
            self._busy[index] -= 1
            if not self._busy[index]:
                self._idle += 1
            # the instance takes its next batch before the futures' callbacks submit more;
            # a pinned instance (sequences) holds one batch at a time
            if self._limiter is not None:
                self._limited_done(index)
            elif self._waiting_for is None:
                if self._waiting and self._busy[index] < self._depth[index]:
                    self._begin(index, self._waiting.popleft())
            elif self._waiting_for[index] and not self._busy[index]:
                self._begin(index, self._waiting_for[index].popleft())
            if times is None:
                times = ExecutionTimes(start, 0, end - start, 0)
            self._resolve(requests, futures, results, times)

        try:
            if self._prepare is not None:
                self._prepare(requests)
            self._driven[index].begin_execute(requests, done)
        except Exception as exc:  # reported through done, after this returns
            self._loop.call_soon(done, exc)

    def _run_granted(self, index: int, batch: Batch) -> None:
        self._begin(index, batch)

    @property
    def _chooses_instances(self) -> bool:
        return self._waiting_for is not None

    def _take_waiting(self, index: int) -> list[Batch]:
        if self._waiting_for is not None:
            taken = list(self._waiting_for[index])
            self._waiting_for[index].clear()
            return taken
        if not self._all_unhealthy():
            return []
        taken = list(self._waiting)
        self._waiting.clear()
        return taken

    def wait_warm(self) -> None:
        if self._warmup is not None:
            asyncio.run_coroutine_threadsafe(self._warm_all(), self._loop).result()
        super().wait_warm()

    async def _warm_all(self) -> None:
        assert self._warmup is not None
        warmup = self._warmup
        runs = [self._warm_up(index, warmup) for index in range(len(self.instances))]
        results = await asyncio.gather(*runs, return_exceptions=True)
        for future, result in zip(self._warmed, results, strict=True):
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(None)

    async def _warm_up(self, index: int, warmup: Warmup) -> None:
        instance, name = self._driven[index], self.names[index]
        if self._limiter is None:
            await warmup.run_async(instance, name)
            return
        granted = self._loop.create_future()
        self._wait_for_grant(index, lambda: granted.set_result(None))
        await granted
        try:
            await warmup.run_async(instance, name)
        finally:
            self._limited_done(index)

    def _stop_workers(self) -> set[int]:
        return self._hung()


def _fail(futures: list[asyncio.Future[InferenceResponse]], error: TritonError) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(error)


def _turns(slot: InstanceSlot) -> int:
    return max(slot.priority, 1) * slot.executions


def _settle(future: Future[None], call: Callable[[], None]) -> None:
    try:
        call()
    except BaseException as exc:
        future.set_exception(exc)
    else:
        future.set_result(None)


def _take_all(queue: SimpleQueue[Batch | None]) -> list[Batch]:
    """The batches waiting in ``queue``; stops at a stop or pin marker, which stays."""
    taken: list[Batch] = []
    while True:
        try:
            batch = queue.get_nowait()
        except Empty:
            return taken
        if batch is None or batch is _PIN:
            queue.put(batch)
            return taken
        taken.append(batch)
