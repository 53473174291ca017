"""HTTP/REST frontend routes, status codes and bodies, against a stand-in server."""

from __future__ import annotations

import asyncio
import gzip
import logging
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

import falcon.testing
import numpy as np
import orjson
import pytest
import tritonclient.http as httpclient

from tests.fake_server import FakeModel, FakeServer
from triton_core.errors import invalid_arg, not_found, unavailable
from triton_core.frontends.http import create_app
from triton_core.frontends.http.fast_path import create_asgi_app
from triton_core.types import (
    InferenceRequest,
    InferenceResponse,
    Tensor,
    TensorMetadata,
)

build_body = httpclient.InferenceServerClient.generate_request_body
parse_body = httpclient.InferenceServerClient.parse_response_body

Handler = Callable[[InferenceRequest], Awaitable[InferenceResponse]]


async def echo(request: InferenceRequest) -> InferenceResponse:
    """INPUTn -> OUTPUTn, like Triton's identity models."""
    outputs = [
        Tensor(name.replace("INPUT", "OUTPUT"), tensor.datatype, tensor.data)
        for name, tensor in request.inputs.items()
    ]
    return InferenceResponse(
        outputs=outputs, model_name=request.model_name, model_version=1, id=request.id
    )


#: the tensors of every canned model, as an ONNX identity model's
_IDENTITY = (
    (TensorMetadata("INPUT0", "FP32", (-1, -1)),),
    (TensorMetadata("OUTPUT0", "FP32", (-1, -1)),),
)


class StubServer(FakeServer):
    """The verified fake with the canned models the HTTP frontend is tested against."""

    def __init__(self) -> None:
        platform = "onnxruntime_onnx"
        super().__init__(
            [
                FakeModel("simple", *_IDENTITY, versions=(1, 2), platform=platform),
                FakeModel("my model", *_IDENTITY, platform=platform),
                FakeModel("streamer", *_IDENTITY, decoupled=True, platform=platform),
            ],
            handler=echo,
        )


@pytest.fixture
def server() -> StubServer:
    return StubServer()


@pytest.fixture(params=["falcon", "fast-path"])
def app_factory(request: pytest.FixtureRequest) -> Any:
    """Every test runs on the falcon app alone and behind the infer fast path, as served."""
    return create_app if request.param == "falcon" else create_asgi_app


@pytest.fixture
def client(server: StubServer, app_factory: Any) -> falcon.testing.TestClient:
    return falcon.testing.TestClient(app_factory(server))


def assert_error(result: falcon.testing.Result, status: int, message: str) -> None:
    assert result.status_code == status, result.text
    assert result.headers["content-type"] == "application/json"
    assert result.json == {"error": message}


def binary_infer_body(values: np.ndarray, **kwargs: Any) -> tuple[bytes, dict[str, str]]:
    infer_input = httpclient.InferInput("INPUT0", list(values.shape), "FP32")
    infer_input.set_data_from_numpy(values)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    body, header_length = build_body([infer_input], outputs=outputs, **kwargs)
    return body, {"Inference-Header-Content-Length": str(header_length)}


def parse_result(result: falcon.testing.Result) -> Any:
    length = result.headers.get("inference-header-content-length")
    return parse_body(
        result.content,
        header_length=int(length) if length is not None else None,
        content_encoding=result.headers.get("content-encoding"),
    )


# ------------------------------------------------------------------------------------------
# health and metadata


def test_health(client: falcon.testing.TestClient, server: StubServer) -> None:
    for path in ("/v2/health/live", "/v2/health/ready"):
        result = client.simulate_get(path)
        assert result.status_code == 200 and result.content == b""
    server.live = server.ready = False
    for path in ("/v2/health/live", "/v2/health/ready"):
        result = client.simulate_get(path)
        assert result.status_code == 400 and result.content == b""


def test_server_metadata(client: falcon.testing.TestClient) -> None:
    result = client.simulate_get("/v2")
    assert result.status_code == 200
    assert result.content == (
        b'{"name":"triton","version":"2.73.0",'
        b'"extensions":["binary_tensor_data","model_configuration"]}'
    )


