"""The SageMaker (``--allow-sagemaker``) and Vertex AI (``--allow-vertex-ai``) endpoints of a
real server process: their routes, bodies, statuses and limits, and the start-up checks."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.e2e.conftest import SIMPLE_CONFIG
from tests.e2e.test_hostile_http import assert_refused, read_answer, send_until_answered
from tests.support import ServerProcess

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")

MAX_INPUT = 1 << 20
PREDICT = "/v1/endpoints/123/deployedModels/456:predict"
HEALTH = "/v1/health"
VERTEX_ENV = {"AIP_PREDICT_ROUTE": PREDICT, "AIP_HEALTH_ROUTE": HEALTH}
SAGEMAKER_MIME = "application/vnd.sagemaker-triton.binary+json;json-header-size="
VERTEX_MIME = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
LOOPBACK = ("--sagemaker-address", "127.0.0.1", "--vertex-ai-address", "127.0.0.1")
SAGEMAKER = ("--allow-sagemaker", "--sagemaker-port", "0")
VERTEX_AI = ("--allow-vertex-ai", "--vertex-ai-port", "0")

#: MODE 0: OUT = MODE; 1: an error saying memory ran out; 2: an UNAVAILABLE error
FAILING_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()
            if mode[0] == 1:
                error = pb_utils.TritonError("CUDA out of memory while running the test model")
                responses.append(pb_utils.InferenceResponse(error=error))
            elif mode[0] == 2:
                error = pb_utils.TritonError("try later", pb_utils.TritonError.UNAVAILABLE)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                out = pb_utils.Tensor("OUT", mode.astype(np.int32))
                responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""
FAILING_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def write_simple(repo: Path, name: str = "simple") -> Path:
    onnx_builders.add_sub(repo / name / "1" / "model.onnx", "INT32", 16)
    config = SIMPLE_CONFIG.replace('name: "simple"', f'name: "{name}"')
    (repo / name / "config.pbtxt").write_text(config)
    (repo / name / "labels.txt").write_text("\n".join(f"label{i}" for i in range(16)))
    return repo


def started(process: ServerProcess) -> Iterator[ServerProcess]:
    try:
        process.wait_ready()
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()[-4000:]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = write_simple(tmp_path_factory.mktemp("cloud_models"))
    onnx_builders.add_sub(root / "other" / "1" / "model.onnx", "FP32", 4)
    return root


@pytest.fixture(scope="module")
def server(repo: Path) -> Iterator[ServerProcess]:
    """Both endpoints, with a 1 MiB input limit; SageMaker and Vertex AI run ``simple``."""
    yield from started(
        ServerProcess(
            [repo],
            *SAGEMAKER,
            *VERTEX_AI,
            *LOOPBACK,
            "--vertex-ai-default-model",
            "simple",
            "--http-max-input-size",
            str(MAX_INPUT),
            env={**VERTEX_ENV, "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple"},
        )
    )


class Answer:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = {name.lower(): value for name, value in response.getheaders()}
        self.body = response.read()

    @property
    def error(self) -> str:
        return str(json.loads(self.body)["error"])


def call(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request(method, path, body, headers or {})
        return Answer(connection.getresponse())
    finally:
        connection.close()


def sagemaker(process: ServerProcess, method: str, path: str, *args, **kwargs) -> Answer:  # type: ignore[no-untyped-def]
    return call(process.ports["sagemaker"], method, path, *args, **kwargs)


def vertex(process: ServerProcess, method: str, path: str, *args, **kwargs) -> Answer:  # type: ignore[no-untyped-def]
    return call(process.ports["vertex_ai"], method, path, *args, **kwargs)


def v2(process: ServerProcess, method: str, path: str, *args, **kwargs) -> Answer:  # type: ignore[no-untyped-def]
    return call(process.http_port, method, path, *args, **kwargs)


DATA = np.arange(16, dtype=np.int32).reshape(1, 16)


def json_body(data: np.ndarray = DATA) -> bytes:
    inputs = [
        {"name": f"INPUT{i}", "datatype": "INT32", "shape": [1, 16], "data": data.ravel().tolist()}
        for i in range(2)
    ]
    return json.dumps({"inputs": inputs}).encode()


def binary_body() -> tuple[bytes, int]:
    """An infer body with binary inputs, asking for binary outputs (the client's encoder)."""
    inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
    for tensor in inputs:
        tensor.set_data_from_numpy(DATA, binary_data=True)
    outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=True) for i in range(2)]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs)
    return body, int(json_size)


