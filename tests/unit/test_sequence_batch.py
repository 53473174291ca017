"""The sequence batcher, driven in-process with the numpy test backend's stateful kinds.

Ordering is forced with executions that take long enough (hundreds of ms) for the requests
of a test to be queued behind the one executing; assertions are on results, orders and
counts, never on timings.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.support import numpy_server
from triton_core import InferenceRequest, RequestedOutput, RequestFlag, Tensor, TritonError
from triton_core.config import normalize, parse_config_text, validate

START = RequestFlag.SEQUENCE_START
END = RequestFlag.SEQUENCE_END

CONTROLS = {
    "START": '{ name: "START" control { kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } }',
    "END": '{ name: "END" control { kind: CONTROL_SEQUENCE_END bool_false_true: [false, true] } }',
    "READY": '{ name: "READY" control { kind: CONTROL_SEQUENCE_READY fp32_false_true: [0, 1] } }',
    "CORRID": '{ name: "CORRID" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } }',
    "CORRID_STRING": (
        '{ name: "CORRID" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } }'
    ),
}

STATE = """state [ {{
  input_name: "INPUT_STATE" output_name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ {dims} ]
  {initial}
}} ]"""


def write_sequence_model(
    repo: Path,
    name: str,
    *,
    kind: str = "accumulate",
    max_batch_size: int = 4,
    controls: tuple[str, ...] = ("START", "END", "READY", "CORRID"),
    strategy: str = "direct { }",
    instances: int = 1,
    idle_us: int = 0,
    sleep_ms: int = 0,
    dims: str = "4",
    sequence_extra: str = "",
    extra: str = "",
) -> Path:
    """A numpy-backend model with ``sequence_batching``: INPUT0 -> OUTPUT0 (INT32)."""
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    (model_dir / "1" / "model.npy").write_bytes(b"")
    control_text = ", ".join(CONTROLS[control] for control in controls)
    (model_dir / "config.pbtxt").write_text(
        f"""
