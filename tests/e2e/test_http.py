"""tritonclient.http (sync and aio) against the real server process."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.conftest import DATATYPES
from tests.e2e.data import as_bytes, sample
from triton_core.shared_memory.cuda import cuda_support


@pytest.fixture(scope="module")
def client(server):
    with httpclient.InferenceServerClient(server.http_url) as client:
        yield client


def infer_identity(client, datatype, *, binary, **kwargs):
    data = sample(datatype)
    inputs = [httpclient.InferInput("INPUT0", list(data.shape), datatype)]
    inputs[0].set_data_from_numpy(data, binary_data=binary)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    result = client.infer(f"identity_{datatype.lower()}", inputs, outputs=outputs, **kwargs)
    return data, result.as_numpy("OUTPUT0")


def test_health_and_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("simple") and client.is_model_ready("simple", "1")
    assert not client.is_model_ready("simple", "2")
    metadata = client.get_server_metadata()
    assert metadata["name"] == "triton"
    assert "binary_tensor_data" in metadata["extensions"]
    assert "statistics" in metadata["extensions"]
    assert "system_shared_memory" in metadata["extensions"]
    # listed where the server can open CUDA IPC handles
    assert ("cuda_shared_memory" in metadata["extensions"]) == cuda_support().available
    model = client.get_model_metadata("simple")
    assert model == {
        "name": "simple",
        "versions": ["1"],
        "platform": "onnxruntime_onnx",
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "INPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]},
            {"name": "OUTPUT1", "datatype": "INT32", "shape": [-1, 16]},
        ],
    }


@pytest.mark.parametrize("datatype", DATATYPES)
def test_every_datatype_round_trips_in_binary(client, datatype):
    data, output = infer_identity(client, datatype, binary=True)
    np.testing.assert_array_equal(output, data)


@pytest.mark.parametrize("datatype", DATATYPES)
def test_large_binary_answers_are_written_in_parts(client, datatype):
    """Answers over 64 KiB go out as JSON and output buffers, not joined: every datatype."""
    data = sample(datatype, (2, 20_000))  # 40k elements: 40 kB (INT8) to 560 kB (BYTES)
    inputs = [httpclient.InferInput("INPUT0", list(data.shape), datatype)]
    inputs[0].set_data_from_numpy(data, binary_data=True)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
    result = client.infer(f"identity_{datatype.lower()}", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize("datatype", [d for d in DATATYPES if d not in ("FP16", "BF16")])
def test_every_json_datatype_round_trips_in_json(client, datatype):
    data, output = infer_identity(client, datatype, binary=False)
    if datatype == "BYTES":
        output = as_bytes(output)
    np.testing.assert_array_equal(output, data)


def test_add_sub_with_request_id_and_parameters(client):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    inputs = [httpclient.InferInput("INPUT0", [2, 16], "INT32"),
              httpclient.InferInput("INPUT1", [2, 16], "INT32")]  # fmt: skip
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    result = client.infer("simple", inputs, request_id="req-7", parameters={"custom": "x"})
    response = result.get_response()
    assert response["id"] == "req-7" and response["model_version"] == "1"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_classification_uses_labels(client):
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "INT32"),
              httpclient.InferInput("INPUT1", [1, 16], "INT32")]  # fmt: skip
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(a)
    outputs = [httpclient.InferRequestedOutput("OUTPUT0", class_count=3)]
    result = client.infer("simple", inputs, outputs=outputs)
    top = result.as_numpy("OUTPUT0")
    assert top.shape == (1, 3)
    assert top[0, 0] == b"30:15:label15"


@pytest.mark.parametrize("algorithm", ["gzip", "deflate"])
def test_compression_both_ways(client, algorithm):
    data = sample("FP32", (4, 64))
    inputs = [httpclient.InferInput("INPUT0", [4, 64], "FP32")]
    inputs[0].set_data_from_numpy(data)
    result = client.infer(
        "identity_fp32",
        inputs,
        request_compression_algorithm=algorithm,
        response_compression_algorithm=algorithm,
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


def test_auto_completed_config(client):
    config = client.get_model_config("mlp")
    assert config["platform"] == "onnxruntime_onnx" and config["backend"] == "onnxruntime"
    assert config["max_batch_size"] == 4
    first_input = config["input"][0]
    assert (first_input["name"], first_input["data_type"]) == ("INPUT0", "TYPE_FP32")
    assert first_input["dims"] == [64] and first_input["optional"] is False
    assert config["output"][0]["dims"] == [10]
    assert config["dynamic_batching"]["preferred_batch_size"] == [4]
    assert config["instance_group"][0]["count"] == 2
    assert config["default_model_filename"] == "model.onnx"
    nobatch = client.get_model_config("nobatch")
    assert nobatch["max_batch_size"] == 0 and nobatch["input"][0]["dims"] == [4]


def test_version_policy_latest_two(client):
    metadata = client.get_model_metadata("versioned")
    assert metadata["versions"] == ["2", "3"]
    assert not client.is_model_ready("versioned", "1")
    data = np.ones((1, 4), dtype=np.float32)
    inputs = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    assert client.infer("versioned", inputs).get_response()["model_version"] == "3"
    assert client.infer("versioned", inputs, model_version="2").get_response()[
        "model_version"] == "2"  # fmt: skip
    with pytest.raises(InferenceServerException, match="'versioned' version 1 is not"):
        client.infer("versioned", inputs, model_version="1")


def test_unlisted_outputs_follow_binary_data_output(client):
    data = sample("INT64", (1, 3))
    inputs = [httpclient.InferInput("INPUT0", [1, 3], "INT64")]
    inputs[0].set_data_from_numpy(data)
    result = client.infer("identity_int64", inputs)  # client asks binary_data_output: true
    assert result.get_output("OUTPUT0")["parameters"]["binary_data_size"] == 24
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)


async def test_aio_client(server):
    async with aiohttpclient.InferenceServerClient(server.http_url) as client:
        assert await client.is_server_ready()
        data = sample("FP32", (3, 5))
        inputs = [aiohttpclient.InferInput("INPUT0", [3, 5], "FP32")]
        inputs[0].set_data_from_numpy(data)
        result = await client.infer("identity_fp32", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
        metadata = await client.get_model_metadata("mlp")
        assert metadata["inputs"][0]["shape"] == [-1, 64]


@pytest.fixture(scope="module")
def large_body_server(onnx_repository):
    from tests.support import ServerProcess

    process = ServerProcess([onnx_repository], "--http-max-input-size", str(1 << 26))
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.log()[-4000:]


@pytest.mark.parametrize(
    ("datatype", "shape"),
    [("FP32", (1, 3 << 20)), ("INT8", (2, 5 << 20)), ("BYTES", (1, 200_000))],
    ids=["fp32-12MiB", "int8-10MiB", "bytes-5MiB"],
)
def test_large_binary_bodies_round_trip(large_body_server, datatype, shape):
    """Bodies of 4 MiB and more, gathered in numpy's memory: decoded on the loop (fixed
    size) or in a thread (BYTES), answered in parts."""
    data = sample(datatype, shape)
    if datatype == "BYTES":  # within the element cap, over 4 MiB
        data = np.array([b"%022d" % i for i in range(shape[1])], dtype=np.object_).reshape(shape)
    with httpclient.InferenceServerClient(
        large_body_server.http_url, connection_timeout=120, network_timeout=120
    ) as client:
        inputs = [httpclient.InferInput("INPUT0", list(shape), datatype)]
        inputs[0].set_data_from_numpy(data, binary_data=True)
        outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=True)]
        result = client.infer(f"identity_{datatype.lower()}", inputs, outputs=outputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data)