def assert_simple_outputs(answer: Answer) -> None:
    assert answer.status == 200, answer.body
    outputs = {output["name"]: output for output in json.loads(answer.body)["outputs"]}
    assert outputs["OUTPUT0"]["data"] == (DATA * 2).ravel().tolist()
    assert outputs["OUTPUT1"]["data"] == [0] * 16


def assert_binary_outputs(answer: Answer, size: int) -> None:
    result = httpclient.InferenceServerClient.parse_response_body(answer.body, header_length=size)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), DATA * 2)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros_like(DATA))


# ------------------------------------------------------------------------------------------
# SageMaker


def test_ping_answers_200_with_no_body_once_ready(server: ServerProcess) -> None:
    answer = sagemaker(server, "GET", "/ping")
    assert (answer.status, answer.body) == (200, b"")


def test_ping_wants_get(server: ServerProcess) -> None:
    answer = sagemaker(server, "POST", "/ping", b"")
    assert answer.status == 405
    assert answer.error == "Method Not Allowed"


def test_invocations_infers_a_json_body_on_the_default_model(server: ServerProcess) -> None:
    answer = sagemaker(server, "POST", "/invocations", json_body())
    assert answer.headers["content-type"] == "application/json"
    assert_simple_outputs(answer)


def test_invocations_takes_a_binary_body_sized_in_its_content_type(
    server: ServerProcess,
) -> None:
    body, json_size = binary_body()
    answer = sagemaker(
        server, "POST", "/invocations", body, {"Content-Type": f"{SAGEMAKER_MIME}{json_size}"}
    )
    assert answer.status == 200, answer.body
    content_type = answer.headers["content-type"]
    assert content_type.startswith(SAGEMAKER_MIME)
    assert "inference-header-content-length" not in answer.headers
    assert_binary_outputs(answer, int(content_type[len(SAGEMAKER_MIME) :]))


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        (f"{SAGEMAKER_MIME}abc", "Unable to parse inference header size, got: abc"),
        (f"{SAGEMAKER_MIME}99999999999", "value is out of range, got: 99999999999"),
        (f"{SAGEMAKER_MIME}100000", "inference header size should be in range (0, "),
        (f"text/plain; {SAGEMAKER_MIME}10", "expect MIME type for binary data starts with"),
    ],
)
def test_a_bad_binary_content_type_is_a_400_in_tritons_words(
    server: ServerProcess, content_type: str, message: str
) -> None:
    answer = sagemaker(server, "POST", "/invocations", json_body(), {"Content-Type": content_type})
    assert answer.status == 400
    assert message in answer.error


@pytest.mark.parametrize(
    "body", [b"{not json", b'{"inputs": [{"name": "NOPE", "datatype": "INT32", "shape": [1]}]}']
)
def test_a_bad_body_gets_the_v2_endpoints_status_and_message(
    server: ServerProcess, body: bytes
) -> None:
    answer = sagemaker(server, "POST", "/invocations", body)
    expected = v2(server, "POST", "/v2/models/simple/infer", body)
    assert answer.status == expected.status == 400
    assert answer.error == expected.error


def test_unknown_sagemaker_routes_are_400_with_no_body(server: ServerProcess) -> None:
    for method, path in (("GET", "/v2/health/ready"), ("POST", "/invocations/x")):
        answer = sagemaker(server, method, path, b"" if method == "POST" else None)
        assert (answer.status, answer.body) == (400, b"")


# ------------------------------------------------------------------------------------------
# Vertex AI


def test_vertex_health_route_answers_200_once_ready(server: ServerProcess) -> None:
    answer = vertex(server, "GET", HEALTH)
    assert (answer.status, answer.body) == (200, b"")


def test_vertex_predict_infers_on_the_default_model(server: ServerProcess) -> None:
    assert_simple_outputs(vertex(server, "POST", PREDICT, json_body()))


