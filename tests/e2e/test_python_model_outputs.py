"""A Python model's outputs go to the client in the shape and datatype it made, as in Triton.

Triton's core holds an output to the config by its name only: Triton 2.51 answers each case
of ANSWERS with the shape and datatype the model returned (checked against it with this model).
An undeclared output is refused here, as Triton's core refuses one (Triton's Python backend
drops it before the core sees it).
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, serve_until_done

pytestmark = pytest.mark.timeout(300)

CLIENTS = {"http": httpclient, "grpc": grpcclient}

#: the model answers KIND with the tensor its CASES entry makes
MODEL = dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    CASES = {
        "one": lambda: [pb_utils.Tensor("text_output", np.array([b"a"], dtype=object))],
        "two_by_three": lambda: [
            pb_utils.Tensor("text_output", np.array([[b"a"] * 3] * 2, dtype=object))
        ],
        "scalar": lambda: [pb_utils.Tensor("text_output", np.array(b"a", dtype=object))],
        "empty_fp64": lambda: [pb_utils.Tensor("text_output", np.array([]))],
        "int32_for_fp32": lambda: [pb_utils.Tensor("f", np.array([1, 2], dtype=np.int32))],
        "rows": lambda: [pb_utils.Tensor("f", np.ones((3, 2), dtype=np.float32))],
        "nothing": lambda: [],
        "undeclared": lambda: [pb_utils.Tensor("zzz", np.ones(2, dtype=np.float32))],
    }


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                kind = pb_utils.get_input_tensor_by_name(request, "KIND").as_numpy()
                outputs = CASES[kind.reshape(-1)[0].decode()]()
                responses.append(pb_utils.InferenceResponse(outputs))
            return responses
    """
)

CONFIG = """
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "KIND" data_type: TYPE_STRING dims: [ 1 ] }} ]
output [
  {{ name: "text_output" data_type: TYPE_STRING dims: [ 1, -1 ] }},
  {{ name: "f" data_type: TYPE_FP32 dims: [ 2 ] }}
]
"""

#: kind -> the outputs (name, datatype, shape) that Triton 2.51 answers with
ANSWERS = {
    "one": [("text_output", "BYTES", [1])],
    "two_by_three": [("text_output", "BYTES", [2, 3])],
    "scalar": [("text_output", "BYTES", [])],
    "empty_fp64": [("text_output", "FP64", [0])],
    "int32_for_fp32": [("f", "INT32", [2])],
    "rows": [("f", "FP32", [3, 2])],
    "nothing": [],
}
MODELS = {"unbatched": 0, "batched": 4}


def write_model(repo: Path, name: str, max_batch_size: int) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(max_batch_size=max_batch_size))
    (repo / name / "1" / "model.py").write_text(MODEL)


@pytest.fixture(scope="module")
def server(tmp_path_factory):  # type: ignore[no-untyped-def]
    repo = tmp_path_factory.mktemp("outputs")
    for name, max_batch_size in MODELS.items():
        write_model(repo, name, max_batch_size)
    yield from serve_until_done(ServerProcess([repo]))


def infer(server, protocol: str, model: str, kind: str):  # type: ignore[no-untyped-def]
    module = CLIENTS[protocol]
    url = server.http_url if protocol == "http" else server.grpc_url
    shape = [1, 1] if MODELS[model] else [1]
    tensor = module.InferInput("KIND", shape, "BYTES")
    tensor.set_data_from_numpy(np.array([kind.encode()], dtype=object).reshape(shape))
    return module.InferenceServerClient(url).infer(model, [tensor])


def described(result, protocol: str) -> list[tuple[str, str, list[int]]]:  # type: ignore[no-untyped-def]
    if protocol == "http":
        outputs = result.get_response().get("outputs", [])
        return [(o["name"], o["datatype"], o["shape"]) for o in outputs]
    return [(o.name, o.datatype, list(o.shape)) for o in result.get_response().outputs]


@pytest.mark.parametrize("protocol", list(CLIENTS))
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("kind", list(ANSWERS))
def test_outputs_go_out_as_the_model_made_them(
    server, kind: str, model: str, protocol: str
) -> None:
    result = infer(server, protocol, model, kind)
    assert described(result, protocol) == ANSWERS[kind]


def test_the_values_of_an_output_of_another_shape_arrive(server) -> None:
    result = infer(server, "http", "unbatched", "two_by_three")
    np.testing.assert_array_equal(result.as_numpy("text_output"), np.full((2, 3), b"a", object))


@pytest.mark.parametrize("protocol", list(CLIENTS))
def test_an_output_the_config_does_not_declare_is_refused(server, protocol: str) -> None:
    with pytest.raises(InferenceServerException) as info:
        infer(server, protocol, "unbatched", "undeclared")
    assert "returned output 'zzz', which the config does not declare" in info.value.message()
