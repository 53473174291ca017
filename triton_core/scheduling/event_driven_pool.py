"""Event-driven model instances: batches handed to them on the event loop, with no thread.

Instances that execute in another process (:class:`~triton_core.EventDrivenInstance`, e.g.
Python models) get no thread: the pool hands them batches on the event loop with
``begin_execute`` and they answer through a callback on the loop, so a batch costs no
thread hop and no GIL hand-over. Such an instance may hold a second batch while one runs
(``max_batches_in_flight``): it goes on to the next without waiting for the loop. The
dynamic and sequence batchers still hand over one batch per instance at a time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from time import monotonic_ns
from typing import TYPE_CHECKING

from triton_core.backends.contract import EventDrivenInstance
from triton_core.backends.streaming import note_instance
from triton_core.observability.statistics import ExecutionTimes
from triton_core.scheduling.executor import Batch, InstancePool, fail_futures

if TYPE_CHECKING:
    from triton_core.server.warmup import Warmup
    from triton_core.types import InferenceRequest, InferenceResponse


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
            fail_futures(futures, watch.unhealthy_error())
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
            fail_futures(futures, watch.unhealthy_error(index))
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
