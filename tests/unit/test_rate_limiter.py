"""The rate limiter: resource counts and Triton's messages, turns weighted by priority, and an
instance pool whose instances run only while they hold their resources."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from tests.support import wait_until_async
from triton_core.backends.contract import EventDrivenInstance, ModelInstance
from triton_core.errors import TritonError
from triton_core.scheduling.rate_limiter import (
    GLOBAL,
    PER_DEVICE,
    InstanceSlot,
    RateLimiter,
    parse_resource,
)
from triton_core.scheduling.runtime import pool_class
from triton_core.scheduling.threaded_pool import ThreadedInstancePool
from triton_core.types import InferenceRequest, InferenceResponse, Tensor


def slot(needs: dict[int, dict[str, int]], priority: int = 1, log: list | None = None):
    record = log if log is not None else []
    holder: list[InstanceSlot] = []
    made = InstanceSlot(lambda: record.append(holder[0]), needs, priority)
    holder.append(made)
    return made


def test_parse_resource_flag():
    assert parse_resource("R:3") == ("R", 3, PER_DEVICE)
    assert parse_resource("R:3:1") == ("R", 3, 1)
    for bad in ("R", "R:x", ":1", "R:1:2:3", "R:-1"):
        with pytest.raises(ValueError, match="--rate-limit-resource"):
            parse_resource(bad)


def test_explicit_count_below_a_need_fails_with_tritons_message():
    limiter = RateLimiter([("G", 2, 1), ("R", 2, PER_DEVICE)])
    with pytest.raises(TritonError) as info:
        limiter.register([slot({GLOBAL: {"G": 3}})])
    assert info.value.message == (
        'Resource count for "G" is limited to 2 which will prevent scheduling of one or more '
        "model instances, the minimum required count is 3"
    )
    with pytest.raises(TritonError, match='"H" is limited to 0'):  # not listed: none exist
        limiter.register([slot({GLOBAL: {"H": 1}})])
    limiter.register([slot({0: {"R": 2}})])  # a per-device flag covers device 0


def test_a_resource_both_global_and_per_device_is_refused():
    limiter = RateLimiter()
    limiter.register([slot({GLOBAL: {"R": 1}})])
    with pytest.raises(TritonError, match="present as both global and device-specific"):
        limiter.register([slot({0: {"R": 1}})])


def test_only_the_resources_there_are_are_granted_and_release_grants_the_next():
    granted: list[InstanceSlot] = []
    limiter = RateLimiter()
    first, second = slot({GLOBAL: {"R": 2}}, log=granted), slot({GLOBAL: {"R": 2}}, log=granted)
    limiter.register([first, second])
    limiter.stage(first)
    limiter.stage(second)
    assert granted == [first]  # two of R exist: the largest need
    limiter.release(first)
    assert granted == [first, second]


def test_priority_two_gets_half_the_turns_of_priority_one():
    granted: list[InstanceSlot] = []
    limiter = RateLimiter()
    first, second = (slot({GLOBAL: {"R": 1}}, priority=1, log=granted) for _ in range(2))
    slow = slot({GLOBAL: {"R": 1}}, priority=2, log=granted)
    limiter.register([first, second, slow])
    for waiting in (first, second, slow):
        limiter.stage(waiting)
    for _ in range(600):  # one runs at a time; the other two always wait for their turn
        holder = granted[-1]
        limiter.release(holder)
        limiter.stage(holder)
    turns = [sum(1 for s in granted if s is each) for each in (first, second, slow)]
    assert abs(turns[0] - turns[1]) <= 2, turns
    assert abs(turns[0] - 2 * turns[2]) <= 4, turns


def test_unregister_gives_the_counts_back_to_the_remaining_instances():
    limiter = RateLimiter()
    big, small = slot({GLOBAL: {"R": 4}}), slot({GLOBAL: {"R": 1}})
    limiter.register([big, small])
    limiter.unregister([big])
    limiter.register([slot({GLOBAL: {"R": 1}})])
    assert limiter._available == {GLOBAL: {"R": 1}}


class Overlap(ModelInstance):
    """Fails a batch that starts while another instance sharing the resource runs."""

    running = 0
    lock = threading.Lock()

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        with Overlap.lock:
            Overlap.running += 1
            overlapped = Overlap.running > 1
        self.release.wait(timeout=0.05)  # widen the window in which an overlap would show
        with Overlap.lock:
            Overlap.running -= 1
        if overlapped:
            raise RuntimeError("two instances ran at once")
        return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]


def finish(requests, responses, instance):  # type: ignore[no-untyped-def]
    return list(responses)


async def test_pools_sharing_a_global_resource_never_run_at_once():
    loop = asyncio.get_running_loop()
    limiter = RateLimiter()
    never = threading.Event()
    needs = [(1, {GLOBAL: {"R": 1}})] * 2
    pools = [
        ThreadedInstancePool(
            [Overlap(never), Overlap(never)],
            [f"{name}_0", f"{name}_1"],
            loop,
            finish,
            name,
            limiter=limiter,
            limits=needs,
        )
        for name in ("a", "b")
    ]
    try:
        futures = []
        for index in range(12):
            future = loop.create_future()
            value = np.full((1, 1), index, np.float32)
            pools[index % 2].submit(
                [InferenceRequest("m", {"x": Tensor("x", "FP32", value)})], [future]
            )
            futures.append(future)
        responses = await asyncio.wait_for(asyncio.gather(*futures), 30)
        assert len(responses) == 12
    finally:
        for pool in pools:
            pool.stop()


class EventDriven(EventDrivenInstance):
    """Answers on the event loop, as a Python model's process does."""

    def __init__(self, started: list[str], name: str) -> None:
        self.started = started
        self.name = name

    running = 0

    def begin_execute(self, requests, done):  # type: ignore[no-untyped-def]
        self.started.append(self.name)
        EventDriven.running += 1
        if EventDriven.running > 1:
            self.started.append("overlap")
        responses = [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]

        def finished() -> None:
            EventDriven.running -= 1
            done(responses)

        asyncio.get_running_loop().call_later(0.01, finished)


