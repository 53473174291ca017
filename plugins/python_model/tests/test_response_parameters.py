"""Response parameters of Python models, checked with Triton's messages, over gRPC with the
stock tritonclient (as qa/L0_backend_python/parameters does)."""

from __future__ import annotations

import json
import queue
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from triton_core.testing import ModelRepository

pytestmark = pytest.mark.timeout(300)

#: sets the parameters its input holds (JSON; digit keys become ints) on its response
PARAMETERS = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def wanted(request):
    text = pb_utils.get_input_tensor_by_name(request, "PARAMETERS").as_numpy()[0][0].decode()
    value = json.loads(text)
    if isinstance(value, dict):
        value = {int(k) if k.isdigit() else k: v for k, v in value.items()}
    return text, value


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text, parameters = wanted(request)
            out = pb_utils.Tensor("OUTPUT", np.array([[text]], dtype=np.object_))
            try:
                response = pb_utils.InferenceResponse([out], parameters=parameters)
            except pb_utils.TritonModelException as exc:
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                response = pb_utils.InferenceResponse(error=error)
            responses.append(response)
        return responses
"""

#: one response per parameters dict of its input's list, then a flag-only final
PARAMETERS_DECOUPLED = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "PARAMETERS").as_numpy()[0][0]
            sender = request.get_response_sender()
            for parameters in json.loads(text.decode()):
                out = pb_utils.Tensor("OUTPUT", np.array([[json.dumps(parameters)]], np.object_))
                sender.send(pb_utils.InferenceResponse([out], parameters=parameters))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

#: calls the two models above and answers the parameters of their responses
PARAMETERS_BLS = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "PARAMETERS")
            # the decoupled model answers once per dict of a list
            listed = json.dumps([json.loads(tensor.as_numpy()[0][0])])
            listed = pb_utils.Tensor("PARAMETERS", np.array([[listed]], dtype=np.object_))
            seen = {}
            for model, decoupled, sent in (
                ("parameters", False, tensor),
                ("parameters_decoupled", True, listed),
            ):
                call = pb_utils.InferenceRequest(
                    model_name=model, inputs=[sent], requested_output_names=["OUTPUT"]
                )
                answers = call.exec(decoupled=decoupled)
                answers = list(answers) if decoupled else [answers]
                seen[model] = [json.loads(a.parameters()) for a in answers if a.output_tensors()]
            out = pb_utils.Tensor("OUTPUT", np.array([[json.dumps(seen)]], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_STRING dims: [ 1 ] } ]
%s
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory, serve):
    root = tmp_path_factory.mktemp("parameter_models")
    repository = ModelRepository(root)
    decoupled = "model_transaction_policy { decoupled: true }"
    for name, source, extra in (
        ("parameters", PARAMETERS, ""),
        ("parameters_decoupled", PARAMETERS_DECOUPLED, decoupled),
        ("parameters_bls", PARAMETERS_BLS, ""),
    ):
        repository.add_model(name, dedent(CONFIG % extra), versions={1: {"model.py": source}})
    with serve(root) as process:
        yield process


def parameters_input(value: object) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("PARAMETERS", [1, 1], "BYTES")]
    inputs[0].set_data_from_numpy(np.array([[json.dumps(value)]], dtype=np.object_))
    return inputs


def parameters_of(result: grpcclient.InferResult) -> dict[str, object]:
    found = {}
    for key, value in result.get_response().parameters.items():
        found[key] = getattr(value, value.WhichOneof("parameter_choice"))
    return found


@pytest.mark.parametrize(
    "parameters",
    [{}, {"many_elements": False}, {"a": "1", "b": "2", "c": 3, "d": False, "e": 5, "f": ""}],
)
def test_response_parameters_reach_the_client(server, parameters):
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("parameters", parameters_input(parameters))
    assert parameters_of(result) == parameters


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ([], "Expect N8pybind114dictE, got <class 'list'>"),
        ({"1": "int key"}, "Expect parameters keys to have type str, found type <class 'int'>"),
        (
            {"int": 2, "float": 0.5},
            "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        ),
        (
            {"bool": True, "null": None},
            "Expect parameters values to have type bool/int/str, found type <class 'NoneType'>",
        ),
        (
            {"str": "", "list": ["variable"]},
            "Expect parameters values to have type bool/int/str, found type <class 'list'>",
        ),
    ],
)
def test_bad_response_parameters_fail_with_tritons_messages(server, parameters, message):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with client, pytest.raises(InferenceServerException) as info:
        client.infer("parameters", parameters_input(parameters))
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == message


def test_decoupled_responses_carry_their_parameters(server):
    sent = [{"bool": False, "int": 2048}, {"str": "Hello World!"}]
    answers: queue.SimpleQueue[object] = queue.SimpleQueue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        client.async_stream_infer("parameters_decoupled", parameters_input(sent))
        received = [parameters_of(answers.get(timeout=60)) for _ in sent]
        client.stop_stream()
    assert received == [{**p, "triton_final_response": False} for p in sent]


def test_bls_responses_carry_the_called_models_parameters(server):
    sent = {"bool": False, "int": 2048, "str": "Hello World!"}
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("parameters_bls", parameters_input(sent))
    seen = json.loads(result.as_numpy("OUTPUT")[0][0])
    # a decoupled model's BLS responses have no triton_final_response, unlike a stream's
    assert seen == {"parameters": [sent], "parameters_decoupled": [sent]}
