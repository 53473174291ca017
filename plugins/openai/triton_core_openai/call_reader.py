"""Tool calls read as the model writes them: each call's name as soon as it is complete, and
its arguments re-serialised as ``json.dumps`` writes them (what the whole answer sends), a
piece at a time.

A piece is given out once later text cannot change it: a bracket, ``, `` or ``: `` when it is
read, a string's characters as soon as they are decoded (not half an escape, nor a high
surrogate that the next escape may pair with), a number or literal once it ends. Each piece
of text is read once (a string's undecoded tail, at most 11 characters, is read again), so
the work per chunk is bounded by the chunk.

Readers assume the text becomes a valid call; where it cannot (a syntax error, a name that
is not a string), they stop and leave the text to the whole-answer parser.
"""

from __future__ import annotations

import json
import re
from json.encoder import encode_basestring, encode_basestring_ascii

_SPACE = re.compile(r"[ \t\n\r]*")
#: the characters of a number or a literal (true, false, null, NaN, Infinity)
_BARE = re.compile(r"[0-9A-Za-z+\-.]*")
_STRING_STOP = re.compile(r'["\\]')
_HIGH_SURROGATE = re.compile(r"[dD][89abAB][0-9a-fA-F]{2}")


def _end(pattern: re.Pattern[str], text: str, pos: int) -> int:
    """Where a run of ``pattern`` (which matches the empty text too) starting at ``pos`` ends."""
    match = pattern.match(text, pos)
    assert match is not None
    return match.end()


# where a call object's reader is: a value, a member's key (or the object's end), the colon,
# an array's first item (or its end), what follows a value, inside a string or a bare token
_VALUE, _KEY_OR_END, _KEY, _COLON, _ITEM_OR_END, _NEXT, _STRING, _BARE_TOKEN = range(8)