backend: "numpy"
max_batch_size: {max_batch_size}
parameters {{ key: "kind" value {{ string_value: "{kind}" }} }}
parameters {{ key: "sleep_ms" value {{ string_value: "{sleep_ms}" }} }}
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ {dims} ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  {strategy}
  control_input [ {control_text} ]
  {sequence_extra}
}}
{extra}
"""
    )
    return model_dir


def seq(
    model: str,
    correlation_id: int | str,
    value: int,
    flags: RequestFlag = RequestFlag.NONE,
    *,
    rows: int = 1,
    width: int = 4,
    outputs: list[str] | None = None,
) -> InferenceRequest:
    data = np.full((rows, width), value, dtype=np.int32)
    return InferenceRequest(
        model,
        {"INPUT0": Tensor("INPUT0", "INT32", data)},
        correlation_id=correlation_id,
        flags=flags,
        outputs=None if outputs is None else [RequestedOutput(name) for name in outputs],
    )


def total(response) -> int:  # type: ignore[no-untyped-def]
    return int(response.output("OUTPUT0").data.flat[0])


def instance(server, model: str, index: int = 0):  # type: ignore[no-untyped-def]
    return server.model(model).pool.instances[index]


def pending(server, model: str) -> int:  # type: ignore[no-untyped-def]
    return server.model(model).scheduler.pending_count


async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"gave up waiting for {what}")


@contextlib.contextmanager
def held(model_instance):  # type: ignore[no-untyped-def]
    """Executions of a numpy instance wait until the yielded event is set (or the block ends)."""
    gate = threading.Event()
    execute = model_instance.execute

    def wait_then_execute(requests):  # type: ignore[no-untyped-def]
        gate.wait(60)
        return execute(requests)

    model_instance.execute = wait_then_execute
    try:
        yield gate
    finally:
        gate.set()
        model_instance.execute = execute


async def run_sequence(server, model: str, correlation_id, values):  # type: ignore[no-untyped-def]
    results = []
    for index, value in enumerate(values):
        flags = RequestFlag.NONE
        if index == 0:
            flags |= START
        if index == len(values) - 1:
            flags |= END
        results.append(total(await server.infer(seq(model, correlation_id, value, flags))))
    return results


# -- basics --------------------------------------------------------------------------------------


async def test_sequences_accumulate_in_order_with_integer_ids(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "acc")
    async with numpy_server(repo) as server:
        first, second = await asyncio.gather(
            run_sequence(server, "acc", 11, [1, 2, 3, 4]),
            run_sequence(server, "acc", 12, [10, 20, 30]),
        )
        assert first == [1, 3, 6, 10]
        assert second == [10, 30, 60]
        # END dropped each sequence's sum in the model, and freed both slots
        assert instance(server, "acc").sums == {}
        assert server.model("acc").scheduler.pending_count == 0


async def test_string_correlation_ids_reach_a_string_corrid_control(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "acc", controls=("START", "END", "CORRID_STRING"))
    async with numpy_server(repo) as server:
        results = await asyncio.gather(
            run_sequence(server, "acc", "session-a", [1, 1, 1]),
            run_sequence(server, "acc", "session-b", [5, 5]),
        )
        assert results == [[1, 2, 3], [5, 10]]
        seen = {entry[1] for batch in instance(server, "acc").sequence_log for entry in batch}
        assert seen == {"session-a", "session-b"}


async def test_non_batching_model_gets_unbatched_controls(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "nobatch", max_batch_size=0, dims="4")
    async with numpy_server(repo) as server:
        request = InferenceRequest(
            "nobatch",
            {"INPUT0": Tensor("INPUT0", "INT32", np.full(4, 2, dtype=np.int32))},
            correlation_id=3,
            flags=START,
        )
        response = await server.infer(request)
        np.testing.assert_array_equal(response.output("OUTPUT0").data, [2, 2, 2, 2])
        assert request.inputs["START"].data.shape == (1,)
        assert request.inputs["CORRID"].data.dtype == np.uint64


async def test_control_tensors_have_the_configured_types_and_shapes(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "acc")
    async with numpy_server(repo) as server:
        request = seq("acc", 2**64 - 1, 1, START | END)
        await server.infer(request)
        inputs = request.inputs
        assert (inputs["START"].datatype, inputs["START"].data.tolist()) == ("INT32", [[1]])
        assert (inputs["END"].datatype, inputs["END"].data.tolist()) == ("BOOL", [[True]])
        assert (inputs["READY"].datatype, inputs["READY"].data.tolist()) == ("FP32", [[1.0]])
        assert (inputs["CORRID"].datatype, inputs["CORRID"].data.tolist()) == (
            "UINT64",
            [[2**64 - 1]],
        )


# -- Triton's errors -----------------------------------------------------------------------------


async def test_errors_match_triton(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "acc")
    async with numpy_server(repo) as server:
        with pytest.raises(TritonError) as raised:
            await server.infer(seq("acc", 5, 1))
        assert raised.value.message == (
            "inference request for sequence 5 to model 'acc' must specify the START flag on the "
            "first request of the sequence"
        )
        with pytest.raises(TritonError, match="batch-size 1 due to requirements of sequence"):
            await server.infer(seq("acc", 5, 1, START, rows=2))
        with pytest.raises(TritonError, match="non-zero or non-empty correlation ID"):
            await server.infer(seq("acc", 0, 1, START))
        with pytest.raises(TritonError, match=r"has a string correlation ID.*TYPE_UINT64"):
            await server.infer(seq("acc", "text", 1, START))
        # after END, the id needs START again
        await server.infer(seq("acc", 6, 1, START))
        await server.infer(seq("acc", 6, 1, END))
        with pytest.raises(TritonError, match="sequence 6 to model 'acc' must specify the START"):
            await server.infer(seq("acc", 6, 1))
        failures = server.model("acc").statistics.failures
        assert failures["OTHER"] == 5


async def test_integer_id_to_a_string_corrid_model_is_refused(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "acc", controls=("START", "CORRID_STRING"))
    async with numpy_server(repo) as server:
        with pytest.raises(TritonError, match=r"has an integer correlation ID.*TYPE_STRING"):
            await server.infer(seq("acc", 7, 1, START))


async def test_a_model_without_corrid_takes_both_id_kinds(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "acc", controls=("START", "END"))
    async with numpy_server(repo) as server:
        assert await run_sequence(server, "acc", "x", [1, 2]) == [1, 3]
        assert await run_sequence(server, "acc", 9, [4, 4]) == [4, 8]


# -- direct strategy -----------------------------------------------------------------------------


async def _fill_slots_then_batch(server, model: str) -> None:  # type: ignore[no-untyped-def]
    """Start sequences 1, 2, 3 (slots 0, 1, 2), then run 1 and 3 together while 2 executes."""
    for correlation_id in (1, 2, 3):
        await server.infer(seq(model, correlation_id, correlation_id, START))
    with held(instance(server, model)) as gate:
        blocker = asyncio.ensure_future(server.infer(seq(model, 2, 100)))
        await until(lambda: pending(server, model) == 0, "the blocker to execute")
        together = asyncio.gather(server.infer(seq(model, 1, 10)), server.infer(seq(model, 3, 30)))
        await until(lambda: pending(server, model) == 2, "both requests to queue")
        gate.set()
        (first, third), second = await together, await blocker
    assert (total(first), total(second), total(third)) == (11, 102, 33)


async def test_direct_keeps_slot_positions_with_not_ready_filler(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "direct")
    async with numpy_server(repo) as server:
        await _fill_slots_then_batch(server, "direct")
        log = instance(server, "direct").sequence_log
        # position = slot; slot 1 is idle in the last batch, so it gets READY false, CORRID 0
        assert log[-1] == [
            (0, 1, True, False, False),
            (1, 0, False, False, False),
            (2, 3, True, False, False),
        ]
        statistics = server.model("direct").statistics
        assert statistics.inference_count == 6  # the filler is not an inference
        assert statistics.execution_count == 5
        assert statistics.dispatch_reasons == {"instance_free": 5}


async def test_direct_without_ready_control_sends_no_filler(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "direct", controls=("START", "END", "CORRID"))
    async with numpy_server(repo) as server:
        await _fill_slots_then_batch(server, "direct")
        log = instance(server, "direct").sequence_log
        assert [(corrid, ready) for _, corrid, ready, _, _ in log[-1]] == [(1, True), (3, True)]


async def test_direct_batches_the_longest_waiting_shape_first(tmp_path):
    # A request of another shape in a higher slot must not wait behind lower slots' requests.
    repo = tmp_path / "models"
    write_sequence_model(repo, "shapes", dims="-1")
    async with numpy_server(repo) as server:
        for correlation_id in (1, 3):  # slots 0 and 1
            await server.infer(seq("shapes", correlation_id, 1, START))
        with held(instance(server, "shapes")) as gate:
            blocker = asyncio.ensure_future(server.infer(seq("shapes", 3, 100)))
            await until(lambda: pending(server, "shapes") == 0, "the blocker to execute")
            wide = asyncio.ensure_future(server.infer(seq("shapes", 2, 7, START, width=8)))
            await until(lambda: pending(server, "shapes") == 1, "the wide request to queue")
            narrow = asyncio.ensure_future(server.infer(seq("shapes", 1, 10)))
            await until(lambda: pending(server, "shapes") == 2, "the narrow request to queue")
            gate.set()
            await blocker
            assert total(await wide) == 7 and total(await narrow) == 11
        log = instance(server, "shapes").sequence_log
        # the wide request (slot 2) ran alone first, padded to its slot; then the narrow one
        assert [entry[1] for entry in log[-2] if entry[2]] == [2]
        assert [entry[1] for entry in log[-1] if entry[2]] == [1]
        assert log[-2][2][:2] == (2, 2)


async def test_direct_slots_keep_sequences_on_their_instance(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "spread", max_batch_size=2, instances=2, sleep_ms=20)
    async with numpy_server(repo) as server:
        runs = [run_sequence(server, "spread", cid, [cid] * 4) for cid in range(1, 9)]
        results = await asyncio.gather(*runs)
        assert results == [[cid * k for k in range(1, 5)] for cid in range(1, 9)]
        ids = [
            {
                entry[1]
                for batch in instance(server, "spread", index).sequence_log
                for entry in batch
            }
            for index in (0, 1)
        ]
        assert ids[0] - {0} and ids[1] - {0}  # both instances served sequences
        assert not (ids[0] & ids[1]) - {0}  # and no sequence ran on both


async def test_sequences_beyond_the_slots_wait_in_the_backlog(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "one", max_batch_size=1, idle_us=60_000_000)
    async with numpy_server(repo) as server:
        await server.infer(seq("one", 1, 1, START))
        waiting = asyncio.ensure_future(server.infer(seq("one", 2, 5, START)))
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert not waiting.done()  # the only slot belongs to sequence 1
        assert server.model("one").scheduler.pending_count == 1
        assert total(await server.infer(seq("one", 1, 1, END))) == 2
        assert total(await asyncio.wait_for(waiting, 30)) == 5


async def test_direct_delay_waits_for_slot_utilization(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(
        repo,
        "delayed",
        strategy="direct { max_queue_delay_microseconds: 5000000 minimum_slot_utilization: 0.5 }",
    )
    async with numpy_server(repo) as server:
        # two of four slots ready reaches the utilization at once: no wait for the delay
        results = await asyncio.gather(
            server.infer(seq("delayed", 1, 1, START)), server.infer(seq("delayed", 2, 2, START))
        )
        assert [total(r) for r in results] == [1, 2]
        assert instance(server, "delayed").executions == [2]
        assert server.model("delayed").statistics.dispatch_reasons == {
            "minimum_slot_utilization": 1
        }


# -- oldest strategy -----------------------------------------------------------------------------


async def test_oldest_batches_at_most_one_request_per_sequence(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(
        repo,
        "oldest",
        controls=("START", "END", "CORRID"),
        strategy="oldest { max_candidate_sequences: 4 }",
    )
    async with numpy_server(repo) as server:
        with held(instance(server, "oldest")) as gate:
            runs = [run_sequence(server, "oldest", cid, [cid] * 5) for cid in range(1, 7)]
            results = asyncio.gather(*runs)
            # sequence 1 executes, held; 2-4 wait in slots, 5-6 in the backlog
            await until(lambda: pending(server, "oldest") == 5, "the sequences to queue")
            gate.set()
            assert await results == [[cid * k for k in range(1, 6)] for cid in range(1, 7)]
        log = instance(server, "oldest").sequence_log
        assert all(len({entry[1] for entry in batch}) == len(batch) for batch in log)
        assert [entry[1] for entry in log[1]] == [2, 3, 4]  # the oldest first
        assert sum(len(batch) for batch in log) == 30  # no filler with oldest


async def test_oldest_candidates_bound_live_sequences_per_instance(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(
        repo,
        "oldest",
        controls=("START", "END", "CORRID"),
        strategy="oldest { max_candidate_sequences: 1 }",
        idle_us=60_000_000,
    )
    async with numpy_server(repo) as server:
        await server.infer(seq("oldest", 1, 1, START))
        waiting = asyncio.ensure_future(server.infer(seq("oldest", 2, 2, START)))
        for _ in range(20):
            await asyncio.sleep(0.01)
        assert not waiting.done()
        await server.infer(seq("oldest", 1, 1, END))
        assert total(await asyncio.wait_for(waiting, 30)) == 2


async def test_oldest_preferred_batch_size_and_delay(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(
        repo,
        "oldest",
        controls=("START", "END", "CORRID"),
        strategy="oldest { max_candidate_sequences: 4 preferred_batch_size: [ 3 ] "
        "max_queue_delay_microseconds: 5000000 }",
    )
    async with numpy_server(repo) as server:
        results = await asyncio.gather(
            *(server.infer(seq("oldest", cid, cid, START)) for cid in (1, 2, 3))
        )
        assert [total(r) for r in results] == [1, 2, 3]
        assert instance(server, "oldest").executions == [3]
        assert server.model("oldest").statistics.dispatch_reasons == {"preferred_batch_size": 1}


# -- idle sequences ------------------------------------------------------------------------------


async def test_idle_sequence_is_released_and_needs_start_again(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "idle", max_batch_size=1, idle_us=200_000)
    async with numpy_server(repo) as server:
        await server.infer(seq("idle", 1, 1, START))
        # the backlogged sequence gets the slot once sequence 1 has been idle for 0.2 s
        assert total(await asyncio.wait_for(server.infer(seq("idle", 2, 7, START)), 30)) == 7
        with pytest.raises(TritonError, match="sequence 1 to model 'idle' must specify the START"):
            await server.infer(seq("idle", 1, 1))


async def test_a_running_request_keeps_its_sequence_alive(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "slow", idle_us=250_000, sleep_ms=600)
    async with numpy_server(repo) as server:
        # each request runs longer than the idle limit; idle time counts from completion
        assert await run_sequence(server, "slow", 1, [1, 2, 3]) == [1, 3, 6]


# -- implicit state ------------------------------------------------------------------------------


async def test_implicit_state_carries_between_requests_and_stays_internal(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(
        repo,
        "state",
        kind="state_add",
        controls=("START",),
        sequence_extra=STATE.format(dims="4", initial=""),
    )
    async with numpy_server(repo) as server:
        results = await asyncio.gather(
            run_sequence(server, "state", 1, [1, 2, 3]),
            run_sequence(server, "state", 2, [5, 5, 5, 5]),
        )
        assert results == [[1, 3, 6], [5, 10, 15, 20]]
        response = await server.infer(seq("state", 3, 4, START, outputs=["OUTPUT0"]))
        assert [t.name for t in response.outputs] == ["OUTPUT0"]
        response = await server.infer(seq("state", 3, 4))
        assert [t.name for t in response.outputs] == ["OUTPUT0"]
        assert total(response) == 8


async def test_listed_state_output_is_returned_when_asked_for(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(
        repo,
        "state",
        kind="state_add",
        controls=("START",),
        dims="-1",
        sequence_extra=STATE.format(dims="-1", initial=""),
        extra='output [ { name: "OUTPUT_STATE" data_type: TYPE_INT32 dims: [ -1 ] } ]',
    )
    async with numpy_server(repo) as server:
        # a variable state dim starts as 1 element, then takes the shape the model returns
        response = await server.infer(seq("state", 1, 2, START, width=1))
        assert sorted(t.name for t in response.outputs) == ["OUTPUT0", "OUTPUT_STATE"]
        response = await server.infer(seq("state", 1, 3, outputs=["OUTPUT_STATE"], width=1))
        assert [t.name for t in response.outputs] == ["OUTPUT_STATE"]
        assert response.output("OUTPUT_STATE").data.tolist() == [[5]]


async def test_initial_state_from_zero_data_and_from_a_file(tmp_path):
    repo = tmp_path / "models"
    zero = 'initial_state { data_type: TYPE_INT32 dims: [ 4 ] zero_data: true name: "zeros" }'
    write_sequence_model(
        repo,
        "zeros",
        kind="state_add",
        controls=(),
        sequence_extra=STATE.format(dims="-1", initial=zero),
    )
    from_file = 'initial_state { data_type: TYPE_INT32 dims: [ 4 ] data_file: "seed" name: "s" }'
    model_dir = write_sequence_model(
        repo,
        "seeded",
        kind="state_add",
        controls=(),
        sequence_extra=STATE.format(dims="4", initial=from_file),
    )
    (model_dir / "initial_state").mkdir()
    (model_dir / "initial_state" / "seed").write_bytes(np.arange(4, dtype="<i4").tobytes())
    async with numpy_server(repo) as server:
        response = await server.infer(seq("zeros", 1, 3, START))
        assert response.output("OUTPUT0").data.tolist() == [[3, 3, 3, 3]]
        response = await server.infer(seq("seeded", 1, 10, START))
        assert response.output("OUTPUT0").data.tolist() == [[10, 11, 12, 13]]
        response = await server.infer(seq("seeded", 1, 1, START))  # START starts over
        assert response.output("OUTPUT0").data.tolist() == [[1, 2, 3, 4]]


async def test_a_backend_without_state_support_fails_the_request_clearly(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(
        repo,
        "nostate",
        kind="accumulate",
        controls=("START",),
        sequence_extra=STATE.format(dims="4", initial=""),
    )
    async with numpy_server(repo) as server:
        with pytest.raises(TritonError, match="did not return output 'OUTPUT_STATE'"):
            await server.infer(seq("nostate", 1, 1, START))


# -- shutdown ------------------------------------------------------------------------------------


async def test_stop_finishes_backlogged_requests(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "one", max_batch_size=1, idle_us=600_000_000)
    server = numpy_server(repo)
    await server.start()
    try:
        await server.infer(seq("one", 1, 1, START))
        waiting = asyncio.ensure_future(server.infer(seq("one", 2, 5, START)))
        await asyncio.sleep(0.05)
        assert not waiting.done()
    finally:
        # sequence 1 is idle: stopping releases its slot, so sequence 2 still runs
        await asyncio.wait_for(server.stop(grace_seconds=0.05), 60)
    assert total(await waiting) == 5


# -- config validation ---------------------------------------------------------------------------


def check(text: str, max_batch_size: int = 4) -> None:
    config = parse_config_text(
        f'name: "m"\nbackend: "numpy"\nmax_batch_size: {max_batch_size}\n'
        'input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] } ]\n' + text,
        "test",
    )
    normalize(config)
    validate(config)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'sequence_batching { control_input [ { name: "S" control { kind: '
            "CONTROL_SEQUENCE_START } } ] }",
            "control input 'S' (CONTROL_SEQUENCE_START) must specify exactly one of",
        ),
        (
            'sequence_batching { control_input [ { name: "S" control { kind: '
            "CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } } ] }",
            "'int32_false_true' must have exactly 2 entries",
        ),
        (
            'sequence_batching { control_input [ { name: "C" control { kind: '
            "CONTROL_SEQUENCE_CORRID data_type: TYPE_FP32 } } ] }",
            "'C' (CONTROL_SEQUENCE_CORRID) has 'data_type' TYPE_FP32",
        ),
        (
            'sequence_batching { control_input [ { name: "A" control { kind: '
            'CONTROL_SEQUENCE_START int32_false_true: [0, 1] } }, { name: "B" control { kind: '
            "CONTROL_SEQUENCE_START int32_false_true: [0, 1] } } ] }",
            "multiple CONTROL_SEQUENCE_START control inputs",
        ),
        (
            'sequence_batching { control_input [ { name: "INPUT0" control { kind: '
            "CONTROL_SEQUENCE_READY int32_false_true: [0, 1] } } ] }",
            "control input 'INPUT0' is also listed in 'input'",
        ),
        (
            "sequence_batching { oldest { preferred_batch_size: [ 8 ] } }",
            "oldest 'preferred_batch_size' 8 must be between 1 and max_batch_size 4",
        ),
        (
            "sequence_batching { oldest { max_candidate_sequences: -1 } }",
            "'max_candidate_sequences' must be non-negative",
        ),
        (
            "sequence_batching { direct { minimum_slot_utilization: 1.5 } }",
            "'minimum_slot_utilization' must be in [0.0, 1.0]",
        ),
        (
            'sequence_batching { state [ { input_name: "S" data_type: TYPE_INT32 dims: [1] } ] }',
            "every sequence_batching 'state' must have an 'input_name' and an 'output_name'",
        ),
        (
            'sequence_batching { state [ { input_name: "INPUT0" output_name: "O" data_type: '
            "TYPE_INT32 dims: [1] } ] }",
            "state 'INPUT0': 'input_name' is already used",
        ),
        (
            'sequence_batching { state [ { input_name: "S" output_name: "O" dims: [1] } ] }',
            "state 'S' must specify 'data_type'",
        ),
        (
            'sequence_batching { state [ { input_name: "S" output_name: "OUTPUT0" data_type: '
            "TYPE_FP32 dims: [4] } ] }",
            "output 'OUTPUT0' is listed in 'output' with data_type TYPE_INT32",
        ),
        (
            'sequence_batching { state [ { input_name: "S" output_name: "O" data_type: '
            "TYPE_INT32 dims: [-1] initial_state { data_type: TYPE_INT32 dims: [-1] "
            'zero_data: true name: "i" } } ] }',
            "'initial_state' dims [-1] must be fixed",
        ),
        (
            'sequence_batching { state [ { input_name: "S" output_name: "O" data_type: '
            'TYPE_INT32 dims: [2] initial_state { data_type: TYPE_INT32 dims: [2] name: "i" '
            "} } ] }",
            "'initial_state' must set 'zero_data' or 'data_file'",
        ),
        (
            'sequence_batching { state [ { input_name: "S" output_name: "O" data_type: '
            "TYPE_INT32 dims: [2] initial_state { data_type: TYPE_INT64 dims: [2] "
            'zero_data: true name: "i" } } ] }',
            "'initial_state' data_type TYPE_INT64 does not match",
        ),
        (
            "sequence_batching { }\nresponse_cache { enable: true }",
            "Response Cache does not currently support model m with sequence batching",
        ),
    ],
)
def test_invalid_sequence_configs_name_model_and_field(text: str, message: str) -> None:
    with pytest.raises(TritonError) as raised:
        check(text)
    assert message in raised.value.message
    assert "m" in raised.value.message


def test_valid_sequence_config_passes() -> None:
    check(
        "sequence_batching { oldest { max_candidate_sequences: 4 } control_input [ "
        + ", ".join(CONTROLS[name] for name in ("START", "END", "READY", "CORRID"))
        + ' ] state [ { input_name: "S" output_name: "O" data_type: TYPE_INT32 dims: [ -1 ] '
        'initial_state { data_type: TYPE_INT32 dims: [ 3 ] zero_data: true name: "z" } } ] }'
    )


async def test_a_bad_sequence_config_fails_the_load_with_the_field(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "bad", strategy="oldest { preferred_batch_size: [ 9 ] }")
    write_sequence_model(
        repo,
        "missing_file",
        kind="state_add",
        controls=(),
        sequence_extra=STATE.format(
            dims="4",
            initial='initial_state { data_type: TYPE_INT32 dims: [ 4 ] data_file: "../x" '
            'name: "s" }',
        ),
    )
    server = numpy_server(repo, exit_on_error=False)
    async with server:
        index = {entry.name: entry for entry in server.repository_index()}
        assert "'preferred_batch_size' 9" in index["bad"].reason
        assert "outside the model's 'initial_state' folder" in index["missing_file"].reason


# -- iterative sequences -----------------------------------------------------------------------


def runs(server, model: str, wanted: int, correlation_id=0, flags=RequestFlag.NONE):  # type: ignore[no-untyped-def]
    return server.infer(seq(model, correlation_id, wanted, flags))


def iterating_server(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A server with ``iter``: the numpy ``iterate`` kind, iterative, 50 ms per run."""
    repo = tmp_path / "models"
    write_sequence_model(
        repo,
        "iter",
        kind="iterate",
        controls=("START", "CORRID"),
        sequence_extra="iterative_sequence: true",
        sleep_ms=50,
    )
    return numpy_server(repo)


