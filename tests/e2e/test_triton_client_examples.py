"""Triton's own Python client examples, unchanged, against a real triton-core server.

The examples (tests/data/triton_client_examples, see its README) are what a Triton user runs
first; each exits 0 and most print "PASS". The repository holds the models they expect, built
here: Triton's ``simple`` (INT32 add/sub, 16 elements) and ``simple_int8`` as ONNX models,
``simple_string``, ``simple_identity``, ``simple_sequence`` and the decoupled
``repeat_int32`` as Python models.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ServerProcess, serve_until_done

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")

EXAMPLES = Path(__file__).parent.parent / "data" / "triton_client_examples"

ADD_SUB_CONFIG = """
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {{ name: "INPUT0" data_type: TYPE_{type} dims: [ 16 ] }},
  {{ name: "INPUT1" data_type: TYPE_{type} dims: [ 16 ] }}
]
output [
  {{ name: "OUTPUT0" data_type: TYPE_{type} dims: [ 16 ] }},
  {{ name: "OUTPUT1" data_type: TYPE_{type} dims: [ 16 ] }}
]
"""

STRING_CONFIG = """
name: "simple_string"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_STRING dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_STRING dims: [ 16 ] }
]
"""

# the sum and difference of numbers written as strings, written back as strings
STRING_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy().astype(np.int64)
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy().astype(np.int64)
            outputs = [
                pb_utils.Tensor(name, np.char.encode((value).astype(str)).astype(np.object_))
                for name, value in (("OUTPUT0", a + b), ("OUTPUT1", a - b))
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

IDENTITY_CONFIG = """
name: "simple_identity"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
"""

IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", value)]))
        return responses
"""

SEQUENCE_CONFIG = """
name: "simple_sequence"
backend: "python"
max_batch_size: 8
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# what Triton's example sequence model answers: the input, plus one on a sequence's start
SEQUENCE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            output = pb_utils.Tensor("OUTPUT", (value + start).astype(value.dtype))
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
"""


REPEAT_CONFIG = """
name: "repeat_int32"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DELAY" data_type: TYPE_UINT32 dims: [ -1 ] },
  { name: "WAIT" data_type: TYPE_UINT32 dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Triton's repeat backend as a decoupled Python model: one response per element of IN, each
# after its DELAY (ms); WAIT (ms) before the request is released
REPEAT_MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            for value, delay in zip(values, delays):
                time.sleep(int(delay) / 1000)
                output = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([output]))
            time.sleep(int(wait[0]) / 1000)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def write_python_model(root: Path, name: str, config: str, source: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(source)


def write_add_sub(root: Path, name: str, datatype: str) -> None:
    onnx_builders.add_sub(root / name / "1" / "model.onnx", datatype, 16)
    (root / name / "config.pbtxt").write_text(ADD_SUB_CONFIG.format(name=name, type=datatype))


def build_repository(root: Path, model_count: int) -> Path:
    """The examples' models, plus add/sub models of other types up to ``model_count`` (the
    model-control examples count the repository's models: 7 for HTTP, 8 for gRPC)."""
    write_add_sub(root, "simple", "INT32")
    write_add_sub(root, "simple_int8", "INT8")
    write_python_model(root, "simple_string", STRING_CONFIG, STRING_MODEL)
    write_python_model(root, "simple_identity", IDENTITY_CONFIG, IDENTITY_MODEL)
    write_python_model(root, "simple_sequence", SEQUENCE_CONFIG, SEQUENCE_MODEL)
    write_python_model(root, "repeat_int32", REPEAT_CONFIG, REPEAT_MODEL)
    for datatype in ("FP32", "INT16")[: model_count - 6]:
        write_add_sub(root, f"simple_{datatype.lower()}", datatype)
    assert len(list(root.iterdir())) == model_count
    return root


def run_example(name: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), "-u", url, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def check_example(name: str, url: str, *args: str) -> None:
    """Exit code 0, and "PASS" printed by the examples that print it."""
    result = run_example(name, url, *args)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    if "PASS" in (EXAMPLES / f"{name}.py").read_text():
        assert "PASS" in result.stdout, output[-4000:]


HTTP_EXAMPLES = (
    "simple_http_health_metadata",
    "simple_http_infer_client",
    "simple_http_async_infer_client",
    "simple_http_aio_infer_client",
    "simple_http_string_infer_client",
    "simple_http_sequence_sync_infer_client",
    "simple_http_shm_client",
    "simple_http_shm_string_client",
)

GRPC_EXAMPLES = (
    "simple_grpc_health_metadata",
    "simple_grpc_infer_client",
    "simple_grpc_async_infer_client",
    "simple_grpc_aio_infer_client",
    "simple_grpc_string_infer_client",
    "simple_grpc_sequence_sync_infer_client",
    "simple_grpc_sequence_stream_infer_client",
    "simple_grpc_aio_sequence_stream_infer_client",
    "simple_grpc_shm_client",
    "simple_grpc_shm_string_client",
    "simple_grpc_custom_args_client",
    "simple_grpc_keepalive_client",
    "grpc_explicit_int_content_client",
    "grpc_explicit_int8_content_client",
    "grpc_explicit_byte_content_client",
    "simple_grpc_custom_repeat",
)


@pytest.fixture(scope="module")
def examples_server(tmp_path_factory: pytest.TempPathFactory):
    repository = build_repository(tmp_path_factory.mktemp("client_examples"), 7)
    process = ServerProcess([repository], "--allow-client-shm=true")
    yield from serve_until_done(process)


@pytest.mark.parametrize("name", HTTP_EXAMPLES)
def test_http_example(examples_server: ServerProcess, name: str) -> None:
    check_example(name, examples_server.http_url)


@pytest.mark.parametrize("name", GRPC_EXAMPLES)
def test_grpc_example(examples_server: ServerProcess, name: str) -> None:
    check_example(name, examples_server.grpc_url)


def test_reuse_infer_objects_example(examples_server: ServerProcess) -> None:
    check_example("reuse_infer_objects_client", examples_server.http_url, "-i", "http")
    check_example("reuse_infer_objects_client", examples_server.grpc_url, "-i", "grpc")


@pytest.mark.parametrize(
    ("name", "model_count", "protocol"),
    [("simple_http_model_control", 7, "http"), ("simple_grpc_model_control", 8, "grpc")],
)
def test_model_control_example(tmp_path: Path, name: str, model_count: int, protocol: str) -> None:
    """Load, a malformed config override ("failed to load" expected), a good override,
    unload, an unknown model ("failed to load" expected); the gRPC one also sends a file
    name longer than a file system allows (INTERNAL "failed to poll" expected)."""
    repository = build_repository(tmp_path / "models", model_count)
    process = ServerProcess([repository], "--model-control-mode=explicit")
    for served in serve_until_done(process):
        url = served.http_url if protocol == "http" else served.grpc_url
        check_example(name, url)
        # the server's log says why the override was refused, as Triton's does
        assert "Poll failed for model directory 'simple': Invalid config override" in (served.log())
