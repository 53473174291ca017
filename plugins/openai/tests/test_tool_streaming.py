"""Streamed tool calls: :class:`StreamingToolCalls` fed a model's text in pieces, and a
streamed call end to end with the openai client."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai_fixtures import OpenAIServer
from triton_core_openai.tools import (
    Llama3Parser,
    MistralParser,
    StreamingToolCalls,
    ToolCallParser,
)

LLAMA3, MISTRAL = Llama3Parser(), MistralParser()
LIMIT = 1 << 20

CALLS = [
    (
        LLAMA3,
        '<|python_tag|>{"name": "get_current_weather", "parameters": {"city": "Dallas", '
        '"state": "TX", "unit": "fahrenheit"}}',
    ),
    # two calls, arguments before the name, escapes, non-ASCII, numbers and literals
    (
        LLAMA3,
        '{"arguments":{"city":"Dall\\u00e1s \\ud83d\\ude00 é","n":[1.50e1,-0,true,null]},'
        '"name":"weather"}; {"name": "time", "parameters": {"zone": "CST\\n\\"x\\""}}',
    ),
    (
        MISTRAL,
        '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"city": "Dällas", '
        '"nested": {"a": [], "b": {}}, "n": 5}}, {"name": "noop", "arguments": {}}]',
    ),
    (MISTRAL, '[{"name":"f","arguments":{"q":"\\u00e9\\ud83d\\ude00\\ud83d x"}}]\n'),
]


def splits(text: str) -> list[list[str]]:
    """The text one character at a time, in pieces of 2 to 9, and cut once at each place."""
    pieces = [list(text)]
    pieces += [[text[i : i + size] for i in range(0, len(text), size)] for size in range(2, 10)]
    pieces += [[text[:cut], text[cut:]] for cut in range(1, len(text))]
    return pieces


def stream(parser: ToolCallParser, pieces: list[str], limit: int = LIMIT) -> dict[str, Any]:
    """What a client gets from the pieces: content, deltas as they came (with how many
    pieces had been fed), finish's share, and whether calls were made."""
    streaming = StreamingToolCalls(parser, limit)
    content, deltas = "", []
    for count, piece in enumerate(pieces, 1):
        streamed = streaming.feed(piece)
        assert not streamed.over
        content += streamed.content
        deltas += [(count, delta) for delta in streamed.calls]
    end = streaming.finish()
    content += end.content
    deltas += [(len(pieces) + 1, delta) for delta in end.calls]
    return {"content": content, "deltas": deltas, "called": streaming.called}


