"""What a backend returns is checked before it leaves the server, by Triton's rule.

In-process, with the numpy test backend's misbehaving kinds (tests/plugins/numpy_backend.py):
an undeclared output, or data that is not what its datatype says, fails its request with
INTERNAL naming the model, version, instance, backend and plugin, while well-behaved models
(and the next request) keep serving. Shapes and datatypes that differ from the config go out
as the backend made them: Triton's core checks only an output's name.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import numpy_server, write_numpy_model
from triton_core import InferenceRequest, InferenceResponse, RequestedOutput, Status, Tensor
from triton_core.config import parse_config_text
from triton_core.errors import TritonError
from triton_core.server.outputs import OutputCheck

#: misbehaving kind -> what the error must say about it (FP32 model, dims [4], batch 1)
MISBEHAVIOURS = {
    "wrong_dtype": "returned output 'OUTPUT0' (FP32) holding numpy int32 values",
    "numpy_datatype": "returned output 'OUTPUT0' with datatype 'float32', which is not a "
    "datatype name",
    "list_output": "returned output 'OUTPUT0' as a list, not a numpy array",
    "undeclared": "returned output 'EXTRA', which the config does not declare "
    "(declared: OUTPUT0, OUTPUT1)",
}
#: kind that breaks the config but not Triton's rule -> the shape of its first output
ACCEPTED = {"extra_dims": (1, 4, 1), "extra_rows": (3, 4), "empty": None}


def fp32_request(model: str, rows: int = 1, **kwargs) -> InferenceRequest:  # type: ignore[no-untyped-def]
    data = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    inputs = {name: Tensor(name, "FP32", data) for name in ("INPUT0", "INPUT1")}
    return InferenceRequest(model, inputs, **kwargs)


@pytest.fixture
async def server(tmp_path):  # type: ignore[no-untyped-def]
    for kind in ("identity", *MISBEHAVIOURS, *ACCEPTED):
        write_numpy_model(tmp_path, kind, kind=kind, datatype="TYPE_FP32")
    server = numpy_server(tmp_path)
    await server.start()
    yield server
    await server.stop()


@pytest.mark.parametrize("kind", list(MISBEHAVIOURS))
async def test_a_misbehaving_backend_fails_the_request_with_an_attributed_internal_error(
    server, kind: str
) -> None:
    with pytest.raises(TritonError) as info:
        await server.infer(fp32_request(kind))
    error = info.value
    assert error.status is Status.INTERNAL
    assert error.message.startswith(
        f"model '{kind}' version 1 instance '{kind}_0_0': backend 'numpy' (plugin numpy) "
    )
    assert MISBEHAVIOURS[kind] in error.message
    # the failure is the backend's, in the statistics too
    assert server.model(kind).statistics.fail.count == 1
    response = await server.infer(fp32_request("identity", rows=2))
    np.testing.assert_array_equal(
        response.output("OUTPUT0").data, fp32_request("x", 2).inputs["INPUT0"].data
    )


@pytest.mark.parametrize("kind", list(ACCEPTED))
async def test_shapes_and_emptiness_the_config_does_not_give_go_out_as_made(
    server, kind: str
) -> None:
    response = await server.infer(fp32_request(kind))
    shapes = [tensor.shape for tensor in response.outputs]
    assert shapes[:1] == ([ACCEPTED[kind]] if ACCEPTED[kind] else [])


async def test_requested_outputs_are_checked_before_selection(server) -> None:
    # the broken output is not asked for, yet it leaves the backend: the request still fails
    request = fp32_request("wrong_dtype", outputs=[RequestedOutput("OUTPUT1")])
    with pytest.raises(TritonError, match="holding numpy int32 values"):
        await server.infer(request)


async def test_a_missing_requested_output_names_the_backend(server) -> None:
    request = fp32_request("empty", outputs=[RequestedOutput("OUTPUT1")])
    with pytest.raises(TritonError) as info:
        await server.infer(request)
    assert info.value.status is Status.INTERNAL
    assert "backend 'numpy' (plugin numpy) did not produce requested output 'OUTPUT1'" in (
        info.value.message
    )


def check(config_text: str) -> OutputCheck:
    return OutputCheck(parse_config_text(config_text, "test"))


BATCHED = """
name: "m"
max_batch_size: 4
output [
  { name: "VAR" data_type: TYPE_FP32 dims: [ -1, 3 ] },
  { name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] },
  { name: "FLAT" data_type: TYPE_INT64 dims: [ 6 ] reshape { shape: [ 2, 3 ] } }
]
"""


@pytest.mark.parametrize(
    ("name", "data", "datatype"),
    [
        ("VAR", np.zeros((2, 5, 3), np.float32), "FP32"),  # -1 matches any size
        ("VAR", np.zeros((2, 0, 3), np.float32), "FP32"),
        ("TEXT", np.array([[b"a", b"b"], [b"c", b"d"]], dtype=object), "BYTES"),
        ("TEXT", np.array([[b"a", b"b"], [b"c", b"d"]]), "BYTES"),  # fixed-size bytes
        ("TEXT", np.array([["a", "b"], ["c", "d"]]), "BYTES"),  # str
        ("FLAT", np.zeros((2, 6), np.int64), "INT64"),
        # Triton holds neither the shape nor the datatype to the config
        ("VAR", np.zeros((2, 5, 4), np.float32), "FP32"),
        ("VAR", np.zeros((2, 3), np.float32), "FP32"),
        ("VAR", np.zeros((), np.float32), "FP32"),
        ("FLAT", np.zeros((2, 6), np.int32), "INT32"),
        ("TEXT", np.zeros(0, np.float64), "FP64"),
    ],
)
def test_outputs_that_follow_the_config_pass(name: str, data: np.ndarray, datatype: str) -> None:
    assert check(BATCHED).problem([Tensor(name, datatype, data)], batch_size=2) is None


def test_an_output_in_its_reshape_shape_is_reshaped_to_its_dims() -> None:
    tensor = Tensor("FLAT", "INT64", np.arange(12, dtype=np.int64).reshape(2, 2, 3))
    assert check(BATCHED).problem([tensor], batch_size=2) is None
    assert tensor.shape == (2, 6)


@pytest.mark.parametrize(
    ("tensor", "problem"),
    [
        (Tensor("VAR", "FP32", np.zeros((2, 1, 3), ">f4")), "holding numpy >f4 values"),
        (Tensor("TEXT", "BYTES", np.zeros((2, 2), np.int32)), "holding numpy int32 values"),
        (Tensor("FLAT", "int64", np.zeros((2, 6), np.int64)), "which is not a datatype name"),
        (Tensor("UNKNOWN", "FP32", np.zeros(2, np.float32)), "which the config does not declare"),
    ],
)
def test_outputs_that_break_the_config_are_described(tensor: Tensor, problem: str) -> None:
    found = check(BATCHED).problem([tensor], batch_size=2)
    assert found is not None and problem in found


def test_a_model_without_batching_reshapes_without_a_batch_dimension() -> None:
    plan = check(
        'name: "m"\noutput [{ name: "Y" data_type: TYPE_BOOL dims: [ 4 ] '
        "reshape { shape: [ 2, 2 ] } }]"
    )
    tensor = Tensor("Y", "BOOL", np.zeros((2, 2), np.bool_))
    assert plan.problem([tensor], batch_size=1) is None
    assert tensor.shape == (4,)


def test_implicit_state_outputs_are_declared_outputs() -> None:
    plan = check(
        """name: "m"