class CallObject:
    """One call's JSON object: ``name`` once read, the arguments' canonical text in
    ``arguments`` (pieces the caller takes), ``done`` at its closing brace, ``failed`` when
    the text cannot be a call this reader streams."""

    def __init__(self, argument_keys: tuple[str, ...], ensure_ascii: bool) -> None:
        self.argument_keys = argument_keys
        self.encode = encode_basestring_ascii if ensure_ascii else encode_basestring
        self.name: str | None = None
        self.arguments: list[str] = []
        self.done = False
        self.failed = False
        self._state = _VALUE
        self._stack: list[str] = []  # the open containers, the call object first
        self._role = ""  # the call object's member being read: name, arguments or other
        self._arguments_seen = False
        self._sink: list[str] | None = None  # where canonical text goes, inside the arguments
        self._key = False  # the string being read is a key
        self._capture: list[str] | None = None  # a decoded string kept: a key, the name
        self._bare: list[str] = []

    def read(self, text: str, pos: int) -> int:
        """Reads ``text`` from ``pos``; returns where reading stopped (the object's end, or
        the start of what waits for more text)."""
        while pos < len(text) and not (self.done or self.failed):
            state = self._state
            moved = self._step(text, pos)
            if moved == pos and self._state == state:
                break  # waiting for more text
            pos = moved
        return pos

    def _step(self, text: str, pos: int) -> int:
        if self._state == _STRING:
            return self._string(text, pos)
        if self._state == _BARE_TOKEN:
            return self._bare_token(text, pos)
        pos = _end(_SPACE, text, pos)
        if pos == len(text):
            return pos
        char = text[pos]
        if self._state == _VALUE:
            self._value(char)
        elif self._state in (_KEY_OR_END, _KEY):
            self._member(char)
        elif self._state == _COLON:
            self._colon(char)
        elif self._state == _ITEM_OR_END:
            if char != "]":
                self._state = _VALUE
                return pos
            self._close(char)
        else:
            self._after_value(char)
        return pos if self._state == _BARE_TOKEN else pos + 1

    def _write(self, piece: str) -> None:
        if self._sink is not None:
            self._sink.append(piece)

    def _fail(self) -> None:
        self.failed = True

    def _value(self, char: str) -> None:
        if len(self._stack) == 1:  # a member of the call object
            if self._role == "name" and char != '"':
                return self._fail()  # a name that is not a string: left to the parser
            self._sink = self.arguments if self._role == "arguments" else None
        elif not self._stack and char != "{":
            return self._fail()
        if char in "{[":
            self._write(char)
            self._stack.append(char)
            self._state = _KEY_OR_END if char == "{" else _ITEM_OR_END
        elif char == '"':
            self._open_string(key=False)
        elif _end(_BARE, char, 0):
            self._bare = []
            self._state = _BARE_TOKEN
        else:
            self._fail()

    def _member(self, char: str) -> None:
        if char == '"':
            self._open_string(key=True)
        elif char == "}" and self._state == _KEY_OR_END:
            self._close(char)
        else:
            self._fail()

    def _colon(self, char: str) -> None:
        if char != ":":
            return self._fail()
        self._write(": ")
        self._state = _VALUE

    def _after_value(self, char: str) -> None:
        top = self._stack[-1]
        if char == ",":
            self._write(", ")
            self._state = _KEY if top == "{" else _VALUE
        elif char == ("}" if top == "{" else "]"):
            self._close(char)
        else:
            self._fail()

    def _close(self, char: str) -> None:
        self._write(char)
        self._stack.pop()
        self._value_done()

    def _value_done(self) -> None:
        self._state = _NEXT
        if len(self._stack) == 1:  # a member of the call object ends
            self._sink = None
            self._role = ""
        elif not self._stack:
            self.done = True

    def _open_string(self, key: bool) -> None:
        self._write('"')
        self._key = key
        at_call = len(self._stack) == 1
        self._capture = [] if at_call and (key or self._role == "name") else None
        self._state = _STRING

    def _string(self, text: str, pos: int) -> int:
        scan, high = pos, -1
        while (match := _STRING_STOP.search(text, scan)) is not None:
            at = match.start()
            if text[at] == '"':
                self._characters(text[pos:at])
                self._close_string()
                return at + 1
            width = 6 if text[at + 1 : at + 2] == "u" else 2
            if at + width > len(text):
                break  # an escape cut short: the rest comes with the next text
            if width == 6 and _HIGH_SURROGATE.fullmatch(text, at + 2, at + 6):
                high = at
            scan = at + width
        else:
            at = len(text)
        # json.loads joins a high surrogate escape with a low one right after it
        cut = high if high >= 0 and high + 6 == at else at
        self._characters(text[pos:cut])
        return cut

    def _characters(self, raw: str) -> None:
        if not raw or self.failed:
            return
        try:
            decoded = json.loads('"' + raw + '"')
        except ValueError:
            return self._fail()  # a bad escape or a control character
        self._write(self.encode(decoded)[1:-1])
        if self._capture is not None:
            self._capture.append(decoded)

    def _close_string(self) -> None:
        if self.failed:
            return
        self._write('"')
        text = "".join(self._capture) if self._capture is not None else ""
        self._capture = None
        if self._key:
            if len(self._stack) == 1:
                self._role = self._member_role(text)
            self._state = _COLON
            return
        if len(self._stack) == 1 and self._role == "name":
            self.name = text
        self._value_done()

    def _member_role(self, key: str) -> str:
        if key == "name" and self.name is None:
            return "name"
        if key in self.argument_keys and not self._arguments_seen:
            self._arguments_seen = True
            return "arguments"
        return ""  # read, not sent (a repeated key is left to the whole-answer parser)

    def _bare_token(self, text: str, pos: int) -> int:
        end = _end(_BARE, text, pos)
        self._bare.append(text[pos:end])
        if end == len(text):
            return end
        try:
            value = json.loads("".join(self._bare))
        except ValueError:
            self._fail()
            return end
        self._write(json.dumps(value))
        self._value_done()
        return end


# what a tool-call text reader found: still reading, plain content, or stopped
READING, PLAIN, STOPPED = "reading", "plain", "stopped"


