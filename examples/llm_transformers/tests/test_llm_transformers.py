"""The transformers example model: its decoding against transformers' own, then served by
``triton-core serve`` and driven over gRPC streams: one response per token, continuous
batching through the core's iterative sequences, cancellation."""

from __future__ import annotations

import json
import queue
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from llm_fixtures import EXAMPLE, MODEL, load

pytestmark = pytest.mark.timeout(300)

#: long enough that a request outlives anything the test waits for, well below the tiny
#: model's 512 positions; the tests cancel such requests once done with them
LONG = 480


@pytest.fixture(scope="module")
def engine_module():
    return load("llm_transformers_model", EXAMPLE / "model.py")


def inputs(prompt: str, sampling: dict, stream: bool = True) -> list[grpcclient.InferInput]:
    tensors = []
    for name, datatype, value in (
        ("text_input", "BYTES", np.array([[prompt.encode()]], dtype=object)),
        ("stream", "BOOL", np.array([[stream]])),
        ("sampling_parameters", "BYTES", np.array([[json.dumps(sampling).encode()]], dtype=object)),
    ):
        tensor = grpcclient.InferInput(name, [1, 1], datatype)
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors


class Stream:
    """A gRPC stream whose responses are sorted by request ID as they come."""

    def __init__(self, server) -> None:
        self.client = grpcclient.InferenceServerClient(server.process.grpc_url)
        self.results: queue.Queue = queue.Queue()
        self.received: dict[str, list] = {}
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(self, request_id: str, prompt: str, sampling: dict, stream: bool = True) -> None:
        self.client.async_stream_infer(
            MODEL, inputs(prompt, sampling, stream), request_id=request_id
        )

    def wait(self, request_id: str, count: int = 0, final: bool = False) -> list:
        """The responses of ``request_id`` once it has ``count`` of them (or its final)."""
        deadline = time.monotonic() + 60
        while True:
            got = self.received.get(request_id, [])
            if (final and got and is_final(got[-1])) or (not final and len(got) >= count):
                return got
            result, error = self.results.get(timeout=max(0.1, deadline - time.monotonic()))
            assert error is None, error
            self.received.setdefault(result.get_response().id, []).append(result)

    def close(self) -> None:
        self.client.stop_stream(cancel_requests=True)
        self.client.close()


def is_final(result) -> bool:
    return result.get_response().parameters["triton_final_response"].bool_param


def text(result) -> str:
    return result.as_numpy("text_output").reshape(-1)[0].decode()


@pytest.fixture
def stream(llm_server):
    opened = Stream(llm_server)
    yield opened
    opened.close()


def test_the_kv_cache_decodes_as_a_full_forward_pass_does(tiny_model, engine_module):
    """Requests of different lengths join one at a time: the logits of each step over the
    left-padded KV caches match those of the whole sequences run again."""
    repository, _, _ = tiny_model
    path = repository / MODEL / "1" / "hf"
    cached, full = engine_module.Engine(path, True), engine_module.Engine(path, False)
    prompts = ["What is machine learning?", "hi", "The weather in Dallas, Texas is hot in the"]
    greedy = {"max_tokens": 8, "temperature": 0, "ignore_eos": True}
    pairs = []
    for step in range(8):
        if step < len(prompts):
            prompt = prompts[step]
            pairs.append((cached.generation(prompt, greedy), full.generation(prompt, greedy)))
        a = cached.step([pair[0] for pair in pairs])
        b = full.step([pair[1] for pair in pairs])
        assert float((a - b).abs().max()) < 1e-4
        for row, (first, second) in enumerate(pairs):
            token = first.choose(a[row])
            first.advance(token, cached.tokenizer)
            second.advance(token, full.tokenizer)
        pairs = [pair for pair in pairs if not pair[0].done]
    # and greedy decoding is transformers' own
    generation = cached.generation(prompts[0], {**greedy, "max_tokens": 6})
    while not generation.done:
        generation.advance(generation.choose(cached.step([generation])[0]), cached.tokenizer)
    ids = cached.tokenizer(prompts[0], return_tensors="pt")["input_ids"]
    expected = cached.model.generate(ids, max_new_tokens=6, do_sample=False, eos_token_id=None)
    assert generation.generated == expected[0, ids.shape[1] :].tolist()


