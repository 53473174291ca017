"""``model_warmup`` through the core: every instance runs the samples before the model is
ready, for ONNX, PyTorch and Python models; a failing sample fails the load with Triton's
message; bad samples are refused at load, naming the sample and the field."""

from __future__ import annotations

import struct
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, explicit_mode_server

pytest.importorskip("triton_core_python")
torch = pytest.importorskip("torch")
onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")
torch_builders = pytest.importorskip("triton_core_torch.model_builders")


def _sample(name: str, inputs: str, batch_size: int = 1, count: int = 0) -> str:
    return f'model_warmup [{{ name: "{name}" batch_size: {batch_size} count: {count} {inputs} }}]'


def _input(name: str, datatype: str, dims: str, data: str) -> str:
    return f'inputs {{ key: "{name}" value {{ data_type: {datatype} dims: [ {dims} ] {data} }} }}'


ONNX_CONFIG = f"""
backend: "onnxruntime"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
{
    _sample(
        "zeros and random",
        _input("INPUT0", "TYPE_FP32", "4", "zero_data: true")
        + _input("INPUT1", "TYPE_FP32", "4", "random_data: true"),
        batch_size=3,
        count=2,
    )
}
"""


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


TORCH_CONFIG = f"""
backend: "pytorch"
max_batch_size: 4
input [ {{ name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{_sample("torch sample", _input("INPUT__0", "TYPE_FP32", "4", "random_data: true"), 2)}
"""

#: fails every request whose inputs are not the warm-up file's values, so the load proves
#: that the file's bytes (FP32 and length-prefixed BYTES) reached the model
CHECKING_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            words = pb_utils.get_input_tensor_by_name(request, "WORDS").as_numpy()
            ok = x.tolist() == [[1.0, 2.0, 3.0, 4.0]] and words.tolist() == [[b"ab", b"xyz"]]
            error = None if ok else pb_utils.TritonError(f"unexpected {x!r} {words!r}")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)], error=error))
        return responses
