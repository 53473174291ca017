"""Model instances on worker threads: where a batch leaves the event loop and comes back.

Each instance owns one thread that takes batches from a queue shared by the model's
instances, so a free instance picks up the next batch. The event loop is woken once per
finished batch, not once per request. Short batches may run on the event loop itself
(:mod:`triton_core.scheduling.inline`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from queue import Empty, SimpleQueue
from time import monotonic_ns, thread_time_ns
from typing import TYPE_CHECKING

from triton_core.backends.streaming import note_instance
from triton_core.observability.statistics import ExecutionTimes
from triton_core.scheduling.executor import Batch, InstancePool, fail_futures
from triton_core.server.host_policy import format_cpus, run_this_thread_on
from triton_core.threads import name_native_thread
from triton_core.types import release_leases, request_to_host

if TYPE_CHECKING:
    from triton_core.backends.contract import ModelInstance
    from triton_core.errors import TritonError
    from triton_core.server.warmup import Warmup
    from triton_core.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

#: tells an instance thread to serve its own queue from now on (see InstancePool.pin)
_PIN: Batch = ([], [])


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
            fail_futures(futures, watch.unhealthy_error())
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
            fail_futures(futures, watch.unhealthy_error(index))
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