@pytest.mark.parametrize(
    ("path", "versions"),
    [("/v2/models/simple", ["1"]), ("/v2/models/simple/versions/2", ["2"])],
)
def test_model_metadata(client: falcon.testing.TestClient, path: str, versions: list) -> None:
    result = client.simulate_get(path)
    assert result.status_code == 200
    assert list(result.json) == ["name", "versions", "platform", "inputs", "outputs"]
    assert result.json["versions"] == versions
    assert result.json["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, -1]}]


def test_model_config(client: falcon.testing.TestClient) -> None:
    result = client.simulate_get("/v2/models/simple/versions/1/config")
    assert result.status_code == 200
    assert result.json["max_batch_size"] == 8


def test_model_ready(client: falcon.testing.TestClient) -> None:
    assert client.simulate_get("/v2/models/simple/ready").status_code == 200
    assert client.simulate_get("/v2/models/simple/versions/1/ready").content == b""
    assert_error(
        client.simulate_get("/v2/models/simple/versions/2/ready"), 400, "Model version not ready"
    )
    assert_error(
        client.simulate_get("/v2/models/nope/ready"),
        400,
        "Request for unknown model: 'nope' is not found",
    )


def test_unknown_model_metadata(client: falcon.testing.TestClient) -> None:
    assert_error(
        client.simulate_get("/v2/models/nope"),
        400,
        "Request for unknown model: 'nope' is not found",
    )


def test_percent_encoded_model_name_and_query_strings(client: falcon.testing.TestClient) -> None:
    assert client.simulate_get("/v2/models/my%20model/ready").status_code == 200
    assert client.simulate_get("/v2/models/my%20model", query_string="a=1").json["name"] == (
        "my model"
    )
    assert client.simulate_get("/v2/health/live", query_string="x=y&z").status_code == 200
    body, headers = binary_infer_body(np.ones((1, 4), np.float32))
    result = client.simulate_post(
        "/v2/models/my%20model/infer", body=body, headers=headers, query_string="test=1"
    )
    assert result.status_code == 200
    assert parse_result(result).get_response()["model_name"] == "my model"


# ------------------------------------------------------------------------------------------
# routing errors


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/v2/",
        "/v2/health",
        "/v2/health/live/",
        "/v2/models",
        "/v2/models/simple/versions/x",
        "/v2/models/simple/versions/-1/ready",
        "/v2/models/simple/versions//ready",
        "/v2/models/simple/unknown",
        "/v2/models/simple/versions/1/trace/setting",
        "/v3/models/simple",
    ],
)
def test_unknown_paths_are_404(client: falcon.testing.TestClient, path: str) -> None:
    assert_error(client.simulate_get(path), 404, "Not Found")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v2/health/live"),
        ("PUT", "/v2"),
        ("DELETE", "/v2/models/simple"),
        ("GET", "/v2/models/simple/infer"),
        ("POST", "/v2/models/simple/ready"),
        ("OPTIONS", "/v2/health/ready"),
        ("GET", "/v2/repository/index"),
        ("PATCH", "/v2/logging"),
    ],
)
def test_wrong_methods_are_405(client: falcon.testing.TestClient, method: str, path: str) -> None:
    assert_error(client.simulate_request(method, path), 405, "Method Not Allowed")


@pytest.mark.parametrize(
    ("method", "path", "feature"),
    [
        ("POST", "/v2/repository/other/index", "'repository_name' specification"),
        ("POST", "/v2/repository/other/models/simple/load", "'repository_name' specification"),
    ],
)
def test_unimplemented_extensions_are_501(
    client: falcon.testing.TestClient, method: str, path: str, feature: str
) -> None:
    assert_error(client.simulate_request(method, path), 501, f"{feature} is not supported")


# ------------------------------------------------------------------------------------------
# inference


def test_infer_binary_with_tritonclient_body(
    client: falcon.testing.TestClient, server: StubServer
) -> None:
    values = np.random.default_rng(0).random((1, 16), dtype=np.float32)
    body, headers = binary_infer_body(values, request_id="r1")
    result = client.simulate_post("/v2/models/simple/versions/1/infer", body=body, headers=headers)
    assert result.status_code == 200, result.text
    assert result.headers["content-type"] == "application/octet-stream"
    assert int(result.headers["content-length"]) == len(result.content)
    parsed = parse_result(result)
    np.testing.assert_array_equal(parsed.as_numpy("OUTPUT0"), values)
    assert parsed.get_response()["id"] == "r1"
    assert parsed.get_response()["model_version"] == "1"
    assert server.requests[0].model_version == 1