"""

CHECKING_CONFIG = f"""
backend: "python"
max_batch_size: 2
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }},
        {{ name: "WORDS" data_type: TYPE_STRING dims: [ 2 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
instance_group [ {{ kind: KIND_CPU count: 2 }} ]
{
    _sample(
        "file sample",
        _input("X", "TYPE_FP32", "4", 'input_data_file: "x.bin"')
        + _input("WORDS", "TYPE_STRING", "2", 'input_data_file: "words.bin"'),
    )
}
"""

FAILING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        error = pb_utils.TritonError("An Error Occurred")
        return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in requests]
"""

PY_CONFIG = """
backend: "python"
max_batch_size: 2
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

DECOUPLED_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

ZERO_SAMPLE = _sample("zero sample", _input("X", "TYPE_FP32", "4", "zero_data: true"))

#: configs refused at load, and what the message must say
BAD_SAMPLES = {
    "outside": _sample(
        "escape", _input("X", "TYPE_FP32", "4", 'input_data_file: "../config.pbtxt"')
    ),
    "variable": _sample("var", _input("X", "TYPE_FP32", "-1", "zero_data: true")),
    "short_file": _sample("short", _input("X", "TYPE_FP32", "4", 'input_data_file: "x.bin"')),
    "unknown_input": _sample("stray", _input("NOPE", "TYPE_FP32", "4", "zero_data: true")),
    "big_batch": _sample("big", _input("X", "TYPE_FP32", "4", "zero_data: true"), 3),
    "wrong_type": _sample("typed", _input("X", "TYPE_INT32", "4", "zero_data: true")),
}
BAD_MESSAGES = {
    "outside": "'input_data_file' '../config.pbtxt' must name a file in the model's warmup/",
    "variable": "warmup setting expects all variable-size dimensions are specified for input 'X'",
    "short_file": "warmup setting expects 16 bytes, but the data provided from x.bin only has 8",
    "unknown_input": "warmup sample 'stray': input 'NOPE' is not an input of the model",
    "big_batch": "warmup sample 'big': 'batch_size' 3 exceeds max_batch_size 2",
    "wrong_type": "warmup sample 'typed': inference input 'X' data-type is 'INT32', but model",
}


def _python_model(repo: Path, name: str, source: str, config: str) -> Path:
    folder = repo / name
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.py").write_text(textwrap.dedent(source))
    (folder / "config.pbtxt").write_text(config)
    return folder


def _build(repo: Path) -> None:
    onnx_builders.add_sub(repo / "warm_onnx" / "1" / "model.onnx", "FP32", 4)
    (repo / "warm_onnx" / "config.pbtxt").write_text(ONNX_CONFIG)
    torch_builders.save(Double(), repo / "warm_torch" / "1" / "model.pt")
    (repo / "warm_torch" / "config.pbtxt").write_text(TORCH_CONFIG)
    checking = _python_model(repo, "warm_file", CHECKING_MODEL, CHECKING_CONFIG)
    (checking / "warmup").mkdir()
    (checking / "warmup" / "x.bin").write_bytes(np.arange(1, 5, dtype="<f4").tobytes())
    words = b"".join(struct.pack("<I", len(w)) + w for w in (b"ab", b"xyz"))
    (checking / "warmup" / "words.bin").write_bytes(words)
    _python_model(repo, "failing_infer", FAILING_MODEL, PY_CONFIG + ZERO_SAMPLE)
    decoupled = PY_CONFIG + "model_transaction_policy { decoupled: true }\n" + ZERO_SAMPLE
    _python_model(repo, "warm_decoupled", DECOUPLED_MODEL, decoupled)
    for name, sample in BAD_SAMPLES.items():
        folder = _python_model(repo, f"bad_{name}", CHECKING_MODEL, PY_CONFIG + sample)
        (folder / "warmup").mkdir()
        (folder / "warmup" / "x.bin").write_bytes(b"\0" * 8)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    repo = tmp_path_factory.mktemp("warmup_models")
    _build(repo)
    yield from explicit_mode_server(repo, "--log-verbose=1")


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url, network_timeout=120)


def _stats(client: httpclient.InferenceServerClient, model: str) -> dict:
    return client.get_inference_statistics(model)["model_stats"][0]


def test_every_instance_runs_each_sample_count_times_before_ready(client, server):
    client.load_model("warm_onnx")
    assert client.is_model_ready("warm_onnx")
    stats = _stats(client, "warm_onnx")
    # 2 instances x 2 iterations, each a batch of 3 requests: counted as Triton counts them
    assert stats["execution_count"] == 4
    assert stats["inference_count"] == 12
    assert stats["inference_stats"]["success"]["count"] == 12
    assert [b["batch_size"] for b in stats["batch_stats"]] == [3]
    log = server.log()
    for instance in ("warm_onnx_0_0", "warm_onnx_0_1"):
        for iteration in (1, 2):
            assert (
                f"model 'warm_onnx' instance {instance} is running warmup sample "
                f"'zeros and random' for iteration {iteration}"
            ) in log
    a = np.ones((1, 4), dtype=np.float32)
    inputs = [httpclient.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    result = client.infer("warm_onnx", inputs)
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + a)


def test_pytorch_model_warms_up_with_random_data(client):
    client.load_model("warm_torch")
    stats = _stats(client, "warm_torch")
    assert (stats["execution_count"], stats["inference_count"]) == (1, 2)


def test_python_model_gets_the_file_data_on_every_instance(client):
    client.load_model("warm_file")  # the model fails any other data, and the load with it
    stats = _stats(client, "warm_file")
    assert (stats["execution_count"], stats["inference_count"]) == (2, 2)


def test_decoupled_python_model_warms_up(client):
    client.load_model("warm_decoupled")
    assert _stats(client, "warm_decoupled")["execution_count"] == 1


def test_failing_sample_fails_the_load_with_tritons_message(client):
    with pytest.raises(InferenceServerException) as info:
        client.load_model("failing_infer")
    assert "failed to run warmup sample 'zero sample': An Error Occurred;" in info.value.message()
    assert not client.is_model_ready("failing_infer")


@pytest.mark.parametrize("name", sorted(BAD_SAMPLES))
def test_bad_samples_are_refused_naming_the_sample_and_field(client, name):
    with pytest.raises(InferenceServerException) as info:
        client.load_model(f"bad_{name}")
    assert BAD_MESSAGES[name] in info.value.message()
    assert not client.is_model_ready(f"bad_{name}")
