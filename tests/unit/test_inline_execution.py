"""Short batches on the event loop: when the pool runs them there, and when it does not."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from triton_core.backends.contract import ModelInstance
from triton_core.errors import Status, TritonError
from triton_core.scheduling import inline
from triton_core.scheduling.inline import InlineGate
from triton_core.scheduling.threaded_pool import ThreadedInstancePool
from triton_core.types import InferenceRequest, InferenceResponse, Tensor

#: generous, so that a trivial execute is "short" on any machine
BUDGET_US = 20_000


class Echo(ModelInstance):
    """Answers each request with its input; remembers the threads it ran on."""

    def __init__(self, may_run_inline: bool = True, burn_secs: float = 0.0) -> None:
        self.may_run_inline = may_run_inline
        self.burn_secs = burn_secs
        self.threads: list[int] = []

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        self.threads.append(threading.get_ident())
        if self.burn_secs:
            end = time.thread_time() + self.burn_secs
            while time.thread_time() < end:  # CPU time, as the gate measures
                pass
        if any(r.parameters.get("fail") for r in requests):
            raise TritonError(Status.INVALID_ARG, "asked to fail")
        return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]


def request(value: float, elements: int = 1, fail: bool = False) -> InferenceRequest:
    data = np.full((1, elements), value, np.float32)
    parameters: dict[str, bool | int | str | float] = {"fail": True} if fail else {}
    return InferenceRequest("m", {"x": Tensor("x", "FP32", data)}, parameters=parameters)


def finish(requests, responses, instance):  # type: ignore[no-untyped-def]
    return list(responses)


def pool_of(instance: Echo, budget_us: int = BUDGET_US) -> ThreadedInstancePool:
    return ThreadedInstancePool(
        [instance], ["m_0"], asyncio.get_running_loop(), finish, "m", inline_budget_us=budget_us
    )


async def one(pool: ThreadedInstancePool, req: InferenceRequest) -> InferenceResponse:
    future = asyncio.get_running_loop().create_future()
    pool.submit([req], [future])
    return await future


async def never_inline(pool: ThreadedInstancePool, instance: Echo) -> None:
    """Well past a streak of short executions, every batch still ran on a thread."""
    try:
        for index in range(inline.STREAK + 5):
            await one(pool, request(index))
    finally:
        pool.stop()
    assert threading.get_ident() not in instance.threads


async def test_after_a_streak_of_short_executions_batches_run_on_the_loop() -> None:
    instance = Echo()
    pool = pool_of(instance)
    try:
        for index in range(inline.STREAK + 5):
            response = await one(pool, request(index))
            assert response.outputs[0].data[0, 0] == index
    finally:
        pool.stop()
    loop_thread = threading.get_ident()
    assert loop_thread not in instance.threads[: inline.STREAK]
    assert instance.threads[inline.STREAK :] == [loop_thread] * 5
    assert pool.statistics.execution_count == inline.STREAK + 5


@pytest.mark.parametrize(
    ("instance", "budget_us"),
    [(Echo(may_run_inline=False), BUDGET_US), (Echo(), 0)],
    ids=["the-instance-does-not-allow-it", "budget-0"],
)
async def test_never_on_the_loop_when_not_allowed(instance: Echo, budget_us: int) -> None:
    pool = pool_of(instance, budget_us)
    await never_inline(pool, instance)


async def test_a_batch_with_large_inputs_goes_to_a_thread() -> None:
    instance = Echo()
    pool = pool_of(instance)
    try:
        for index in range(inline.STREAK):
            await one(pool, request(index))
        large = inline.MAX_INPUT_BYTES // 4 + 1  # FP32 elements just over the bound
        response = await one(pool, request(7, elements=large))
        assert response.outputs[0].data.shape == (1, large)
        await one(pool, request(8))
    finally:
        pool.stop()
    loop_thread = threading.get_ident()
    assert instance.threads[-2] != loop_thread
    assert instance.threads[-1] == loop_thread


async def test_batches_arriving_while_a_thread_runs_are_all_answered_in_either_way() -> None:
    """Small batches wait for the threads to be idle and run inline; a large one sends
    the waiting ones to the threads first: every future gets its own answer."""
    instance = Echo()
    pool = pool_of(instance)
    loop = asyncio.get_running_loop()
    try:
        for index in range(inline.STREAK):
            await one(pool, request(index))
        large = inline.MAX_INPUT_BYTES // 4 + 1
        requests = [request(i, elements=large if i % 5 == 0 else 1) for i in range(40)]
        futures = [loop.create_future() for _ in requests]
        for req, future in zip(requests, futures, strict=True):
            pool.submit([req], [future])
        responses = await asyncio.wait_for(asyncio.gather(*futures), 30)
    finally:
        pool.stop()
    assert [r.outputs[0].data[0, 0] for r in responses] == list(range(40))
    assert pool.outstanding == 0


async def test_a_failing_inline_execution_fails_its_request_only() -> None:
    instance = Echo()
    pool = pool_of(instance)
    try:
        for index in range(inline.STREAK):
            await one(pool, request(index))
        with pytest.raises(TritonError, match="asked to fail"):
            await one(pool, request(1, fail=True))
        assert instance.threads[-1] == threading.get_ident()
        response = await one(pool, request(2))
        assert response.outputs[0].data[0, 0] == 2
    finally:
        pool.stop()


async def test_a_long_inline_execution_sends_the_model_back_to_its_threads() -> None:
    instance = Echo()
    pool = pool_of(instance, budget_us=1_000)
    try:
        for index in range(inline.STREAK):
            await one(pool, request(index))
        instance.burn_secs = inline.OVERRUN_FACTOR * 1_000 / 1e6 * 2  # well over the bound
        await one(pool, request(1))  # inline: the overrun starts a cool-down
        instance.burn_secs = 0.0
        for index in range(inline.STREAK + 2):
            await one(pool, request(index))
    finally:
        pool.stop()
    loop_thread = threading.get_ident()
    assert instance.threads[inline.STREAK] == loop_thread
    assert loop_thread not in instance.threads[inline.STREAK + 1 :]


async def test_instances_under_a_host_policy_stay_on_their_bound_threads() -> None:
    instance = Echo()
    pool = ThreadedInstancePool(
        [instance],
        ["m_0"],
        asyncio.get_running_loop(),
        finish,
        "m",
        cpus=[frozenset(os.sched_getaffinity(0))],
        inline_budget_us=BUDGET_US,
    )
    await never_inline(pool, instance)


async def test_pools_whose_scheduler_follows_each_batch_never_run_inline() -> None:
    """The dynamic batcher forms batches as instances free up (on_batch_done)."""
    instance = Echo()
    pool = pool_of(instance)
    pool.on_batch_done = lambda: None
    await never_inline(pool, instance)


# -- the gate alone ------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 10**12

    def __call__(self) -> int:
        return self.now


def gate_after_streak(budget_us: int = 50) -> tuple[InlineGate, Clock]:
    clock = Clock()
    gate = InlineGate(budget_us, "m", clock)
    for _ in range(inline.STREAK):
        gate.record(budget_us * 1000)
    return gate, clock


def test_the_gate_opens_after_a_streak_and_a_slow_thread_run_resets_it() -> None:
    gate = InlineGate(50, "m")
    small = [request(1)]
    for _ in range(inline.STREAK - 1):
        gate.record(10_000)
    assert not gate.allows(small)
    gate.record(10_000)
    assert gate.allows(small)

    gate = InlineGate(50, "m")
    for _ in range(inline.STREAK - 1):
        gate.record(10_000)
    gate.record(51_000)
    gate.record(10_000)
    assert not gate.allows(small)


def test_the_gate_closes_when_inline_runs_average_over_twice_the_budget() -> None:
    gate, _ = gate_after_streak()
    small = [request(1)]
    for _ in range(8):
        gate.record_inline(90_000)  # slower than the budget, still under twice it on average
    assert gate.allows(small)
    for _ in range(64):
        gate.record_inline(150_000)
        if not gate.allows(small):
            break
    assert not gate.allows(small)


def test_an_overrun_cools_down_and_repeated_overruns_double_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger=inline.__name__)
    gate, clock = gate_after_streak()
    small = [request(1)]
    gate.record_inline(inline.OVERRUN_FACTOR * 50_000 + 1)
    assert "took 1000 us (budget 50 us); running on instance threads for 1 s" in caplog.text
    gate.record(10_000)  # threads' runs during a cool-down do not count
    clock.now += 999_000_000
    assert not gate.allows(small)
    clock.now += 1_000_000
    assert not gate.allows(small)  # over: a new streak starts
    for _ in range(inline.STREAK):
        gate.record(10_000)
    assert gate.allows(small)
    gate.record_inline(10**9)
    assert "for 2 s" in caplog.text  # again within a cool-down of the last one


def test_decoupled_requests_stay_off_the_loop() -> None:
    gate, _ = gate_after_streak()
    req = request(1)
    assert gate.allows([req])
    req.response_sender = object()  # type: ignore[assignment]
    assert not gate.allows([req])


# -- the flag ------------------------------------------------------------------------------------


def test_a_negative_budget_is_refused_at_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    output = subprocess.run(
        [sys.executable, "-m", "triton_core", "serve", "--model-repository", str(tmp_path),
         "--inline-execution-budget-us=-1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert output.returncode == 2
    assert "--inline-execution-budget-us must not be negative" in output.stderr + output.stdout