def test_vertex_predict_takes_a_binary_body_sized_in_its_content_type(
    server: ServerProcess,
) -> None:
    body, json_size = binary_body()
    answer = vertex(server, "POST", PREDICT, body, {"Content-Type": f"{VERTEX_MIME}{json_size}"})
    assert answer.status == 200, answer.body
    # the v2 way of saying the JSON's size, as Triton's Vertex AI endpoint answers
    assert_binary_outputs(answer, int(answer.headers["inference-header-content-length"]))


def redirect(process: ServerProcess, target: str, body: bytes | None = b"") -> Answer:
    return vertex(process, "POST", PREDICT, body, {"X-Vertex-Ai-Triton-Redirect": target})


@pytest.mark.parametrize(
    ("target", "v2_method", "v2_path"),
    [
        ("v2/models/simple/config", "GET", "/v2/models/simple/config"),
        ("v2/models/simple/versions/1", "GET", "/v2/models/simple/versions/1"),
        ("v2/models/other/ready", "GET", "/v2/models/other/ready"),
        ("v2/models/missing/ready", "GET", "/v2/models/missing/ready"),
        ("v2", "GET", "/v2"),
        ("v2/health/live", "GET", "/v2/health/live"),
        ("v2/systemsharedmemory/status", "GET", "/v2/systemsharedmemory/status"),
        ("v2/repository/index", "POST", "/v2/repository/index"),
    ],
)
def test_the_redirect_header_answers_as_the_v2_route(
    server: ServerProcess, target: str, v2_method: str, v2_path: str
) -> None:
    answer = redirect(server, target)
    expected = v2(server, v2_method, v2_path, b"" if v2_method == "POST" else None)
    assert (answer.status, answer.body) == (expected.status, expected.body)


def test_the_redirect_header_reaches_infer_on_any_model(server: ServerProcess) -> None:
    assert_simple_outputs(redirect(server, "v2/models/simple/versions/1/infer", json_body()))
    answer = redirect(server, "v2/models/missing/infer", json_body())
    expected = v2(server, "POST", "/v2/models/missing/infer", json_body())
    assert (answer.status, answer.error) == (expected.status, expected.error)


def test_the_redirect_header_reaches_metrics(server: ServerProcess) -> None:
    answer = redirect(server, "metrics")
    assert answer.status == 200
    assert b"nv_inference_request_success" in answer.body


@pytest.mark.parametrize(
    "target",
    [
        "v2/repository/models/simple/unload",
        "v2/repository/models/simple/load",
        "v2/systemsharedmemory/region/r/register",
        "v2/cudasharedmemory/unregister",
    ],
)
def test_changes_through_the_redirect_are_refused(server: ServerProcess, target: str) -> None:
    answer = redirect(server, target)
    assert (answer.status, answer.body) == (403, b"")
    assert v2(server, "GET", "/v2/models/simple/ready").status == 200


def test_redirects_to_no_route_or_not_by_post_are_refused(server: ServerProcess) -> None:
    for target in ("v2/models/simple/generate", "v2/nothing", "../metrics"):
        assert redirect(server, target).status == 400
    answer = vertex(server, "GET", PREDICT, None, {"X-Vertex-Ai-Triton-Redirect": "v2"})
    assert answer.status == 405


def test_unknown_vertex_routes_are_400(server: ServerProcess) -> None:
    assert vertex(server, "GET", "/ping").status == 400
    assert vertex(server, "POST", "/invocations", json_body()).status == 400


# ------------------------------------------------------------------------------------------
# limits: the HTTP endpoint's, on these ports too


@pytest.mark.parametrize(
    ("endpoint", "path"), [("sagemaker", "/invocations"), ("vertex_ai", PREDICT)]
)
def test_a_body_over_the_input_limit_is_refused_before_it_is_read(
    server: ServerProcess, endpoint: str, path: str
) -> None:
    with socket.create_connection(("127.0.0.1", server.ports[endpoint]), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {10**12}\r\n\r\n".encode()
        )
        response = http.client.HTTPResponse(sock)
        response.begin()
        assert response.status == 413
        assert "--http-max-input-size" in json.loads(response.read())["error"]


