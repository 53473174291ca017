"""Iterative sequences: Python models that release requests with
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE run them again, in a real server driven by tritonclient."""

from __future__ import annotations

import queue
import time
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from triton_core.testing import ModelRepository, ServerProcess

pytestmark = pytest.mark.timeout(300)

#: Triton's decoupled example: IN responses counting down to 0, the request rescheduled after
#: each but the last; every response also says what the execution saw (START control,
#: correlation ID, request flags)
COUNTDOWN = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.remaining = {}

    def execute(self, requests):
        for request in requests:
            def value(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]

            corrid = int(value("CORRID"))
            if int(value("START")):
                self.remaining[corrid] = int(value("IN"))
            self.remaining[corrid] -= 1
            left = self.remaining[corrid]
            outputs = [
                pb_utils.Tensor("OUT", np.array([left], np.int32)),
                pb_utils.Tensor("SEEN_START", np.array([value("START")], np.int32)),
                pb_utils.Tensor("SEEN_CORRID", np.array([corrid], np.uint64)),
                pb_utils.Tensor("SEEN_FLAGS", np.array([request.flags()], np.int32)),
            ]
            sender = request.get_response_sender()
            if left <= 0:
                del self.remaining[corrid]
                sender.send(pb_utils.InferenceResponse(outputs),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                sender.send(pb_utils.InferenceResponse(outputs))
        return None
"""

COUNTDOWN_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
sequence_batching {
  iterative_sequence: true
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SEEN_START" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SEEN_CORRID" data_type: TYPE_UINT64 dims: [ 1 ] },
  { name: "SEEN_FLAGS" data_type: TYPE_INT32 dims: [ 1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

#: Triton's non-decoupled example: rescheduled (None in the list) until it ran IN times, then
#: answers how many times it ran; MODE 1 wrongly answers a rescheduled request
RERUN = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.runs = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            def value(name):
                return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().flat[0])

            wanted, mode = value("IN"), value("MODE")
            key = request.correlation_id()
            runs = self.runs[key] = self.runs.get(key, 0) + 1
            shape = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().shape
            runs_out = pb_utils.Tensor("RUNS", np.full(shape, runs, np.int32))
            response = pb_utils.InferenceResponse([runs_out])
            if runs < wanted:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(response if mode == 1 else None)
            else:
                del self.runs[key]
                responses.append(response)
        return responses
"""


def rerun_config(scheduling: str, max_batch_size: int = 0) -> str:
    return f"""
backend: "python"
max_batch_size: {max_batch_size}
{scheduling}
input [
  {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "MODE" data_type: TYPE_INT32 dims: [ 1 ] }}
]
output [ {{ name: "RUNS" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = ModelRepository(tmp_path_factory.mktemp("rescheduling"))
    models = {
        "countdown": (COUNTDOWN, COUNTDOWN_CONFIG),
        # the same model without iterative_sequence: rescheduling is refused
        "countdown_plain": (
            COUNTDOWN,
            COUNTDOWN_CONFIG.replace("iterative_sequence: true", ""),
        ),
        "rerun": (RERUN, rerun_config("sequence_batching { iterative_sequence: true }")),
        "rerun_dynamic": (RERUN, rerun_config("dynamic_batching { }", 4)),
    }
    for name, (source, config) in models.items():
        repository.add_model(name, config, versions={1: {"model.py": dedent(source)}})
    process = ServerProcess([repository.root])
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.log()[-3000:]


def count_input(count: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([count], dtype=np.int32))
    return [tensor]


def rerun_inputs(module, runs: int, mode: int = 0, shape: tuple[int, ...] = (1,)) -> list:
    tensors = []
    for name, value in (("IN", runs), ("MODE", mode)):
        tensor = module.InferInput(name, list(shape), "INT32")
        tensor.set_data_from_numpy(np.full(shape, value, dtype=np.int32))
        tensors.append(tensor)
    return tensors


def collect(client, results: queue.Queue, request_id: str, count: int) -> list:
    """Responses of ``request_id`` until its final one (at most ``count``), in order."""
    received = []
    deadline = time.monotonic() + 60
    while len(received) < count:
        result, error = results.get(timeout=max(0.1, deadline - time.monotonic()))
        assert error is None, error
        response = result.get_response()
        if response.id == request_id:
            received.append(result)
            if response.parameters["triton_final_response"].bool_param:
                break
    return received


def test_a_decoupled_model_reschedules_its_request_until_done(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        # no correlation ID: the iterative sequence batcher gives each request its own
        client.async_stream_infer("countdown", count_input(3), request_id="a")
        client.async_stream_infer("countdown", count_input(2), request_id="b")
        first = collect(client, results, "a", 10)
        second = collect(client, results, "b", 10) if len(first) == 3 else []
    finally:
        client.stop_stream()
    assert [int(r.as_numpy("OUT")[0]) for r in first] == [2, 1, 0]
    # START (control and request flag) only on the first execution; the same sequence after
    assert [int(r.as_numpy("SEEN_START")[0]) for r in first] == [1, 0, 0]
    assert [int(r.as_numpy("SEEN_FLAGS")[0]) for r in first] == [1, 0, 0]
    assert len({int(r.as_numpy("SEEN_CORRID")[0]) for r in first}) == 1
    assert int(first[0].as_numpy("SEEN_CORRID")[0]) != 0
    finals = [r.get_response().parameters["triton_final_response"].bool_param for r in first]
    assert finals == [False, False, True]
    assert [int(r.as_numpy("OUT")[0]) for r in second] == [1, 0]
    assert int(second[0].as_numpy("SEEN_CORRID")[0]) != int(first[0].as_numpy("SEEN_CORRID")[0])


def test_a_model_reschedules_a_request_returning_none_in_its_place(server):
    http = httpclient.InferenceServerClient(server.http_url)
    result = http.infer("rerun", rerun_inputs(httpclient, 3))
    assert int(result.as_numpy("RUNS")[0]) == 3
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    result = grpc.infer("rerun", rerun_inputs(grpcclient, 2), sequence_id=77, sequence_start=True)
    assert int(result.as_numpy("RUNS")[0]) == 2
    stats = http.get_inference_statistics("rerun")["model_stats"][0]
    assert stats["execution_count"] == 5 and stats["inference_stats"]["success"]["count"] == 2


def test_a_response_for_a_rescheduled_request_is_an_error(server):
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        http.infer("rerun", rerun_inputs(httpclient, 2, mode=1))
    assert "Expected a None object in the execute function return list for reschduled " in (
        info.value.message()
    )


NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)


def test_rescheduling_without_iterative_sequence_is_refused_as_triton_does(server):
    http = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        http.infer("rerun_dynamic", rerun_inputs(httpclient, 2, shape=(1, 1)))
    assert info.value.status() == "400" and NOT_CONFIGURED in info.value.message()

    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "countdown_plain", count_input(3), sequence_id=5, sequence_start=True
        )
        # the response sent before rescheduling may come first; the stream ends with the error
        errors = []
        for _ in range(2):
            result, error = results.get(timeout=60)
            if error is not None:
                errors.append(error)
                break
            assert int(result.as_numpy("OUT")[0]) == 2
    finally:
        client.stop_stream()
    assert len(errors) == 1 and NOT_CONFIGURED in errors[0].message()
