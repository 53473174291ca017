"""The statuses and messages clients look for, as the real tritonserver 2.51 answers them
(compared side by side over HTTP and gRPC): failed loads, unknown models and versions."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_numpy_model

PLUGINS = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}
#: what each protocol calls a status (tritonclient's InferenceServerException.status())
STATUS = {
    "http": {"NOT_FOUND": "404", "INVALID_ARG": "400", "INTERNAL": "500"},
    "grpc": {
        "NOT_FOUND": "StatusCode.NOT_FOUND",
        "INVALID_ARG": "StatusCode.INVALID_ARGUMENT",
        "INTERNAL": "StatusCode.INTERNAL",
    },
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("messages")
    write_numpy_model(repo, "simple", kind="add_sub")
    write_numpy_model(
        repo,
        "broken",
        kind="add_sub",
        extra='parameters { key: "fail_load" value { string_value: "boom" } }',
    )
    process = ServerProcess([repo], "--model-control-mode=explicit", env=PLUGINS)
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def client_for(server: ServerProcess, protocol: str) -> Any:
    if protocol == "http":
        return httpclient.InferenceServerClient(server.http_url)
    return grpcclient.InferenceServerClient(server.grpc_url)


def adds(protocol: str) -> list[Any]:
    module = httpclient if protocol == "http" else grpcclient
    tensors = [module.InferInput(name, [1, 4], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(np.ones((1, 4), np.int32))
    return tensors


def error_of(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_failed_loads_say_failed_to_load_as_triton(server: ServerProcess, protocol: str) -> None:
    client, status = client_for(server, protocol), STATUS[protocol]
    poll = "failed to load 'simple', failed to poll from model repository: "
    cases = [
        (lambda: client.load_model("simple", config='"parameters": {{"max_batch_size": 2}}'),
         "Invalid config override: "),
        (lambda: client.load_model("simple", config='{"bogus_field": 1}'),
         "Invalid config override: "),
        (lambda: client.load_model("simple", config='{"name": "other"}'),
         "unexpected directory name 'simple' for model 'other', directory name must equal "
         "model name"),
        (lambda: client.load_model("simple", files={"file:1/model.npy": b""}),
         "Load parameter 'config' must be specified for model file override"),
    ]  # fmt: skip
    for call, detail in cases:
        error = error_of(call)
        assert error.status() == status["INTERNAL"]
        assert error.message().startswith(poll + detail), error.message()
    error = error_of(lambda: client.load_model("nothere"))
    assert (error.status(), error.message()) == (
        status["INTERNAL"],
        "failed to load 'nothere', failed to poll from model repository: model not found in "
        "any model repository",
    )
    # found, but its backend fails it: INVALID_ARG, per version
    error = error_of(lambda: client.load_model("broken"))
    assert error.status() == status["INVALID_ARG"]
    assert error.message().startswith(
        "load failed for model 'broken': version 1 is at UNAVAILABLE state: "
    )
    assert "told to fail loading 'broken'" in error.message()
    assert error.message().endswith(";\n")
    # unloading what is not loaded (or not there) succeeds, as Triton's does
    client.unload_model("nothere")
    # the refused overrides did not touch what serves
    client.load_model("simple")
    assert client.is_model_ready("simple")
    client.unload_model("broken")
    assert "Poll failed for model directory 'simple': Invalid config override" in server.log()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unknown_models_and_versions_answer_not_found(server: ServerProcess, protocol: str) -> None:
    client, status = client_for(server, protocol), STATUS[protocol]
    client.load_model("simple")
    routes: dict[str, Callable[[str, str], object]] = {
        "infer": lambda m, v: client.infer(m, adds(protocol), model_version=v),
        "metadata": lambda m, v: client.get_model_metadata(m, v),
        "config": lambda m, v: client.get_model_config(m, v),
    }
    for route, call in routes.items():
        error = error_of(lambda call=call: call("simple", "7"))
        assert (error.status(), error.message()) == (
            status["NOT_FOUND"],
            "Request for unknown model: 'simple' version 7 is not found",
        ), route
        error = error_of(lambda call=call: call("nothere", ""))
        assert (error.status(), error.message()) == (
            status["NOT_FOUND"],
            "Request for unknown model: 'nothere' is not found",
        ), route
    error = error_of(lambda: client.get_inference_statistics("simple", "7"))
    assert (error.status(), error.message()) == (
        status["INVALID_ARG"],
        "requested model version is not available for model 'simple'",
    )
    # readiness is an answer, not an error
    assert not client.is_model_ready("simple", "7")
    assert not client.is_model_ready("nothere")
    client.unload_model("simple")
    error = error_of(lambda: client.get_model_metadata("simple"))
    assert (error.status(), error.message()) == (
        status["NOT_FOUND"],
        "Request for unknown model: 'simple' has no available versions",
    )


def test_version_strings_are_read_as_triton_reads_them(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.load_model("simple")
    stol = (
        "failed to get model version from specified version string '{}' (details: stol), "
        "version should be an integral value > 0"
    )
    for version, message in (
        ("abc", stol.format("abc")),
        ("99999999999999999999", stol.format("99999999999999999999")),
        ("-1", "invalid model version specified '-1' , version should be an integral value > 0"),
    ):
        for call in (client.get_model_metadata, client.is_model_ready, client.get_model_config):
            error = error_of(lambda call=call, version=version: call("simple", version))
            assert (error.status(), error.message()) == ("StatusCode.INVALID_ARGUMENT", message)
    # a URL version past int64: the same words over HTTP, on the infer fast path too
    big = "99999999999999999999"
    for method, path in (("GET", f"/v2/models/simple/versions/{big}/ready"),
                         ("POST", f"/v2/models/simple/versions/{big}/infer")):  # fmt: skip
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=30)
        try:
            connection.request(method, path, body=b"{}" if method == "POST" else None)
            reply = connection.getresponse()
            assert (reply.status, json.loads(reply.read())) == (400, {"error": stol.format(big)})
        finally:
            connection.close()
    client.unload_model("simple")


def test_grpc_repository_parameters_of_the_wrong_type_get_tritons_words(
    server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    pb = grpcclient.service_pb2
    channel = grpc.insecure_channel(server.grpc_url)
    stub = grpcclient.service_pb2_grpc.GRPCInferenceServiceStub(channel)
    parameter = pb.ModelRepositoryParameter
    cases = [
        (
            {"config": parameter(int64_param=5)},
            "invalid value type for load parameter 'config', expected string_param.",
        ),
        (
            {
                "config": parameter(string_param="{}"),
                "file:1/model.npy": parameter(string_param=""),
            },
            "invalid value type for load parameter 'file:1/model.npy', expected bytes_param.",
        ),
        ({"foo": parameter(string_param="x")}, "unrecognized load parameter 'foo'."),
    ]
    for parameters, message in cases:
        request = pb.RepositoryModelLoadRequest(model_name="simple", parameters=parameters)
        with pytest.raises(grpc.RpcError) as info:
            stub.RepositoryModelLoad(request)
        assert (info.value.code(), info.value.details()) == (
            grpc.StatusCode.INVALID_ARGUMENT,
            message,
        )
    request = pb.RepositoryModelUnloadRequest(
        model_name="simple", parameters={"unload_dependents": parameter(string_param="yes")}
    )
    with pytest.raises(grpc.RpcError) as info:
        stub.RepositoryModelUnload(request)
    assert info.value.details() == (
        "invalid value type for 'unload_dependents' parameter, expected bool_param."
    )
    channel.close()
    error = error_of(lambda: client.get_inference_statistics("nothere", "7"))
    assert error.message() == "requested model 'nothere' is not available"
