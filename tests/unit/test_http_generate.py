"""The generate extension (/generate, /generate_stream) against a stand-in server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import falcon.testing
import numpy as np
import orjson
import pytest

from triton_core.errors import internal, invalid_arg
from triton_core.frontends.http import create_app
from triton_core.frontends.http.generate import (
    SSE_CONTENT_TYPE,
    decode_generate_request,
    encode_generate_response,
    sse_event,
)
from triton_core.types import (
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    Tensor,
    TensorMetadata,
)

Script = Callable[[InferenceRequest], list[InferenceResponse | Exception]]

LLM = ModelMetadata(
    "llm",
    ("1",),
    "python",
    (
        TensorMetadata("text_input", "BYTES", (1,)),
        TensorMetadata("max_tokens", "INT32", (1,)),
        TensorMetadata("stream", "BOOL", (1,)),
        TensorMetadata("temperature", "FP32", (1,)),
    ),
    (TensorMetadata("text_output", "BYTES", (1,)),),
)
BATCHED = ModelMetadata(
    "batched",
    ("1",),
    "python",
    (TensorMetadata("ids", "INT64", (-1, -1)), TensorMetadata("pairs", "UINT8", (-1, 2, -1))),
    (TensorMetadata("out", "FP32", (-1, 3)),),
)


def text(request: InferenceRequest, value: str, final: bool = True) -> InferenceResponse:
    data = np.array([value.encode()], dtype=object)
    return InferenceResponse(
        [Tensor("text_output", "BYTES", data)],
        model_name=request.model_name,
        model_version=1,
        id=request.id,
        final=final,
    )


def empty_final(request: InferenceRequest) -> InferenceResponse:
    return InferenceResponse(model_name=request.model_name, model_version=1, id=request.id)


class StandIn:
    """model_metadata + infer_stream, answering what ``script`` says for each request."""

    def __init__(self) -> None:
        self.requests: list[InferenceRequest] = []
        self.closed = 0
        self.script: Script = lambda request: [text(request, "echo")]

    def model_metadata(self, name: str, version: int = -1) -> ModelMetadata:
        for metadata in (LLM, BATCHED):
            if metadata.name == name:
                return metadata
        raise invalid_arg(f"Request for unknown model: '{name}' is not found")

    async def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        self.requests.append(request)
        try:
            for item in self.script(request):
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            self.closed += 1


@pytest.fixture
def server() -> StandIn:
    return StandIn()


@pytest.fixture
def client(server: StandIn) -> falcon.testing.TestClient:
    return falcon.testing.TestClient(create_app(server))  # type: ignore[arg-type]


def post(client, path: str, body: Any) -> falcon.testing.Result:
    data = body if isinstance(body, str | bytes) else orjson.dumps(body)
    return client.simulate_post(path, body=data)


# ------------------------------------------------------------------------------------------
# decoding


def test_keys_naming_inputs_become_tensors_and_the_rest_parameters():
    request = decode_generate_request(
        "llm",
        -1,
        orjson.dumps(
            {
                "id": "42",
                "text_input": "hello",
                "max_tokens": 7,
                "parameters": {"stream": False, "temperature": 0.5, "top_k": 3, "name": "x"},
                "seed": 11,
            }
        ),
        LLM,
    )
    assert request.id == "42"
    assert request.inputs["text_input"].data.tolist() == [b"hello"]
    assert request.inputs["text_input"].datatype == "BYTES"
    assert request.inputs["max_tokens"].data.dtype == np.int32
    assert request.inputs["max_tokens"].data.tolist() == [7]
    assert request.inputs["stream"].data.tolist() == [False]
    assert request.inputs["temperature"].data.dtype == np.float32
    assert request.parameters == {"top_k": 3, "name": "x", "seed": 11}


def test_shapes_come_from_the_metadata():
    request = decode_generate_request(
        "batched", -1, orjson.dumps({"ids": [1, 2, 3], "pairs": [[1, 2], [3, 4], [5, 6]]}), BATCHED
    )
    assert request.inputs["ids"].data.shape == (1, 3)  # innermost variable dim takes the rest
    assert request.inputs["pairs"].data.shape == (1, 2, 3)  # fixed dims divide the count
    with pytest.raises(Exception, match="5 elements do not fit the shape"):
        decode_generate_request("batched", -1, orjson.dumps({"pairs": [1, 2, 3, 4, 5]}), BATCHED)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"text_input": 123},
            "Unable to parse JSON bytes array: attempt to access JSON non-string",
        ),
        (
            {"stream": "false"},
            "Unable to parse 'data': attempt to access JSON non-boolean as boolean",
        ),
        ({"max_tokens": 1.5}, "attempt to access JSON non-signed-integer as signed-integer"),
        ({"max_tokens": True}, "attempt to access JSON non-signed-integer as signed-integer"),
        ({"temperature": "hot"}, "attempt to access JSON non-double as double"),
        ({"text_input": {"user": "x"}}, "attempt to access JSON non-string as string"),
        (
            {"PARAMS": {"a": 1}},
            "parameter 'PARAMS' has invalid type. It should be either 'int', 'bool', or 'string'.",
        ),
        (
            {"parameters": {"nested": {"twice": 1}}},
            "Converting keyword: 'parameters': parameter 'nested' has invalid type.",
        ),
        (
            {"parameters": 1},
            "Expected JSON object for keyword: 'parameters': attempt to access "
            "JSON non-object as object",
        ),
        ({"id": 5}, "Unable to parse 'id': attempt to access JSON non-string as string"),
        ({"text_input": ["a", "b"]}, "needs 1 elements for its shape [1], got 2"),
        ({"max_tokens": 1 << 40}, "out of range for INT32"),
        ('{"text_input": "a", "text_input": "b"}', "input 'text_input' already exists in request"),
        ('{"text_input": "a", "parameters": {"text_input": "b"}}', "already exists in request"),
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "failed to parse the generate request JSON"),
        ({"triton_x": 1}, "reserved for Triton usage"),
    ],
)
def test_bad_requests_say_what_is_wrong(body, message):
    data = body.encode() if isinstance(body, str) else orjson.dumps(body)
    with pytest.raises(Exception, match=None) as info:
        decode_generate_request("llm", -1, data, LLM)
    assert message in info.value.message


def test_sequence_parameters_set_the_request_fields():
    request = decode_generate_request(
        "llm", -1, orjson.dumps({"sequence_id": 9, "sequence_start": True, "priority": 2}), LLM
    )
    assert request.correlation_id == 9 and int(request.flags) == 1 and request.priority == 2


def test_response_fields():
    response = InferenceResponse(
        [
            Tensor("text_output", "BYTES", np.array([b"hi \xc3\xa9"], dtype=object)),
            Tensor("logits", "FP32", np.array([[0.5, 1.5]], dtype=np.float32)),
            Tensor("count", "INT64", np.array([[3]])),
        ],
        parameters={"finish": "stop"},
        model_name="llm",
        model_version=2,
        id="a",
    )
    assert orjson.loads(encode_generate_response(response)) == {
        "id": "a",
        "model_name": "llm",
        "model_version": "2",
        "finish": "stop",
        "text_output": "hi é",
        "logits": [0.5, 1.5],
        "count": 3,
    }
    assert sse_event(b'{"a":1}') == b'data: {"a":1}\n\n'


# ------------------------------------------------------------------------------------------
# /generate


def test_generate_answers_one_json_object(client, server):
    result = post(client, "/v2/models/llm/generate", {"text_input": "hi", "id": "r1"})
    assert result.status_code == 200
    assert result.headers["content-type"].startswith("application/json")
    assert result.json == {
        "id": "r1", "model_name": "llm", "model_version": "1", "text_output": "echo"
    }  # fmt: skip
    assert server.requests[0].inputs["text_input"].data.tolist() == [b"hi"]
    versioned = post(client, "/v2/models/llm/versions/1/generate", {"text_input": "hi"})
    assert versioned.status_code == 200 and server.requests[1].model_version == 1


def test_generate_takes_one_response_and_a_flag_only_final(client, server):
    server.script = lambda request: [text(request, "one", final=False), empty_final(request)]
    result = post(client, "/v2/models/llm/generate", {"text_input": "hi"})
    assert result.status_code == 200 and result.json["text_output"] == "one"


@pytest.mark.parametrize("count", [0, 2])
def test_generate_refuses_other_response_counts(client, server, count):
    server.script = lambda request: [
        *(text(request, str(i), final=False) for i in range(count)),
        empty_final(request),
    ]
    result = post(client, "/v2/models/llm/generate", {"text_input": "hi"})
    assert result.status_code == 400
    assert "generate expects model to produce exactly 1 response" in result.json["error"]


def test_generate_errors_keep_their_status(client, server):
    server.script = lambda request: [internal("the model failed")]
    result = post(client, "/v2/models/llm/generate", {"text_input": "hi"})
    assert result.status_code == 500 and result.json == {"error": "the model failed"}
    unknown = post(client, "/v2/models/nope/generate", {"text_input": "hi"})
    assert unknown.status_code == 400 and "unknown model" in unknown.json["error"]
    # Triton answers values of the wrong JSON type with TritonJson's INTERNAL status
    bad = post(client, "/v2/models/llm/generate", {"text_input": 1})
    assert bad.status_code == 500 and "Unable to parse JSON bytes array" in bad.json["error"]


# ------------------------------------------------------------------------------------------
# /generate_stream


def events(body: bytes) -> list[dict]:
    assert body.endswith(b"\n\n")
    chunks = body[:-2].split(b"\n\n")
    assert all(chunk.startswith(b"data: ") for chunk in chunks)
    return [orjson.loads(chunk[len(b"data: ") :]) for chunk in chunks]


def test_generate_stream_sends_each_response_as_an_event(client, server):
    server.script = lambda request: [
        text(request, "a", final=False),
        text(request, "b", final=False),
        empty_final(request),  # a flag-only completion is not an event
    ]
    result = post(client, "/v2/models/llm/generate_stream", {"text_input": "hi", "id": "s"})
    assert result.status_code == 200
    assert result.headers["content-type"] == SSE_CONTENT_TYPE
    assert [event["text_output"] for event in events(result.content)] == ["a", "b"]
    assert all(event["id"] == "s" for event in events(result.content))
    assert server.closed == 1


def test_generate_stream_error_after_a_response_is_an_error_event(client, server):
    server.script = lambda request: [text(request, "a", final=False), internal("broke")]
    result = post(client, "/v2/models/llm/generate_stream", {"text_input": "hi"})
    assert result.status_code == 200
    assert events(result.content) == [
        {"model_name": "llm", "model_version": "1", "text_output": "a"},
        {"error": "broke"},
    ]


def test_generate_stream_error_before_any_response_has_its_status(client, server):
    server.script = lambda request: [invalid_arg("no such thing")]
    result = post(client, "/v2/models/llm/generate_stream", {"text_input": "hi"})
    assert result.status_code == 400 and result.json == {"error": "no such thing"}
    assert server.closed == 1


def test_generate_stream_error_once_the_model_has_the_request_is_an_event_with_its_status(
    client, server
):
    def model_fails(request: InferenceRequest) -> list[Exception]:
        request.queued_ns = 1  # what the server's scheduler sets when it takes a request
        return [internal("An Error Occurred")]

    server.script = model_fails
    result = post(client, "/v2/models/llm/generate_stream", {"text_input": "hi"})
    assert result.status_code == 500
    assert result.headers["content-type"] == SSE_CONTENT_TYPE
    assert events(result.content) == [{"error": "An Error Occurred"}]
    assert server.closed == 1


def test_generate_stream_with_no_response_is_an_empty_stream(client, server):
    server.script = lambda request: [empty_final(request)]
    result = post(client, "/v2/models/llm/generate_stream", {"text_input": "hi"})
    assert result.status_code == 200 and result.content == b""


@pytest.mark.parametrize("route", ["generate", "generate_stream"])
def test_forwarded_headers_reach_generate_requests_as_on_infer(server: StandIn, route: str):
    import re

    from triton_core.frontends.header_forwarding import HeaderForwarder

    app = create_app(server, header_forwarder=HeaderForwarder(re.compile("^x-")))  # type: ignore[arg-type]
    client = falcon.testing.TestClient(app)
    result = client.simulate_post(
        f"/v2/models/llm/{route}",
        body=orjson.dumps({"text_input": "hi"}),
        headers={"X-Tenant": "a", "Other": "b"},
    )
    assert result.status_code == 200, result.text
    assert server.requests[0].parameters == {"x-tenant": "a"}