async def test_iterative_requests_run_again_in_their_slot_batched_with_new_ones(tmp_path):
    async with iterating_server(tmp_path) as server:
        # no correlation IDs: each request gets its own sequence (and slot)
        first = asyncio.ensure_future(runs(server, "iter", 4))
        await until(lambda: instance(server, "iter").sequence_log, "the first run")
        later = [asyncio.ensure_future(runs(server, "iter", wanted)) for wanted in (2, 3)]
        results = await asyncio.gather(first, *later)
        assert [total(response) for response in results] == [4, 2, 3]
        log = instance(server, "iter").sequence_log
        by_corrid: dict[int, list[bool]] = {}
        for batch in log:
            for _, corrid, _, start, _ in batch:
                by_corrid.setdefault(corrid, []).append(start)
        # START on the first run only, and as many runs as each asked for
        assert sorted(by_corrid.values(), key=len) == [
            [True, False],
            [True, False, False],
            [True, False, False, False],
        ]
        assert 0 not in by_corrid
        # rescheduled requests shared batches with the ones that came later
        assert max(len(batch) for batch in log) > 1
        statistics = server.model("iter").statistics
        assert statistics.success.count == 3 and statistics.execution_count == len(log)
        assert pending(server, "iter") == 0


async def test_an_iterative_request_with_its_own_id_and_one_queued_behind_it(tmp_path):
    async with iterating_server(tmp_path) as server:
        # the second START for ID 9 joins the live sequence (Triton's conflict warning): the
        # two take turns in its slot (the model sees one sequence) and neither is stranded
        # when the other ends
        calls = [runs(server, "iter", 3, 9, START), runs(server, "iter", 2, 9, START)]
        results = await asyncio.wait_for(asyncio.gather(*calls), 60)
        assert all(total(response) >= 2 for response in results)
        assert pending(server, "iter") == 0
        assert total(await runs(server, "iter", 2, 9, START)) == 2  # the ID is free again


