"""The dynamic batcher, driven in-process with the numpy test backend.

Ordering is observed through the order in which requests complete: with one instance and
``max_batch_size: 1`` every execution answers one request, so completion order is execution
order. Timing assertions are lower bounds only (a timer never fires early by more than the
batcher's slack), or are replaced by "this finished before that".
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from tests.plugins import numpy_backend
from tests.support import numpy_server, write_numpy_model
from triton_core import (
    Backend,
    BackendModel,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    Server,
    ServerOptions,
    Tensor,
    hookimpl,
)
from triton_core.config import normalize, parse_config_text, validate
from triton_core.errors import Status, TritonError
from triton_core.plugins.manager import create_plugin_manager

strategy_plugin = pytest.importorskip("triton_core_test_batch_strategy")

SLOW = 'parameters {{ key: "sleep_ms" value {{ string_value: "{ms}" }} }}'


def request(
    model: str, value: int, rows: int = 1, width: int = 4, priority: int = 0, timeout_us: int = 0
) -> InferenceRequest:
    data = np.full((rows, width), value, dtype=np.int32)
    return InferenceRequest(
        model,
        {name: Tensor(name, "INT32", data) for name in ("INPUT0", "INPUT1")},
        priority=priority,
        timeout_us=timeout_us,
    )


async def run_concurrently(server, requests):
    return await asyncio.gather(*(server.infer(r) for r in requests))


class Tracker:
    """Starts requests as tasks, in order, and records the order in which they finish."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.finished: list[str] = []
        self.tasks: dict[str, asyncio.Task] = {}

    def start(self, label: str, req: InferenceRequest) -> asyncio.Task:
        task = asyncio.ensure_future(self.server.infer(req))
        task.add_done_callback(lambda _: self.finished.append(label))
        self.tasks[label] = task
        return task

    async def queued(self) -> None:
        """Let every started task reach the scheduler's queue."""
        for _ in range(5):
            await asyncio.sleep(0)

    async def wait(self) -> dict[str, InferenceResponse | BaseException]:
        results = await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        return dict(zip(self.tasks, results, strict=True))


def executions(server: Server, model: str) -> list[int]:
    return [n for instance in server.model(model).pool.instances for n in instance.executions]


# -- batching ------------------------------------------------------------------------------------


async def test_concurrent_requests_are_batched_and_each_gets_its_rows(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo, "batched", kind="add_sub", extra="dynamic_batching { }\n" + SLOW.format(ms=50)
    )
    async with numpy_server(repo) as server:
        responses = await run_concurrently(server, [request("batched", i) for i in range(20)])
        for index, response in enumerate(responses):
            np.testing.assert_array_equal(response.output("OUTPUT0").data, [[2 * index] * 4])
        done = executions(server, "batched")
        assert sum(done) == 20
        assert len(done) < 20 and max(done) > 1
        assert server.model("batched").scheduler.pending_count == 0


async def test_multi_row_requests_get_their_own_rows_back(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo, "rows", kind="add_sub", extra="dynamic_batching { }\n" + SLOW.format(ms=30)
    )
    async with numpy_server(repo) as server:
        sent = [request("rows", i, rows=1 + i % 3) for i in range(12)]
        responses = await run_concurrently(server, sent)
        for index, response in enumerate(responses):
            output = response.output("OUTPUT0").data
            assert output.shape == (1 + index % 3, 4)
            assert (output == 2 * index).all()


async def test_max_batch_size_and_preferred_sizes_bound_batches(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "preferred",
        max_batch_size=8,
        extra="dynamic_batching { preferred_batch_size: [ 2, 4 ] }\n" + SLOW.format(ms=30),
    )
    async with numpy_server(repo) as server:
        await run_concurrently(server, [request("preferred", i) for i in range(13)])
        done = executions(server, "preferred")
        assert sum(done) == 13
        assert all(size in (1, 2, 4) for size in done[:-1]), done


async def test_a_preferred_size_goes_at_once_despite_a_long_delay(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "eager",
        max_batch_size=8,
        extra="dynamic_batching { preferred_batch_size: [ 4 ] "
        "max_queue_delay_microseconds: 60000000 }",
    )
    async with numpy_server(repo) as server:
        # Four requests make the preferred size: no waiting for the 60 s delay.
        await asyncio.wait_for(
            run_concurrently(server, [request("eager", i) for i in range(4)]), 30
        )
        assert executions(server, "eager") == [4]
        assert server.model("eager").statistics.dispatch_reasons == {"preferred_batch_size": 1}