def accumulate(deltas: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The calls as an OpenAI client accumulates them, checking each delta's shape."""
    calls: list[dict[str, Any]] = []
    for _, delta in deltas:
        index, function = delta["index"], delta["function"]
        if "id" in delta:  # the first delta of a call: its id, type and whole name
            assert index == len(calls)
            assert delta["type"] == "function" and function["arguments"] == ""
            calls.append({"id": delta["id"], "name": function["name"], "arguments": ""})
        else:
            assert index == len(calls) - 1 and set(delta) == {"index", "function"}
            assert set(function) == {"arguments"} and function["arguments"]
            calls[index]["arguments"] += function["arguments"]
    return calls


def whole(parser: ToolCallParser, text: str) -> list[tuple[str, str]]:
    parsed = parser.parse(text)
    assert parsed is not None
    return [(call.name, call.arguments) for call in parsed[1]]


@pytest.mark.parametrize(("parser", "text"), CALLS)
def test_arguments_join_to_the_whole_answer_at_every_split(parser, text):
    expected = whole(parser, text)
    for pieces in splits(text):
        got = stream(parser, pieces)
        assert got["content"] == "" and got["called"]
        calls = accumulate(got["deltas"])
        assert [(call["name"], call["arguments"]) for call in calls] == expected


@pytest.mark.parametrize(("parser", "text"), CALLS)
def test_arguments_arrive_in_pieces_before_the_end(parser, text):
    got = stream(parser, list(text))
    fed = [count for count, delta in got["deltas"] if "id" not in delta]
    assert len(fed) > 3
    assert all(count <= len(text) for count, _ in got["deltas"])  # none left to the end


def test_ids_follow_each_parser():
    llama3 = accumulate(stream(LLAMA3, list(CALLS[1][1]))["deltas"])
    mistral = accumulate(stream(MISTRAL, list(CALLS[2][1]))["deltas"])
    assert all(call["id"].startswith("cmpl-") for call in llama3)
    assert all(len(call["id"]) == 9 and call["id"].isalnum() for call in mistral)
    assert len({call["id"] for call in llama3 + mistral}) == 4


def sent_after(parser: ToolCallParser, prefix: str) -> str:
    """The arguments sent once ``prefix`` is fed."""
    streaming = StreamingToolCalls(parser, LIMIT)
    deltas = streaming.feed(prefix).calls
    return "".join(delta["function"]["arguments"] for delta in deltas)


@pytest.mark.parametrize(
    ("prefix", "sent"),
    [
        ('{"name": "f"', ""),
        ('{"name": "f", "parameters": {"city": "Dal', '{"city": "Dal'),
        ('{"name": "f", "parameters": {"n": 12', '{"n": '),  # the number may go on
        ('{"name": "f", "parameters": {"n": 12,', '{"n": 12, '),
        ('{"name": "f", "parameters": {"n": 1e2}', '{"n": 100.0}'),
        ('{"name": "f", "parameters": {"a": "x\\u00', '{"a": "x'),  # half an escape
        ('{"name": "f", "parameters": {"a": "x\\ud83d', '{"a": "x'),  # a low one may follow
        ('{"name": "f", "parameters": {"a": "x\\ud83d\\ude00', '{"a": "x\\ud83d\\ude00'),
        ('{"name": "f", "parameters": {"a": tru', '{"a": '),
        ('{"name": "f", "parameters": {"a": [true ', '{"a": [true'),
    ],
)
def test_only_what_cannot_change_is_sent(prefix, sent):
    assert sent_after(LLAMA3, prefix) == sent


def test_mistral_writes_non_ascii_as_is():
    assert sent_after(MISTRAL, '[{"name": "f", "arguments": {"a": "\\u00e9') == '{"a": "é'


def test_text_that_does_not_start_as_a_call_passes_at_once():
    for parser in (LLAMA3, MISTRAL):
        streaming = StreamingToolCalls(parser, LIMIT)
        assert streaming.feed("Sure").content == "Sure"
        assert streaming.feed(' {"name": "f", "arguments": {}}').content.startswith(" {")
        assert streaming.finish().content == "" and not streaming.called


@pytest.mark.parametrize(("parser", "text"), CALLS)
def test_content_before_a_call_is_content_as_in_the_whole_answer(parser, text):
    text = "Let me check. " + text
    assert parser.parse(text) is None
    for pieces in (list(text), [text]):
        got = stream(parser, pieces)
        assert got["content"] == text and not got["deltas"] and not got["called"]


@pytest.mark.parametrize(
    ("parser", "text"),
    [
        (LLAMA3, '{"greeting": "hello", "to": ["you"]}'),
        (MISTRAL, "[1, 2, 3] are numbers"),
        (MISTRAL, "[TOOL_CALLS] not a list"),
        (MISTRAL, "[TOOL_CALLS][]"),
    ],
)
def test_text_that_starts_as_a_call_but_is_none_is_content_at_the_end(parser, text):
    parsed = parser.parse(text)
    assert parsed is None or not parsed[1]
    streaming = StreamingToolCalls(parser, LIMIT)
    for char in text:
        streamed = streaming.feed(char)
        assert streamed.content == "" and not streamed.calls
    end = streaming.finish()
    assert end.content == text and not end.calls and not streaming.called


def test_a_sent_call_stands_though_the_text_goes_on_badly():
    text = '{"name": "f", "parameters": {"a": 1}} and more'
    assert LLAMA3.parse(text) is None
    got = stream(LLAMA3, list(text))
    assert got["called"] and got["content"] == ""  # as Triton's parser leaves it
    assert [(c["name"], c["arguments"]) for c in accumulate(got["deltas"])] == [("f", '{"a": 1}')]


def test_held_text_over_the_limit_is_refused():
    text = CALLS[0][1]
    streaming = StreamingToolCalls(LLAMA3, 64)
    over = [streaming.feed(text[i : i + 8]).over for i in range(0, len(text), 8)]
    assert over[:8] == [False] * 8 and over[8]  # 72 bytes held
    assert StreamingToolCalls(LLAMA3, 4).feed("é" * 3).over  # bytes, not characters
    plain = StreamingToolCalls(LLAMA3, 4)
    assert plain.feed("hi").content == "hi" and not plain.feed("x" * 10).over


@st.composite
def call_texts(draw: st.DrawFn) -> tuple[ToolCallParser, str]:
    """Calls with any arguments, written as json.dumps may write them."""
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    values = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )
    calls = draw(st.lists(st.tuples(st.text(min_size=1), values), min_size=1, max_size=3))
    ensure_ascii = draw(st.booleans())
    indent = draw(st.none() | st.integers(0, 2))
    separators = draw(st.sampled_from([None, (",", ":"), (" ,", " : ")]))

    def dumps(value: Any) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators)

    if draw(st.booleans()):
        objects = [dumps({"name": name, "parameters": args}) for name, args in calls]
        return LLAMA3, draw(st.sampled_from(["", "<|python_tag|>"])) + "; ".join(objects)
    objects = [dumps({"name": name, "arguments": args}) for name, args in calls]
    return MISTRAL, "[TOOL_CALLS][" + ", ".join(objects) + "]"


