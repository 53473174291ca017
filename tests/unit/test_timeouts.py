"""Per-model ``load_timeout_secs`` and ``execute_timeout_secs``: a hung load fails only its
model, a hung execute fails its batch and makes its instance (and the model) unhealthy until
the call returns."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.plugins import numpy_backend
from tests.support import numpy_server, wait_until_async, write_numpy_model
from triton_core.backends.contract import EventDrivenInstance, ModelInstance
from triton_core.config import ModelConfig, validate
from triton_core.errors import Status, TritonError
from triton_core.observability.metrics import create_registry, exposition
from triton_core.observability.metrics_options import MetricsOptions
from triton_core.scheduling.executor import InstancePool
from triton_core.scheduling.runtime import pool_class
from triton_core.server.core import Server
from triton_core.testing import inference_request
from triton_core.types import InferenceRequest, InferenceResponse, Tensor

ONE_INSTANCE = "\ninstance_group [{ count: 1 kind: KIND_CPU }]"


def parameters(**values: str) -> str:
    return "\n".join(
        f'parameters {{ key: "{key}" value {{ string_value: "{value}" }} }}'
        for key, value in values.items()
    )


def request(model: str):
    data = np.ones((1, 4), dtype=np.int32)
    return inference_request(model, {"INPUT0": data, "INPUT1": data})


@pytest.mark.parametrize("key", ["load_timeout_secs", "execute_timeout_secs"])
@pytest.mark.parametrize("value", ["abc", "0", "-1", "inf", "nan", ""])
def test_bad_timeouts_are_refused_naming_model_and_key(key, value):
    config = ModelConfig(name="m", backend="numpy")
    config.input.add(name="I", data_type=8, dims=[1])
    config.output.add(name="O", data_type=8, dims=[1])
    config.parameters[key].string_value = value
    with pytest.raises(TritonError, match=f"model 'm' parameter '{key}' must be a positive"):
        validate(config)


async def test_a_bad_timeout_fails_that_model_at_load_and_the_others_serve(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "bad", extra=parameters(execute_timeout_secs="soon"))
    write_numpy_model(repo, "good")
    server = numpy_server(repo, exit_on_error=False)
    await server.start()
    try:
        index = {entry.name: entry for entry in server.models.index()}
        assert "parameter 'execute_timeout_secs'" in index["bad"].reason
        assert (await server.infer(request("good"))).model_name == "good"
    finally:
        await server.stop()


async def test_a_hung_load_fails_only_its_model_and_is_unloaded_when_it_ends(tmp_path, caplog):
    repo = tmp_path / "models"
    write_numpy_model(repo, "hung", extra=parameters(hang_load="true", load_timeout_secs="1"))
    write_numpy_model(repo, "good")
    numpy_backend.RELEASE_LOADS.clear()
    server = numpy_server(repo, exit_on_error=False)
    try:
        await server.start()  # returns although one load never ends by itself
        index = {entry.name: entry for entry in server.models.index()}
        assert index["hung"].state == "UNAVAILABLE"
        assert "did not finish within load_timeout_secs=1" in index["hung"].reason
        assert (await server.infer(request("good"))).model_name == "good"
        assert not server.is_ready()  # strict readiness: a model asked for is not serving
    finally:
        numpy_backend.RELEASE_LOADS.set()
    await wait_until_async(lambda: "finished after all: unloading it" in caplog.text)
    assert "its thread is abandoned" in caplog.text
    assert await server.stop(grace_seconds=60)


async def gated_server(
    tmp_path: Path, *others: str
) -> tuple[Server, numpy_backend.NumpyInstance, threading.Event]:
    """A started server whose model "slow" (one instance, execute_timeout_secs=1) waits in
    ``execute`` until the returned gate is set; ``others`` are plain models beside it."""
    repo = tmp_path / "models"
    write_numpy_model(repo, "slow", extra=parameters(execute_timeout_secs="1") + ONE_INSTANCE)
    for name in others:
        write_numpy_model(repo, name)
    server = numpy_server(repo)
    await server.start()
    instance = server.models.get("slow").pool.instances[0]
    assert isinstance(instance, numpy_backend.NumpyInstance)
    instance.gate = gate = threading.Event()
    return server, instance, gate


async def test_a_hung_execute_marks_the_instance_unhealthy_until_it_returns(tmp_path):
    server, instance, gate = await gated_server(tmp_path, "good")
    registry = create_registry(server, MetricsOptions())
    try:
        hung = asyncio.ensure_future(server.infer(request("slow")))
        assert await asyncio.to_thread(instance.entered.wait, 60)
        queued = asyncio.ensure_future(server.infer(request("slow")))  # behind the hung one
        with pytest.raises(TritonError) as failed:
            await hung
        assert failed.value.status is Status.UNAVAILABLE
        assert "instance 'slow_0_0' did not finish executing within execute_timeout_secs=1" in (
            failed.value.message
        )
        with pytest.raises(TritonError, match="every instance is unhealthy"):
            await queued  # no instance left to run it
        assert not server.models.is_ready("slow")
        assert not server.is_ready()
        assert server.models.is_ready("good")
        index = {entry.name: entry for entry in server.models.index()}
        assert index["slow"].state == "UNAVAILABLE" and "unhealthy" in index["slow"].reason
        text = exposition(registry).decode()
        assert 'nv_model_instance_unhealthy{model="slow",version="1"} 1' in text
        assert 'nv_model_execute_timeout{model="slow",version="1"} 1' in text

        # no instance to run on: the next request fails at once instead of queueing
        with pytest.raises(TritonError, match="every instance is unhealthy"):
            await server.infer(request("slow"))
        # the hung call returns: its results are dropped, the instance serves again
        gate.set()
        await wait_until_async(lambda: server.models.is_ready("slow"))
        assert (await server.infer(request("slow"))).model_name == "slow"
        assert server.is_ready()
        text = exposition(registry).decode()
        assert 'nv_model_instance_unhealthy{model="slow",version="1"} 0' in text
        assert 'nv_model_execute_timeout{model="slow",version="1"} 1' in text
    finally:
        assert await server.stop(grace_seconds=60)


async def test_a_stop_leaves_a_hung_instance_behind_within_its_deadline(tmp_path):
    server, _, gate = await gated_server(tmp_path)
    try:
        with pytest.raises(TritonError, match="execute_timeout_secs"):
            await server.infer(request("slow"))
        assert await server.stop(grace_seconds=60)  # does not wait for the hung call
    finally:
        gate.set()


class Gated(ModelInstance):
    """Echoes its inputs; while ``hold`` is set, execute waits for ``gate`` first."""

    def __init__(self) -> None:
        self.hold = False
        self.gate = threading.Event()
        self.interrupted = 0

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        if self.hold:
            self.gate.wait(120)
        return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]

    def interrupt(self) -> None:
        self.interrupted += 1


class Killable(EventDrivenInstance):
    """Event-driven: holds its first batch until interrupted, which fails it (as a killed
    process's batches fail), then answers at once."""

    def __init__(self) -> None:
        self.held: Callable[..., None] | None = None
        self.loop = asyncio.get_running_loop()

    def begin_execute(self, requests: list[InferenceRequest], done: Callable[..., None]) -> None:
        responses = [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]
        if self.held is None:
            self.held = done
        else:
            self.loop.call_soon(done, responses)

    def interrupt(self) -> None:
        assert self.held is not None
        self.loop.call_soon(self.held, RuntimeError("process killed"))


def one_request() -> InferenceRequest:
    return InferenceRequest("m", {"x": Tensor("x", "FP32", np.ones((1, 1), np.float32))})


def pool_of(instances: list[ModelInstance]) -> InstancePool:
    names = [f"m_{index}" for index in range(len(instances))]
    loop = asyncio.get_running_loop()
    finish = lambda _, r, __: list(r)  # noqa: E731
    return pool_class(instances)(instances, names, loop, finish, "m", execute_timeout=0.5)


async def submitted(pool: InstancePool, index: int | None = None) -> InferenceResponse:
    future = asyncio.get_running_loop().create_future()
    if index is None:
        pool.submit([one_request()], [future])
    else:
        pool.submit_to(index, [one_request()], [future])
    return await future


async def test_a_pinned_instance_that_hangs_refuses_its_batches_and_the_other_serves():
    hung, other = Gated(), Gated()
    hung.hold = True
    pool = pool_of([hung, other])
    pool.pin()
    try:
        with pytest.raises(TritonError, match="'m_0' did not finish executing"):
            await submitted(pool, 0)
        assert hung.interrupted == 1
        with pytest.raises(TritonError, match="instance 'm_0' is unhealthy"):
            await submitted(pool, 0)
        await submitted(pool, 1)
        assert pool.healthy  # one instance still serves
        hung.gate.set()
        await wait_until_async(lambda: pool.watch is not None and not pool.watch.unhealthy_count)
        await submitted(pool, 0)
    finally:
        hung.gate.set()
        await asyncio.to_thread(pool.stop)


async def test_an_event_driven_instance_is_interrupted_and_serves_once_its_call_ends():
    instance = Killable()
    pool = pool_of([instance])
    try:
        with pytest.raises(TritonError, match="did not finish executing within"):
            await submitted(pool)
        # interrupting failed the held call, which returned the instance to health
        await wait_until_async(lambda: pool.healthy)
        assert (await submitted(pool)).outputs[0].name == "x"
    finally:
        await asyncio.to_thread(pool.stop)
