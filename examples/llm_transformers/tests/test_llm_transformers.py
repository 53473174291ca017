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


def test_the_batched_kv_cache_follows_requests_that_skip_steps_or_move(tiny_model, engine_module):
    """Steps run any subset of the requests, in any order: requests left out of a step keep
    their caches for a later one, and every step's logits still match the whole sequences
    run again."""
    import random

    repository, _, _ = tiny_model
    path = repository / MODEL / "1" / "hf"
    cached, full = engine_module.Engine(path, True), engine_module.Engine(path, False)
    prompts = ["What is machine learning?", "hi", "The weather in Dallas is", "a b c d e f g"]
    greedy = {"max_tokens": 40, "temperature": 0, "ignore_eos": True}
    pairs = [(cached.generation(p, greedy), full.generation(p, greedy)) for p in prompts]
    chooser = random.Random(3)
    same_order = 0
    for step in range(30):
        if step % 3 == 0 or step < 4:
            chosen = list(pairs)  # the same requests in the same order: the usual step
            same_order += 1
        else:
            chosen = chooser.sample(pairs, chooser.randint(1, len(pairs)))
        a = cached.step([pair[0] for pair in chosen])
        b = full.step([pair[1] for pair in chosen])
        assert float((a - b).abs().max()) < 1e-4, step
        for row, (first, second) in enumerate(chosen):
            token = first.choose(a[row])
            first.advance(token, cached.tokenizer)
            second.advance(token, full.tokenizer)
    assert same_order > 5 and all(len(pair[0].generated) > 5 for pair in pairs)


def _metaspace_tokenizer():
    """A SentencePiece-style tokenizer (spaces as a marker that decoding turns back into
    spaces, stripping the first one), trained here from a few sentences."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    # Llama's: the marker back to spaces, bytes back to characters, the first space off
    tokenizer.decoder = decoders.Sequence(
        [
            decoders.Replace("\u2581", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    bytes_ = [f"<0x{value:02X}>" for value in range(256)]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<unk>", "</s>", *bytes_])
    corpus = ["the quick brown fox jumps over the lazy dog", "héllo wörld, ça va très bien"]
    tokenizer.train_from_iterator(corpus * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="</s>")


def test_text_decoded_a_few_tokens_at_a_time_is_the_whole_decode(tiny_model, engine_module):
    """Each step decodes only the last tokens again; the text is still exactly what
    decoding every generated token gives, for byte-level and SentencePiece-style
    tokenizers, through random tokens (lone bytes, special tokens, split characters)."""
    import random

    repository, _, _ = tiny_model
    engine = engine_module.Engine(repository / MODEL / "1" / "hf", True)
    chooser = random.Random(5)
    for tokenizer in (engine.tokenizer, _metaspace_tokenizer()):
        for _ in range(300):
            generation = engine_module.Generation(
                "p", {"max_tokens": 30, "ignore_eos": True}, [1], 512, set()
            )
            sent = ""
            while not generation.done:
                sent += generation.advance(chooser.randrange(len(tokenizer)), tokenizer)
                whole = tokenizer.decode(generation.generated, skip_special_tokens=True)
                assert generation.text == whole
            assert sent == whole  # what was streamed, joined, is the whole text


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


def test_a_larger_vocabulary_has_few_tokens_without_text(tmp_path):
    """--vocab-size trains on Python's reference manual too: few tokens are parts of a
    character, as in real tokenizers, where the default's are a third."""
    from llm_fixtures import build_model
    from transformers import AutoTokenizer

    def partial_share(vocab_size):
        folder = build_model.build_tokenizer(tmp_path / str(vocab_size), vocab_size)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        partial = sum("\ufffd" in tokenizer.decode([token]) for token in range(len(tokenizer)))
        return len(tokenizer), partial / len(tokenizer)

    size, share = partial_share(4096)
    assert size == 4096 and share < 0.05
    size, share = partial_share(build_model.SMALL_VOCABULARY)
    assert share > 0.3
