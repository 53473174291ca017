"""Ragged batching on a real server: requests of different lengths batch together, the
server fills ``batch_input`` tensors and framework backends scatter ``batch_output``s back,
for an ONNX, a PyTorch and a Python model; bad ``batch_input`` configs are refused with
Triton's messages."""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import explicit_mode_server

torch = pytest.importorskip("torch")
pytest.importorskip("triton_core_python")
onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")
torch_builders = pytest.importorskip("triton_core_torch.model_builders")

#: three requests of 3, 4 and 5 elements wait for each other and run as one batch
RAGGED_CONFIG = """
max_batch_size: 8
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX"
                data_type: TYPE_FP32 source_input: "INPUT" } ]
output [ { name: "DOUBLED" data_type: TYPE_FP32 dims: [ -1 ] },
         { name: "ENDS" data_type: TYPE_FP32 dims: [ 1 ] } ]
batch_output [ { target_name: "DOUBLED" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                 source_input: "INPUT" } ]
dynamic_batching { preferred_batch_size: [ 3 ] max_queue_delay_microseconds: 20000000 }
instance_group [ { kind: KIND_CPU count: 1 } ]
"""


class RaggedDouble(torch.nn.Module):
    def forward(self, INPUT: torch.Tensor, INDEX: torch.Tensor):
        return INPUT * 2.0, INDEX.reshape(-1, 1)


#: what a Python model sees of a ragged batch: its own request's tensors and batch inputs
PYTHON_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            index = pb_utils.get_input_tensor_by_name(request, "INDEX").as_numpy()
            ends = pb_utils.Tensor("ENDS", index.reshape(1, 1))
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("DOUBLED", x * 2), ends]))
        return responses
"""

BAD_CONFIGS = {
    "bad_type": ("TYPE_INT64", '"INPUT"', "batch input data type must be TYPE_INT32 or TYPE_FP32"),
    "bad_source": ("TYPE_FP32", '"NOPE"', "unknown source input name 'NOPE'"),
    "two_sources": ("TYPE_FP32", '"INPUT", "INPUT"', "expects 1 source input, got 2"),
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ragged")
    onnx_builders.ragged_scatter(root / "ragged_onnx" / "1" / "model.onnx")
    (root / "ragged_onnx" / "config.pbtxt").write_text('backend: "onnxruntime"\n' + RAGGED_CONFIG)
    torch_builders.save(RaggedDouble(), root / "ragged_torch" / "1" / "model.pt")
    (root / "ragged_torch" / "config.pbtxt").write_text('backend: "pytorch"\n' + RAGGED_CONFIG)
    (root / "ragged_python" / "1").mkdir(parents=True)
    (root / "ragged_python" / "1" / "model.py").write_text(textwrap.dedent(PYTHON_MODEL))
    (root / "ragged_python" / "config.pbtxt").write_text('backend: "python"\n' + RAGGED_CONFIG)
    for name, (datatype, sources, _) in BAD_CONFIGS.items():
        config = RAGGED_CONFIG.replace(
            'data_type: TYPE_FP32 source_input: "INPUT" }',
            f"data_type: {datatype} source_input: [ {sources} ] }}",
        )
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(textwrap.dedent(PYTHON_MODEL))
        (root / name / "config.pbtxt").write_text('backend: "python"\n' + config)
    return root


@pytest.fixture(scope="module")
def server(repo: Path):
    yield from explicit_mode_server(repo)


def _infer(url: str, model: str, length: int) -> tuple[np.ndarray, np.ndarray]:
    client = httpclient.InferenceServerClient(url, network_timeout=60)
    x = np.arange(length, dtype=np.float32).reshape(1, length) + 1
    tensor = httpclient.InferInput("INPUT", [1, length], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer(model, [tensor])
    return result.as_numpy("DOUBLED"), result.as_numpy("ENDS")


@pytest.mark.parametrize("model", ["ragged_onnx", "ragged_torch", "ragged_python"])
def test_requests_of_different_lengths_run_as_one_batch(server, model):
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model(model)
    lengths = (3, 4, 5)
    with ThreadPoolExecutor(3) as threads:
        results = list(threads.map(lambda n: _infer(server.http_url, model, n), lengths))
    for length, (doubled, _) in zip(lengths, results, strict=True):
        # each request gets its own piece back, in its own shape
        expected = (np.arange(length, dtype=np.float32).reshape(1, length) + 1) * 2
        np.testing.assert_array_equal(doubled, expected)
    # INDEX: where each request's elements end in the batch, in the order it formed
    ends = {length: int(result[1].item()) for length, result in zip(lengths, results, strict=True)}
    order = sorted(lengths, key=ends.__getitem__)
    assert [ends[n] for n in order] == list(np.cumsum(order)), ends
    stats = client.get_inference_statistics(model)["model_stats"][0]
    assert [b["batch_size"] for b in stats["batch_stats"]] == [3]


@pytest.mark.parametrize("name", sorted(BAD_CONFIGS))
def test_bad_batch_inputs_are_refused_with_tritons_messages(server, name):
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.load_model(name)
    assert BAD_CONFIGS[name][2] in info.value.message()