def test_infer_json(client: falcon.testing.TestClient) -> None:
    body = {"inputs": [{"name": "INPUT0", "shape": [1, 2], "datatype": "INT32", "data": [[1, 2]]}]}
    result = client.simulate_post("/v2/models/simple/infer", body=orjson.dumps(body))
    assert result.status_code == 200
    assert result.headers["content-type"] == "application/json"
    assert "inference-header-content-length" not in result.headers
    assert result.json == {
        "model_name": "simple",
        "model_version": "1",
        "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 2], "data": [1, 2]}],
    }


def test_infer_raw_binary_request(client: falcon.testing.TestClient, server: StubServer) -> None:
    values = np.arange(5, dtype=np.float32)
    result = client.simulate_post(
        "/v2/models/simple/infer",
        body=values.tobytes(),
        headers={"Inference-Header-Content-Length": "0"},
    )
    assert result.status_code == 200, result.text
    assert server.requests[0].inputs["INPUT0"].data.shape == (1, 5)
    np.testing.assert_array_equal(parse_result(result).as_numpy("OUTPUT0"), values[None])


def test_infer_decoupled_model_is_501(client: falcon.testing.TestClient) -> None:
    body, headers = binary_infer_body(np.ones((1, 2), np.float32))
    assert_error(
        client.simulate_post("/v2/models/streamer/infer", body=body, headers=headers),
        501,
        "HTTP end point doesn't support models with decoupled transaction policy",
    )


def test_infer_unknown_model(client: falcon.testing.TestClient) -> None:
    assert_error(
        client.simulate_post("/v2/models/nope/infer", body=b"{}"),
        400,
        "Request for unknown model: 'nope' is not found",
    )


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (invalid_arg("unexpected shape for input 'INPUT0' for model 'simple'"), 400),
        (not_found("gone"), 404),
        (unavailable("Request for model 'simple' version 1 is not at ready state"), 503),
    ],
)
def test_infer_errors_keep_their_status(
    client: falcon.testing.TestClient, server: StubServer, error: Exception, status: int
) -> None:
    async def fail(request: InferenceRequest) -> InferenceResponse:
        raise error

    server.handler = fail
    body, headers = binary_infer_body(np.ones((1, 2), np.float32))
    result = client.simulate_post("/v2/models/simple/infer", body=body, headers=headers)
    assert_error(result, status, str(error))


