"""A backend's bad outputs over the wire: HTTP 500 / gRPC INTERNAL naming the culprit.

The numpy and stream test backends come in through ``TRITON_CORE_PLUGINS``; their
misbehaving kinds return undeclared outputs or data that is not what its datatype says.
Before the server checked outputs, these went out as 200 with mislabelled data, failed inside
the gRPC codec, or got a 400 that blamed the client.
"""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_numpy_model, write_stream_model

PLUGINS = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend,tests.plugins.stream_backend"}

#: misbehaving kind of the numpy backend -> what the error says about it
MISBEHAVIOURS = {
    "wrong_dtype": "returned output 'OUTPUT0' (FP32) holding numpy int32 values",
    "numpy_datatype": "returned output 'OUTPUT0' with datatype 'float32', which is not a",
    "list_output": "returned output 'OUTPUT0' as a list, not a numpy array",
    "undeclared": "returned output 'EXTRA', which the config does not declare",
    "key_error": "raised KeyError: 'x'",
}
NUMPY = "tests.plugins.numpy_backend"
CLIENTS = {"http": (httpclient, "500"), "grpc": (grpcclient, "StatusCode.INTERNAL")}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("misbehaving")
    for kind in ("identity", *MISBEHAVIOURS):
        write_numpy_model(repo, kind, kind=kind, datatype="TYPE_FP32")
    write_stream_model(repo, "floats", count=2, delay_ms=1, out_dtype="float32")
    process = ServerProcess([repo], env=PLUGINS)
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def fp32_inputs(module, rows: int = 1):  # type: ignore[no-untyped-def]
    data = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    tensors = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [rows, 4], "FP32")
        tensor.set_data_from_numpy(data)
        tensors.append(tensor)
    return tensors


def client_for(server, protocol: str):  # type: ignore[no-untyped-def]
    module, _ = CLIENTS[protocol]
    url = server.http_url if protocol == "http" else server.grpc_url
    return module, module.InferenceServerClient(url)


@pytest.mark.parametrize("protocol", list(CLIENTS))
@pytest.mark.parametrize("kind", list(MISBEHAVIOURS))
def test_a_misbehaving_backend_gets_an_internal_error_naming_it(
    server, kind: str, protocol: str
) -> None:
    module, client = client_for(server, protocol)
    with pytest.raises(InferenceServerException) as info:
        client.infer(kind, fp32_inputs(module))
    assert info.value.status() == CLIENTS[protocol][1]
    message = info.value.message()
    culprit = f"model '{kind}' version 1 instance '{kind}_0_0': backend 'numpy' (plugin {NUMPY}"
    assert culprit in message
    assert MISBEHAVIOURS[kind] in message
    # the server, and the same connection, keep serving well-behaved models
    result = client.infer("identity", fp32_inputs(module, rows=2))
    np.testing.assert_array_equal(
        result.as_numpy("OUTPUT0"), np.arange(8, dtype=np.float32).reshape(2, 4)
    )


def test_a_stream_response_of_the_wrong_dtype_arrives_as_an_error(server) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
        client.async_stream_infer("floats", [tensor], request_id="f1")
        result, error = results.get(timeout=30)
    finally:
        client.stop_stream()
    assert result is None and error is not None
    culprit = "model 'floats' version 1 instance 'floats_0_0': backend 'stream' (plugin tests."
    assert culprit in error.message()
    assert "returned output 'OUT' (INT32) holding numpy float32 values" in error.message()


def test_the_log_holds_one_traceback_for_repeated_execute_failures(server) -> None:
    module, client = client_for(server, "http")
    for _ in range(3):
        with pytest.raises(InferenceServerException):
            client.infer("key_error", fp32_inputs(module))
    log = server.log()
    assert log.count("raised KeyError: 'x' (logged once; repeats are counted)") == 1
    assert log.count("Traceback") == 1
