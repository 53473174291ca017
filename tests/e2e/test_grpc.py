"""tritonclient.grpc (sync, aio, streaming) against the real server process."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from tests.e2e.conftest import DATATYPES
from tests.e2e.data import sample
from triton_core.frontends.grpc.wire import SPLIT_THRESHOLD


@pytest.fixture(scope="module")
def client(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    yield client
    client.close()


def identity_inputs(datatype, shape=(2, 3), module=grpcclient):
    data = sample(datatype, shape)
    inputs = [module.InferInput("INPUT0", list(shape), datatype)]
    inputs[0].set_data_from_numpy(data)
    return data, inputs


def test_health_metadata_and_config(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("mlp")
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "triton"
    model = client.get_model_metadata("mlp", as_json=True)
    assert model["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "64"]}]
    config = client.get_model_config("simple").config
    assert config.max_batch_size == 8 and config.input[0].dims == [16]
    assert config.instance_group[0].name == "simple_0"


@pytest.mark.parametrize("datatype", DATATYPES)
def test_every_datatype_round_trips(client, datatype):
    data, inputs = identity_inputs(datatype)
    result = client.infer(f"identity_{datatype.lower()}", inputs, request_id="r1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
    assert result.get_response().id == "r1"


def test_mixed_input_datatypes(client):
    a = np.full((2, 4), 1.5, dtype=np.float32)
    b = np.arange(8, dtype=np.int64).reshape(2, 4)
    inputs = [grpcclient.InferInput("INPUT0", [2, 4], "FP32"),
              grpcclient.InferInput("INPUT1", [2, 4], "INT64")]  # fmt: skip
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("mixed", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a * b)


@pytest.mark.parametrize(
    ("model", "datatype", "shape", "code", "message"),
    [
        ("nope", "FP32", (1, 3), "StatusCode.NOT_FOUND", "unknown model: 'nope'"),
        ("identity_fp32", "INT32", (1, 3), "StatusCode.INVALID_ARGUMENT", "data-type is 'INT32'"),
        ("identity_fp32", "FP32", (9, 3), "StatusCode.INVALID_ARGUMENT", "batch-size must be <= 4"),
        ("nobatch", "FP32", (1, 4), "StatusCode.INVALID_ARGUMENT", "unexpected shape for input"),
    ],
)
def test_errors_carry_triton_status_codes(client, model, datatype, shape, code, message):
    _, inputs = identity_inputs(datatype, shape)
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, inputs)
    assert info.value.status() == code
    assert message in info.value.message()
    assert client.is_server_live()


def test_cuda_shared_memory_is_off_without_allow_client_shm(client):
    with pytest.raises(InferenceServerException) as info:
        client.register_cuda_shared_memory("r", b"aGFuZGxl", 0, 8)
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "--allow-client-shm=true" in info.value.message()


def test_streaming_answers_every_request(client):
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        sent = {}
        for index in range(5):
            data, inputs = identity_inputs("INT32", (1, 3))
            sent[str(index)] = data + 0
            client.async_stream_infer("identity_int32", inputs, request_id=str(index))
        _, bad_inputs = identity_inputs("FP32", (1, 3))
        client.async_stream_infer("identity_int32", bad_inputs, request_id="bad")
        received = {}
        errors = []
        for _ in range(6):
            result, error = responses.get(timeout=30)
            if error is not None:
                errors.append(error)
            else:
                received[result.get_response().id] = result.as_numpy("OUTPUT0")
    finally:
        client.stop_stream()
    assert sorted(received) == sorted(sent)
    for key, data in sent.items():
        np.testing.assert_array_equal(received[key], data)
    assert len(errors) == 1 and "data-type is 'FP32'" in errors[0].message()


async def test_aio_client_and_stream(server):
    async with aiogrpcclient.InferenceServerClient(server.grpc_url) as client:
        assert await client.is_server_ready()
        data, inputs = identity_inputs("FP64", (2, 2), aiogrpcclient)
        result = await client.infer("identity_fp64", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)

        async def requests():
            for index in range(3):
                yield {"model_name": "identity_fp64", "inputs": inputs, "request_id": str(index)}

        ids = []
        async for result, error in client.stream_infer(requests()):
            assert error is None
            ids.append(result.get_response().id)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        assert sorted(ids) == ["0", "1", "2"]


#: tensor elements around the size from which messages skip protobuf's copies, and above
LARGE_COUNTS = (SPLIT_THRESHOLD // 4 - 64, SPLIT_THRESHOLD // 4 + 64, 3 << 20)


def check_large_tensors(client, datatype="FP32"):
    """Large tensors in and out (wire-level split and pre-encoded answer), exactly."""
    for count in LARGE_COUNTS:
        data = (np.random.default_rng(count).random((1, count)) * 100).astype(
            triton_to_np_dtype(datatype)
        )
        inputs = [grpcclient.InferInput("INPUT0", [1, count], datatype)]
        inputs[0].set_data_from_numpy(data)
        result = client.infer(f"identity_{datatype.lower()}", inputs, request_id=str(count))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        assert result.get_response().id == str(count)


@pytest.mark.parametrize("datatype", ["FP32", "FP64", "INT8"])
def test_large_tensors_round_trip(client, datatype):
    check_large_tensors(client, datatype)


def test_grpcio_transport_serves_the_same(onnx_repository):
    """--grpc-transport grpcio (grpc.aio) behind the same servicers: answers and errors."""
    from tests.support import ServerProcess

    process = ServerProcess([onnx_repository], "--grpc-transport", "grpcio")
    try:
        process.wait_ready()
        client = grpcclient.InferenceServerClient(process.grpc_url)
        data, inputs = identity_inputs("FP32")
        result = client.infer("identity_fp32", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        check_large_tensors(client)
        with pytest.raises(InferenceServerException) as exc:
            client.infer("nope", inputs)
        assert exc.value.message() == "Request for unknown model: 'nope' is not found"
        client.close()
    finally:
        assert process.stop() == 0, process.log()[-4000:]
