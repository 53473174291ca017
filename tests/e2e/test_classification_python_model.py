"""The classification extension on a Python model's outputs, as Triton's QA runs it
(L0_parameters class_count_test.py: the identity_fp32 model, and it as identity_bytes)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.test_shared_memory import PYTHON_IDENTITY
from tests.support import ServerProcess, serve_until_done

pytestmark = pytest.mark.timeout(300)

CLIENTS = {"http": httpclient, "grpc": grpcclient}
CONFIG = """
backend: "python"
max_batch_size: 64
input [ {{ name: "INPUT0" data_type: {dtype} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ -1 ] }} ]
"""
MODELS = {
    "identity_fp32": "TYPE_FP32",
    "identity_bytes": "TYPE_STRING",
    "identity_fp16": "TYPE_FP16",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):  # type: ignore[no-untyped-def]
    repo: Path = tmp_path_factory.mktemp("classification")
    for name, dtype in MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(CONFIG.format(dtype=dtype))
        (repo / name / "1" / "model.py").write_text(PYTHON_IDENTITY)
    yield from serve_until_done(ServerProcess([repo]))


def classify(server, protocol: str, model: str, data: np.ndarray, datatype: str):  # type: ignore[no-untyped-def]
    module = CLIENTS[protocol]
    url = server.http_url if protocol == "http" else server.grpc_url
    tensor = module.InferInput("INPUT0", list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    output = module.InferRequestedOutput("OUTPUT0", class_count=5)
    return module.InferenceServerClient(url).infer(model, [tensor], outputs=[output])


@pytest.mark.parametrize("protocol", list(CLIENTS))
def test_a_python_models_output_is_classified(server, protocol: str) -> None:
    data = np.array([[3, 1, 4, 1, 5, 9, 2, 6]], dtype=np.float32)
    result = classify(server, protocol, "identity_fp32", data, "FP32")
    assert result.as_numpy("OUTPUT0").tolist() == [
        [b"9.000000:5", b"6.000000:7", b"5.000000:4", b"4.000000:2", b"3.000000:0"]
    ]


@pytest.mark.parametrize("protocol", list(CLIENTS))
@pytest.mark.parametrize(
    ("model", "data", "datatype", "message"),
    [
        (
            "identity_bytes",
            np.array([[b"test"] * 8], dtype=object),
            "BYTES",
            "class result not available for output due to unsupported type 'BYTES'",
        ),
        (
            "identity_fp16",
            np.ones((1, 8), np.float16),
            "FP16",
            "class result not available for output due to unsupported type 'FP16'",
        ),
        (
            "identity_fp32",
            np.ones((1, 1_000_001), np.float32),
            "FP32",
            "classification output tensor too large",
        ),
    ],
)
def test_what_triton_cannot_classify_is_refused_in_its_words(
    server, protocol: str, model: str, data: np.ndarray, datatype: str, message: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        classify(server, protocol, model, data, datatype)
    assert message in info.value.message()
    assert info.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
