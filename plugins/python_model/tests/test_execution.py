"""How ``execute`` runs, as Triton's Python backend runs it. Real ``triton-core serve``
process, stock tritonclient."""

from __future__ import annotations

import json
import time
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from triton_core.testing import ModelRepository, ServerProcess

pytestmark = pytest.mark.timeout(300)

#: answers its process's sys.argv, as JSON
ARGV = """
import json
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = pb_utils.Tensor("OUT", np.array([json.dumps(sys.argv).encode()], np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""

ARGV_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

INT32_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: not decoupled: polls is_cancelled() inside execute until the client cancels its call
CANCEL = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pb_utils.Logger.log_info("cancel: polling")
        deadline = time.monotonic() + 60
        while not requests[0].is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        pb_utils.Logger.log_info(f"cancel: is_cancelled() {requests[0].is_cancelled()}")
        error = pb_utils.TritonError("cancelled", pb_utils.TritonError.CANCELLED)
        return [pb_utils.InferenceResponse(error=error) for _ in requests]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = ModelRepository(tmp_path_factory.mktemp("execution"))
    for name, source, config in (
        ("argv", ARGV, ARGV_CONFIG),
        ("cancel", CANCEL, INT32_CONFIG),
    ):
        repository.add_model(name, dedent(config), versions={1: {"model.py": dedent(source)}})
    with ServerProcess([repository.root]) as process:
        process.wait_ready()
        yield process


def int_input(value: int) -> list[grpcclient.InferInput]:
    return [
        grpcclient.InferInput("IN", [1], "INT32").set_data_from_numpy(np.array([value], np.int32))
    ]


def wait_for_log(server, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in server.log():
        assert time.monotonic() < deadline, server.log()[-3000:]
        time.sleep(0.05)


def test_the_model_sees_an_empty_command_line_as_in_triton(server):
    # unittest.main() or argparse in a model must not see the stub's own options
    result = grpcclient.InferenceServerClient(server.grpc_url).infer("argv", int_input(0))
    assert json.loads(result.as_numpy("OUT")[0]) == [""]


def test_a_cancelled_unary_call_reaches_is_cancelled_during_execute(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    call = client.async_infer("cancel", int_input(0), callback=lambda result, error: None)
    wait_for_log(server, "cancel: polling")
    call.cancel()
    wait_for_log(server, "cancel: is_cancelled() True")
