"""The generate extension against a decoupled Python model shaped like Triton's QA ``mock_llm``.

What Triton 2.51 answers for each case was checked with the same model: a 0-dimension FP64
output of a STRING output is ``[]``; an error as the model's first response makes the status
and comes as a Server-Sent Event; missing inputs and values of the wrong JSON type are refused
in Triton's words.
"""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import orjson
import pytest
import requests

from tests.support import ServerProcess, serve_until_done

pytestmark = pytest.mark.timeout(300)

CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "PROMPT" data_type: TYPE_STRING dims: [ 1, 1 ] },
  { name: "STREAM" data_type: TYPE_BOOL dims: [ 1, 1 ] },
  { name: "input_ids" data_type: TYPE_INT32 dims: [ 1, -1 ] optional: true }
]
output [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1, -1 ] } ]
"""

MODEL = dedent(
    """
    import json

    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            for request in requests:
                params = json.loads(request.parameters())
                sender = request.get_response_sender()
                prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
                value = np.array([]) if params.get("OUTPUT_0_DIM") else prompt
                response = pb_utils.InferenceResponse([pb_utils.Tensor("TEXT", value)])
                for _ in range(params.get("REPETITION", 1)):
                    sender.send(response)
                last = None
                if params.get("FAIL_LAST"):
                    last = pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("An Error Occurred")
                    )
                sender.send(last, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
    """
)

SSE = "text/event-stream; charset=utf-8"


@pytest.fixture(scope="module")
def server(tmp_path_factory):  # type: ignore[no-untyped-def]
    repo: Path = tmp_path_factory.mktemp("generate")
    (repo / "mock_llm" / "1").mkdir(parents=True)
    (repo / "mock_llm" / "config.pbtxt").write_text(CONFIG)
    (repo / "mock_llm" / "1" / "model.py").write_text(MODEL)
    yield from serve_until_done(ServerProcess([repo]))


def post(server, route: str, body: dict) -> requests.Response:  # type: ignore[no-untyped-def]
    url = f"http://{server.http_url}/v2/models/mock_llm/{route}"
    return requests.post(url, data=orjson.dumps(body), timeout=60)


def events(response: requests.Response) -> list[dict]:
    chunks = response.content.split(b"\n\n")
    assert chunks[-1] == b""
    return [orjson.loads(chunk.removeprefix(b"data: ")) for chunk in chunks[:-1]]


def test_a_zero_dimension_output_is_an_empty_list(server) -> None:
    body = {"PROMPT": "hello world", "STREAM": False, "OUTPUT_0_DIM": True}
    answer = post(server, "generate", body)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Content-Type"] == "application/json"
    assert answer.json()["TEXT"] == []


def test_a_failing_first_response_sets_the_status_and_is_an_event(server) -> None:
    body = {"PROMPT": ["hello"], "STREAM": True, "REPETITION": 0, "FAIL_LAST": True}
    answer = post(server, "generate_stream", body)
    assert answer.status_code >= 400
    assert answer.headers["Content-Type"] == SSE
    assert events(answer) == [{"error": "An Error Occurred"}]


def test_a_failing_later_response_is_an_event_after_a_200(server) -> None:
    body = {"PROMPT": ["hello"], "STREAM": True, "REPETITION": 1, "FAIL_LAST": True}
    answer = post(server, "generate_stream", body)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"] == SSE
    assert [event.get("TEXT", event.get("error")) for event in events(answer)] == [
        "hello",
        "An Error Occurred",
    ]


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (
            {},
            400,
            "expected number of inputs between 2 and 3 but got 0 inputs for model 'mock_llm'. "
            "Got input(s) [], but missing required input(s) ['PROMPT','STREAM']. Please "
            "provide all required input(s).",
        ),
        (
            {"STREAM": False, "other": "param"},
            400,
            "expected number of inputs between 2 and 3 but got 1 inputs for model 'mock_llm'. "
            "Got input(s) ['STREAM'], but missing required input(s) ['PROMPT'].",
        ),
        (
            {"PROMPT": 123, "STREAM": False},
            500,
            "Unable to parse JSON bytes array: attempt to access JSON non-string as string",
        ),
        (
            {"STREAM": 123, "PROMPT": True},
            500,
            "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
        ),
        (
            {"PROMPT": "x", "STREAM": True, "parameters": {"nested": {"twice": 1}}},
            400,
            "Converting keyword: 'parameters': parameter 'nested' has invalid type. It should "
            "be either 'int', 'bool', or 'string'.",
        ),
        (
            {"PROMPT": "x", "STREAM": True, "parameters": 1},
            500,
            "Expected JSON object for keyword: 'parameters': attempt to access JSON non-object "
            "as object",
        ),
    ],
)
def test_refused_requests_get_tritons_words_as_json(
    server, route: str, body: dict, status: int, message: str
) -> None:
    answer = post(server, route, body)
    assert answer.status_code == status
    assert answer.headers["Content-Type"] == "application/json"
    assert message in answer.json()["error"]