async def test_rescheduling_without_iterative_sequence_fails_with_tritons_message(tmp_path):
    repo = tmp_path / "models"
    write_sequence_model(repo, "plain", kind="iterate", controls=("START", "CORRID"))
    async with numpy_server(repo) as server:
        with pytest.raises(TritonError) as info:
            await runs(server, "plain", 2, 5, START | END)
        assert info.value.message == (
            "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model "
            "is not configured to handle such a flag."
        )
        assert total(await runs(server, "plain", 1, 6, START | END)) == 1


@pytest.mark.parametrize("preserve", [True, False])
async def test_oldest_preserve_ordering_answers_in_arrival_order(tmp_path, preserve):
    """Sequence 1 runs on one instance, held; sequence 2 finishes on the other first: with
    preserve_ordering its answer waits for sequence 1's, without it goes out at once."""
    repo = tmp_path / "models"
    ordering = "preserve_ordering: true" if preserve else ""
    write_sequence_model(
        repo,
        "ordered",
        controls=("START", "END", "CORRID"),
        strategy=f"oldest {{ max_candidate_sequences: 1 {ordering} }}",
        instances=2,
    )
    async with numpy_server(repo) as server:
        instances = server.model("ordered").pool.instances
        gates = [threading.Event(), threading.Event()]
        for model_instance, gate in zip(instances, gates, strict=True):
            model_instance.gate = gate
        answered: list[int] = []
        try:
            first = asyncio.ensure_future(server.infer(seq("ordered", 1, 1, START | END)))
            first.add_done_callback(lambda _: answered.append(1))
            await until(lambda: any(i.entered.is_set() for i in instances), "sequence 1 to run")
            held = next(index for index, i in enumerate(instances) if i.entered.is_set())
            other = 1 - held
            second = asyncio.ensure_future(server.infer(seq("ordered", 2, 2, START | END)))
            second.add_done_callback(lambda _: answered.append(2))
            await until(lambda: instances[other].entered.is_set(), "sequence 2 to run")
            gates[other].set()
            statistics = server.model("ordered").statistics
            await until(lambda: statistics.execution_count == 1, "sequence 2's batch to finish")
            if preserve:
                await asyncio.sleep(0.3)  # time enough for an answer to get through
                assert answered == []
            else:
                await until(lambda: answered == [2], "sequence 2's answer")
            gates[held].set()
            assert total(await asyncio.wait_for(first, 30)) == 1
            assert total(await asyncio.wait_for(second, 30)) == 2
        finally:
            for gate in gates:
                gate.set()
        assert answered == ([1, 2] if preserve else [2, 1])
