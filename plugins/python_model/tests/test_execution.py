"""How ``execute`` runs, as Triton's Python backend runs it. Real ``triton-core serve``
process, stock tritonclient."""

from __future__ import annotations

import json
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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = ModelRepository(tmp_path_factory.mktemp("execution"))
    for name, source, config in (("argv", ARGV, ARGV_CONFIG),):
        repository.add_model(name, dedent(config), versions={1: {"model.py": dedent(source)}})
    with ServerProcess([repository.root]) as process:
        process.wait_ready()
        yield process


def int_input(value: int) -> list[grpcclient.InferInput]:
    return [
        grpcclient.InferInput("IN", [1], "INT32").set_data_from_numpy(np.array([value], np.int32))
    ]


def test_the_model_sees_an_empty_command_line_as_in_triton(server):
    # unittest.main() or argparse in a model must not see the stub's own options
    result = grpcclient.InferenceServerClient(server.grpc_url).infer("argv", int_input(0))
    assert json.loads(result.as_numpy("OUT")[0]) == [""]
