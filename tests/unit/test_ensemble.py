"""Ensembles, driven in-process with the numpy test backend."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from tests.plugins import numpy_backend
from tests.support import numpy_server, write_numpy_model
from triton_core import (
    Backend,
    BackendModel,
    InferenceRequest,
    InferenceResponse,
    ModelInstance,
    RequestedOutput,
    RequestFlag,
    Status,
    Tensor,
    TritonError,
    hookimpl,
)
from triton_core.config import parse_config_text
from triton_core.plugins.manager import create_plugin_manager
from triton_core.repository.ensembles import ensemble_load_order, validate_ensemble_config
from triton_core.server.core import Server, ServerOptions

Step = tuple[str, dict[str, str], dict[str, str]]


def write_ensemble(
    repo: Path,
    name: str,
    steps: list[Step],
    *,
    inputs: tuple[str, ...] = ("A", "B"),
    outputs: tuple[str, ...] = ("OUT0", "OUT1"),
    max_batch_size: int = 8,
    dims: str = "4",
    datatype: str = "TYPE_INT32",
    extra: str = "",
    version: int = -1,
) -> Path:
    """An ensemble config; each step is (model, input_map, output_map)."""
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True, exist_ok=True)

    def tensors(kind: str, names: tuple[str, ...]) -> str:
        return "\n".join(
            f'{kind} [{{ name: "{n}" data_type: {datatype} dims: [ {dims} ] }}]' for n in names
        )

    def mapping(kind: str, pairs: dict[str, str]) -> str:
        return " ".join(f'{kind} {{ key: "{k}" value: "{v}" }}' for k, v in pairs.items())

    step_text = "\n".join(
        f'step [{{ model_name: "{model}" model_version: {version} '
        f"{mapping('input_map', ins)} {mapping('output_map', outs)} }}]"
        for model, ins, outs in steps
    )
    (model_dir / "config.pbtxt").write_text(
        f'platform: "ensemble"\nmax_batch_size: {max_batch_size}\n'
        f"{tensors('input', inputs)}\n{tensors('output', outputs)}\n"
        f"ensemble_scheduling {{\n{step_text}\n{extra}\n}}\n"
    )
    return model_dir


def both(a: str, b: str) -> dict[str, str]:
    return {"INPUT0": a, "INPUT1": b}


def outs(a: str, b: str) -> dict[str, str]:
    return {"OUTPUT0": a, "OUTPUT1": b}


#: A -> (left, right in parallel) -> last: OUT0 = 3A + B, OUT1 = A - B
DAG_STEPS: list[Step] = [
    ("first", both("A", "B"), outs("sum", "diff")),
    ("left", both("sum", "diff"), outs("twice_a", "twice_b")),
    ("right", both("sum", "diff"), outs("sum_copy", "diff_copy")),
    ("last", both("twice_a", "sum_copy"), outs("OUT0", "OUT1")),
]


def write_dag(repo: Path, *, sleep_ms: int = 0, name: str = "dag") -> None:
    slow = f'parameters {{ key: "sleep_ms" value {{ string_value: "{sleep_ms}" }} }}'
    for model, kind in (("first", "add_sub"), ("left", "add_sub"), ("last", "add_sub")):
        write_numpy_model(repo, model, kind=kind, extra=slow if model == "left" else "")
    write_numpy_model(repo, "right", kind="identity", extra=slow)
    # twice_b and diff_copy feed a final identity so that every ensemble tensor is used
    steps = [
        *DAG_STEPS,
        ("sink", both("twice_b", "diff_copy"), outs("TWICE_B", "DIFF")),
    ]
    write_numpy_model(repo, "sink", kind="identity")
    write_ensemble(repo, name, steps, outputs=("OUT0", "OUT1", "TWICE_B", "DIFF"))


def ints(value: list[list[int]]) -> np.ndarray:
    return np.array(value, dtype=np.int32)


def request(model: str, a: np.ndarray, b: np.ndarray, **kwargs) -> InferenceRequest:
    inputs = {"A": Tensor("A", "INT32", a), "B": Tensor("B", "INT32", b)}
    return InferenceRequest(model, inputs, **kwargs)


@pytest.fixture
async def dag_server(tmp_path):
    repo = tmp_path / "models"
    write_dag(repo)
    async with numpy_server(repo) as server:
        yield server


# -- running -----------------------------------------------------------------------------------


async def test_a_dag_with_a_parallel_branch_computes_every_output(dag_server):
    a = ints([[1, 2, 3, 4], [10, 20, 30, 40]])
    b = ints([[4, 3, 2, 1], [1, 1, 1, 1]])
    response = await dag_server.infer(request("dag", a, b, id="r1"))
    assert (response.model_name, response.model_version, response.id) == ("dag", 1, "r1")
    assert [t.name for t in response.outputs] == ["OUT0", "OUT1", "TWICE_B", "DIFF"]
    np.testing.assert_array_equal(response.output("OUT0").data, 3 * a + b)
    np.testing.assert_array_equal(response.output("OUT1").data, a - b)
    np.testing.assert_array_equal(response.output("TWICE_B").data, 2 * b)
    np.testing.assert_array_equal(response.output("DIFF").data, a - b)
    assert dag_server.model("dag").platform == "ensemble"
    assert dag_server.model_metadata("dag").inputs[0].shape == (-1, 4)


async def test_only_the_requested_outputs_come_back(dag_server):
    a, b = ints([[1, 1, 1, 1]]), ints([[2, 2, 2, 2]])
    response = await dag_server.infer(request("dag", a, b, outputs=[RequestedOutput("OUT1")]))
    assert [t.name for t in response.outputs] == ["OUT1"]
    np.testing.assert_array_equal(response.output("OUT1").data, a - b)


async def test_independent_steps_run_at_the_same_time(tmp_path):
    repo = tmp_path / "models"
    write_dag(repo, sleep_ms=1000)
    async with numpy_server(repo) as server:
        left, right = server.model("left").pool, server.model("right").pool
        call = asyncio.ensure_future(server.infer(request("dag", ints([[1] * 4]), ints([[2] * 4]))))
        overlapped = False
        for _ in range(500):  # bounded: at most ~5 s
            if left.idle_count == 0 and right.idle_count == 0:
                overlapped = True
                break
            if call.done():
                break
            await asyncio.sleep(0.01)
        response = await call
        assert overlapped, "the two branches never executed at the same time"
        np.testing.assert_array_equal(response.output("OUT0").data, ints([[5] * 4]))


async def test_tensors_pass_between_steps_without_copies(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "copy1", kind="identity")
    write_numpy_model(repo, "copy2", kind="identity")
    write_ensemble(
        repo,
        "chain",
        [
            ("copy1", both("A", "B"), outs("x", "y")),
            ("copy2", both("x", "y"), outs("OUT0", "OUT1")),
        ],
    )
    async with numpy_server(repo) as server:
        a, b = ints([[1, 2, 3, 4]]), ints([[5, 6, 7, 8]])
        response = await server.infer(request("chain", a, b))
        assert response.output("OUT0").data is a
        assert response.output("OUT1").data is b


async def test_an_ensemble_can_use_an_ensemble(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "add_sub", kind="add_sub")
    # the inner ensemble's name sorts after the outer one: load order must not be by name
    write_ensemble(repo, "z_inner", [("add_sub", both("A", "B"), outs("OUT0", "OUT1"))])
    write_ensemble(
        repo,
        "a_outer",
        [
            ("z_inner", {"A": "A", "B": "B"}, {"OUT0": "s", "OUT1": "d"}),
            ("add_sub", both("s", "d"), outs("OUT0", "OUT1")),
        ],
    )
    async with numpy_server(repo) as server:
        a, b = ints([[3, 3, 3, 3]]), ints([[1, 1, 1, 1]])
        response = await server.infer(request("a_outer", a, b))
        np.testing.assert_array_equal(response.output("OUT0").data, 2 * a)
        np.testing.assert_array_equal(response.output("OUT1").data, 2 * b)
        assert server.is_ready()


async def test_a_failing_step_fails_the_request_naming_the_step_model(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "add_sub", kind="add_sub")
    write_numpy_model(repo, "broken", kind="fail")
    write_ensemble(
        repo,
        "fragile",
        [
            ("add_sub", both("A", "B"), outs("s", "d")),
            ("broken", both("s", "d"), outs("OUT0", "OUT1")),
        ],
    )
    async with numpy_server(repo) as server:
        with pytest.raises(TritonError) as info:
            await server.infer(request("fragile", ints([[1] * 4]), ints([[1] * 4])))
        assert info.value.status is Status.INTERNAL
        assert "in ensemble 'fragile', step 1 (model 'broken') failed" in info.value.message
        assert "numpy backend was told to fail" in info.value.message
        ensemble = server.model("fragile").statistics
        assert (ensemble.fail.count, ensemble.failures["OTHER"]) == (1, 1)
        assert server.model("broken").statistics.failures["BACKEND"] == 1
        assert server.model("add_sub").statistics.success.count == 1


async def test_invalid_inputs_are_rejected_by_the_ensemble_itself(dag_server):
    with pytest.raises(TritonError) as info:
        await dag_server.infer(request("dag", ints([[1, 2, 3]]), ints([[1, 2, 3]])))
    assert "unexpected shape for input 'A' for model 'dag'" in info.value.message


class _Recorder(ModelInstance):
    seen: list[InferenceRequest] = []

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        self.seen.extend(requests)
        return [
            InferenceResponse([Tensor("OUTPUT0", "INT32", r.inputs["INPUT0"].data)])
            for r in requests
        ]


class _RecorderModel(BackendModel):
    def create_instance(self, spec):  # type: ignore[no-untyped-def]
        return _Recorder()


class _RecorderBackend(Backend):
    name = "recorder"
    default_model_filename = "model.npy"

    def load_model(self, context):  # type: ignore[no-untyped-def]
        return _RecorderModel()


class _RecorderPlugin:
    @hookimpl
    def triton_register_backends(self, registry) -> None:  # type: ignore[no-untyped-def]
        registry.add(_RecorderBackend)


async def test_request_settings_pass_through_to_the_steps(tmp_path):
    repo = tmp_path / "models"
    (repo / "recorder" / "1").mkdir(parents=True)
    (repo / "recorder" / "config.pbtxt").write_text(
        'backend: "recorder"\nmax_batch_size: 8\n'
        'input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]\n'
        'output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] }]\n'
    )
    write_ensemble(
        repo, "passthrough", [("recorder", {"INPUT0": "A"}, {"OUTPUT0": "OUT0"})], inputs=("A",),
        outputs=("OUT0",),
    )  # fmt: skip
    plugins = create_plugin_manager(
        autoload=False,
        extra_plugins=[("numpy", numpy_backend), ("recorder", _RecorderPlugin())],
    )
    _Recorder.seen = []
    async with Server(ServerOptions([repo]), plugins) as server:
        sent = InferenceRequest(
            "passthrough",
            {"A": Tensor("A", "INT32", ints([[1, 2, 3, 4]]))},
            id="req-7",
            parameters={"custom": "yes", "level": 3},
            priority=2,
            timeout_us=5_000_000,
            correlation_id="seq-9",
            flags=RequestFlag.SEQUENCE_START,
        )
        response = await server.infer(sent)
        np.testing.assert_array_equal(response.output("OUT0").data, ints([[1, 2, 3, 4]]))
        (step,) = _Recorder.seen
        assert step.model_name == "recorder" and step.id == "req-7"
        assert step.parameters == {"custom": "yes", "level": 3}
        assert (step.priority, step.timeout_us) == (2, 5_000_000)
        assert (step.correlation_id, step.flags) == ("seq-9", RequestFlag.SEQUENCE_START)
        assert step.inputs["INPUT0"].data is sent.inputs["A"].data


async def test_max_inflight_requests_bounds_each_step(tmp_path):
    repo = tmp_path / "models"
    slow = 'parameters { key: "sleep_ms" value { string_value: "300" } }'
    write_numpy_model(
        repo, "slow", kind="add_sub", extra=slow + "\ninstance_group [{ count: 4 kind: KIND_CPU }]"
    )
    write_ensemble(
        repo,
        "bounded",
        [("slow", both("A", "B"), outs("OUT0", "OUT1"))],
        extra="max_inflight_requests: 1",
    )
    async with numpy_server(repo) as server:
        scheduler = server.model("bounded").scheduler
        pool = server.model("slow").pool
        calls = [
            asyncio.ensure_future(
                server.infer(request("bounded", ints([[i] * 4]), ints([[1] * 4])))
            )
            for i in range(3)
        ]
        most_waiting = most_busy = 0
        for _ in range(500):  # bounded: at most ~5 s
            most_waiting = max(most_waiting, scheduler.pending_count)
            most_busy = max(most_busy, pool.size - pool.idle_count)
            if all(call.done() for call in calls):
                break
            await asyncio.sleep(0.01)
        responses = await asyncio.gather(*calls)
        for i, response in enumerate(responses):
            np.testing.assert_array_equal(response.output("OUT0").data, ints([[i + 1] * 4]))
        assert most_waiting == 2  # the two others waited for the step's one slot
        assert most_busy == 1  # although the model has four instances
        assert scheduler.pending_count == 0


async def test_requests_in_flight_finish_when_the_server_stops(tmp_path):
    repo = tmp_path / "models"
    slow = 'parameters { key: "sleep_ms" value { string_value: "300" } }'
    write_numpy_model(repo, "slow", kind="add_sub", extra=slow)
    write_numpy_model(repo, "after", kind="add_sub")
    write_ensemble(
        repo,
        "two_steps",
        [
            ("slow", both("A", "B"), outs("s", "d")),
            ("after", both("s", "d"), outs("OUT0", "OUT1")),
        ],
    )
    server = numpy_server(repo)
    await server.start()
    call = asyncio.ensure_future(
        server.infer(request("two_steps", ints([[2] * 4]), ints([[1] * 4])))
    )
    await asyncio.sleep(0.05)
    await server.stop(grace_seconds=30)
    response = await call  # its second step started after the server stopped accepting
    np.testing.assert_array_equal(response.output("OUT0").data, ints([[4] * 4]))


async def test_a_cancelled_request_cancels_its_running_steps(tmp_path):
    repo = tmp_path / "models"
    write_dag(repo, sleep_ms=500)
    async with numpy_server(repo) as server:
        scheduler = server.model("dag").scheduler
        call = asyncio.ensure_future(server.infer(request("dag", ints([[1] * 4]), ints([[2] * 4]))))
        for _ in range(500):  # bounded: wait until the parallel steps are running
            if server.model("left").pool.idle_count == 0:
                break
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await asyncio.wait_for(scheduler.stop(), 10)  # nothing of the request is left waiting
        response = await server.infer(request("dag", ints([[1] * 4]), ints([[2] * 4])))
        np.testing.assert_array_equal(response.output("OUT0").data, ints([[5] * 4]))


# -- loading and readiness ---------------------------------------------------------------------


def write_member(repo: Path, name: str = "add_sub", **kwargs) -> None:
    write_numpy_model(repo, name, kind="add_sub", **kwargs)


def simple(model: str = "add_sub") -> list[Step]:
    return [(model, both("A", "B"), outs("OUT0", "OUT1"))]


INVALID = {
    "unknown_model": (
        lambda repo: write_ensemble(repo, "bad", simple("nowhere")),
        "'model_name' names 'nowhere', which is not in the model repository",
    ),
    "data_type_mismatch": (
        lambda repo: write_ensemble(repo, "bad", simple(), datatype="TYPE_FP32"),
        "ensemble tensor 'A' has inconsistent 'data_type': TYPE_FP32 from ensemble 'bad' "
        "input 'A', but TYPE_INT32 from model 'add_sub' input 'INPUT0' (step 0 'input_map')",
    ),
    "shape_mismatch": (
        lambda repo: write_ensemble(repo, "bad", simple(), dims="5"),
        "ensemble tensor 'A' has inconsistent 'dims': [-1,5] from ensemble 'bad' input 'A', "
        "but [-1,4] from model 'add_sub' input 'INPUT0'",
    ),
    "unused_ensemble_input": (
        lambda repo: write_ensemble(repo, "bad", simple(), inputs=("A", "B", "C")),
        "ensemble input 'C' for ensemble 'bad' is not used: no step's 'input_map' reads it",
    ),
    "unmapped_model_input": (
        lambda repo: write_ensemble(
            repo, "bad", [("add_sub", {"INPUT0": "A"}, outs("OUT0", "OUT1"))], inputs=("A",)
        ),
        "in ensemble 'bad', step 0 (model 'add_sub'): input 'INPUT1' of model 'add_sub' is not "
        "mapped to any ensemble tensor in 'input_map'",
    ),
    "missing_model_input": (
        lambda repo: write_ensemble(
            repo, "bad", [("add_sub", {"INPUT0": "A", "NOPE": "B"}, outs("OUT0", "OUT1"))]
        ),
        "step 0 (model 'add_sub') 'input_map' maps input 'NOPE', which model 'add_sub' does not "
        "have (its inputs: INPUT0, INPUT1)",
    ),
    "output_not_written": (
        lambda repo: write_ensemble(
            repo, "bad", [("add_sub", both("A", "B"), {"OUTPUT0": "OUT0"})]
        ),
        "ensemble output 'OUT1' for ensemble 'bad' is not written",
    ),
    "batch_too_large": (
        lambda repo: write_ensemble(repo, "bad", simple(), max_batch_size=16),
        "ensemble 'bad' allows maximum batch size 16 ('max_batch_size'), but it contains model "
        "'add_sub' (step 0) which only allows maximum batch size to be 8",
    ),
    "missing_version": (
        lambda repo: write_ensemble(repo, "bad", simple(), version=3),
        "ensemble 'bad' depends on 'add_sub' whose required version 3 ('model_version') is not "
        "loaded",
    ),
    "self_cycle": (
        lambda repo: write_ensemble(
            repo, "bad", [("bad", {"A": "A", "B": "B"}, {"OUT0": "OUT0", "OUT1": "OUT1"})]
        ),
        "circular dependency between ensembles: bad -> bad",
    ),
}


@pytest.mark.parametrize("case", sorted(INVALID))
async def test_invalid_ensembles_fail_their_load_and_the_others_serve(tmp_path, case):
    repo = tmp_path / "models"
    write_member(repo)
    write_ensemble(repo, "good", simple())
    writer, message = INVALID[case]
    writer(repo)
    async with numpy_server(repo, exit_on_error=False) as server:
        (entry,) = [e for e in server.repository_index() if e.name == "bad"]
        assert entry.state == "UNAVAILABLE"
        assert message in entry.reason
        assert not server.model_ready("bad")
        assert not server.is_ready()
        response = await server.infer(request("good", ints([[1] * 4]), ints([[1] * 4])))
        np.testing.assert_array_equal(response.output("OUT0").data, ints([[2] * 4]))


async def test_by_default_an_invalid_ensemble_stops_the_start_up(tmp_path):
    repo = tmp_path / "models"
    write_member(repo)
    write_ensemble(repo, "bad", simple("nowhere"))
    with pytest.raises(TritonError, match="names 'nowhere', which is not in the model"):
        await numpy_server(repo).start()


async def test_a_cycle_between_two_ensembles_fails_both_and_their_users(tmp_path):
    repo = tmp_path / "models"
    write_member(repo)
    pass_through = ({"A": "A", "B": "B"}, {"OUT0": "OUT0", "OUT1": "OUT1"})
    write_ensemble(repo, "ping", [("pong", *pass_through)])
    write_ensemble(repo, "pong", [("ping", *pass_through)])
    write_ensemble(repo, "user", [("ping", *pass_through)])
    async with numpy_server(repo, exit_on_error=False) as server:
        reasons = {e.name: e.reason for e in server.repository_index()}
        assert "circular dependency between ensembles: ping -> pong -> ping" in reasons["ping"]
        assert "circular dependency between ensembles" in reasons["pong"]
        assert "ensemble 'user' depends on 'ping' which has no loaded version" in reasons["user"]
        assert server.model_ready("add_sub")


async def test_an_ensemble_whose_member_fails_to_load_is_not_ready(tmp_path):
    repo = tmp_path / "models"
    write_member(repo, "member")
    (repo / "member" / "1" / "model.npy").unlink()  # the numpy backend fails the load
    write_member(repo)
    write_ensemble(repo, "bad", simple("member"))
    async with numpy_server(repo, exit_on_error=False) as server:
        (entry,) = [e for e in server.repository_index() if e.name == "bad"]
        assert "ensemble 'bad' depends on 'member' which has no loaded version" in entry.reason
        assert "model.npy is missing" in entry.reason
        assert not server.model_ready("bad")
        with pytest.raises(TritonError, match="'bad' has no available versions"):
            await server.infer(request("bad", ints([[1] * 4]), ints([[1] * 4])))


async def test_readiness_follows_the_members(dag_server):
    assert dag_server.model_ready("dag") and dag_server.is_ready()
    record = dag_server.models.record("right")
    record.versions[1].state = "UNAVAILABLE"  # as if 'right' were being unloaded
    record.refresh_latest()
    try:
        assert not dag_server.model_ready("dag")
        assert not dag_server.model_ready("dag", 1)
        assert not dag_server.is_ready()
        entry = next(e for e in dag_server.repository_index() if e.name == "dag")
        assert (entry.state, entry.reason) == (
            "UNAVAILABLE",
            "composing model 'right' is not ready",
        )
        assert "dag" not in [e.name for e in dag_server.repository_index(ready_only=True)]
        with pytest.raises(TritonError) as info:
            await dag_server.infer(request("dag", ints([[1] * 4]), ints([[1] * 4])))
        assert info.value.status is Status.NOT_FOUND  # the member's status, as Triton's
        assert "step 2 (model 'right') failed" in info.value.message
    finally:
        record.versions[1].state = "READY"
        record.refresh_latest()
    assert dag_server.model_ready("dag")


# -- the config alone --------------------------------------------------------------------------


def ensemble_config(body: str) -> None:
    config = parse_config_text(
        'name: "e"\nplatform: "ensemble"\n'
        'input [{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }]\n' + body,
        "test",
    )
    validate_ensemble_config(config)


def step(model: str, ins: str, outs_: str) -> str:
    return (
        f'step [{{ model_name: "{model}" input_map {{ key: "x" value: "{ins}" }} '
        f'output_map {{ key: "y" value: "{outs_}" }} }}]'
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "ensemble scheduling must be set for ensemble 'e'"),
        ("ensemble_scheduling { }", "must specify 'step' for ensemble 'e'"),
        (
            'ensemble_scheduling { step [{ input_map { key: "x" value: "IN" } }] }',
            "must specify 'model_name' in step 0 of ensemble 'e'",
        ),
        (
            'ensemble_scheduling { step [{ model_name: "m" input_map { key: "x" value: "IN" } }] }',
            "must specify 'output_map' in step 0 of ensemble 'e'",
        ),
        (
            f"ensemble_scheduling {{ {step('m', 'IN', 'OUT')} {step('n', 'IN', 'OUT')} }}",
            "ensemble tensor 'OUT' can appear in an 'output_map' only once for ensemble 'e'",
        ),
        (
            f"ensemble_scheduling {{ {step('m', 'IN', 'mid')} {step('n', 'nowhere', 'OUT')} }}",
            "step 1 (model 'n') maps input 'x' to ensemble tensor 'nowhere', which is neither",
        ),
        (
            "ensemble_scheduling { "
            'step [{ model_name: "m" input_map [{ key: "x" value: "IN" }, '
            '{ key: "z" value: "loop" }] output_map { key: "y" value: "mid" } }] '
            f"{step('n', 'mid', 'loop')} {step('o', 'mid', 'OUT')} }}",
            "step(s) 0 ('m'), 1 ('n'), 2 ('o') can never run: their 'input_map' and "
            "'output_map' form a cycle",
        ),
        (
            f"ensemble_scheduling {{ {step('m', 'IN', 'OUT')} {step('n', 'IN', 'spare')} }}",
            "ensemble tensor 'spare' is unused in ensemble 'e'",
        ),
        (
            f"instance_group [{{ count: 1 }}]\nensemble_scheduling {{ {step('m', 'IN', 'OUT')} }}",
            "'instance_group' should not be specified for ensemble 'e'",
        ),
        (
            "optimization { graph { level: 1 } }\n"
            f"ensemble_scheduling {{ {step('m', 'IN', 'OUT')} }}",
            "'optimization' should not be specified for ensemble 'e'",
        ),
    ],
)
def test_configs_that_cannot_work_are_rejected_naming_the_field(body, message):
    with pytest.raises(TritonError) as info:
        ensemble_config(body)
    assert message in info.value.message


def test_ensemble_scheduling_needs_the_ensemble_platform():
    config = parse_config_text(
        f'name: "m"\nbackend: "numpy"\nensemble_scheduling {{ {step("x", "a", "b")} }}', "test"
    )
    with pytest.raises(TritonError, match="whose platform is not ensemble"):
        validate_ensemble_config(config)


def test_load_order_puts_used_ensembles_first_and_reports_cycles():
    order, errors = ensemble_load_order(
        {
            "a": {"b", "plain"},
            "b": {"c"},
            "c": {"plain"},
            "x": {"y"},
            "y": {"x"},
            "z": {"x"},
        }
    )
    assert order.index("c") < order.index("b") < order.index("a")
    assert set(errors) == {"x", "y"}
    assert errors["x"].message == "circular dependency between ensembles: x -> y -> x"
    assert "z" in order  # its load fails later, on its member
