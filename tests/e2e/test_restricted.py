"""Restricted APIs on the real server, with the stock tritonclient, on both gRPC transports.

``inference`` needs ``infer-key: infer-value``; ``model-repository`` and ``health`` need
``admin-key: admin-value`` (gRPC: ``triton-grpc-protocol-`` before each key); the rest is open.
"""

from __future__ import annotations

import queue
from functools import partial

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_numpy_model
from triton_core.protos import health_pb2, health_pb2_grpc

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}
RESTRICTIONS = (
    "--http-restricted-api", "inference:infer-key=infer-value",
    "--http-restricted-api", "model-repository,health:admin-key=admin-value",
    "--grpc-restricted-protocol", "inference:infer-key=infer-value",
    "--grpc-restricted-protocol", "model-repository,health:admin-key=admin-value",
)  # fmt: skip
HTTP_INFER = {"infer-key": "infer-value"}
HTTP_ADMIN = {"admin-key": "admin-value"}
GRPC_INFER = {"triton-grpc-protocol-infer-key": "infer-value"}
GRPC_ADMIN = {"triton-grpc-protocol-admin-key": "admin-value"}
GRPC_RESTRICTED = "This protocol is restricted, expecting header 'triton-grpc-protocol-{}'"
#: bound on every wait for a streamed answer
WAIT_S = 30


@pytest.fixture(scope="module", params=["http2", "grpcio"])
def server(request, tmp_path_factory):
    repo = tmp_path_factory.mktemp("restricted_models")
    write_numpy_model(repo, "simple")
    process = ServerProcess(
        [repo], "--grpc-transport", request.param, *RESTRICTIONS, env=NUMPY_PLUGIN
    )
    try:
        process.wait_ready(path="/v2")  # health is restricted; metadata is not
        yield process
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def inputs(module, rows: int = 1):
    data = np.arange(rows * 4, dtype=np.int32).reshape(rows, 4)
    tensors = [module.InferInput(name, [rows, 4], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(data)
    return data, tensors


# -- HTTP --------------------------------------------------------------------------------------


def test_http_inference_needs_its_header(server):
    client = httpclient.InferenceServerClient(server.http_url)
    data, tensors = inputs(httpclient)
    for headers in (None, {"infer-key": "wrong"}, HTTP_ADMIN):
        with pytest.raises(InferenceServerException) as caught:
            client.infer("simple", tensors, headers=headers)
        assert caught.value.status() == "403"
        assert caught.value.message() == "This API is restricted, expecting header 'infer-key'"
    result = client.infer("simple", tensors, headers=HTTP_INFER)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    client.close()


def test_http_health_and_repository_need_the_admin_header(server):
    client = httpclient.InferenceServerClient(server.http_url)
    assert not client.is_server_live()  # tritonclient reports any non-200 as not live
    assert client.is_server_live(headers=HTTP_ADMIN)
    assert client.is_model_ready("simple", headers=HTTP_ADMIN)
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_repository_index(headers=HTTP_INFER)
    assert caught.value.status() == "403"
    assert caught.value.message() == "This API is restricted, expecting header 'admin-key'"
    index = client.get_model_repository_index(headers=HTTP_ADMIN)
    assert [entry["name"] for entry in index] == ["simple"]
    client.close()


def test_http_unrestricted_apis_are_open(server):
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.get_server_metadata()["name"] == "triton"
    assert client.get_model_metadata("simple")["name"] == "simple"
    assert client.get_model_config("simple")["max_batch_size"] == 8
    assert client.get_inference_statistics("simple")["model_stats"][0]["name"] == "simple"
    client.close()


# -- gRPC --------------------------------------------------------------------------------------


def assert_restricted(caught: pytest.ExceptionInfo, key: str) -> None:
    assert caught.value.status() == "StatusCode.UNAVAILABLE"
    assert caught.value.message() == GRPC_RESTRICTED.format(key)


def test_grpc_inference_needs_its_header(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    data, tensors = inputs(grpcclient)
    for headers in (None, {"triton-grpc-protocol-infer-key": "wrong"}, {"infer-key": "x"}):
        with pytest.raises(InferenceServerException) as caught:
            client.infer("simple", tensors, headers=headers)
        assert_restricted(caught, "infer-key")
    result = client.infer("simple", tensors, headers=GRPC_INFER)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    client.close()


def stream_answers(client, headers, count: int) -> list:
    answers: queue.Queue = queue.Queue()
    client.start_stream(
        partial(lambda q, result, error: q.put((result, error)), answers), headers=headers
    )
    _, tensors = inputs(grpcclient)
    for _ in range(count):
        try:
            client.async_stream_infer("simple", tensors)
        except InferenceServerException:
            break  # the stream already ended with the error status
    got = [answers.get(timeout=WAIT_S)]
    while len(got) < count and got[-1][1] is None:
        got.append(answers.get(timeout=WAIT_S))
    client.stop_stream()
    return got


def test_grpc_stream_inference_needs_its_header(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    (result, error), *_ = stream_answers(client, {"test": "1"}, 1)
    assert result is None and error is not None
    assert error.message() == GRPC_RESTRICTED.format("infer-key")
    answers = stream_answers(client, GRPC_INFER, 3)
    assert [error for _, error in answers] == [None, None, None]
    client.close()


def test_grpc_health_needs_the_admin_header(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for call in (client.is_server_live, client.is_server_ready):
        with pytest.raises(InferenceServerException) as caught:
            call(headers=GRPC_INFER)
        assert_restricted(caught, "admin-key")
        assert call(headers=GRPC_ADMIN)
    with pytest.raises(InferenceServerException) as caught:
        client.is_model_ready("simple")
    assert_restricted(caught, "admin-key")
    assert client.is_model_ready("simple", headers=GRPC_ADMIN)
    client.close()


def test_grpc_health_check_service_is_in_the_health_group(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        with pytest.raises(grpc.RpcError) as caught:
            check(health_pb2.HealthCheckRequest(), timeout=WAIT_S)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert caught.value.details() == GRPC_RESTRICTED.format("admin-key")
        metadata = tuple(GRPC_ADMIN.items())
        answer = check(health_pb2.HealthCheckRequest(), metadata=metadata, timeout=WAIT_S)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING


def test_grpc_repository_needs_the_admin_header(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as caught:
        client.unload_model("simple", headers=GRPC_INFER)
    assert_restricted(caught, "admin-key")
    # past the check, the call meets the server's own refusal (no explicit model control)
    with pytest.raises(InferenceServerException, match="explicit model load / unload"):
        client.unload_model("simple", headers=GRPC_ADMIN)
    client.close()


def test_grpc_unrestricted_apis_are_open(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.get_server_metadata().name == "triton"
    assert client.get_model_metadata("simple").name == "simple"
    assert client.get_model_config("simple").config.max_batch_size == 8
    assert client.get_inference_statistics("simple").model_stats[0].name == "simple"
    client.close()


# -- refused at start --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--grpc-restricted-protocol", "model-repository,health:k1=v1",
             "--grpc-restricted-protocol", "metadata,health:k2=v2"],
            "restricted protocol 'health' can not be specified in multiple config groups",
        ),
        (
            ["--grpc-restricted-protocol", "model-reposit,health:k1=v1"],
            "unknown restricted protocol 'model-reposit'",
        ),
        (["--http-restricted-api", "inference"], "--http-restricted-api option format is"),
    ],
)  # fmt: skip
def test_bad_restrictions_stop_the_server(tmp_path, args, message):
    with ServerProcess([tmp_path], *args, env=NUMPY_PLUGIN) as process:
        code = process.process.wait(60)
        assert code != 0
        assert message in process.log()
