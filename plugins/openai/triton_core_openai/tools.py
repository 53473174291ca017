"""Tool calls in a model's text: the ``llama3`` and ``mistral`` parsers of
``--tool-call-parser``, as Triton's (and vLLM's) read them.

- llama3: the text starts with ``<|python_tag|>`` or ``{``; one or more JSON objects
  ``{"name": ..., "parameters" | "arguments": {...}}`` separated by ``; ``.
- mistral: the text starts with ``[TOOL_CALLS]`` (or ``[``); a JSON list of
  ``{"name": ..., "arguments": {...}}``.

A text that does not parse is answered as plain content, as Triton does. While streaming,
:class:`StreamingToolCalls` sends a call as the model writes it, as Triton's parsers do:
a first delta with its ``index``, ``id``, ``type`` and ``name`` once the name is complete,
then its arguments in pieces (:mod:`triton_core_openai.call_reader`), which join to the
arguments the whole answer has. Text that does not start as a call passes as content at
once; text that starts as one but is no call is held back and sent as content at the end.
"""

from __future__ import annotations

import json
import logging
import secrets
import string
import uuid
from dataclasses import dataclass, field
from typing import Any

from triton_core_openai.call_reader import PLAIN, READING, CallText, Llama3Text, MistralText

#: the parsers of --tool-call-parser
PARSERS = ("llama3", "mistral")
#: Triton's default --max-tool-call-parse-bytes: the text a streamed tool call may grow to
DEFAULT_MAX_TOOL_CALL_PARSE_BYTES = 128 * 1024

_ALPHANUMERIC = string.ascii_letters + string.digits

logger = logging.getLogger("triton_core_openai")


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    #: the arguments as a JSON string
    arguments: str

    def message(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


class ToolCallParser:
    """Finds the tool calls in a model's whole text."""

    bot_token = ""
    #: what a tool call's text may start with besides the token
    opening = ""
    #: the keys whose value is a call's arguments
    argument_keys: tuple[str, ...] = ("arguments",)
    #: how the arguments are written (json.dumps's ensure_ascii)
    ensure_ascii = True

    def parse(self, text: str) -> tuple[str, list[ToolCall]] | None:
        """(content before the calls, the calls), or None when the text holds none."""
        raise NotImplementedError

    def reader(self) -> CallText:
        """A reader of the calls as the text arrives."""
        raise NotImplementedError

    def new_id(self) -> str:
        return f"cmpl-{uuid.uuid1()}"

    def dumps(self, arguments: Any) -> str:
        return json.dumps(arguments, ensure_ascii=self.ensure_ascii)


class Llama3Parser(ToolCallParser):
    bot_token = "<|python_tag|>"
    opening = "{"
    argument_keys = ("arguments", "parameters")

    def reader(self) -> CallText:
        return Llama3Text(self.bot_token, self.argument_keys, self.ensure_ascii)

    def parse(self, text: str) -> tuple[str, list[ToolCall]] | None:
        if not (text.startswith(self.bot_token) or text.startswith(self.opening)):
            return None
        decoder = json.JSONDecoder()
        start = len(self.bot_token) if text.startswith(self.bot_token) else 0
        calls = []
        try:
            while start < len(text):
                raw, end = decoder.raw_decode(text[start:])
                start += end + len("; ")
                arguments = raw["arguments"] if "arguments" in raw else raw["parameters"]
                calls.append(ToolCall(self.new_id(), str(raw["name"]), self.dumps(arguments)))
        except (ValueError, KeyError, TypeError, RecursionError):
            return None  # not a tool call after all: the text is the content
        return "", calls


class MistralParser(ToolCallParser):
    bot_token = "[TOOL_CALLS]"
    opening = "["
    ensure_ascii = False

    def reader(self) -> CallText:
        return MistralText(self.bot_token, self.argument_keys, self.ensure_ascii)

    def new_id(self) -> str:
        # Mistral's ids: 9 letters or digits
        return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(9))

    def parse(self, text: str) -> tuple[str, list[ToolCall]] | None:
        if not (text.startswith(self.bot_token) or text.startswith(self.opening)):
            return None
        content = text.replace(self.bot_token, "").strip()
        try:
            try:
                raw_calls = json.loads(content)
            except ValueError:
                # the list alone, when the model wrote more around it
                first, last = content.find("[{"), content.rfind("}]")
                if first < 0 or last < first:
                    return None
                raw_calls = json.loads(content[first : last + 2])
            calls = [
                ToolCall(self.new_id(), str(raw["name"]), self.dumps(raw["arguments"]))
                for raw in raw_calls
            ]
        except (ValueError, KeyError, TypeError, RecursionError):
            return None
        return "", calls


