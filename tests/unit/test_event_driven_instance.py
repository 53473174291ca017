"""The contract of ``EventDrivenInstance``: what a subclass must give, what it may choose per
object, and which pool runs it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import numpy as np
import pytest

import triton_core
from triton_core import EventDrivenInstance, ModelInstance
from triton_core.scheduling.event_driven_pool import EventDrivenInstancePool
from triton_core.scheduling.executor import InstancePool
from triton_core.scheduling.runtime import pool_class
from triton_core.scheduling.threaded_pool import ThreadedInstancePool
from triton_core.types import InferenceRequest, InferenceResponse, Tensor


class Echo(EventDrivenInstance):
    """Answers on the loop; runs on a thread instead when told so per object."""

    def __init__(self, event_driven: bool = True) -> None:
        self.event_driven = event_driven
        self.threads: list[int] = []

    def begin_execute(self, requests: list[InferenceRequest], done: Callable[..., None]) -> None:
        self.threads.append(threading.get_ident())
        asyncio.get_running_loop().call_soon(done, self._answers(requests))

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        self.threads.append(threading.get_ident())
        return self._answers(requests)

    @staticmethod
    def _answers(requests: list[InferenceRequest]) -> list[InferenceResponse]:
        return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]


class OnlyEventDriven(EventDrivenInstance):
    def begin_execute(self, requests: list[InferenceRequest], done: Callable[..., None]) -> None:
        raise AssertionError("not called here")


class Threaded(ModelInstance):
    #: the attribute alone does not make an instance event-driven: the subclass does
    event_driven = True

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        return []


def finish(requests, responses, instance):  # type: ignore[no-untyped-def]
    return list(responses)


def test_it_is_public_and_a_model_instance():
    from triton_core.backends.contract import EventDrivenInstance as defined

    assert triton_core.EventDrivenInstance is defined
    assert "EventDrivenInstance" in triton_core.__all__
    assert issubclass(EventDrivenInstance, ModelInstance)


def test_a_subclass_must_implement_begin_execute():
    class Missing(EventDrivenInstance):
        pass

    with pytest.raises(TypeError, match="begin_execute"):
        Missing()  # type: ignore[abstract]


def test_defaults_one_batch_in_flight_and_event_driven():
    instance = OnlyEventDriven()
    assert instance.event_driven is True
    assert instance.max_batches_in_flight == 1


def test_execute_of_an_instance_that_only_runs_event_driven_says_so():
    with pytest.raises(NotImplementedError, match="OnlyEventDriven runs event-driven only"):
        OnlyEventDriven().execute([])


def test_the_base_contract_has_no_event_driven_members():
    assert not hasattr(ModelInstance, "begin_execute")
    assert not hasattr(ModelInstance, "max_batches_in_flight")


@pytest.mark.parametrize(
    ("instances", "expected"),
    [
        ([Echo(), Echo()], EventDrivenInstancePool),
        ([Echo(), Echo(event_driven=False)], ThreadedInstancePool),
        ([Echo(event_driven=False)], ThreadedInstancePool),
        ([Echo(), Threaded()], ThreadedInstancePool),
        ([Threaded()], ThreadedInstancePool),
        ([], ThreadedInstancePool),
    ],
)
def test_the_pool_is_event_driven_only_when_every_instance_runs_so_now(instances, expected):
    assert pool_class(instances) is expected


async def _answer(pool: InstancePool) -> float:
    future = asyncio.get_running_loop().create_future()
    data = np.full((1, 1), 7.0, np.float32)
    pool.submit([InferenceRequest("m", {"x": Tensor("x", "FP32", data)})], [future])
    response = await asyncio.wait_for(future, 10)
    return float(response.outputs[0].data[0, 0])


@pytest.mark.parametrize("event_driven", [True, False])
async def test_the_object_chooses_the_loop_or_a_worker_thread(event_driven):
    instance = Echo(event_driven)
    pool = pool_class([instance])([instance], ["m_0"], asyncio.get_running_loop(), finish, "m")
    try:
        assert await _answer(pool) == 7.0
    finally:
        pool.stop()
    on_loop = instance.threads == [threading.get_ident()]
    assert on_loop is event_driven


async def test_the_event_driven_pool_refuses_instances_that_are_not():
    with pytest.raises(TypeError, match="pool_class"):
        EventDrivenInstancePool([Threaded()], ["m_0"], asyncio.get_running_loop(), finish, "m")
