"""The framework-backend kit: config completion and checks, parameters, batched execution."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import pytest

from tests.support import ROOT
from triton_core import (
    Backend,
    BackendModel,
    BatchPlan,
    DataType,
    InferenceRequest,
    ModelConfig,
    ModelContext,
    Parameters,
    Status,
    Tensor,
    TritonError,
    available_cpus,
    batchable,
    complete_batching,
    config_shape,
    count_instances,
    default_max_batch_size,
    dims_error,
    fill_tensor,
    fill_unset,
    input_reshapes,
    output_reshapes,
    parse_config_text,
    reshaper,
    wire_type,
    wire_types,
)
from triton_core.testing import ModelRepository, inference_request


@dataclass(frozen=True)
class Reported:
    """A tensor as a framework reports it (what ONNX Runtime or torch.export tell)."""

    name: str
    config_type: str
    shape: tuple[int, ...] | None


class KitBackend(Backend):
    name = "kit"
    default_model_filename = "model.bin"

    def load_model(self, context: ModelContext) -> BackendModel:
        raise NotImplementedError


def config(text: str = "") -> ModelConfig:
    return parse_config_text('name: "m"\n' + text, "of the test")


def dims(tensor) -> list[int]:  # type: ignore[no-untyped-def]
    return list(tensor.dims)


# -- parameters --------------------------------------------------------------------------------


def test_parameters_read_booleans_and_integers_of_a_config():
    params = Parameters.of_model(
        config(
            'parameters { key: "on" value { string_value: " Yes " } }'
            'parameters { key: "off" value { string_value: "0" } }'
            'parameters { key: "threads" value { string_value: "3" } }'
        ),
        "m",
    )
    assert (params.boolean("on"), params.boolean("off"), params.boolean("unset")) == (
        True,
        False,
        None,
    )
    assert params.integer("threads") == 3
    assert params.integer("unset") is None and params.integer("unset", 7) == 7
    assert dict(params) == {"on": " Yes ", "off": "0", "threads": "3"}


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        (
            lambda p: p.boolean("k"),
            "model 'm': parameter 'k' is 'maybe', expected 1/0 or true/false",
        ),
        (lambda p: p.integer("k"), "model 'm': parameter 'k' is 'maybe', expected an integer >= 0"),
        (lambda p: p.integer("k", 0, allowed=(0, 1)), "is 'maybe', expected 0 or 1"),
    ],
)
def test_a_malformed_parameter_names_the_model_key_and_value(read, expected):
    params = Parameters.of_model(
        config('parameters { key: "k" value { string_value: "maybe" } }'), "m"
    )
    with pytest.raises(TritonError) as info:
        read(params)
    assert info.value.status is Status.INVALID_ARG
    assert expected in info.value.message


def test_integers_out_of_range_are_refused():
    params = Parameters({"neg": "-1", "two": "2"}, "model 'm': parameter")
    with pytest.raises(TritonError, match="'neg' is '-1'"):
        params.integer("neg")
    with pytest.raises(TritonError, match="'two' is '2', expected 0 or 1"):
        params.integer("two", allowed=(0, 1))


def test_ignored_parameters_are_left_out():
    text = (
        'parameters { key: "A" value { string_value: "x" } }'
        'parameters { key: "B" value { string_value: "1" } }'
    )
    params = Parameters.of_model(config(text), "m", ignore=["A"])
    assert "A" not in params and params.boolean("B") is True


def test_backend_options_name_the_backend():
    params = Parameters.of_backend(KitBackend({"fast": "sometimes"}))
    with pytest.raises(TritonError) as info:
        params.boolean("fast")
    assert info.value.message.startswith("backend 'kit': option 'fast' is 'sometimes'")


# -- default max batch size, instances -----------------------------------------------------------


def test_default_max_batch_size_comes_from_the_backend_option():
    assert default_max_batch_size(KitBackend()) == 4
    assert default_max_batch_size(KitBackend({"default-max-batch-size": "16"})) == 16
    assert default_max_batch_size(KitBackend({"default-max-batch-size": "-3"})) == 0
    with pytest.raises(TritonError) as info:
        default_max_batch_size(KitBackend({"default-max-batch-size": "many"}))
    assert info.value.message == (
        "backend option default-max-batch-size='many' of backend 'kit' is not an integer"
    )


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ("", 2),
        ("instance_group { kind: KIND_CPU }", 2),
        ("instance_group { kind: KIND_CPU count: 3 }", 3),
        ("instance_group { kind: KIND_GPU gpus: [0, 1] }", 2),
        ("instance_group { kind: KIND_GPU count: 2 gpus: [0, 1, 2] }", 6),
        ("instance_group { kind: KIND_GPU } instance_group { kind: KIND_CPU count: 1 }", 2),
    ],
)
def test_count_instances(groups, expected):
    assert count_instances(config(groups), default_cpu_count=2) == expected


def test_available_cpus_is_what_this_process_may_use():
    assert available_cpus() >= 1


# -- auto-complete -------------------------------------------------------------------------------

X = Reported("x", "TYPE_FP32", (-1, 4))
Y = Reported("y", "TYPE_INT64", (-1,))
FIXED = Reported("x", "TYPE_FP32", (2, 4))


def test_a_model_that_batches_gets_the_default_max_batch_size_and_dynamic_batching():
    completed = config()
    complete_batching(completed, "m", {"x": X}, {"y": Y}, KitBackend())
    assert completed.max_batch_size == 4
    assert completed.HasField("dynamic_batching")


def test_max_batch_size_one_needs_no_dynamic_batching_and_a_bound_caps_the_default():
    completed = config()
    complete_batching(
        completed, "m", {"x": X}, {"y": Y}, KitBackend({"default-max-batch-size": "1"})
    )
    assert completed.max_batch_size == 1 and not completed.HasField("dynamic_batching")
    capped = config()
    complete_batching(capped, "m", {"x": X}, {"y": Y}, KitBackend(), max_batch=3)
    assert capped.max_batch_size == 3


def test_a_chosen_scheduler_is_kept():
    completed = config("sequence_batching { }")
    complete_batching(completed, "m", {"x": X}, {"y": Y}, KitBackend())
    assert completed.WhichOneof("scheduling_choice") == "sequence_batching"


def test_a_listed_full_shape_keeps_max_batch_size_zero():
    listed = config('input [ { name: "x" dims: [ 8, 4 ] } ]')
    complete_batching(listed, "m", {"x": X}, {"y": Y}, KitBackend())
    assert listed.max_batch_size == 0 and not listed.HasField("dynamic_batching")
    # an optional input (an overridable initializer) counts as listed too
    optional = config('input [ { name: "w" dims: [ 8, 4 ] } ]')
    weights = Reported("w", "TYPE_FP32", (8, 4))
    complete_batching(
        optional, "m", {"x": X}, {"y": Y}, KitBackend(), optional_inputs={"w": weights}
    )
    assert optional.max_batch_size == 0


def test_an_optional_input_does_not_decide_whether_the_model_batches():
    completed = config()
    weights = Reported("w", "TYPE_FP32", (8, 4))
    complete_batching(
        completed, "m", {"x": X}, {"y": Y}, KitBackend(), optional_inputs={"w": weights}
    )
    assert completed.max_batch_size == 4


def test_a_model_that_cannot_batch_refuses_a_max_batch_size():
    unbatched = config()
    # The option is read only where it is needed: a malformed one does not matter here.
    complete_batching(unbatched, "m", {"x": FIXED}, {}, KitBackend({"default-max-batch-size": "x"}))
    assert unbatched.max_batch_size == 0
    with pytest.raises(TritonError) as info:
        complete_batching(
            config("max_batch_size: 8"), "m", {"x": FIXED}, {}, KitBackend(), why="x is [2, 4]"
        )
    assert info.value.status is Status.INVALID_ARG
    assert info.value.message == (
        "autofill failed for model 'm': model does not support batching (x is [2, 4]) while "
        "non-zero max_batch_size is specified"
    )


def test_fill_tensor_leaves_out_the_batch_dim_and_turns_scalars_into_dims_one():
    completed = config("max_batch_size: 4")
    fill_tensor(completed.input.add(), X, 4)
    fill_tensor(completed.output.add(), Reported("score", "TYPE_FP32", (-1,)), 4, name="OUT__0")
    (x,), (out,) = completed.input, completed.output
    assert (x.name, DataType.Name(x.data_type), dims(x)) == ("x", "TYPE_FP32", [4])
    assert (out.name, dims(out), out.HasField("reshape"), config_shape(out)) == (
        "OUT__0",
        [1],
        True,
        (),
    )
    unbatched = config()
    fill_tensor(unbatched.input.add(), FIXED, 0)
    fill_tensor(unbatched.input.add(), Reported("s", "TYPE_INT32", ()), 0)
    assert [dims(t) for t in unbatched.input] == [[2, 4], [1]]
    assert not unbatched.input[1].HasField("reshape")


def test_fill_unset_keeps_what_the_config_says():
    listed = config(
        'max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP16 }, { name: "z" dims: [ 7 ] } ]'
    )
    x, z = listed.input
    fill_unset(x, X, 4)
    fill_unset(z, X, 4)
    assert (DataType.Name(x.data_type), dims(x)) == ("TYPE_FP16", [4])
    assert (DataType.Name(z.data_type), dims(z)) == ("TYPE_FP32", [7])


def test_a_tensor_without_a_reported_shape_cannot_be_filled():
    with pytest.raises(ValueError, match="'x'"):
        fill_tensor(config().input.add(), Reported("x", "TYPE_FP32", None), 0)


def test_batchable():
    assert (
        batchable((-1, 3)) and not batchable((2, 3)) and not batchable(()) and not batchable(None)
    )


# -- checks ------------------------------------------------------------------------------------


def test_dims_that_fit_the_model_shape_give_no_error():
    checked = config(
        'max_batch_size: 4 input [ { name: "x" dims: [ 4 ] }, { name: "v" dims: [ 9 ] } ]'
    )
    x, v = checked.input
    assert dims_error("m", "input", x, (-1, 4), 4) is None
    assert dims_error("m", "input", v, (-1, -1), 4) is None  # a variable dim takes any size


def test_dims_that_do_not_fit_name_model_tensor_and_shapes():
    checked = config('max_batch_size: 4 output [ { name: "y" dims: [ 11 ] } ]')
    assert dims_error("m", "output", checked.output[0], (-1, 10), 4) == (
        "model 'm': output 'y' has dims [11] in the config (max_batch_size 4, full shape "
        "[-1, 11]) but shape [-1, 10] in the model"
    )


def test_a_reshape_is_what_the_model_sees():
    checked = config('input [ { name: "x" dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]')
    assert dims_error("m", "input", checked.input[0], (2, 2), 0) is None
    assert "has reshape [2, 2] in the config" in (
        dims_error("m", "input", checked.input[0], (4,), 0) or ""
    )


def test_batching_needs_a_variable_first_dim():
    checked = config('max_batch_size: 4 input [ { name: "x" dims: [ 4 ] } ]')
    error = dims_error("m", "input", checked.input[0], (2, 4), 4, hint="export it again")
    assert error == (
        "model 'm': input 'x' has shape [2, 4] in the model, without the variable first (batch) "
        "dimension that max_batch_size 4 in the config needs (export it again)"
    )


def test_wire_types():
    typed = config(
        'output [ { name: "a" data_type: TYPE_STRING }, { name: "b" data_type: TYPE_BF16 } ]'
    )
    assert wire_types("m", "output", typed.output) == {"a": "BYTES", "b": "BF16"}
    untyped = config('output [ { name: "c" } ]')
    with pytest.raises(TritonError) as info:
        wire_type("m", "output", untyped.output[0])
    assert info.value.message == "model 'm': output 'c' has data_type TYPE_INVALID"


# -- reshape ---------------------------------------------------------------------------------------


def test_reshaper_views_arrays_without_copies():
    batched = reshaper((2, 2), batched=True)
    assert batched is not None
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = batched(array)
    assert view.shape == (3, 2, 2) and np.shares_memory(view, array)
    assert batched(view) is view  # already shaped: the array itself
    single = reshaper((4,), batched=False)
    assert single is not None and single(np.zeros((2, 2))).shape == (4,)
    assert reshaper((-1, -1), batched=True) is None  # numpy cannot infer two dims


def test_input_and_output_reshapes_go_opposite_ways():
    reshaped = config(
        'max_batch_size: 2 input [ { name: "x" dims: [ 4 ] reshape: { shape: [ 2, 2 ] } }, '
        '{ name: "p" dims: [ 4 ] } ]'
        ' output [ { name: "y" dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]'
    )
    to_model, to_config = input_reshapes(reshaped), output_reshapes(reshaped)
    assert set(to_model) == {"x"} and set(to_config) == {"y"}
    assert to_model["x"](np.zeros((3, 4))).shape == (3, 2, 2)
    assert to_config["y"](np.zeros((3, 2, 2))).shape == (3, 4)


# -- batched execution -------------------------------------------------------------------------


class Doubler:
    """A framework with one call: OUT0 = 2 * IN, OUT1 = IN + 1. Records each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, np.ndarray], list[str]]] = []
        self.results: list[np.ndarray] = []

    def run(self, inputs: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        self.calls.append((inputs, names))
        results = {"OUT0": inputs["IN"] * 2, "OUT1": inputs["IN"] + 1}
        self.results += [results[name] for name in names]
        return [results[name] for name in names]


PLAN = BatchPlan("m", {"OUT0": "FP32", "OUT1": "FP32"}, batching=True)


def request(rows: int, outputs: list[str] | None = None, start: float = 0) -> InferenceRequest:
    data = np.arange(start, start + rows * 2, dtype=np.float32).reshape(rows, 2)
    return inference_request("m", {"IN": data}, outputs)


def test_select_gives_the_outputs_a_request_asks_for():
    assert PLAN.select(request(1)) == ["OUT0", "OUT1"]
    assert PLAN.select(request(1, ["OUT1"])) == ["OUT1"]
    with pytest.raises(TritonError) as info:
        PLAN.select(request(1, ["OUT1", "NOPE"]))
    assert info.value.status is Status.INVALID_ARG
    assert info.value.message == "model 'm' has no output(s) NOPE (outputs: OUT0, OUT1)"


def test_one_request_runs_alone_and_an_error_fails_the_batch():
    framework = Doubler()
    (response,) = PLAN.execute([request(2, ["OUT1"])], framework.run)
    assert [(t.name, t.datatype) for t in response.outputs] == [("OUT1", "FP32")]
    np.testing.assert_array_equal(response.output("OUT1").data, np.arange(4).reshape(2, 2) + 1)
    with pytest.raises(TritonError, match="NOPE"):
        PLAN.execute([request(1, ["NOPE"])], framework.run)


def test_a_batch_is_one_call_and_each_request_gets_views_of_its_rows():
    framework = Doubler()
    requests = [request(1, ["OUT0"], start=0), request(3, ["OUT0"], start=10), request(2, start=20)]
    responses = PLAN.execute(requests, framework.run)
    ((inputs, names),) = framework.calls
    assert inputs["IN"].shape == (6, 2) and names == ["OUT0", "OUT1"]
    for req, response in zip(requests, responses, strict=True):
        expected = req.inputs["IN"].data * 2
        np.testing.assert_array_equal(response.output("OUT0").data, expected)
        assert np.shares_memory(response.output("OUT0").data, framework.results[0])
    assert [t.name for t in responses[0].outputs] == ["OUT0"]
    assert [t.name for t in responses[2].outputs] == ["OUT0", "OUT1"]


def test_the_call_computes_only_the_outputs_some_request_asks_for():
    framework = Doubler()
    PLAN.execute([request(1, ["OUT1"]), request(1, ["OUT1"])], framework.run)
    assert [names for _, names in framework.calls] == [["OUT1"]]


def test_a_request_for_an_unknown_output_fails_alone():
    framework = Doubler()
    responses = PLAN.execute([request(1), request(1, ["NOPE"]), request(1)], framework.run)
    assert responses[1].error is not None and "NOPE" in responses[1].error.message
    assert responses[0].error is None and responses[2].error is None
    assert len(framework.calls) == 1
    every_request_failed = PLAN.execute([request(1, ["NOPE"]), request(1, ["NOPE"])], framework.run)
    assert all(r.error is not None for r in every_request_failed) and len(framework.calls) == 1


def test_requests_that_cannot_be_concatenated_run_one_at_a_time():
    framework = Doubler()
    wide = inference_request("m", {"IN": np.ones((1, 3), np.float32)})
    responses = PLAN.execute([request(1), wide], framework.run)
    assert len(framework.calls) == 2
    assert responses[1].output("OUT0").data.shape == (1, 3)


def test_a_model_without_batching_runs_each_request_alone():
    framework = Doubler()
    plan = BatchPlan("m", {"OUT0": "FP32", "OUT1": "FP32"}, batching=False)
    responses = plan.execute([request(2), request(2, ["NOPE"])], framework.run)
    assert len(framework.calls) == 1 and responses[1].error is not None
    assert plan.execute([], framework.run) == []


def test_a_framework_that_returns_the_wrong_batch_fails_the_batch():
    def one_row(inputs: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        return [inputs["IN"][:1] for _ in names]

    with pytest.raises(TritonError) as info:
        PLAN.execute([request(1), request(2)], one_row)
    assert info.value.status is Status.INTERNAL
    assert (
        info.value.message == "model 'm' returned output 'OUT0' with shape [1, 2] for a batch of 3"
    )


# -- the guide's example -----------------------------------------------------------------------


def guide_example_code() -> str:
    """The backend of docs/writing_plugins.md, "A framework backend with the kit"."""
    guide = (ROOT / "docs" / "writing_plugins.md").read_text()
    section = guide.split("## A framework backend with the kit\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


WEIGHTS = np.arange(12, dtype=np.float32).reshape(4, 3)


@pytest.fixture
def triton_plugins(monkeypatch):
    example = ModuleType("triton_core_matmul_example")
    monkeypatch.setitem(sys.modules, example.__name__, example)  # dataclasses look it up
    exec(compile(guide_example_code(), "docs/writing_plugins.md", "exec"), example.__dict__)
    return [example]


@pytest.fixture
def model_repository(model_repository: ModelRepository) -> ModelRepository:
    # A long delay: the four requests below fill the batch at once, so it never runs out.
    config = {"backend": "matmul", "dynamic_batching": {"max_queue_delay_microseconds": 5_000_000}}
    model_file = {"model.npy": lambda path: np.save(path, WEIGHTS)}
    model_repository.add_model("matmul", config, versions={1: model_file})
    return model_repository


def test_the_guide_example_completes_its_config_and_runs_a_batch_as_one_call(triton_server):
    completed = triton_server.server.model_config("matmul")
    assert completed.max_batch_size == 4
    assert [(t.name, list(t.dims)) for t in completed.input] == [("x", [4])]
    assert [(t.name, DataType.Name(t.data_type)) for t in completed.output] == [("y", "TYPE_FP32")]
    rows = [np.full((1, 4), i, dtype=np.float32) for i in range(4)]

    async def together() -> list:  # type: ignore[type-arg]
        server = triton_server.server
        return await asyncio.gather(
            *(server.infer(inference_request("matmul", {"x": x})) for x in rows)
        )

    responses = triton_server.run(together())
    for x, response in zip(rows, responses, strict=True):
        assert response.error is None
        np.testing.assert_array_equal(response.output("y").data, x @ WEIGHTS)
    (statistics,) = triton_server.server.statistics("matmul")
    assert (statistics.inference_count, statistics.execution_count) == (4, 1)


def test_the_guide_example_refuses_a_config_that_contradicts_the_model(
    triton_server_factory, tmp_path
):
    repository = ModelRepository(tmp_path / "contradicting")
    config = {"backend": "matmul", "max_batch_size": 2, "input": [{"name": "x", "dims": [5]}]}
    repository.add_model("m", config, versions={1: {"model.npy": lambda p: np.save(p, WEIGHTS)}})
    server = triton_server_factory(repository=repository, exit_on_error=False).server
    (entry,) = server.repository_index()
    assert not server.model_ready("m")
    assert entry.reason == (
        "model 'm': input 'x' has dims [5] in the config (max_batch_size 2, full shape [-1, 5]) "
        "but shape [-1, 4] in the model (raised by backend 'matmul' (plugin "
        "triton_core_matmul_example) in load_model())"
    )


def test_the_removed_execute_concatenated_warns_and_runs_through_batch_plan():
    import importlib
    import sys
    import warnings

    sys.modules.pop("triton_core.batching", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batching = importlib.import_module("triton_core.batching")
    assert [w.category for w in caught] == [DeprecationWarning]
    assert "triton_core.BatchPlan" in str(caught[0].message)
    requests = [
        InferenceRequest("m", {"X": Tensor("X", "FP32", np.full((1, 2), i, np.float32))})
        for i in range(3)
    ]
    runs = []

    def run(inputs, names):
        runs.append(inputs["X"].shape)
        return [inputs["X"] * 2]

    responses = batching.execute_concatenated(
        requests,
        model_name="m",
        all_outputs=["Y"],
        output_datatypes={"Y": "FP32"},
        output_names=lambda request: ["Y"],
        run=run,
        run_alone=lambda request: None,
    )
    assert runs == [(3, 2)]  # one run for the batch
    assert [response.outputs[0].data.tolist() for response in responses] == [
        [[0.0, 0.0]],
        [[2.0, 2.0]],
        [[4.0, 4.0]],
    ]
