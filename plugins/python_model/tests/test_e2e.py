"""Python models in a real ``triton-core serve`` process, driven by the stock tritonclient."""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import time
import urllib.request
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from triton_core.testing import ModelRepository, ServerProcess

pytestmark = pytest.mark.timeout(300)

#: a decoupled "LLM": one response per word of text_input
WORDS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
            for word in text.reshape(-1)[0].decode().split():
                out = pb_utils.Tensor("text_output", np.array([word.encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

WORDS_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "text_output" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


#: a decoupled model whose one response carries an error
SENDS_AN_ERROR = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            error = pb_utils.TritonError("sent error from the model")
            request.get_response_sender().send(
                pb_utils.InferenceResponse(error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
"""


def _write_repository(root, sources) -> ModelRepository:
    repository = ModelRepository(root)
    for name, (source, config) in sources.items():
        repository.add_model(name, dedent(config), versions={1: {"model.py": dedent(source)}})
    return repository


@pytest.fixture(scope="module")
def server(tmp_path_factory, models, serve):
    root = tmp_path_factory.mktemp("python_models")
    _write_repository(
        root,
        {
            "add_sub": (
                models.ADD_SUB,
                models.ADD_SUB_CONFIG.format(max_batch_size=8, dtype="TYPE_INT32", extra=""),
            ),
            "strings": (models.STRINGS, models.STRINGS_CONFIG),
            "repeat": (models.REPEAT, models.REPEAT_CONFIG),
            "failing": (models.FAILING, models.FAILING_CONFIG),
            "proc": (models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "2")),
            "words": (WORDS, WORDS_CONFIG),
            "sends_an_error": (
                SENDS_AN_ERROR,
                models.FAILING_CONFIG + "model_transaction_policy { decoupled: true }\n",
            ),
        },
    )
    with serve(root) as process:
        yield process


def add_sub_inputs(module, a, b):
    inputs = [
        module.InferInput("INPUT0", list(a.shape), "INT32"),
        module.InferInput("INPUT1", list(b.shape), "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


@pytest.mark.parametrize("binary", [True, False])
def test_http_add_sub(server, binary):
    client = httpclient.InferenceServerClient(server.http_url)
    a = np.arange(8, dtype=np.int32).reshape(2, 4)
    b = np.full((2, 4), 5, dtype=np.int32)
    inputs = add_sub_inputs(httpclient, a, b)
    if not binary:
        for tensor, value in zip(inputs, (a, b), strict=True):
            tensor.set_data_from_numpy(value, binary_data=False)
    outputs = [
        httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")
    ]
    result = client.infer("add_sub", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_grpc_add_sub_and_model_config(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    a = np.arange(4, dtype=np.int32).reshape(1, 4)
    result = client.infer("add_sub", add_sub_inputs(grpcclient, a, a))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
    config = client.get_model_config("add_sub", as_json=True)["config"]
    assert config["backend"] == "python"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bytes_with_nul_bytes_over_the_wire(server, protocol):
    module = httpclient if protocol == "http" else grpcclient
    url = server.http_url if protocol == "http" else server.grpc_url
    client = module.InferenceServerClient(url)
    texts = np.array([b"a\x00b", b"", b"\x00\x00", b"plain"], dtype=np.object_)
    tensor = module.InferInput("TEXT", [4], "BYTES")
    tensor.set_data_from_numpy(texts)
    result = client.infer("strings", [tensor])
    assert result.as_numpy("WRAPPED").tolist() == [b"<" + t + b">" for t in texts]
    assert result.as_numpy("LENGTH").tolist() == [3, 0, 2, 5]


def mode_input(module, mode: int):
    tensor = module.InferInput("MODE", [1], "INT32")
    tensor.set_data_from_numpy(np.array([mode], dtype=np.int32))
    return [tensor]


def test_errors_over_http_and_grpc(server):
    http_client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        http_client.infer("failing", mode_input(httpclient, 1))
    assert info.value.status() == "500"
    assert "ValueError: boom from the model" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        http_client.infer("failing", mode_input(httpclient, 2))
    assert info.value.status() == "400" and "bad MODE" in info.value.message()
    grpc_client = grpcclient.InferenceServerClient(server.grpc_url)
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("failing", mode_input(grpcclient, 3))
    assert info.value.status() == "StatusCode.UNAVAILABLE" and "try later" in info.value.message()
    assert http_client.infer("failing", mode_input(httpclient, 0)).as_numpy("OUT").tolist() == [0]


def failing_metric(
    server, name: str = "failure", reason: str = "BACKEND", model: str = "failing"
) -> int:
    """A model's ``nv_inference_request_<name>`` count, read as Triton's QA reads it
    (qa/L0_backend_python/lifecycle: the labels in Triton's order)."""
    url = f"http://127.0.0.1:{server.metrics_port}/metrics"
    with urllib.request.urlopen(url) as answer:
        text = answer.read().decode()
    labels = f'model="{model}",' + (f'reason="{reason}",' if name == "failure" else "")
    pattern = rf'nv_inference_request_{name}\{{{labels}version="1"\}} (\d+)'
    found = re.search(pattern, text)
    assert found is not None, text
    return int(found.group(1))


def backend_failures(server) -> int:
    return failing_metric(server)


def test_an_execute_that_raises_is_a_backend_failure_in_the_metrics(server):
    before = backend_failures(server)
    client = httpclient.InferenceServerClient(server.http_url)
    with client, pytest.raises(InferenceServerException, match="Failed to process the request"):
        client.infer("failing", mode_input(httpclient, 1))
    assert backend_failures(server) == before + 1


def test_a_response_that_carries_an_error_counts_as_a_success(server):
    # Triton 2.51's Python backend reports the request a success: only a raising execute fails
    failures = {reason: failing_metric(server, reason=reason) for reason in ("BACKEND", "OTHER")}
    successes = failing_metric(server, "success")
    stats_before = failing_statistics(server)
    client = httpclient.InferenceServerClient(server.http_url)
    with client, pytest.raises(InferenceServerException, match="bad MODE for this request"):
        client.infer("failing", mode_input(httpclient, 2))
    assert failing_metric(server, "success") == successes + 1
    assert {reason: failing_metric(server, reason=reason) for reason in failures} == failures
    assert failing_statistics(server) == {
        "success": stats_before["success"] + 1,
        "fail": stats_before["fail"],
    }


def test_a_sent_response_that_carries_an_error_counts_as_a_success(server):
    # Triton 2.51 counts it a success in a decoupled model too
    before = failing_metric(server, "success", model="sends_an_error")
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put(error))
    try:
        client.async_stream_infer("sends_an_error", mode_input(grpcclient, 0))
        error = results.get(timeout=60)
    finally:
        client.stop_stream()
    assert error is not None and "sent error from the model" in error.message()
    assert failing_metric(server, "success", model="sends_an_error") == before + 1
    assert failing_metric(server, model="sends_an_error") == 0


def failing_statistics(server) -> dict[str, int]:
    """The failing model's success and fail counts in the statistics extension."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    answer = client.get_inference_statistics("failing", as_json=True)
    stats = answer["model_stats"][0]["inference_stats"]
    return {kind: int(stats[kind].get("count", 0)) for kind in ("success", "fail")}


def count_input(count: int, delay_ms: int = 0):
    tensors = [
        grpcclient.InferInput("COUNT", [1], "INT32"),
        grpcclient.InferInput("DELAY_MS", [1], "INT32"),
    ]
    tensors[0].set_data_from_numpy(np.array([count], dtype=np.int32))
    tensors[1].set_data_from_numpy(np.array([delay_ms], dtype=np.int32))
    return tensors


def test_grpc_stream_delivers_every_response_and_the_final_flag(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "repeat", count_input(3), request_id="s1", enable_empty_final_response=True
        )
        received = [results.get(timeout=60) for _ in range(4)]
    finally:
        client.stop_stream()
    assert all(error is None for _, error in received)
    responses = [result.get_response() for result, _ in received]
    finals = [r.parameters["triton_final_response"].bool_param for r in responses]
    assert finals == [False, False, False, True]
    assert [int(result.as_numpy("OUT")[0]) for result, _ in received[:3]] == [0, 1, 2]
    assert responses[-1].id == "s1" and len(responses[-1].outputs) == 0


def test_plain_infer_on_a_decoupled_model_is_refused(server):
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("COUNT", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("repeat", [tensor])
    assert info.value.status() == "501"
    assert "decoupled transaction policy" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        grpcclient.InferenceServerClient(server.grpc_url).infer("repeat", count_input(1))
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"


def test_closing_the_stream_reaches_is_cancelled(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("repeat", count_input(1000, 20), request_id="cancel-me")
    first, error = results.get(timeout=60)
    assert error is None and first.get_response().id == "cancel-me"
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 60
    while "request 'cancel-me' was cancelled" not in server.log():
        assert time.monotonic() < deadline, server.log()[-2000:]
        time.sleep(0.05)


def post(server, path: str, body: dict) -> http.client.HTTPResponse:
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return connection.getresponse()


def test_generate_stream_serves_a_decoupled_python_model(server):
    reply = post(
        server, "/v2/models/words/generate_stream", {"text_input": "the quick fox", "id": "g"}
    )
    assert reply.status == 200
    assert reply.getheader("Content-Type") == "text/event-stream; charset=utf-8"
    body = reply.read()
    chunks = body.split(b"\n\n")
    assert chunks[-1] == b"" and all(c.startswith(b"data: ") for c in chunks[:-1])
    events = [json.loads(c[len(b"data: ") :]) for c in chunks[:-1]]
    assert [e["text_output"] for e in events] == ["the", "quick", "fox"]
    assert all(e["model_name"] == "words" and e["id"] == "g" for e in events)


def test_generate_answers_a_single_response(server):
    reply = post(server, "/v2/models/words/generate", {"text_input": "single"})
    assert reply.status == 200
    assert json.loads(reply.read()) == {
        "model_name": "words",
        "model_version": "1",
        "text_output": "single",
    }
    reply = post(server, "/v2/models/words/generate", {"text_input": "two words"})
    assert reply.status == 400
    assert "exactly 1 response" in json.loads(reply.read())["error"]


def action_input(module, value: int):
    tensor = module.InferInput("ACTION", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


def test_a_killed_instance_fails_its_request_and_is_restarted(server):
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.infer("proc", action_input(httpclient, 1))
    assert info.value.status() == "503"
    assert "killed by signal 9 (SIGKILL)" in info.value.message()
    for _ in range(4):
        result = client.infer("proc", action_input(httpclient, 0))
        assert int(result.as_numpy("INFO")[0]) > 0
    assert client.is_model_ready("proc")


def test_shutdown_leaves_no_processes_and_no_shared_memory(tmp_path, models, list_shm):
    _write_repository(
        tmp_path / "repo",
        {"proc": (models.PROCESS, models.PROCESS_CONFIG.replace("{count}", "2"))},
    )
    shm_before = list_shm()
    process = ServerProcess([tmp_path / "repo"])
    try:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url, concurrency=2)
        # two busy requests at once run on both instances (processes)
        pending = [client.async_infer("proc", action_input(httpclient, 2)) for _ in range(2)]
        pids = {int(p.get_result().as_numpy("INFO")[0]) for p in pending}
        assert len(pids) == 2
    finally:
        assert process.stop() == 0, process.log()[-3000:]
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"stub {pid} outlived the server"
    assert list_shm() - shm_before == set()


HUNG = """
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.started = args["model_repository"] + "/started"

    def execute(self, requests):
        with open(self.started, "w") as started:
            started.write(str(os.getpid()))
        time.sleep(60)
        return [pb_utils.InferenceResponse([]) for _ in requests]
"""

HUNG_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def _process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.startswith("State:\tZ") for line in status)  # a zombie has ended
    except FileNotFoundError:
        return True


def test_exit_timeout_kills_a_hung_stub_and_ends_the_process(tmp_path):
    import threading

    _write_repository(tmp_path, {"hung": (HUNG, HUNG_CONFIG)})
    started = tmp_path / "hung" / "started"
    process = ServerProcess([tmp_path], "--exit-timeout-secs", "2")
    try:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url, network_timeout=90)
        tensor = httpclient.InferInput("INPUT0", [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, dtype=np.float32))
        thread = threading.Thread(
            target=lambda: _ignore_errors(client.infer, "hung", [tensor]), daemon=True
        )
        thread.start()
        deadline = time.monotonic() + 60
        while not (started.exists() and started.read_text()):
            assert time.monotonic() < deadline, process.log()[-3000:]
            assert process.process.poll() is None, process.log()[-3000:]
            time.sleep(0.02)
        stub_pid = int(started.read_text())
        began = time.monotonic()
        code = process.stop(timeout=40)
        took = time.monotonic() - began
        log = process.log()
        assert code == 1, log[-3000:]
        assert took < 10, (took, log[-3000:])  # a 2 s deadline, against a 60 s execute
        assert "Exit timeout expired. Exiting immediately." in log
        deadline = time.monotonic() + 10
        while not _process_gone(stub_pid):
            assert time.monotonic() < deadline, f"stub {stub_pid} outlived the server"
            time.sleep(0.05)
    finally:
        process.stop()


def _ignore_errors(function, *args) -> None:
    import contextlib

    with contextlib.suppress(Exception):  # the connection ends with the server process
        function(*args)


IDENTITY_CONFIG = {
    "backend": "python",
    "max_batch_size": 4,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [-1]}],
}
IDENTITY = b"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            output = pb_utils.Tensor("OUTPUT0", values)
            responses.append(pb_utils.InferenceResponse([output]))
        return responses
"""


def test_names_with_characters_tritons_stubs_refuse_fail_the_load(tmp_path) -> None:
    # Triton's L0_backend_python model_control names; its Python backend (2.7x) refuses them
    process = ServerProcess([tmp_path], "--model-control-mode=explicit")
    try:
        process.wait_ready(path="/v2/health/live")
        client = grpcclient.InferenceServerClient(process.grpc_url)
        for name in ("model;test", "model|test", "model$test", "model(test)", "model\\test"):
            config = json.dumps({**IDENTITY_CONFIG, "name": name})
            with pytest.raises(InferenceServerException) as refused:
                client.load_model(name, config=config, files={"file:/1/model.py": IDENTITY})
            assert "Invalid stub name: contains invalid characters" in refused.value.message()
            assert not client.is_model_ready(name)
        config = json.dumps({**IDENTITY_CONFIG, "name": "model-with-hyphens"})
        client.load_model("model-with-hyphens", config=config, files={"file:/1/model.py": IDENTITY})
        assert client.is_model_ready("model-with-hyphens")
    finally:
        assert process.stop() == 0, process.log()[-4000:]