async def test_queue_delay_gathers_requests_that_arrive_spread_out(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "delayed",
        max_batch_size=4,
        extra="dynamic_batching { max_queue_delay_microseconds: 300000 }",
    )
    async with numpy_server(repo) as server:

        async def late(index):
            await asyncio.sleep(0.02 * index)
            return await server.infer(request("delayed", index))

        await asyncio.gather(*(late(i) for i in range(4)))
        assert executions(server, "delayed") == [4]


async def test_a_partial_batch_waits_for_the_delay_then_goes(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "partial",
        max_batch_size=8,
        extra="dynamic_batching { max_queue_delay_microseconds: 200000 }",
    )
    async with numpy_server(repo) as server:
        started = time.monotonic()
        await run_concurrently(server, [request("partial", i) for i in range(3)])
        assert time.monotonic() - started >= 0.19  # timers do not fire early
        assert executions(server, "partial") == [3]
        assert server.model("partial").statistics.dispatch_reasons == {"max_queue_delay": 1}


# -- priorities ----------------------------------------------------------------------------------


async def test_higher_priority_levels_are_served_first(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "prio",
        max_batch_size=1,
        extra="dynamic_batching { priority_levels: 3 default_priority_level: 2 }\n"
        + SLOW.format(ms=200),
    )
    async with numpy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy", request("prio", 0))  # occupies the only instance
        await tracker.queued()
        tracker.start("low", request("prio", 1, priority=3))
        tracker.start("unset", request("prio", 2, priority=0))  # default level 2
        tracker.start("out-of-range", request("prio", 3, priority=99))  # default level 2
        tracker.start("high", request("prio", 4, priority=1))
        await tracker.queued()
        assert server.model("prio").scheduler.pending_count == 4
        results = await tracker.wait()
        assert tracker.finished == ["busy", "high", "unset", "out-of-range", "low"]
        assert not any(isinstance(r, BaseException) for r in results.values())


async def test_a_batch_takes_the_high_level_first_then_fills_from_lower_ones(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "fill",
        kind="add_sub",
        max_batch_size=3,
        extra="dynamic_batching { priority_levels: 2 default_priority_level: 2 }\n"
        + SLOW.format(ms=300),
    )
    async with numpy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy", request("fill", 0))
        await tracker.queued()
        for i in range(3):
            tracker.start(f"low{i}", request("fill", 10 + i, priority=2))
        for i in range(2):
            tracker.start(f"high{i}", request("fill", 20 + i, priority=1))
        results = await tracker.wait()
        # second batch: both high requests plus the oldest low one; third: the other two
        assert executions(server, "fill") == [1, 3, 2]
        assert tracker.finished.index("low0") < tracker.finished.index("low1")
        assert tracker.finished.index("high1") < tracker.finished.index("low1")
        for label, value in (("low2", 12), ("high0", 20)):
            assert (results[label].output("OUTPUT0").data == 2 * value).all()


# -- queue policies ------------------------------------------------------------------------------


def assert_rejected(result: object, *words: str) -> None:
    assert isinstance(result, TritonError), result
    assert result.status is Status.UNAVAILABLE
    assert result.reason == "REJECTED"
    for word in words:
        assert word in result.message


async def test_a_queue_timeout_rejects_while_a_batch_is_still_executing(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "timeout",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { default_timeout_microseconds: 50000 } }"
        "\n" + SLOW.format(ms=1500),
    )
    async with numpy_server(repo) as server:
        tracker = Tracker(server)
        busy = tracker.start("busy", request("timeout", 0))
        await tracker.queued()
        waiting = tracker.start("waiting", request("timeout", 1))
        await asyncio.wait([busy, waiting], return_when=asyncio.FIRST_COMPLETED)
        # rejected at its timeout, not when the executing batch finished
        assert waiting.done() and not busy.done()
        results = await tracker.wait()
        assert_rejected(results["waiting"], "Request timeout expired", "'timeout'")
        assert isinstance(results["busy"], InferenceResponse)
        statistics = server.model("timeout").statistics
        assert statistics.failures["REJECTED"] == 1
        assert statistics.success.count == 1
        assert server.model("timeout").scheduler.pending_count == 0