max_batch_size: 2
output [{ name: "Y" data_type: TYPE_INT32 dims: [ 1 ] }]
sequence_batching { state [{ input_name: "S_IN" output_name: "S_OUT"
  data_type: TYPE_INT32 dims: [ 1 ] }] }"""
    )
    state = Tensor("S_OUT", "INT32", np.zeros((1, 1), np.int32))
    assert plan.problem([state], batch_size=1) is None


def test_models_may_send_empty_responses() -> None:
    plan = check('name: "m"\noutput [{ name: "Y" data_type: TYPE_INT32 dims: [ 1 ] }]')
    assert plan.problem(InferenceResponse().outputs, batch_size=1) is None


ENSEMBLE = """
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }]
ensemble_scheduling { step [{
  model_name: "wrong_dtype"
  model_version: -1
  input_map [{ key: "INPUT0" value: "A" }, { key: "INPUT1" value: "B" }]
  output_map [{ key: "OUTPUT0" value: "OUT" }]
}] }
"""


async def test_an_ensemble_step_is_checked_as_its_own_model(tmp_path) -> None:
    write_numpy_model(tmp_path, "wrong_dtype", kind="wrong_dtype", datatype="TYPE_FP32")
    (tmp_path / "ens" / "1").mkdir(parents=True)
    (tmp_path / "ens" / "config.pbtxt").write_text(ENSEMBLE)
    async with numpy_server(tmp_path) as server:
        data = np.ones((1, 4), np.float32)
        request = InferenceRequest(
            "ens", {"A": Tensor("A", "FP32", data), "B": Tensor("B", "FP32", data)}
        )
        with pytest.raises(TritonError) as info:
            await server.infer(request)
    assert info.value.status is Status.INTERNAL
    assert (
        "step 0 (model 'wrong_dtype') failed: model 'wrong_dtype' version 1" in info.value.message
    )
    assert "holding numpy int32 values" in info.value.message
