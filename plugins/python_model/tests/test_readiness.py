"""A model's own ``is_ready()`` (Triton 2.7x), asked by the model-ready endpoints of a real
``triton-core serve``, over HTTP and gRPC with the stock tritonclient."""

from __future__ import annotations

import queue
import threading
import time
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from triton_core.testing import ModelRepository

pytestmark = pytest.mark.timeout(300)


def identity_model(imports: str, methods: str) -> str:
    """A model whose outputs are its inputs, with more ``imports`` and ``methods``."""
    return f"""
import triton_python_backend_utils as pb_utils
{imports}

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", data)]))
        return responses
{methods}"""


#: Triton's qa/L0_backend_python/model_readiness/test_models/readiness_model.py, shortened:
#: what is_ready() does comes from the config's parameters
READINESS = identity_model(
    "import json\nimport time\n",
    """
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.outcome = parameters["OUTCOME"]["string_value"]
        self.delay = float(parameters["DELAY"]["string_value"])
        self.calls = 0

    def is_ready(self):
        self.calls += 1
        time.sleep(self.delay)
        if self.outcome == "exception":
            raise RuntimeError("Internal check failed - model is not ready")
        if self.outcome == "non_boolean":
            return "ready"
        if self.outcome == "calls":  # ready on every other call: each call reached the model
            return self.calls % 2 == 1
        return self.outcome == "true"
""",
)

COROUTINE = identity_model(
    "import asyncio\n",
    """
    async def is_ready(self):
        await asyncio.sleep(0.05)
        return True
""",
)

PLAIN = identity_model("", "")

IDENTITY_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
parameters { key: "OUTCOME" value: { string_value: "%s" } }
parameters { key: "DELAY" value: { string_value: "%s" } }
"""

#: qa/.../is_ready_fn_returns_true_decoupled: COUNT responses from execute itself
DECOUPLED = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().item())
            sender = request.get_response_sender()
            out = pb_utils.Tensor("OUT", np.array([[count]], dtype=np.int32))
            for _ in range(count):
                time.sleep(0.02)
                sender.send(pb_utils.InferenceResponse(output_tensors=[out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None

    def is_ready(self):
        time.sleep(0.05)
        return True
"""

DECOUPLED_CONFIG = """
backend: "python"
max_batch_size: 1
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
"""

#: kills its own process when asked; a restarted process fails to initialize, so the
#: instance stays without a live process
DIES = """
import os
import signal

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        marker = os.path.join(args["model_repository"], "started")
        if os.path.exists(marker):
            raise pb_utils.TritonModelException("this model starts once")
        open(marker, "w").close()

    def execute(self, requests):
        os.kill(os.getpid(), signal.SIGKILL)
"""

#: ready while its folder has no file ``not_ready``
FLAGGED = identity_model(
    "import os\n",
    """
    def initialize(self, args):
        self.flag = os.path.join(args["model_repository"], "not_ready")

    def is_ready(self):
        return not os.path.exists(self.flag)
""",
)

MODELS = {
    "ready_true": (READINESS, IDENTITY_CONFIG % ("true", "0.01")),
    "ready_false": (READINESS, IDENTITY_CONFIG % ("false", "0.01")),
    "ready_raises": (READINESS, IDENTITY_CONFIG % ("exception", "0.01")),
    "ready_non_boolean": (READINESS, IDENTITY_CONFIG % ("non_boolean", "0.01")),
    "ready_alternates": (READINESS, IDENTITY_CONFIG % ("calls", "0.01")),
    "ready_slow": (READINESS, IDENTITY_CONFIG % ("true", "6.5")),
    "ready_coroutine": (COROUTINE, IDENTITY_CONFIG % ("true", "0")),
    "ready_decoupled": (DECOUPLED, DECOUPLED_CONFIG),
    "no_is_ready": (PLAIN, IDENTITY_CONFIG % ("true", "0")),
    "dies": (DIES, IDENTITY_CONFIG % ("true", "0")),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory, serve):
    root = tmp_path_factory.mktemp("readiness_models")
    repository = ModelRepository(root)
    for name, (source, config) in MODELS.items():
        repository.add_model(name, dedent(config), versions={1: {"model.py": dedent(source)}})
    with serve(root, "--strict-readiness=false", "--log-verbose=1") as process:
        yield process


def ready_over_both(server, model: str) -> tuple[bool, bool]:
    with httpclient.InferenceServerClient(server.http_url) as http_client:
        over_http = http_client.is_model_ready(model)
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        over_grpc = grpc_client.is_model_ready(model)
    return over_http, over_grpc


def infer_identity(server, model: str) -> None:
    data = np.ones((1, 8), np.float32)
    with httpclient.InferenceServerClient(server.http_url) as client:
        inputs = [httpclient.InferInput("INPUT0", list(data.shape), "FP32")]
        inputs[0].set_data_from_numpy(data)
        np.testing.assert_array_equal(client.infer(model, inputs).as_numpy("OUTPUT0"), data)