@pytest.mark.parametrize("event_driven", [False, True])
async def test_batches_for_a_chosen_instance_wait_for_its_resources(event_driven):
    """The sequence batcher's submit_to: each batch runs on its instance, one at a time
    across the pool since both instances need the only unit of R."""
    loop = asyncio.get_running_loop()
    started: list[str] = []
    never = threading.Event()
    instances = (
        [EventDriven(started, "m_0"), EventDriven(started, "m_1")]
        if event_driven
        else [Overlap(never), Overlap(never)]
    )
    pool = pool_class(instances)(
        instances,
        ["m_0", "m_1"],
        loop,
        finish,
        "m",
        limiter=RateLimiter(),
        limits=[(1, {GLOBAL: {"R": 1}})] * 2,
    )
    pool.pin()
    try:
        futures = []
        for index in range(6):
            future = loop.create_future()
            value = np.full((1, 1), index, np.float32)
            request = InferenceRequest("m", {"x": Tensor("x", "FP32", value)})
            pool.submit_to(index % 2, [request], [future])
            futures.append(future)
        responses = await asyncio.wait_for(asyncio.gather(*futures), 30)
        values = [r.outputs[0].data.item() for r in responses]
        assert values == list(range(6))
        if event_driven:
            assert sorted(started) == ["m_0"] * 3 + ["m_1"] * 3
    finally:
        pool.stop()


def test_the_flags_parse_and_bad_values_are_refused_naming_the_flag(capsys):
    from triton_core.cli import build_parser

    parser = build_parser()
    resources = ["--rate-limit-resource", "R:2", "--rate-limit-resource", "G:1:0"]
    args = parser.parse_args(
        ["serve", "--model-repository", "r", "--rate-limit", "execution_count", *resources]
    )
    assert args.rate_limit == "execution_count"
    assert args.rate_limit_resource == [("R", 2, PER_DEVICE), ("G", 1, 0)]
    assert parser.parse_args(["serve", "--model-repository", "r"]).rate_limit == "off"
    for flag, value in (("--rate-limit", "always"), ("--rate-limit-resource", "R")):
        with pytest.raises(SystemExit):
            parser.parse_args(["serve", "--model-repository", "r", flag, value])
        assert flag in capsys.readouterr().err


class Hanging(ModelInstance):
    """Blocks in execute until released (a hung framework call)."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        self.release.wait(timeout=30)
        return [InferenceResponse(outputs=list(r.inputs.values())) for r in requests]


async def test_batches_waiting_for_resources_fail_once_no_instance_is_healthy():
    """execute_timeout_secs with the limiter: the batch behind a hung one does not wait for
    an instance that may never come back."""
    loop = asyncio.get_running_loop()
    release = threading.Event()
    pool = ThreadedInstancePool(
        [Hanging(release)],
        ["m_0"],
        loop,
        finish,
        "m",
        execute_timeout=0.2,
        limiter=RateLimiter(),
        limits=[(1, {GLOBAL: {"R": 1}})],
    )
    try:
        futures = [loop.create_future() for _ in range(2)]
        for future in futures:
            value = np.zeros((1, 1), np.float32)
            pool.submit([InferenceRequest("m", {"x": Tensor("x", "FP32", value)})], [future])
        results = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), timeout=20
        )
        assert all(isinstance(result, TritonError) for result in results), results
        assert "execute_timeout_secs" in results[0].message
    finally:
        release.set()
        pool.stop()


async def test_a_dynamic_batching_model_runs_one_instance_at_a_time_under_the_limiter(tmp_path):
    """In-process server: the dynamic batcher's batches wait for the instance holding R."""
    from tests.support import numpy_server, write_numpy_model
    from triton_core.testing import inference_request

    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "dyn",
        extra="dynamic_batching { max_queue_delay_microseconds: 0 }\n"
        'instance_group [ { count: 2 kind: KIND_CPU rate_limiter { resources [ { name: "R" '
        "global: true count: 1 } ] } } ]",
    )
    server = numpy_server(repo, rate_limit="execution_count")
    await server.start()
    try:
        instances = server.models.get("dyn").pool.instances
        gate = threading.Event()
        for instance in instances:
            instance.gate = gate
        data = np.ones((1, 4), dtype=np.int32)
        calls = [
            asyncio.ensure_future(
                server.infer(inference_request("dyn", {"INPUT0": data, "INPUT1": data}))
            )
            for _ in range(6)
        ]
        await wait_until_async(lambda: any(i.entered.is_set() for i in instances), 20)
        # what must not happen has no event to wait for: a bounded window for it
        await asyncio.sleep(0.3)  # time for a second instance to start, were it allowed
        assert sum(i.entered.is_set() for i in instances) == 1
        gate.set()
        responses = await asyncio.wait_for(asyncio.gather(*calls), 30)
        assert len(responses) == 6
    finally:
        gate.set()
        await server.stop()
