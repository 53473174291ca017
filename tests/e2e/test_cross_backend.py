"""Backends together: a Python model calling a PyTorch model through BLS, and an ensemble whose
steps are an ONNX, a PyTorch and a Python model."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import ServerProcess

torch = pytest.importorskip("torch")
pytest.importorskip("triton_core_python")
onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")
torch_builders = pytest.importorskip("triton_core_torch.model_builders")


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3.0


TORCH_CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

BLS_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            call = pb_utils.InferenceRequest(
                model_name="torch_scale",
                requested_output_names=["OUTPUT__0"],
                inputs=[pb_utils.Tensor("INPUT__0", x.as_numpy())],
            )
            result = call.exec()
            if result.has_error():
                responses.append(pb_utils.InferenceResponse(error=result.error()))
                continue
            scaled = pb_utils.get_output_tensor_by_name(result, "OUTPUT__0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", scaled + 1)]))
        return responses
"""

PY_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

ENSEMBLE_CONFIG = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "A" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "B" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "RESULT" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [
  { model_name: "onnx_add_sub" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "SUM" } },
  { model_name: "torch_scale" model_version: -1
    input_map { key: "INPUT__0" value: "SUM" } output_map { key: "OUTPUT__0" value: "SCALED" } },
  { model_name: "py_bls" model_version: -1
    input_map { key: "X" value: "SCALED" } output_map { key: "Y" value: "RESULT" } }
] }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("cross")
    torch_builders.save(Scale(), repo / "torch_scale" / "1" / "model.pt")
    (repo / "torch_scale" / "config.pbtxt").write_text(TORCH_CONFIG)
    (repo / "py_bls" / "1").mkdir(parents=True)
    (repo / "py_bls" / "1" / "model.py").write_text(textwrap.dedent(BLS_MODEL))
    (repo / "py_bls" / "config.pbtxt").write_text(PY_CONFIG)
    onnx_builders.add_sub(repo / "onnx_add_sub" / "1" / "model.onnx", "FP32", 4)
    (repo / "onnx_add_sub" / "config.pbtxt").write_text('backend: "onnxruntime"\n')
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    process = ServerProcess([repo])
    try:
        process.wait_ready(timeout=120)
        yield process
    finally:
        assert process.stop() == 0


def test_python_model_calls_a_pytorch_model_through_bls(server):
    client = httpclient.InferenceServerClient(server.http_url)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    tensor = httpclient.InferInput("X", [2, 4], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("py_bls", [tensor])
    np.testing.assert_allclose(result.as_numpy("Y"), x * 3 + 1)
    stats = client.get_inference_statistics("torch_scale")["model_stats"][0]
    assert stats["inference_count"] >= 2


def test_ensemble_of_onnx_pytorch_and_python_steps(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    a = np.full((1, 4), 2.0, dtype=np.float32)
    b = np.arange(4, dtype=np.float32).reshape(1, 4)
    tensors = [grpcclient.InferInput(n, [1, 4], "FP32") for n in ("A", "B")]
    tensors[0].set_data_from_numpy(a)
    tensors[1].set_data_from_numpy(b)
    result = client.infer("pipeline", tensors)
    # ONNX adds, PyTorch triples, and the Python step calls PyTorch again (BLS) and adds one
    np.testing.assert_allclose(result.as_numpy("RESULT"), (a + b) * 9 + 1)
