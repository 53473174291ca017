"""The instance pool: worker threads, the per-thread set-up hook, batches in and out."""

from __future__ import annotations

import asyncio
import logging
import threading

import numpy as np
import pytest

from triton_core.backend import ModelInstance
from triton_core.scheduling.executor import InstancePool
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


def finish(requests, responses):  # type: ignore[no-untyped-def]
    return list(responses)


@pytest.mark.parametrize("count", [1, 3])
async def test_thread_started_runs_once_on_each_instance_thread(count: int) -> None:
    instances = [Recorder() for _ in range(count)]
    pool = InstancePool(
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
    pool = InstancePool([instance], ["m_0"], asyncio.get_running_loop(), finish, "m")
    try:
        with caplog.at_level(logging.ERROR):
            responses = await run_batches(pool, 3)
        assert len(responses) == 3
    finally:
        pool.stop()
    assert "thread set-up failed" in caplog.text and "no GPU today" in caplog.text