@pytest.mark.parametrize(
    ("endpoint", "path"), [("sagemaker", "/invocations"), ("vertex_ai", PREDICT)]
)
def test_a_chunked_body_over_the_input_limit_is_refused(
    server: ServerProcess, endpoint: str, path: str
) -> None:
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    with socket.create_connection(("127.0.0.1", server.ports[endpoint]), timeout=10) as sock:
        sock.sendall(head)
        send_until_answered(sock, (chunk for _ in range(4 * MAX_INPUT // 0x10000)))
        answer = read_answer(sock)
    assert_refused(answer, 413, "--http-max-input-size")


def test_json_nesting_limits_hold_on_these_ports(server: ServerProcess) -> None:
    nested = b'{"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1], "data": '
    nested += b"[" * 200 + b"1" + b"]" * 200 + b"}]}"
    answer = sagemaker(server, "POST", "/invocations", nested)
    assert answer.status == 400
    assert "depth" in answer.error or "nest" in answer.error


@pytest.fixture(scope="module")
def streaming_server(repo: Path) -> Iterator[ServerProcess]:
    """SageMaker's ``/invocations`` as the generate_stream route of ``simple``."""
    env = {
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "simple",
        "SAGEMAKER_TRITON_INFERENCE_TYPE": "generate_stream",
    }
    yield from started(ServerProcess([repo], *SAGEMAKER, *LOOPBACK, env=env))


def test_invocations_can_be_the_generate_stream_route(streaming_server: ServerProcess) -> None:
    body = json.dumps({"INPUT0": DATA.ravel().tolist(), "INPUT1": DATA.ravel().tolist()}).encode()
    answer = sagemaker(streaming_server, "POST", "/invocations", body)
    expected = v2(streaming_server, "POST", "/v2/models/simple/generate_stream", body)
    assert answer.status == expected.status == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.body == expected.body
    event = json.loads(answer.body.decode().removeprefix("data: "))
    assert event["OUTPUT0"] == (DATA * 2).ravel().tolist()


# ------------------------------------------------------------------------------------------
# a server that is not ready, a model that fails while it runs


@pytest.fixture(scope="module")
def failing_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """SageMaker on a Python model that fails on request, beside a model that cannot load."""
    root = tmp_path_factory.mktemp("cloud_failing")
    (root / "failing" / "1").mkdir(parents=True)
    (root / "failing" / "1" / "model.py").write_text(FAILING_MODEL)
    (root / "failing" / "config.pbtxt").write_text(FAILING_CONFIG)
    (root / "broken").mkdir()
    (root / "broken" / "config.pbtxt").write_text('backend: "no_such_backend"\n')
    process = ServerProcess(
        [root],
        *SAGEMAKER,
        *LOOPBACK,
        "--exit-on-error", "false",
        env={"SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "failing"},
    )  # fmt: skip
    yield from started_live(process)


def started_live(process: ServerProcess) -> Iterator[ServerProcess]:
    try:
        process.wait_ready(path="/v2/health/live")
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()[-4000:]


def mode_body(mode: int) -> bytes:
    inputs = [{"name": "MODE", "datatype": "INT32", "shape": [1], "data": [mode]}]
    return json.dumps({"inputs": inputs}).encode()


def test_ping_is_400_while_the_server_is_not_ready(failing_server: ServerProcess) -> None:
    assert v2(failing_server, "GET", "/v2/health/ready").status == 400
    answer = sagemaker(failing_server, "GET", "/ping")
    assert (answer.status, answer.body) == (400, b"")


def test_a_model_failing_while_it_runs_gets_the_v2_statuses_on_invocations(
    failing_server: ServerProcess,
) -> None:
    answer = sagemaker(failing_server, "POST", "/invocations", mode_body(0))
    assert answer.status == 200, answer.body
    assert json.loads(answer.body)["outputs"][0]["data"] == [0]
    # as Triton 2.51 answers /invocations: the error's own status (memory or not)
    for mode, status in ((1, 500), (2, 503)):
        answer = sagemaker(failing_server, "POST", "/invocations", mode_body(mode))
        expected = v2(failing_server, "POST", "/v2/models/failing/infer", mode_body(mode))
        assert answer.status == expected.status == status
        assert answer.error == expected.error


# ------------------------------------------------------------------------------------------
# Vertex AI's environment: AIP_MODE, AIP_HTTP_PORT, AIP_STORAGE_URI


@pytest.fixture(scope="module")
def prediction_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``AIP_MODE=PREDICTION`` with the repository from ``AIP_STORAGE_URI`` (one model), and
    SageMaker with no default model named."""
    root = write_simple(tmp_path_factory.mktemp("cloud_single"), "only")
    env = {
        **VERTEX_ENV,
        "AIP_MODE": "PREDICTION",
        "AIP_HTTP_PORT": "0",
        "AIP_STORAGE_URI": str(root),
    }
    restricted = ("--http-restricted-api", "model-config,statistics:admin-key=s3cret")
    yield from started(ServerProcess([], *SAGEMAKER, *LOOPBACK, *restricted, env=env))


def test_prediction_mode_serves_vertex_ai_alone_on_aip_http_port(
    prediction_server: ServerProcess,
) -> None:
    ports = prediction_server.ports
    assert "http" not in ports and "grpc" not in ports
    assert ports["vertex_ai"] > 0
    assert vertex(prediction_server, "GET", HEALTH).status == 200


def test_the_only_model_of_aip_storage_uri_is_the_default(
    prediction_server: ServerProcess,
) -> None:
    assert_simple_outputs(vertex(prediction_server, "POST", PREDICT, json_body()))


def test_sagemaker_without_a_default_model_names_tritons_placeholder(
    prediction_server: ServerProcess,
) -> None:
    answer = sagemaker(prediction_server, "POST", "/invocations", json_body())
    assert answer.status == 404
    assert answer.error == (
        "Request for unknown model: 'unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME' is not found"
    )


def test_http_restrictions_hold_through_the_redirect(prediction_server: ServerProcess) -> None:
    headers = {"X-Vertex-Ai-Triton-Redirect": "v2/models/only/config"}
    answer = vertex(prediction_server, "POST", PREDICT, b"", headers)
    assert answer.status == 403
    assert answer.error == "This API is restricted, expecting header 'admin-key'"
    answer = vertex(prediction_server, "POST", PREDICT, b"", {**headers, "admin-key": "s3cret"})
    assert answer.status == 200
    assert json.loads(answer.body)["name"] == "only"


# ------------------------------------------------------------------------------------------
# refused at start


def refused(repos: list[Path], *args: str, env: dict[str, str] | None = None) -> str:
    """The log of a server that must exit with an error before serving."""
    process = ServerProcess(repos, *args, env=env)
    try:
        code = process.process.wait(120)
    finally:
        process.stop()
    assert code != 0, process.log()[-4000:]
    assert not process.ports_path.exists()
    return process.log()


#: how tritonserver logs a Vertex AI endpoint that cannot start
VERTEX_REFUSED = "failed to start Vertex AI service: Invalid argument - "


def test_two_endpoints_on_one_address_and_port_are_refused(repo: Path) -> None:
    with socket.socket() as sock:  # a port number to ask for; nothing listens on it
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = refused(
        [repo], *SAGEMAKER, *LOOPBACK, "--sagemaker-port", str(port), "--http-port", str(port)
    )
    assert (
        "The server cannot listen to HTTP requests and SageMaker requests at the same address "
        f"and port 127.0.0.1:{port}"
    ) in log
    assert "successfully loaded" not in log


def test_ports_outside_the_sagemaker_safe_range_are_refused(repo: Path) -> None:
    log = refused([repo], *SAGEMAKER, *LOOPBACK, "--sagemaker-safe-port-range", "9000-9010")
    assert "The server cannot listen to HTTP requests at port 0, allowed port range is " in log
    assert "[9000, 9010]" in log


def test_vertex_ai_without_its_routes_is_refused(repo: Path) -> None:
    log = refused([repo], *VERTEX_AI, *LOOPBACK, env={"AIP_HEALTH_ROUTE": HEALTH})
    assert f"{VERTEX_REFUSED}API_PREDICT_ROUTE is not defined for Vertex AI endpoint" in log


def test_vertex_ai_without_a_default_among_several_models_is_refused(repo: Path) -> None:
    log = refused([repo], *VERTEX_AI, *LOOPBACK, env=VERTEX_ENV)
    assert (
        f"{VERTEX_REFUSED}Expect the model repository contains only a single model if default "
        "model is not specified"
    ) in log
    log = refused(
        [repo], *VERTEX_AI, *LOOPBACK, "--vertex-ai-default-model", "nope", env=VERTEX_ENV
    )
    assert f"{VERTEX_REFUSED}Expect the default model 'nope' is loaded" in log


# ------------------------------------------------------------------------------------------
# SageMaker's multi-model endpoint

ENSEMBLE_CONFIG = """
name: "fan"
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "B" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [ { name: "SUM" data_type: TYPE_INT32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [{
    model_name: "member" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "SUM" }
  }]
}
"""


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What SageMaker unpacks: a model at an archive's root, one in a subfolder, an ensemble
    with its member, a Python model that fails on request, and a model that cannot load."""
    root = tmp_path_factory.mktemp("opt_ml_models")
    write_simple(root / "hash1", "model")
    (root / "hash1" / "model" / "config.pbtxt").write_text(
        SIMPLE_CONFIG.replace('name: "simple"', 'name: "sm_mme_model_1"')
    )
    write_simple(root / "hash2" / "model", "inner")
    archive = root / "hash3" / "model"
    write_simple(archive, "member")
    (archive / "fan" / "1").mkdir(parents=True)
    (archive / "fan" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    failing = root / "hash4" / "model"
    (failing / "1").mkdir(parents=True)
    (failing / "1" / "model.py").write_text(FAILING_MODEL)
    (failing / "config.pbtxt").write_text(FAILING_CONFIG)
    (root / "hash5" / "model" / "1").mkdir(parents=True)
    (root / "hash5" / "model" / "config.pbtxt").write_text('backend: "no_such_backend"\n')
    return root


@pytest.fixture(scope="module")
def mme_server(archives: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """As Triton's ``serve`` starts it for SAGEMAKER_MULTI_MODEL=true: explicit mode, an
    empty repository, ping reporting liveness; inference restricted to show the invoke route
    checks it."""
    empty = tmp_path_factory.mktemp("sagemaker_empty")
    env = {"TRITON_CORE_SAGEMAKER_MODEL_ROOT": str(archives), "SAGEMAKER_TRITON_PING_MODE": "live"}
    yield from started_live(
        ServerProcess(
            [empty],
            *SAGEMAKER,
            *LOOPBACK,
            "--model-control-mode",
            "explicit",
            "--allow-grpc",
            "false",
            "--http-restricted-api",
            "inference:infer-key=k",
            env=env,
        )
    )


def load(process: ServerProcess, name: str, url: str, target: str | None = None) -> Answer:
    headers = {"Content-Type": "application/json"}
    if target:
        headers["X-Amzn-SageMaker-Target-Model"] = target
    body = json.dumps({"model_name": name, "url": url}).encode()
    return sagemaker(process, "POST", "/models", body, headers)


def invoke(process: ServerProcess, name: str, body: bytes, **headers: str) -> Answer:
    headers = {"infer-key": "k", **headers}
    return sagemaker(process, "POST", f"/models/{name}/invoke", body, headers)


def test_the_multi_model_lifecycle(mme_server: ServerProcess, archives: Path) -> None:
    url = f"{archives}/hash1/model"
    assert sagemaker(mme_server, "GET", "/ping").status == 200
    assert json.loads(sagemaker(mme_server, "GET", "/models").body) == {"models": []}
    assert invoke(mme_server, "sm_mme_model_1", json_body()).status == 404

    assert load(mme_server, "sm_mme_model_1", url).status == 200
    again = load(mme_server, "sm_mme_model_1", url)
    assert again.status == 409
    assert "has already been registered" in again.error
    entry = {"modelName": "sm_mme_model_1", "modelUrl": f"{archives}/hash1"}
    assert json.loads(sagemaker(mme_server, "GET", "/models").body) == {"models": [entry]}
    assert json.loads(sagemaker(mme_server, "GET", "/models/sm_mme_model_1").body) == entry

    assert_simple_outputs(invoke(mme_server, "sm_mme_model_1", json_body()))
    restricted = sagemaker(mme_server, "POST", "/models/sm_mme_model_1/invoke", json_body())
    assert restricted.status == 403
    # every invoke error is a 400, as in Triton
    assert invoke(mme_server, "sm_mme_model_1", b"{not json").status == 400

    deleted = sagemaker(mme_server, "DELETE", "/models/sm_mme_model_1")
    assert deleted.status == 200
    assert sagemaker(mme_server, "GET", "/models/sm_mme_model_1").status == 404
    assert invoke(mme_server, "sm_mme_model_1", json_body()).status == 404
    assert sagemaker(mme_server, "DELETE", "/models/sm_mme_model_1").status == 404
    # its folder is free again
    assert load(mme_server, "sm_mme_model_1", url).status == 200
    assert sagemaker(mme_server, "DELETE", "/models/sm_mme_model_1").status == 200


def test_a_target_model_header_names_the_model(mme_server: ServerProcess, archives: Path) -> None:
    answer = load(mme_server, "hash2", f"{archives}/hash2/model", target="target2.tar.gz")
    assert answer.status == 200, answer.body
    try:
        body, json_size = binary_body()
        headers = {"Content-Type": f"{SAGEMAKER_MIME}{json_size}"}
        answered = invoke(
            mme_server,
            "hash2",
            body,
            **headers,
            **{"X-Amzn-SageMaker-Target-Model": "target2.tar.gz"},
        )
        assert answered.status == 200, answered.body
        size = int(answered.headers["content-type"][len(SAGEMAKER_MIME) :])
        assert_binary_outputs(answered, size)
    finally:
        headers = {"X-Amzn-SageMaker-Target-Model": "target2.tar.gz"}
        assert sagemaker(mme_server, "DELETE", "/models/hash2", None, headers).status == 200


def test_an_archive_of_several_models_serves_its_ensemble(
    mme_server: ServerProcess, archives: Path
) -> None:
    assert load(mme_server, "hash3", f"{archives}/hash3/model").status == 200
    body = json.dumps(
        {
            "inputs": [
                {"name": name, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
                for name in ("A", "B")
            ]
        }
    ).encode()
    answer = invoke(mme_server, "hash3", body)
    assert answer.status == 200, answer.body
    assert json.loads(answer.body)["outputs"][0]["data"] == [2 * i for i in range(16)]
    assert sagemaker(mme_server, "DELETE", "/models/hash3").status == 200


def test_every_invoke_failure_is_a_400_or_a_507_on_memory(
    mme_server: ServerProcess, archives: Path
) -> None:
    assert load(mme_server, "hash4", f"{archives}/hash4/model").status == 200
    try:
        assert json.loads(invoke(mme_server, "hash4", mode_body(0)).body)["outputs"][0]["data"] == [
            0
        ]
        unavailable = invoke(mme_server, "hash4", mode_body(2))
        assert (unavailable.status, unavailable.error) == (400, "try later")
        out_of_memory = invoke(mme_server, "hash4", mode_body(1))
        assert out_of_memory.status == 507
        assert "CUDA out of memory" in out_of_memory.error
        wrong_input = invoke(mme_server, "hash4", json_body())
        assert wrong_input.status == 400
    finally:
        assert sagemaker(mme_server, "DELETE", "/models/hash4").status == 200


def test_a_model_that_fails_to_load_leaves_nothing_registered(
    mme_server: ServerProcess, archives: Path
) -> None:
    for _ in range(2):  # not 409 the second time: its folder was unregistered
        answer = load(mme_server, "hash5", f"{archives}/hash5/model")
        assert answer.status == 400
        assert "no_such_backend" in answer.error
    assert sagemaker(mme_server, "GET", "/models/hash5").status == 404


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("/tmp/elsewhere/model", "expected a path of the form"),
        ("{root}/hash1/../../outside/model", "expected a path of the form"),
        ("{root}/missing/model", "failed to register"),
    ],
)
def test_archives_outside_the_models_root_are_refused(
    mme_server: ServerProcess, archives: Path, url: str, message: str
) -> None:
    answer = load(mme_server, "bad", url.format(root=archives))
    assert answer.status == 400
    assert message in answer.error
    assert sagemaker(mme_server, "GET", "/models/bad").status == 404


def test_system_paths_and_bad_bodies_are_refused(mme_server: ServerProcess) -> None:
    answer = load(mme_server, "bad", "/proc/self/model")
    assert (answer.status, answer.body) == (400, b"")
    assert sagemaker(mme_server, "POST", "/models", b"[1, 2]").status == 400
    assert sagemaker(mme_server, "POST", "/models", b'{"model_name": 1}').status == 400
    assert sagemaker(mme_server, "PUT", "/models/x", b"").status == 400