def test_infer_response_with_error(client: falcon.testing.TestClient, server: StubServer) -> None:
    async def fail(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(error=invalid_arg("model said no"))

    server.handler = fail
    body, headers = binary_infer_body(np.ones((1, 2), np.float32))
    result = client.simulate_post("/v2/models/simple/infer", body=body, headers=headers)
    assert_error(result, 400, "model said no")


def test_unexpected_exception_is_500_and_logged(
    client: falcon.testing.TestClient, server: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    async def crash(request: InferenceRequest) -> InferenceResponse:
        raise RuntimeError("boom")

    server.handler = crash
    body, headers = binary_infer_body(np.ones((1, 2), np.float32))
    with caplog.at_level(logging.ERROR):
        result = client.simulate_post("/v2/models/simple/infer", body=body, headers=headers)
    assert_error(result, 500, "boom")
    assert "boom" in caplog.text


@pytest.mark.parametrize("value", ["100000", "-1", "abc"])
def test_bad_inference_header_length(client: falcon.testing.TestClient, value: str) -> None:
    body, _ = binary_infer_body(np.ones((1, 2), np.float32))
    result = client.simulate_post(
        "/v2/models/simple/infer", body=body, headers={"Inference-Header-Content-Length": value}
    )
    assert result.status_code == 400
    if value == "abc":
        assert (
            result.json["error"] == f"Unable to parse Inference-Header-Content-Length, got: {value}"
        )
    else:
        assert result.json["error"] == (
            f"inference header size should be in range (0, {len(body)}), got: {value}"
        )


def test_wire_errors_are_400(client: falcon.testing.TestClient) -> None:
    result = client.simulate_post("/v2/models/simple/infer", body=b"{broken")
    assert result.status_code == 400
    assert result.json["error"].startswith("failed to parse the request JSON buffer")
    body, headers = binary_infer_body(np.ones((1, 2), np.float32))
    result = client.simulate_post("/v2/models/simple/infer", body=body + b"x", headers=headers)
    assert_error(result, 400, "unexpected additional input data for model 'simple'")


# ------------------------------------------------------------------------------------------
# compression


@pytest.mark.parametrize(
    ("encoding", "compress"), [("gzip", gzip.compress), ("deflate", zlib.compress)]
)
def test_compressed_request(
    client: falcon.testing.TestClient, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    values = np.arange(16, dtype=np.float32).reshape(1, 16)
    body, headers = binary_infer_body(values)
    result = client.simulate_post(
        "/v2/models/simple/infer",
        body=compress(body),
        headers={**headers, "Content-Encoding": encoding},
    )
    assert result.status_code == 200, result.text
    np.testing.assert_array_equal(parse_result(result).as_numpy("OUTPUT0"), values)


def test_unknown_request_encoding(client: falcon.testing.TestClient) -> None:
    result = client.simulate_post(
        "/v2/models/simple/infer", body=b"xx", headers={"Content-Encoding": "br"}
    )
    assert_error(result, 501, "Unsupported compression type")
    assert result.headers["accept-encoding"] == "gzip, deflate"


def test_corrupt_compressed_request(client: falcon.testing.TestClient) -> None:
    result = client.simulate_post(
        "/v2/models/simple/infer", body=b"not gzip", headers={"Content-Encoding": "gzip"}
    )
    assert result.status_code == 400
    assert "failed to decompress" in result.json["error"]


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("gzip", "gzip"),
        ("deflate", "deflate"),
        ("gzip;q=0.5, deflate;q=0.8", "deflate"),
        ("deflate;q=0.5, gzip", "gzip"),
        ("identity, gzip;q=0.9", None),
        ("gzip;q=0", None),
        ("br, *", None),
    ],
)
def test_response_compression(
    client: falcon.testing.TestClient, accept: str, expected: str | None
) -> None:
    values = np.arange(16, dtype=np.float32).reshape(1, 16)
    body, headers = binary_infer_body(values)
    result = client.simulate_post(
        "/v2/models/simple/infer", body=body, headers={**headers, "Accept-Encoding": accept}
    )
    assert result.status_code == 200
    assert result.headers.get("content-encoding") == expected
    # the header length is the uncompressed JSON's
    header_length = int(result.headers["inference-header-content-length"])
    raw = {"gzip": gzip.decompress, "deflate": zlib.decompress}.get(expected, bytes)(result.content)
    assert orjson.loads(raw[:header_length])["model_name"] == "simple"
    np.testing.assert_array_equal(parse_result(result).as_numpy("OUTPUT0"), values)


# ------------------------------------------------------------------------------------------
# size limit


def test_oversized_body(server: StubServer, app_factory: Any) -> None:
    client = falcon.testing.TestClient(app_factory(server, max_input_size=1000))
    body, headers = binary_infer_body(np.ones((1, 256), np.float32))
    result = client.simulate_post("/v2/models/simple/infer", body=body, headers=headers)
    assert result.status_code == 400
    message = result.json["error"]
    assert f"({len(body)} bytes)" in message and "1000 bytes" in message
    assert "--http-max-input-size" in message


def test_oversized_after_decompression(server: StubServer, app_factory: Any) -> None:
    client = falcon.testing.TestClient(app_factory(server, max_input_size=1000))
    body, headers = binary_infer_body(np.zeros((1, 256), np.float32))
    compressed = gzip.compress(body)
    assert len(compressed) < 1000
    result = client.simulate_post(
        "/v2/models/simple/infer", body=compressed, headers={**headers, "Content-Encoding": "gzip"}
    )
    assert result.status_code == 400
    assert result.json["error"].startswith("decompressed request body size exceeds")
    assert "--http-max-input-size" in result.json["error"]


def asgi_scope(
    method: str, path: str, headers: list[tuple[bytes, bytes]], raw_path: bytes | None = None
) -> dict[str, Any]:
    """An ASGI HTTP scope as the HTTP server builds it."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode() if raw_path is None else raw_path,
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }


async def asgi_exchange(app: Any, scope: dict[str, Any], events: list[dict]) -> list[dict]:
    """Run ``app`` on ``scope``, receiving ``events`` (then a disconnect); what it sent."""
    sent: list[dict] = []

    async def receive() -> dict:
        return events.pop(0) if events else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def call_chunked(app: Any, path: str, chunks: list[bytes]) -> tuple[int, bytes]:
    """A POST with no Content-Length (chunked transfer), straight through ASGI."""
    scope = asgi_scope("POST", path, [(b"host", b"localhost"), (b"transfer-encoding", b"chunked")])
    events = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent = await asgi_exchange(app, scope, events)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_chunked_body_limit(server: StubServer, app_factory: Any) -> None:
    app = app_factory(server, max_input_size=100)
    doc = orjson.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
    )
    status, body = asyncio.run(call_chunked(app, "/v2/models/simple/infer", [doc[:10], doc[10:]]))
    assert status == 200, body
    status, body = asyncio.run(call_chunked(app, "/v2/models/simple/infer", [doc, b" " * 60]))
    assert status == 400
    assert "--http-max-input-size" in orjson.loads(body)["error"]


@pytest.mark.parametrize(
    ("path", "name"),
    [("/v2/models/..%2F..%2Fetc/ready", "../../etc"), ("/v2/models/a%2fb%20c", "a/b c")],
)
def test_encoded_slash_stays_in_the_model_name(
    client: falcon.testing.TestClient, path: str, name: str
) -> None:
    assert_error(
        client.simulate_get(path), 400, f"Request for unknown model: '{name}' is not found"
    )
    assert_error(
        client.simulate_post(path.removesuffix("/ready") + "/infer", body=b"{}"),
        400,
        f"Request for unknown model: '{name}' is not found",
    )


def _binary_body(header: dict[str, Any], binary_size: int) -> tuple[bytes, str]:
    text = orjson.dumps(header)
    return text + bytes(binary_size), str(len(text))


@pytest.mark.parametrize(
    ("datatype", "binary_size", "off_loop"),
    [
        ("FP32", 1 << 16, False),  # small: decoded on the loop, as always
        ("FP32", 1 << 22, False),  # large fixed-size tensors are views: no work to move off
        ("BYTES", 1 << 22, True),  # large BYTES: work per element, in a thread
        ("BYT\\u0045S", 1 << 22, True),  # an escaped datatype could hide BYTES: in a thread
        ("FP32", (1 << 20) - 200, False),
    ],
)
def test_which_large_bodies_are_decoded_in_a_thread(
    datatype: str, binary_size: int, off_loop: bool
) -> None:
    from triton_core.frontends.http.decoding import decodes_off_loop

    header = {"inputs": [{"name": "x", "datatype": "@", "shape": [binary_size],
                          "parameters": {"binary_data_size": binary_size}}]}  # fmt: skip
    body, length = _binary_body(header, binary_size)
    body = body.replace(b'"@"', b'"' + datatype.encode() + b'"')
    length = str(int(length) + len(datatype) - 1)
    assert decodes_off_loop(body, length) is off_loop


def test_large_json_raw_or_unframed_bodies_are_decoded_in_a_thread() -> None:
    from triton_core.frontends.http.decoding import decodes_off_loop

    big_json = orjson.dumps({"inputs": [{"data": list(range(20_000))}]})
    assert decodes_off_loop(big_json, None)  # all JSON, larger than 64 kB
    assert decodes_off_loop(big_json + bytes(1 << 21), str(len(big_json)))
    assert decodes_off_loop(bytes(1 << 21), "0")  # raw binary: the model's datatype, maybe BYTES
    assert decodes_off_loop(bytes(1 << 21), "12x")  # not a length: decoding refuses it there
