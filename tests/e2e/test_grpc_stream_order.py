"""A gRPC stream answers requests for models that are not decoupled in the order they came,
as Triton does: errors found at once do not overtake an answer still being computed."""

from __future__ import annotations

import queue
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support import ServerProcess, serve_until_done, wait_until

pytestmark = pytest.mark.timeout(300)

CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
parameters {{ key: "release" value: {{ string_value: "{release}" }} }}
"""
#: answers once the test creates the release file (at most a minute later)
HELD = """
import json
import os
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.release = config["parameters"]["release"]["string_value"]

    def execute(self, requests):
        deadline = time.monotonic() + 60
        while not os.path.exists(self.release) and time.monotonic() < deadline:
            time.sleep(0.01)
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", values)]))
        return responses
"""


@pytest.fixture
def release(tmp_path: Path) -> Path:
    return tmp_path / "go"


@pytest.fixture(params=["http2", "grpcio"])
def server(request, tmp_path: Path, release: Path):  # type: ignore[no-untyped-def]
    repo = tmp_path / "ordered"
    (repo / "held" / "1").mkdir(parents=True)
    (repo / "held" / "config.pbtxt").write_text(CONFIG.format(release=release))
    (repo / "held" / "1" / "model.py").write_text(HELD)
    yield from serve_until_done(ServerProcess([repo], "--grpc-transport", request.param))


def tensor(count: int) -> grpcclient.InferInput:
    values = grpcclient.InferInput("IN", [count], "FP32")
    values.set_data_from_numpy(np.arange(count, dtype=np.float32))
    return values


def failures(client: grpcclient.InferenceServerClient) -> int:
    statistics = client.get_inference_statistics("held")
    return statistics.model_stats[0].inference_stats.fail.count


def test_errors_wait_for_the_answer_of_an_earlier_request(server, release: Path) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        client.async_stream_infer("held", [tensor(4)], request_id="good")
        client.async_stream_infer("unknown_model", [tensor(4)], request_id="unknown")
        client.async_stream_infer("held", [tensor(2)], request_id="short")
        # both errors are decided while the first request's model waits for the release
        wait_until(lambda: failures(client) == 1, what="the short input refused")
        release.touch()
        received = [answers.get(timeout=60) for _ in range(3)]
    finally:
        client.stop_stream()
        client.close()
    (good, no_error), (none_1, unknown), (none_2, short) = received
    assert no_error is None and none_1 is None and none_2 is None
    np.testing.assert_array_equal(good.as_numpy("OUT"), np.arange(4, dtype=np.float32))
    assert "Request for unknown model: 'unknown_model' is not found" in unknown.message()
    assert "unexpected shape for input 'IN' for model 'held'" in short.message()
