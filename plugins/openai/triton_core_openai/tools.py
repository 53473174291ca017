"""Tool calls in a model's text: the ``llama3`` and ``mistral`` parsers of
``--tool-call-parser``, as Triton's (and vLLM's) read them.

- llama3: the text starts with ``<|python_tag|>`` or ``{``; one or more JSON objects
  ``{"name": ..., "parameters" | "arguments": {...}}`` separated by ``; ``.
- mistral: the text starts with ``[TOOL_CALLS]`` (or ``[``); a JSON list of
  ``{"name": ..., "arguments": {...}}``.

A text that does not parse is answered as plain content, as Triton does. While streaming,
:class:`StreamingToolCalls` holds back a text that may be a tool call until it is complete
(the model's last response), then sends each call whole: its id, name and arguments in one
chunk, which OpenAI's clients accumulate like any other split.
"""

from __future__ import annotations

import json
import secrets
import string
import uuid
from dataclasses import dataclass
from typing import Any

#: the parsers of --tool-call-parser
PARSERS = ("llama3", "mistral")
#: Triton's default --max-tool-call-parse-bytes: the text a streamed tool call may grow to
DEFAULT_MAX_TOOL_CALL_PARSE_BYTES = 128 * 1024

_ALPHANUMERIC = string.ascii_letters + string.digits


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

    def may_be_call(self, text: str) -> bool:
        """The text so far could still become a tool call (a prefix of the token counts)."""
        if not text:
            return True
        return (
            text.startswith(self.bot_token)
            or self.bot_token.startswith(text)
            or text.startswith(self.opening)
        )

    def parse(self, text: str) -> tuple[str, list[ToolCall]] | None:
        """(content before the calls, the calls), or None when the text holds none."""
        raise NotImplementedError


class Llama3Parser(ToolCallParser):
    bot_token = "<|python_tag|>"
    opening = "{"

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
                calls.append(
                    ToolCall(f"cmpl-{uuid.uuid1()}", str(raw["name"]), json.dumps(arguments))
                )
        except (ValueError, KeyError, TypeError, RecursionError):
            return None  # not a tool call after all: the text is the content
        return "", calls


class MistralParser(ToolCallParser):
    bot_token = "[TOOL_CALLS]"
    opening = "["

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
                ToolCall(
                    "".join(secrets.choice(_ALPHANUMERIC) for _ in range(9)),
                    str(raw["name"]),
                    json.dumps(raw["arguments"], ensure_ascii=False),
                )
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


class StreamingToolCalls:
    """A streamed answer that may be a tool call: text that could be one is held back until
    the model is done (or passes ``limit`` bytes); other text passes through at once."""

    def __init__(self, parser: ToolCallParser, limit: int) -> None:
        self.parser = parser
        self.limit = limit
        self.held = ""
        self.held_bytes = 0
        self.passing = False  # decided: plain content

    def feed(self, delta: str) -> tuple[str | None, bool]:
        """(content to send now or None, whether the held text passed the limit)."""
        if self.passing:
            return delta, False
        self.held += delta
        self.held_bytes += len(delta.encode())
        if self.held_bytes > self.limit:
            return None, True
        if not self.parser.may_be_call(self.held):
            self.passing = True
            text, self.held = self.held, ""
            return text, False
        return None, False

    def finish(self) -> tuple[str, list[ToolCall]]:
        """What was held back: (content, tool calls) once the model is done."""
        if self.passing or not self.held:
            return "", []
        parsed = self.parser.parse(self.held)
        return (self.held, []) if parsed is None else parsed
