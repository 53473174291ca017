"""The transformers example model behind the OpenAI frontend, driven by the official openai
client: chat completions streamed token by token through the tokenizer's chat template,
and a client that goes away stops the generation."""

from __future__ import annotations

import pytest
from llm_fixtures import MODEL

pytestmark = pytest.mark.timeout(300)

MESSAGES = [{"role": "user", "content": "What is machine learning?"}]
#: every request generates exactly max_tokens tokens
EXACT = {"ignore_eos": True}


def test_chat_completions_stream_tokens_to_the_openai_client(llm_server):
    client = llm_server.get_client()
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=EXACT,
        )
    )
    choices = [chunk.choices[0] for chunk in chunks if chunk.choices]
    deltas = [choice.delta for choice in choices]
    # the role first, then one chunk per token, the last saying why it ended
    assert deltas[0].role == "assistant" and not deltas[0].content
    assert len(deltas[1:]) == 8
    assert [choice.finish_reason for choice in choices[1:]] == [None] * 7 + ["stop"]
    usage = chunks[-1].usage
    assert usage.completion_tokens == 8
    # the prompt is the chat template's rendering, tokenized by the model
    assert usage.prompt_tokens > len(MESSAGES[0]["content"].split())
    streamed = "".join(d.content or "" for d in deltas)
    whole = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, extra_body=EXACT
    )
    assert whole.choices[0].message.content == streamed
    assert whole.usage.completion_tokens == 8


def test_completions_echo_the_prompt(llm_server):
    client = llm_server.get_client()
    answer = client.completions.create(
        model=MODEL, prompt="hello", max_tokens=4, temperature=0, echo=True, extra_body=EXACT
    )
    assert answer.choices[0].text.startswith("hello")
    assert answer.usage.completion_tokens == 4


def test_a_client_that_goes_away_stops_the_generation(llm_server, tiny_model):
    _, _, steps = tiny_model
    seen = len(steps.records())
    client = llm_server.get_client()
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=400, stream=True, extra_body=EXACT
    )
    for index, _ in enumerate(stream):
        if index == 3:
            break
    stream.close()  # the connection goes away with the answer half sent
    records = steps.wait_for(lambda rs: any(r["cancelled"] for r in rs[seen:]))
    (name,) = next(r["cancelled"] for r in records[seen:] if r["cancelled"])
    assert len([r for r in records if name in r["batch"]]) < 400
