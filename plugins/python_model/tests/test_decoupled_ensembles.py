"""Ensembles with a decoupled step: pre-process -> decoupled "LLM" -> post-process, streaming
through a real server to the stock tritonclient (gRPC stream) and HTTP generate_stream."""

from __future__ import annotations

import http.client
import json
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

#: TEXT -> PROMPT, upper-cased
PRE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)[0]
            prompt = np.array([text.decode().upper().encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PROMPT", prompt)]))
        return responses
"""

#: one response per word of PROMPT, DELAY_MS apart; the word FAIL answers an error instead;
#: stops (and says so in the log) once its request is cancelled
LLM = """
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy()
            delay = pb_utils.get_input_tensor_by_name(request, "DELAY_MS")
            delay = 0 if delay is None else int(delay.as_numpy().reshape(-1)[0])
            words = prompt.reshape(-1)[0].decode().split()
            sender = request.get_response_sender()
            thread = threading.Thread(
                target=self.answer, args=(sender, request.request_id(), words, delay / 1000)
            )
            thread.start()
            self.threads.append(thread)
        return None

    def answer(self, sender, request_id, words, delay):
        for index, word in enumerate(words):
            if sender.is_cancelled():
                pb_utils.Logger.log_warn(f"llm request '{request_id}' cancelled after {index}")
                break
            time.sleep(delay)
            if word == "FAIL":
                error = pb_utils.TritonError("the llm cannot say FAIL")
                sender.send(pb_utils.InferenceResponse(error=error),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            token = pb_utils.Tensor("TOKEN", np.array([word.encode()], dtype=np.object_))
            sender.send(pb_utils.InferenceResponse([token]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""

#: TOKEN -> TEXT_OUT "<token>"; the token BOOM raises
POST = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            token = pb_utils.get_input_tensor_by_name(request, "TOKEN").as_numpy().reshape(-1)[0]
            if token == b"BOOM":
                raise ValueError("post-processing cannot handle BOOM")
            out = np.array([b"<" + token + b">"], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("TEXT_OUT", out)]))
        return responses
"""


def python_config(inputs: str, outputs: str, extra: str = "") -> str:
    return (
        f'backend: "python"\nmax_batch_size: 0\ninput [ {inputs} ]\noutput [ {outputs} ]\n{extra}'
    )


def string(name: str, optional: bool = False) -> str:
    flag = " optional: true" if optional else ""
    return f'{{ name: "{name}" data_type: TYPE_STRING dims: [ 1 ]{flag} }}'


DELAY = '{ name: "DELAY_MS" data_type: TYPE_INT32 dims: [ 1 ] optional: true }'
DECOUPLED = "model_transaction_policy { decoupled: true }"


def step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = " ".join(f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += " " + " ".join(f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'step [ {{ model_name: "{model}" model_version: -1 {maps} }} ]'


def ensemble(inputs: str, outputs: str, steps: list[str], extra: str = "") -> str:
    return (
        f'platform: "ensemble"\nmax_batch_size: 0\ninput [ {inputs} ]\noutput [ {outputs} ]\n'
        f"ensemble_scheduling {{ {' '.join(steps)} }}\n{extra}"
    )


PIPELINE_STEPS = [
    step("pre", {"TEXT": "text_input"}, {"PROMPT": "prompt"}),
    step("llm", {"PROMPT": "prompt", "DELAY_MS": "delay_ms"}, {"TOKEN": "token"}),
    step("post", {"TOKEN": "token"}, {"TEXT_OUT": "text_output"}),
]
PIPELINE = ensemble(
    f"{string('text_input')}, {DELAY.replace('DELAY_MS', 'delay_ms')}",
    string("text_output"),
    PIPELINE_STEPS,
)

#: each fails its own load, with the message Triton gives
INVALID = {
    # post reads the llm's token and the ensemble input: two different origins
    "mixed_origins": (
        ensemble(
            string("text_input"),
            string("text_output"),
            [
                step("pre", {"TEXT": "text_input"}, {"PROMPT": "prompt"}),
                step("llm", {"PROMPT": "prompt"}, {"TOKEN": "token"}),
                step("join", {"A": "token", "B": "text_input"}, {"OUT": "text_output"}),
            ],
        ),
        "in ensemble mixed_origins, step of model 'join' receives inputs originated from "
        "different decoupled models",
    ),
    "cached_stream": (
        PIPELINE + "response_cache { enable: true }\n",
        "Response Cache does not currently support model cached_stream with 'decoupled' "
        "transaction policy. Please disable the response cache.",
    ),
}

JOIN = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "A").as_numpy())]
            )
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repository = ModelRepository(tmp_path_factory.mktemp("decoupled_ensembles"))
    models = {
        "pre": (PRE, python_config(string("TEXT"), string("PROMPT"))),
        "llm": (LLM, python_config(f"{string('PROMPT')}, {DELAY}", string("TOKEN"), DECOUPLED)),
        "post": (POST, python_config(string("TOKEN"), string("TEXT_OUT"))),
        "join": (JOIN, python_config(f"{string('A')}, {string('B')}", string("OUT"))),
    }
    for name, (source, config) in models.items():
        repository.add_model(name, config, versions={1: {"model.py": dedent(source)}})
    repository.add_model("pipeline", PIPELINE, versions={1: {}})
    for name, (config, _) in INVALID.items():
        repository.add_model(name, config, versions={1: {}})
    process = ServerProcess([repository.root], "--exit-on-error=false")
    try:
        process.wait_ready(path="/v2/health/live")
        deadline = time.monotonic() + 120
        client = httpclient.InferenceServerClient(process.http_url)
        while not client.is_model_ready("pipeline"):
            assert time.monotonic() < deadline, process.log()[-3000:]
            time.sleep(0.1)
        yield process
    finally:
        assert process.stop() == 0, process.log()[-3000:]


def text_inputs(text: str, delay_ms: int | None = None) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("text_input", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
    inputs = [tensor]
    if delay_ms is not None:
        delay = grpcclient.InferInput("delay_ms", [1], "INT32")
        delay.set_data_from_numpy(np.array([delay_ms], dtype=np.int32))
        inputs.append(delay)
    return inputs


def stream(server, text: str, request_id: str, count: int) -> list[tuple[object, object]]:
    """``count`` callbacks of one streamed request to the pipeline."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            "pipeline", text_inputs(text), request_id=request_id, enable_empty_final_response=True
        )
        return [results.get(timeout=60) for _ in range(count)]
    finally:
        client.stop_stream()


def test_every_llm_response_flows_through_post_processing_to_the_grpc_stream(server):
    received = stream(server, "the quick brown fox", "s1", 5)
    assert all(error is None for _, error in received), received
    responses = [result.get_response() for result, _ in received]
    finals = [r.parameters["triton_final_response"].bool_param for r in responses]
    assert finals == [False, False, False, False, True]
    texts = [result.as_numpy("text_output")[0] for result, _ in received[:4]]
    assert texts == [b"<THE>", b"<QUICK>", b"<BROWN>", b"<FOX>"]
    assert all(r.id == "s1" and r.model_name == "pipeline" for r in responses)
    assert len(responses[-1].outputs) == 0


def test_generate_stream_serves_the_pipeline(server):
    host, port = server.http_url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    body = {"text_input": "hello streaming world", "id": "g1"}
    connection.request("POST", "/v2/models/pipeline/generate_stream", json.dumps(body))
    reply = connection.getresponse()
    assert reply.status == 200
    chunks = reply.read().split(b"\n\n")
    events = [json.loads(chunk[len(b"data: ") :]) for chunk in chunks if chunk]
    assert [event["text_output"] for event in events] == ["<HELLO>", "<STREAMING>", "<WORLD>"]
    assert all(event["id"] == "g1" and event["model_name"] == "pipeline" for event in events)


def test_the_pipeline_is_decoupled_so_plain_infer_is_refused_as_triton_does(server):
    client = httpclient.InferenceServerClient(server.http_url)
    assert client.get_model_config("pipeline")["model_transaction_policy"] == {"decoupled": True}
    tensor = httpclient.InferInput("text_input", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([b"one"], dtype=np.object_))
    with pytest.raises(InferenceServerException) as info:
        client.infer("pipeline", [tensor])
    assert info.value.status() == "501"
    assert "HTTP end point doesn't support models with decoupled" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        grpcclient.InferenceServerClient(server.grpc_url).infer("pipeline", text_inputs("one"))
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"


@pytest.mark.parametrize(
    ("text", "step_name", "detail"),
    [
        ("one two FAIL never", "step 1 (model 'llm')", "the llm cannot say FAIL"),
        ("one two BOOM never", "step 2 (model 'post')", "post-processing cannot handle BOOM"),
    ],
)
def test_an_error_in_a_step_ends_the_stream_with_an_error_naming_the_step(
    server, text, step_name, detail
):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer("pipeline", text_inputs(text, delay_ms=50), request_id="err")
        texts = []
        for _ in range(4):  # at most the two good words, then the error
            result, error = results.get(timeout=60)
            if error is not None:
                break
            texts.append(result.as_numpy("text_output")[0])
    finally:
        client.stop_stream()
    # the error stops the steps still running (as in Triton): what came before it is in order
    assert texts == [b"<ONE>", b"<TWO>"][: len(texts)]
    assert isinstance(error, InferenceServerException), texts
    assert f"in ensemble 'pipeline', {step_name} failed" in error.message()
    assert detail in error.message()


def test_closing_the_stream_cancels_the_llm_step(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    words = " ".join(f"w{i}" for i in range(500))
    client.async_stream_infer("pipeline", text_inputs(words, delay_ms=20), request_id="stop-me")
    first, error = results.get(timeout=60)
    assert error is None and first.as_numpy("text_output")[0] == b"<W0>"
    client.stop_stream(cancel_requests=True)
    deadline = time.monotonic() + 60
    while "llm request 'stop-me' cancelled after" not in server.log():
        assert time.monotonic() < deadline, server.log()[-3000:]
        time.sleep(0.05)
    # the pipeline still serves
    assert len(stream(server, "again", "after", 2)) == 2


@pytest.mark.parametrize("name", sorted(INVALID))
def test_ensembles_that_cannot_stream_fail_their_load_with_tritons_message(server, name):
    assert not httpclient.InferenceServerClient(server.http_url).is_model_ready(name)
    assert f"failed to load '{name}'" in server.log()
    assert INVALID[name][1] in server.log()