async def test_request_timeouts_count_only_where_the_policy_allows_an_override(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "override",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { allow_timeout_override: true } }\n"
        + SLOW.format(ms=600),
    )
    write_numpy_model(
        repo, "fixed", max_batch_size=1, extra="dynamic_batching { }\n" + SLOW.format(ms=300)
    )
    write_numpy_model(
        repo,
        "lower_only",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { allow_timeout_override: true "
        "default_timeout_microseconds: 50000 } }\n" + SLOW.format(ms=600),
    )
    async with numpy_server(repo) as server:
        tracker = Tracker(server)
        for model in ("override", "fixed", "lower_only"):
            tracker.start(f"{model}-busy", request(model, 0))
        await tracker.queued()
        tracker.start("override-short", request("override", 1, timeout_us=20_000))
        tracker.start("override-none", request("override", 2))
        tracker.start("fixed-short", request("fixed", 1, timeout_us=20_000))
        # a request cannot raise the policy's timeout
        tracker.start("lower_only-long", request("lower_only", 1, timeout_us=60_000_000))
        results = await tracker.wait()
        assert_rejected(results["override-short"], "Request timeout expired")
        assert isinstance(results["override-none"], InferenceResponse)
        assert isinstance(results["fixed-short"], InferenceResponse)  # no override allowed
        assert_rejected(results["lower_only-long"], "Request timeout expired")
        assert tracker.finished.index("override-short") < tracker.finished.index("override-busy")


async def test_delay_action_moves_expired_requests_behind_the_others(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "delay",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { timeout_action: DELAY "
        "allow_timeout_override: true } }\n" + SLOW.format(ms=300),
    )
    async with numpy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy", request("delay", 0))
        await tracker.queued()
        tracker.start("expires", request("delay", 1, timeout_us=20_000))
        tracker.start("patient", request("delay", 2))
        results = await tracker.wait()
        assert tracker.finished == ["busy", "patient", "expires"]
        assert all(isinstance(r, InferenceResponse) for r in results.values())


async def test_a_full_queue_rejects_at_once(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "bounded",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { max_queue_size: 2 } }\n"
        + SLOW.format(ms=300),
    )
    async with numpy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy", request("bounded", 0))  # executing: not in the queue
        await tracker.queued()
        tracker.start("queued0", request("bounded", 1))
        tracker.start("queued1", request("bounded", 2))
        extra = tracker.start("extra", request("bounded", 3))
        await tracker.queued()
        assert extra.done()  # answered at once, nothing executed in between
        assert tracker.finished == ["extra"]
        results = await tracker.wait()
        assert_rejected(results["extra"], "Exceeds maximum queue size", "'bounded'", "2")
        assert all(isinstance(results[k], InferenceResponse) for k in ("queued0", "queued1"))
        assert server.model("bounded").statistics.failures["REJECTED"] == 1


async def test_queue_size_limits_are_per_priority_level(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "levels",
        max_batch_size=1,
        extra="dynamic_batching { priority_levels: 2 default_priority_level: 2 "
        "priority_queue_policy { key: 1 value { max_queue_size: 1 } } }\n" + SLOW.format(ms=200),
    )
    async with numpy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy", request("levels", 0))
        await tracker.queued()
        tracker.start("high0", request("levels", 1, priority=1))
        tracker.start("high1", request("levels", 2, priority=1))
        for i in range(3):
            tracker.start(f"low{i}", request("levels", 3 + i, priority=2))
        results = await tracker.wait()
        assert_rejected(results["high1"], "Exceeds maximum queue size", "priority level 1")
        assert sum(isinstance(r, InferenceResponse) for r in results.values()) == 5


async def test_a_cancelled_request_leaves_the_queue(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "cancel", extra="dynamic_batching { }\n" + SLOW.format(ms=200))
    async with numpy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy", request("cancel", 0))
        await tracker.queued()
        for i in range(3):
            tracker.start(f"queued{i}", request("cancel", 1 + i))
        await tracker.queued()
        scheduler = server.model("cancel").scheduler
        assert scheduler.pending_count == 3
        tracker.tasks["queued1"].cancel()
        await tracker.queued()
        assert scheduler.pending_count == 2
        results = await tracker.wait()
        assert isinstance(results["queued1"], asyncio.CancelledError)
        assert executions(server, "cancel") == [1, 2]


# -- preserve_ordering -----------------------------------------------------------------------------


class SleepyInstance(ModelInstance):
    """Identity on INPUT0, after sleeping as many milliseconds as its first element says."""

    def __init__(self, context: ModelContext, spec: InstanceSpec) -> None:
        self.executions: list[int] = []
        #: the distinct non-batch shapes of INPUT0 in each batch
        self.shapes: list[set[tuple[int, ...]]] = []

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        self.executions.append(len(requests))
        self.shapes.append({r.inputs["INPUT0"].data.shape[1:] for r in requests})
        time.sleep(max(int(r.inputs["INPUT0"].data.flat[0]) for r in requests) / 1000)
        return [
            InferenceResponse(outputs=[Tensor("OUTPUT0", "INT32", r.inputs["INPUT0"].data)])
            for r in requests
        ]


class SleepyModel(BackendModel):
    def __init__(self, context: ModelContext) -> None:
        self.context = context

    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return SleepyInstance(self.context, spec)


class SleepyBackend(Backend):
    name = "sleepy"
    default_model_filename = "model.npy"

    def load_model(self, context: ModelContext) -> BackendModel:
        return SleepyModel(context)


class SleepyPlugin:
    @hookimpl
    def triton_register_backends(self, registry) -> None:  # type: ignore[no-untyped-def]
        registry.add(SleepyBackend)


def sleepy_server(repo, *extra_plugins) -> Server:  # type: ignore[no-untyped-def]
    plugins = create_plugin_manager(
        autoload=False,
        extra_plugins=[("numpy", numpy_backend), ("sleepy", SleepyPlugin()), *extra_plugins],
    )
    return Server(ServerOptions([repo]), plugins)


def write_sleepy_model(  # type: ignore[no-untyped-def]
    repo, name: str, batching: str, max_batch: int = 1, count: int = 2, input_extra: str = ""
) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.npy").write_bytes(b"")
    (repo / name / "config.pbtxt").write_text(
        f'backend: "sleepy"\nmax_batch_size: {max_batch}\n'
        f'input [{{ name: "INPUT0" data_type: TYPE_INT32 dims: [ -1 ] {input_extra} }}]\n'
        'output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ -1 ] }]\n'
        f"instance_group [{{ count: {count} kind: KIND_CPU }}]\ndynamic_batching {{ {batching} }}\n"
    )


def sleep_request(model: str, ms: int, width: int = 1) -> InferenceRequest:
    data = np.full((1, width), ms, dtype=np.int32)
    return InferenceRequest(model, {"INPUT0": Tensor("INPUT0", "INT32", data)})


@pytest.mark.parametrize("ragged", [False, True])
async def test_different_shapes_batch_together_only_when_ragged(tmp_path, ragged):
    repo = tmp_path / "models"
    extra = "allow_ragged_batch: true" if ragged else ""
    write_sleepy_model(repo, "shapes", "", max_batch=8, count=1, input_extra=extra)
    async with sleepy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy", sleep_request("shapes", 200))
        await tracker.queued()
        for i in range(8):
            tracker.start(f"r{i}", sleep_request("shapes", 0, width=2 + i % 2))
        results = await tracker.wait()
        for i in range(8):
            assert results[f"r{i}"].output("OUTPUT0").shape == (1, 2 + i % 2)
        instance = server.model("shapes").pool.instances[0]
        if ragged:
            assert instance.executions == [1, 8]
            assert instance.shapes[1] == {(2,), (3,)}
        else:
            # one batch per shape, each taking every queued request of its shape
            assert instance.executions == [1, 4, 4]
            assert all(len(shapes) == 1 for shapes in instance.shapes)


async def test_preserve_ordering_releases_responses_in_arrival_order(tmp_path):
    repo = tmp_path / "models"
    write_sleepy_model(repo, "ordered", "preserve_ordering: true")
    write_sleepy_model(repo, "unordered", "")
    async with sleepy_server(repo) as server:
        tracker = Tracker(server)
        for model in ("ordered", "unordered"):
            tracker.start(f"{model}-slow", sleep_request(model, 400))
            tracker.start(f"{model}-fast", sleep_request(model, 0))
        results = await tracker.wait()
        finished = tracker.finished
        # two instances: the fast request finishes first, and only the ordered model holds it
        assert finished.index("unordered-fast") < finished.index("unordered-slow")
        assert finished.index("ordered-slow") < finished.index("ordered-fast")
        for label, ms in (("ordered-slow", 400), ("ordered-fast", 0)):
            assert results[label].output("OUTPUT0").data.tolist() == [[ms]]


async def test_preserve_ordering_does_not_hold_responses_behind_a_cancelled_request(tmp_path):
    repo = tmp_path / "models"
    write_sleepy_model(repo, "ordered", "preserve_ordering: true")
    async with sleepy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("first", sleep_request("ordered", 200))
        tracker.start("gone", sleep_request("ordered", 400))  # executing on the other instance
        await tracker.queued()
        tracker.start("after", sleep_request("ordered", 0))
        await tracker.queued()
        tracker.tasks["gone"].cancel()
        results = await asyncio.wait_for(tracker.wait(), 30)
        assert isinstance(results["gone"], asyncio.CancelledError)
        assert isinstance(results["after"], InferenceResponse)
        assert tracker.finished.index("first") < tracker.finished.index("after")


async def test_preserve_ordering_releases_held_responses_when_a_waiting_request_goes(tmp_path):
    repo = tmp_path / "models"
    write_sleepy_model(
        repo,
        "ordered",
        "preserve_ordering: true preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 300000",
        max_batch=4,
        count=1,
    )
    async with sleepy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy0", sleep_request("ordered", 100))
        tracker.start("busy1", sleep_request("ordered", 100))  # a preferred batch: runs now
        await tracker.queued()
        first = tracker.start("first", sleep_request("ordered", 0))
        waiting = tracker.start("waiting", sleep_request("ordered", 0, width=2))
        held = tracker.start("held", sleep_request("ordered", 0))
        # "first" and "held" make the next preferred batch; "waiting", older than "held" and
        # alone with its shape, then waits for the delay, holding "held" back
        await asyncio.wait_for(first, 30)
        assert not held.done()
        waiting.cancel()
        # released when the delay ends, though nothing else comes to finish a batch
        await asyncio.wait_for(held, 30)


async def test_a_request_of_another_shape_does_not_wait_behind_a_delayed_batch(tmp_path):
    repo = tmp_path / "models"
    write_sleepy_model(
        repo,
        "mixed",
        "preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 60000000",
        max_batch=4,
        count=1,
    )
    async with sleepy_server(repo) as server:
        tracker = Tracker(server)
        tracker.start("busy0", sleep_request("mixed", 100))
        tracker.start("busy1", sleep_request("mixed", 100))
        await tracker.queued()
        tracker.start("wide", sleep_request("mixed", 0, width=2))
        tracker.start("narrow0", sleep_request("mixed", 0))
        tracker.start("narrow1", sleep_request("mixed", 0))
        # "wide" goes alone at once instead of holding the others for its 60 s delay
        await asyncio.wait_for(tracker.wait(), 30)
        assert server.model("mixed").pool.instances[0].executions == [2, 1, 2]
        reasons = server.model("mixed").statistics.dispatch_reasons
        assert reasons == {"preferred_batch_size": 2, "incompatible_shape": 1}


# -- custom batch strategies ---------------------------------------------------------------------


def strategy_extra(limit: str | None) -> str:
    text = (
        "dynamic_batching { }\n"
        'parameters { key: "batch_strategy" value { string_value: "max_input_bytes" } }\n'
        + SLOW.format(ms=300)
    )
    if limit is not None:
        text += (
            f'\nparameters {{ key: "max_batch_input_bytes" value {{ string_value: "{limit}" }}}}'
        )
    return text


async def test_a_strategy_plugin_limits_batches_by_input_bytes(tmp_path):
    repo = tmp_path / "models"
    # each request: two INT32 inputs of 1x4 = 32 bytes; 64 bytes allow two per batch
    write_numpy_model(repo, "bytes", kind="add_sub", extra=strategy_extra("64"))
    async with sleepy_server(repo, ("strategy", strategy_plugin)) as server:
        tracker = Tracker(server)
        tracker.start("busy", request("bytes", 0))
        await tracker.queued()
        for i in range(5):
            tracker.start(f"r{i}", request("bytes", 1 + i))
        results = await tracker.wait()
        assert executions(server, "bytes") == [1, 2, 2, 1]
        for i in range(5):
            assert (results[f"r{i}"].output("OUTPUT0").data == 2 * (1 + i)).all()
        reasons = server.model("bytes").statistics.dispatch_reasons
        assert reasons["batch_strategy"] == 2


async def test_a_strategy_without_its_setting_fails_the_load_naming_it(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "nolimit", kind="add_sub", extra=strategy_extra(None))
    server = sleepy_server(repo, ("strategy", strategy_plugin))
    with pytest.raises(TritonError) as info:
        await server.start()
    assert "'nolimit'" in info.value.message
    assert "max_batch_input_bytes" in info.value.message


async def test_an_unknown_strategy_fails_the_load_naming_the_parameter(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "unknown", kind="add_sub", extra=strategy_extra("64"))
    server = numpy_server(repo)  # the strategy plugin is not registered here
    with pytest.raises(TritonError) as info:
        await server.start()
    assert "'batch_strategy'" in info.value.message
    assert "max_input_bytes" in info.value.message


# -- configuration -------------------------------------------------------------------------------

INPUTS = 'input [{name: "I" data_type: TYPE_FP32 dims: [1]}] max_batch_size: 4 '


@pytest.mark.parametrize(
    ("batching", "field"),
    [
        ("priority_levels: 2 default_priority_level: 3", "'default_priority_level'"),
        ("priority_levels: 2", "'default_priority_level'"),
        (
            "priority_levels: 2 default_priority_level: 1 "
            "priority_queue_policy { key: 3 value { } }",
            "'priority_queue_policy' key 3",
        ),
        ("priority_queue_policy { key: 1 value { } }", "needs 'priority_levels'"),
        (
            "preserve_ordering: true priority_levels: 2 default_priority_level: 1",
            "'preserve_ordering'",
        ),
        (
            "preserve_ordering: true default_queue_policy { timeout_action: DELAY "
            "default_timeout_microseconds: 100 }",
            "default_queue_policy 'timeout_action'",
        ),
        (
            "preserve_ordering: true priority_levels: 1 default_priority_level: 1 "
            "priority_queue_policy { key: 1 value { timeout_action: DELAY "
            "allow_timeout_override: true } }",
            "priority_queue_policy[1] 'timeout_action'",
        ),
        ("preferred_batch_size: [ 0 ]", "'preferred_batch_size'"),
    ],
)
def test_invalid_dynamic_batching_names_model_and_field(batching, field):
    config = parse_config_text(f'name: "bad" {INPUTS} dynamic_batching {{ {batching} }}', "test")
    normalize(config)
    with pytest.raises(TritonError) as info:
        validate(config)
    assert info.value.status is Status.INVALID_ARG
    assert field in info.value.message
    assert "'bad'" in info.value.message


def test_valid_queue_policies_pass():
    config = parse_config_text(
        f'name: "good" {INPUTS} dynamic_batching {{ priority_levels: 2 default_priority_level: 2 '
        "preferred_batch_size: [ 2, 4 ] max_queue_delay_microseconds: 100 "
        "default_queue_policy { max_queue_size: 8 default_timeout_microseconds: 1000 "
        "timeout_action: DELAY allow_timeout_override: true } "
        "priority_queue_policy { key: 1 value { max_queue_size: 2 } } }",
        "test",
    )
    normalize(config)
    validate(config)


async def test_an_invalid_batching_config_fails_only_that_model(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "fine", extra="dynamic_batching { }")
    write_numpy_model(
        repo,
        "broken",
        extra="dynamic_batching { preserve_ordering: true priority_levels: 2 "
        "default_priority_level: 1 }",
    )
    async with numpy_server(repo, exit_on_error=False) as server:
        index = {entry.name: entry for entry in server.repository_index()}
        assert index["fine"].state == "READY"
        assert index["broken"].state == "UNAVAILABLE"
        assert "'preserve_ordering'" in index["broken"].reason