class CallText:
    """A model's text read as tool calls, as it arrives: :attr:`calls` holds a
    :class:`CallObject` per call begun. :attr:`state` turns ``PLAIN`` when the text cannot be
    a call (it does not start as one) and ``STOPPED`` when the reader cannot follow it."""

    def __init__(self, bot_token: str, argument_keys: tuple[str, ...], ensure_ascii: bool):
        self.bot_token = bot_token
        self.argument_keys = argument_keys
        self.ensure_ascii = ensure_ascii
        self.calls: list[CallObject] = []
        self.state = READING
        self._text = ""  # what waits for more text, then the new text
        self._where = "start"

    def feed(self, delta: str) -> None:
        if self.state != READING:
            return
        text, pos = self._text + delta, 0
        while pos < len(text) and self.state == READING:
            call = self.calls[-1] if self.calls and not self.calls[-1].done else None
            if call is not None:
                pos = call.read(text, pos)
                if call.failed:
                    self.state = STOPPED
                if not call.done:
                    break
                self._where = self._after_call()
                continue
            before = (pos, len(self.calls), self._where)
            pos = self._between(text, pos)
            if (pos, len(self.calls), self._where) == before:
                break  # waiting for more text (the bot token's rest)
        self._text = text[pos:]

    def _start(self, text: str, pos: int, opening: str) -> int:
        """Past the bot token (or at the opening), or PLAIN for any other text."""
        rest = text[pos:]
        if rest.startswith(self.bot_token):
            self._where = "lead"
            return pos + len(self.bot_token)
        if self.bot_token.startswith(rest):
            return pos  # the token may still come
        if rest.startswith(opening):
            self._where = "lead"
            return pos
        self.state = PLAIN
        return pos

    def _begin_call(self, pos: int) -> int:
        self.calls.append(CallObject(self.argument_keys, self.ensure_ascii))
        self._where = "call"
        return pos

    def _between(self, text: str, pos: int) -> int:
        raise NotImplementedError

    def _after_call(self) -> str:
        raise NotImplementedError


class Llama3Text(CallText):
    """``<|python_tag|>`` or nothing, then call objects, each two characters (``; ``) after
    the last, as the whole-answer parser skips them."""

    def __init__(self, bot_token: str, argument_keys: tuple[str, ...], ensure_ascii: bool):
        super().__init__(bot_token, argument_keys, ensure_ascii)
        self._gap = 0

    def _between(self, text: str, pos: int) -> int:
        if self._where == "start":
            return self._start(text, pos, "{")
        if self._gap:
            skipped = min(self._gap, len(text) - pos)
            self._gap -= skipped
            return pos + skipped
        if text[pos] != "{":
            self.state = STOPPED
            return pos
        return self._begin_call(pos)

    def _after_call(self) -> str:
        if self.calls[-1].name is None:
            self.state = STOPPED  # a call without a name: left to the whole-answer parser
        self._gap = 2
        return "gap"


class MistralText(CallText):
    """``[TOOL_CALLS]`` or nothing, white space, then a JSON list of call objects."""

    def _between(self, text: str, pos: int) -> int:
        where = self._where
        if where == "start":
            return self._start(text, pos, "[")
        if where == "lead":
            return self._lead(text, pos)
        if where == "tail":
            end = pos
            while end < len(text) and text[end].isspace():
                end += 1
            if end < len(text):
                self.state = STOPPED  # text after the list: left to the whole-answer parser
            return end
        pos = _end(_SPACE, text, pos)
        if pos == len(text):
            return pos
        return self._in_list(text[pos], pos)

    def _lead(self, text: str, pos: int) -> int:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return pos
        if text[pos] != "[":
            self.state = STOPPED
            return pos
        self._where = "first"
        return pos + 1

    def _in_list(self, char: str, pos: int) -> int:
        where = self._where
        if char == "{" and where in ("first", "item"):
            return self._begin_call(pos)
        if char == "]" and where in ("first", "next"):
            self._where = "tail"
        elif char == "," and where == "next":
            self._where = "item"
        else:
            self.state = STOPPED
        return pos + 1

    def _after_call(self) -> str:
        if self.calls[-1].name is None:
            self.state = STOPPED
        return "next"
