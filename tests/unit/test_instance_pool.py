"""The instance pool: worker threads, the per-thread set-up hook, batches in and out."""

from __future__ import annotations

import asyncio
import logging
import threading

import numpy as np
import pytest

from triton_core.backends.contract import EventDrivenInstance, ModelInstance
from triton_core.scheduling.event_driven_pool import EventDrivenInstancePool
from triton_core.scheduling.executor import InstancePool
from triton_core.scheduling.threaded_pool import ThreadedInstancePool
from triton_core.types import InferenceRequest, InferenceResponse, Tensor


class Recorder(ModelInstance):
    """Remembers which thread set it up and which threads executed it."""

    def __init__(self, fail_setup: bool = False) -> None:
        self.fail_setup = fail_setup
        self.setup_threads: list[int] = []
        self.execute_threads: list[int] = []

    def thread_started(self) -> None:
        self.setup_threads.append(threading.get_ident())
        if self.fail_setup:
            raise RuntimeError("no GPU today")

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        assert self.setup_threads, "thread_started() runs before the first execute()"
        self.execute_threads.append(threading.get_ident())
        return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]


def request(value: float) -> InferenceRequest:
    return InferenceRequest("m", {"x": Tensor("x", "FP32", np.full((1, 1), value, np.float32))})


async def run_batches(pool: InstancePool, count: int) -> list[InferenceResponse]:
    loop = asyncio.get_running_loop()
    futures = []
    for index in range(count):
        future = loop.create_future()
        pool.submit([request(index)], [future])
        futures.append(future)
    return await asyncio.gather(*futures)


def finish(requests, responses, instance):  # type: ignore[no-untyped-def]
    return list(responses)


@pytest.mark.parametrize("count", [1, 3])
async def test_thread_started_runs_once_on_each_instance_thread(count: int) -> None:
    instances = [Recorder() for _ in range(count)]
    pool = ThreadedInstancePool(
        instances, [f"m_{i}" for i in range(count)], asyncio.get_running_loop(), finish, "m"
    )
    try:
        responses = await run_batches(pool, 20)
        assert [r.outputs[0].data[0, 0] for r in responses] == list(range(20))
    finally:
        pool.stop()
    for instance in instances:
        assert len(instance.setup_threads) == 1  # once, however many batches it ran
        assert set(instance.execute_threads) <= set(instance.setup_threads)
        assert instance.setup_threads[0] != threading.get_ident()  # not the loop's thread


async def test_a_failing_thread_set_up_is_logged_and_the_instance_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    instance = Recorder(fail_setup=True)
    pool = ThreadedInstancePool([instance], ["m_0"], asyncio.get_running_loop(), finish, "m")
    try:
        with caplog.at_level(logging.ERROR):
            responses = await run_batches(pool, 3)
        assert len(responses) == 3
    finally:
        pool.stop()
    assert "thread set-up failed" in caplog.text and "no GPU today" in caplog.text


# ------------------------------------------------------------------------------------------
# event-driven instances that take a second batch while one runs


class Pipelined(EventDrivenInstance):
    """An event-driven instance whose batches finish when the test says so."""

    max_batches_in_flight = 2

    def __init__(self) -> None:
        self.started: list[tuple[list[InferenceRequest], object]] = []

    def begin_execute(self, requests, done) -> None:  # type: ignore[no-untyped-def]
        self.started.append((requests, done))

    def finish_oldest(self, times=None) -> None:  # type: ignore[no-untyped-def]
        requests, done = self.started.pop(0)
        loop = asyncio.get_running_loop()
        outputs = [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]
        loop.call_soon(done, outputs, times)


def submit(pool: InstancePool, value: float) -> asyncio.Future[InferenceResponse]:
    future = asyncio.get_running_loop().create_future()
    pool.submit([request(value)], [future])
    return future


async def test_a_pipelined_instance_holds_two_batches_and_takes_the_next_as_one_ends() -> None:
    instance = Pipelined()
    pool = EventDrivenInstancePool([instance], ["m_0"], asyncio.get_running_loop(), finish, "m")
    futures = [submit(pool, value) for value in range(4)]
    assert len(instance.started) == 2  # the second waits in the instance, the rest here
    assert pool.idle_count == 0 and pool.outstanding == 4
    instance.finish_oldest()
    first = await futures[0]
    assert first.outputs[0].data[0, 0] == 0
    assert len(instance.started) == 2  # batch 2 went over as batch 0 ended
    for future in futures[1:]:
        instance.finish_oldest()
        await future
    values = [future.result().outputs[0].data[0, 0] for future in futures]
    assert values == [0, 1, 2, 3] and pool.idle_count == 1 and pool.outstanding == 0
    pool.stop()


async def test_an_idle_instance_is_chosen_before_a_second_batch_for_a_busy_one() -> None:
    instances = [Pipelined(), Pipelined()]
    pool = EventDrivenInstancePool(
        instances, ["m_0", "m_1"], asyncio.get_running_loop(), finish, "m"
    )
    futures = [submit(pool, value) for value in range(3)]
    # one each first; the third goes to an instance that may hold a second
    assert sorted(len(i.started) for i in instances) == [1, 2]
    for instance in instances:
        while instance.started:
            instance.finish_oldest()
    await asyncio.gather(*futures)
    assert pool.idle_count == 2
    pool.stop()


async def test_pinned_instances_hold_one_batch_at_a_time() -> None:
    instance = Pipelined()
    pool = EventDrivenInstancePool([instance], ["m_0"], asyncio.get_running_loop(), finish, "m")
    pool.pin()
    loop = asyncio.get_running_loop()
    futures = [loop.create_future() for _ in range(2)]
    for value, future in enumerate(futures):
        pool.submit_to(0, [request(value)], [future])
    assert len(instance.started) == 1  # a sequence's next request waits for the last one
    instance.finish_oldest()
    await futures[0]
    assert len(instance.started) == 1
    instance.finish_oldest()
    await futures[1]
    pool.stop()


async def test_times_an_instance_reports_go_to_the_statistics() -> None:
    from triton_core.observability.statistics import ExecutionTimes

    instance = Pipelined()
    pool = EventDrivenInstancePool([instance], ["m_0"], asyncio.get_running_loop(), finish, "m")
    future = submit(pool, 1.0)
    requests, _ = instance.started[0]
    requests[0].queued_ns = 1_000_000
    started = 1_005_000  # the instance began it 5 us after it was queued
    instance.finish_oldest(ExecutionTimes(started, 1_000, 20_000, 3_000))
    await future
    stats = pool.statistics
    assert (stats.queue.count, stats.queue.ns) == (1, 5_000)
    assert (stats.compute_input.ns, stats.compute_infer.ns, stats.compute_output.ns) == (
        1_000,
        20_000,
        3_000,
    )
    pool.stop()