def test_sampling_follows_the_distribution_within_top_k_and_top_p(engine_module):
    torch = pytest.importorskip("torch")
    module = engine_module
    probabilities = torch.tensor([0.4, 0.3, 0.2, 0.1, 0.0, 0.0])
    logits = torch.log(probabilities)
    draws = 4000

    def sample(sampling, rows=draws, seed=7):
        generation = module.Generation("p", {"seed": seed, **sampling}, [1, 2], 512, {5})
        return module.choose_tokens([generation] * rows, logits.expand(rows, -1))

    def shares(tokens):
        return [tokens.count(token) / len(tokens) for token in range(len(probabilities))]

    for share, expected in zip(shares(sample({})), probabilities.tolist(), strict=True):
        assert abs(share - expected) < 0.03  # zero-probability tokens never come
    top_k = shares(sample({"top_k": 2}))
    assert set(sample({"top_k": 2})) == {0, 1} and abs(top_k[0] - 4 / 7) < 0.03
    assert set(sample({"top_p": 0.6})) == {0, 1}
    assert sample({}, rows=50) == sample({}, rows=50)  # a seed repeats
    assert sample({}, rows=50) != sample({}, rows=50, seed=8)
    # greedy and sampled rows in one step; min_tokens bars the stop tokens
    greedy = module.Generation("p", {"temperature": 0}, [1], 512, {0})
    barred = module.Generation("p", {"temperature": 0, "min_tokens": 2}, [1], 512, {0})
    hot = module.Generation("p", {"seed": 1, "top_k": 1}, [1], 512, {5})
    assert module.choose_tokens([greedy, barred, hot], logits.expand(3, -1)) == [0, 1, 0]


def test_tokens_stream_one_by_one_the_last_final(stream):
    sampling = {"max_tokens": 6, "temperature": 0, "ignore_eos": True}
    stream.send("streamed", "What is machine learning?", sampling)
    streamed = stream.wait("streamed", final=True)
    assert len(streamed) == 6
    assert [is_final(result) for result in streamed] == [False] * 5 + [True]
    # not streamed: one response, the whole text, the prompt before it (vLLM's default)
    stream.send("whole", "What is machine learning?", sampling, stream=False)
    (whole,) = stream.wait("whole", final=True)
    assert text(whole) == "What is machine learning?" + "".join(text(r) for r in streamed)


def test_requests_join_and_leave_the_running_batch(stream, tiny_model):
    _, _, steps = tiny_model
    greedy = {"temperature": 0, "ignore_eos": True}
    stream.send("first", "What is machine learning?", {**greedy, "max_tokens": LONG})
    stream.wait("first", count=2)
    # "first" is running: these join its batch at the next step, and leave before it
    stream.send("second", "hello", {**greedy, "max_tokens": 5})
    stream.send("third", "The weather in Dallas", {**greedy, "max_tokens": 9})
    assert len(stream.wait("second", final=True)) == 5
    assert len(stream.wait("third", final=True)) == 9

    def first_went_on(records):  # the step log is written after each step's responses
        ended = [r["step"] for r in records if "third" in r["finished"]]
        return bool(ended) and any("first" in r["batch"] and r["step"] > ended[0] for r in records)

    records = steps.wait_for(first_went_on)
    names = ("first", "second", "third")
    runs = {name: [r for r in records if name in r["batch"]] for name in names}
    joined = next(r for r in records if "second" in r["new"])
    assert "first" in joined["batch"], joined
    assert len(runs["second"]) == 5 and len(runs["third"]) == 9
    assert any(set(names) <= set(r["batch"]) for r in records)
    # "first" ran before the others came, and goes on after they left
    assert runs["first"][0]["step"] < joined["step"]
    assert not any("first" in r["finished"] for r in records)


def test_a_cancelled_stream_stops_generating(llm_server, tiny_model):
    _, _, steps = tiny_model
    cancelled = Stream(llm_server)
    cancelled.send("cancelled", "hello", {"max_tokens": LONG, "ignore_eos": True})
    cancelled.wait("cancelled", count=3)
    cancelled.close()
    records = steps.wait_for(lambda rs: any("cancelled" in r["cancelled"] for r in rs))
    stopped = next(r["step"] for r in records if "cancelled" in r["cancelled"])
    assert len([r for r in records if "cancelled" in r["batch"]]) < LONG
    # a request after it runs to its end, and the cancelled one never runs again
    after = Stream(llm_server)
    try:
        after.send("after", "hello", {"max_tokens": 3, "ignore_eos": True})
        assert len(after.wait("after", final=True)) == 3
    finally:
        after.close()
    records = steps.records()
    assert not any("cancelled" in r["batch"] for r in records if r["step"] > stopped)


def test_the_model_reports_its_batches_as_metrics(llm_server, stream):
    stream.send("counted", "hello", {"max_tokens": 2, "ignore_eos": True})
    stream.wait("counted", final=True)
    with urllib.request.urlopen(llm_server.process.metrics_url) as reply:
        metrics = reply.read().decode()
    assert f'llm_step_batch_size_count{{model="{MODEL}"}}' in metrics
    assert f'llm_generated_tokens{{model="{MODEL}"}}' in metrics


def test_a_request_the_model_cannot_take_fails_alone(llm_server, tiny_model):
    _, _, steps = tiny_model
    client = grpcclient.InferenceServerClient(llm_server.process.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(MODEL, inputs("hello", {"n": 2}), request_id="two")
        _, error = results.get(timeout=60)
    finally:
        client.stop_stream()
        client.close()
    assert error is not None and "only n=1 is supported" in error.message()
    steps.wait_for(lambda records: any("two" in r["failed"] for r in records))