@settings(max_examples=150, deadline=None)
@given(call=call_texts(), data=st.data())
def test_any_call_split_anywhere_joins_to_the_whole_answer(call, data):
    parser, text = call
    cuts = sorted(data.draw(st.sets(st.integers(1, max(len(text) - 1, 1)), max_size=12)))
    pieces = [text[start:end] for start, end in pairwise([0, *cuts, len(text)])]
    got = stream(parser, [piece for piece in pieces if piece])
    calls = accumulate(got["deltas"])
    assert [(call["name"], call["arguments"]) for call in calls] == whole(parser, text)


@pytest.fixture(scope="module")
def tool_stream_server(tokenizer_model):
    repository = str(Path(__file__).parent / "tool_parser_models")
    args = ["--model-repository", repository, "--tokenizer", tokenizer_model]
    with OpenAIServer([*args, "--tool-call-parser", "mistral"]) as server:
        yield server


def test_the_openai_client_gets_arguments_in_pieces(tool_stream_server):
    client = tool_stream_server.get_client()
    request: dict[str, Any] = {
        "model": "tool_stream_py",
        "messages": [{"role": "user", "content": "big-tool-args"}],
        "tools": [{"type": "function", "function": {"name": "get_current_weather"}}],
        "max_completion_tokens": 4096,
    }
    answer = client.chat.completions.create(**request)
    assert answer.choices[0].finish_reason == "tool_calls"
    expected = answer.choices[0].message.tool_calls
    assert expected is not None and len(expected) == 1

    fragments, ids, names, finish = [], [], [], None
    for chunk in client.chat.completions.create(**request, stream=True):
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        assert not choice.delta.content
        for call in choice.delta.tool_calls or []:
            assert call.index == 0
            ids += [call.id] if call.id else []
            names += [call.function.name] if call.function.name else []
            fragments += [call.function.arguments] if call.function.arguments else []
    assert finish == "tool_calls" and len(ids) == 1 and len(ids[0]) == 9
    assert names == [expected[0].function.name]
    assert len(fragments) > 1
    assert "".join(fragments) == expected[0].function.arguments
    assert json.loads("".join(fragments)) == {"city": "A" * 2000}