@pytest.mark.parametrize(
    ("model", "ready"),
    [
        ("ready_true", True),
        ("ready_coroutine", True),
        ("no_is_ready", True),
        ("ready_false", False),
        ("ready_raises", False),
        ("ready_non_boolean", False),
    ],
)
def test_is_ready_decides_the_model_ready_endpoints(server, model, ready):
    for _ in range(3):
        assert ready_over_both(server, model) == (ready, ready)
        infer_identity(server, model)  # inference is not affected by the answer


def test_every_readiness_request_asks_the_model(server):
    answers = [ready_over_both(server, "ready_alternates") for _ in range(2)]
    assert answers == [(True, False), (True, False)]


def test_why_a_model_is_not_ready_is_logged_as_triton_does(server):
    for model in ("ready_false", "ready_raises", "ready_non_boolean"):
        assert ready_over_both(server, model) == (False, False)
    log = server.log()
    assert (
        "Model 'ready_false' version 1 is not ready: Model 'ready_false_0_0' is not ready "
        "(user-defined check failed)." in log
    )
    assert (
        "Model 'ready_raises' version 1 is not ready: RuntimeError: Internal check failed - "
        "model is not ready" in log
    )
    assert (
        "Model 'ready_non_boolean' version 1 is not ready: is_ready() must return a boolean "
        "value" in log
    )


def test_a_slow_check_times_out_then_later_requests_share_its_answer(server):
    """Triton waits 5 s for is_ready(); the check goes on, and the next request waits for
    that one instead of asking again; inference goes on meanwhile."""
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60) as client:
        assert client.is_model_ready("ready_slow") is False
    infer_identity(server, "ready_slow")
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.is_model_ready("ready_slow") is True
    assert "Timed out waiting for user-defined is_ready() response" in server.log()


def test_readiness_requests_beside_decoupled_inference_lose_no_response(server):
    results: queue.SimpleQueue[object] = queue.SimpleQueue()

    def stream(count: int) -> None:
        answers: queue.SimpleQueue[object] = queue.SimpleQueue()
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            data = np.array([[count]], np.int32)
            inputs = [grpcclient.InferInput("IN", list(data.shape), "INT32")]
            inputs[0].set_data_from_numpy(data)
            client.start_stream(callback=lambda result, error: answers.put(error or result))
            client.async_stream_infer("ready_decoupled", inputs)
            got = [answers.get(timeout=60) for _ in range(count)]
            client.stop_stream()
        results.put([r.as_numpy("OUT").item() if hasattr(r, "as_numpy") else r for r in got])

    def ready() -> None:
        results.put(ready_over_both(server, "ready_decoupled"))

    threads = []
    for _ in range(8):
        threads += [threading.Thread(target=stream, args=(8,)), threading.Thread(target=ready)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    outcomes = [results.get_nowait() for _ in threads]
    expected = [[8] * 8] * 8 + [(True, True)] * 8
    assert sorted(map(str, outcomes)) == sorted(map(str, expected))


def test_a_model_whose_process_died_is_not_ready(server):
    assert ready_over_both(server, "dies") == (True, True)
    with pytest.raises(InferenceServerException):
        infer_identity(server, "dies")
    deadline = time.monotonic() + 60
    while ready_over_both(server, "dies") != (False, False):
        assert time.monotonic() < deadline, "still ready a minute after its process died"
        time.sleep(0.05)  # polling, bounded by the deadline
    assert "Model 'dies' version 1 is not ready: Stub process 'dies_0_0' is not healthy." in (
        server.log()
    )


def server_ready_over_both(server) -> tuple[bool, bool]:
    with httpclient.InferenceServerClient(server.http_url) as http_client:
        over_http = http_client.is_server_ready()
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc_client:
        over_grpc = grpc_client.is_server_ready()
    return over_http, over_grpc


def test_without_strict_readiness_the_server_is_ready_beside_unready_models(server):
    assert ready_over_both(server, "ready_false") == (False, False)
    assert server_ready_over_both(server) == (True, True)


def test_strict_readiness_asks_the_instances_of_every_ready_model(tmp_path, serve):
    # Triton 2.7x's InferenceServer::IsReady also asks each READY model's instances
    repository = ModelRepository(tmp_path)
    config = dedent(IDENTITY_CONFIG % ("true", "0"))
    repository.add_model("flagged", config, versions={1: {"model.py": dedent(FLAGGED)}})
    repository.add_model("no_is_ready", config, versions={1: {"model.py": dedent(PLAIN)}})
    with serve(tmp_path, "--log-verbose=1") as process:
        assert server_ready_over_both(process) == (True, True)
        (tmp_path / "flagged" / "not_ready").touch()
        assert server_ready_over_both(process) == (False, False)
        assert (
            "Model 'flagged' version 1 is in READY lifecycle state but failed runtime "
            "readiness check during server readiness evaluation: " in process.log()
        )
        (tmp_path / "flagged" / "not_ready").unlink()
        assert server_ready_over_both(process) == (True, True)