def parser_for(name: str) -> ToolCallParser:
    if name == "llama3":
        return Llama3Parser()
    if name == "mistral":
        return MistralParser()
    raise ValueError(f"--tool-call-parser: unknown parser '{name}' (known: {', '.join(PARSERS)})")


def _announce(index: int, call_id: str, name: str) -> dict[str, Any]:
    function = {"name": name, "arguments": ""}
    return {"index": index, "id": call_id, "type": "function", "function": function}


def _arguments(index: int, piece: str) -> dict[str, Any]:
    return {"index": index, "function": {"arguments": piece}}


@dataclass(slots=True)
class Streamed:
    """What a piece of the model's text gives the client: content, tool-call deltas (one a
    chunk), or that the held text passed the limit."""

    content: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)
    over: bool = False


@dataclass(slots=True)
class _Sent:
    id: str
    arguments: list[str] = field(default_factory=list)


class StreamingToolCalls:
    """A streamed answer that may be tool calls: each call is sent as it is read; text that
    starts as a call but is none is held until the model is done; other text passes at once.
    The held text is bounded by ``limit`` bytes."""

    def __init__(self, parser: ToolCallParser, limit: int) -> None:
        self.parser = parser
        self.limit = limit
        self.reader = parser.reader()
        self.held: list[str] = []  # the whole text, for the whole-answer parse at the end
        self.held_bytes = 0
        self.passing = False  # decided: plain content
        self.sent: list[_Sent] = []

    @property
    def called(self) -> bool:
        """Whether calls were sent (the answer's finish_reason is then tool_calls)."""
        return bool(self.sent)

    def feed(self, delta: str) -> Streamed:
        if self.passing:
            return Streamed(content=delta)
        self.held.append(delta)
        self.held_bytes += len(delta.encode())
        if self.held_bytes > self.limit:
            return Streamed(over=True)
        self.reader.feed(delta)
        if self.reader.state == PLAIN:
            self.passing = True
            text, self.held = "".join(self.held), []
            return Streamed(content=text)
        return Streamed(calls=self._read_calls() if self.reader.state == READING else [])

    def _read_calls(self) -> list[dict[str, Any]]:
        deltas = []
        calls = self.reader.calls
        # the calls before the last one sent are complete and sent already
        for index in range(max(len(self.sent) - 1, 0), len(calls)):
            call = calls[index]
            if index == len(self.sent):
                if call.name is None:
                    break
                self.sent.append(_Sent(self.parser.new_id()))
                deltas.append(_announce(index, self.sent[index].id, call.name))
            if call.arguments:
                piece = "".join(call.arguments)
                call.arguments.clear()
                self.sent[index].arguments.append(piece)
                deltas.append(_arguments(index, piece))
        return deltas

    def finish(self) -> Streamed:
        """What the end of the text gives: the rest of the calls, or the held text as
        content when it holds no call."""
        if self.passing or not self.held:
            return Streamed()
        text = "".join(self.held)
        parsed = self.parser.parse(text)
        if not self.sent:
            if parsed is None or not parsed[1]:
                return Streamed(content=text)
            return Streamed(content=parsed[0], calls=self._rest(parsed[1]))
        # once calls are sent they stand, as Triton's do, though the text ends badly
        return Streamed() if parsed is None else Streamed(calls=self._rest(parsed[1]))

    def _rest(self, calls: list[ToolCall]) -> list[dict[str, Any]]:
        """The deltas that complete what was sent into ``calls``."""
        deltas = []
        for index, call in enumerate(calls):
            if index >= len(self.sent):
                self.sent.append(_Sent(call.id, [call.arguments]))
                deltas.append(_announce(index, call.id, call.name))
                deltas.append(_arguments(index, call.arguments))
                continue
            sent = "".join(self.sent[index].arguments)
            if call.arguments.startswith(sent):
                if len(call.arguments) > len(sent):
                    deltas.append(_arguments(index, call.arguments[len(sent) :]))
            else:
                # a repeated key: json.loads keeps the last value where the first was sent
                logger.warning("tool call %d: streamed arguments differ from the answer's", index)
        return deltas
