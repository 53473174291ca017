"""The request bodies of ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/embeddings``,
checked against OpenAI's schema as Triton's frontend checks them (its pydantic models:
unknown fields refused, ranges, types), before anything is allocated or looped over.

A body that does not fit is refused with 422 and pydantic's list of problems (the same
``type``/``loc``/``msg`` Triton's clients see); what fits is returned as a plain dict with
the schema's defaults filled in. Counts a client controls are bounded here: messages,
content parts, tools, stop strings, embedding inputs (see the constants).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from triton_core_openai.errors import schema_error

#: most messages in one chat request
MAX_MESSAGES = 2048
#: most content parts in one message
MAX_CONTENT_PARTS = 256
#: most tools in one chat request (OpenAI's limit)
MAX_TOOLS = 128
#: most tool calls in one assistant message
MAX_TOOL_CALLS = 128
#: most stop strings in one request
MAX_STOP = 16
#: most token ids in one prompt or embedding input given as ids
MAX_TOKEN_IDS = 1 << 16
#: ``n`` and ``best_of`` as the schema bounds them (only 1 is served, as Triton)
MAX_CHOICES = 128

_INT64 = (-(1 << 63), (1 << 63) - 1)

Problems = list[dict[str, Any]]
Check = Callable[[Any, tuple[Any, ...], Problems], Any]

_MISSING = object()


def _problem(problems: Problems, kind: str, loc: tuple[Any, ...], msg: str, value: Any) -> None:
    # the input is echoed as pydantic does, but never a large one
    shown = value if isinstance(value, bool | int | float | type(None)) else None
    if isinstance(value, str) and len(value) <= 256:
        shown = value
    problems.append({"type": kind, "loc": ["body", *loc], "msg": msg, "input": shown})


def string(*, min_length: int = 0) -> Check:
    def check(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
        if not isinstance(value, str):
            _problem(problems, "string_type", loc, "Input should be a valid string", value)
        elif len(value) < min_length:
            _problem(
                problems,
                "string_too_short",
                loc,
                f"String should have at least {min_length} character",
                value,
            )
        return value

    return check


def boolean() -> Check:
    def check(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
        if not isinstance(value, bool):
            _problem(problems, "bool_type", loc, "Input should be a valid boolean", value)
        return value

    return check


def _bounds(
    value: float, low: float | None, high: float | None, loc: tuple[Any, ...], p: Problems
) -> None:
    if low is not None and value < low:
        message = f"Input should be greater than or equal to {low}"
        _problem(p, "greater_than_equal", loc, message, value)
    elif high is not None and value > high:
        _problem(p, "less_than_equal", loc, f"Input should be less than or equal to {high}", value)


def integer(low: int | None = None, high: int | None = None) -> Check:
    def check(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            _problem(problems, "int_type", loc, "Input should be a valid integer", value)
        else:
            _bounds(value, low, high, loc, problems)
        return value

    return check


def number(low: float | None = None, high: float | None = None) -> Check:
    def check(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
        if not isinstance(value, int | float) or isinstance(value, bool):
            _problem(problems, "float_type", loc, "Input should be a valid number", value)
        elif not math.isfinite(value):
            _problem(problems, "finite_number", loc, "Input should be a finite number", value)
        else:
            _bounds(value, low, high, loc, problems)
        return value

    return check


def literal(*choices: str) -> Check:
    def check(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
        if value not in choices:
            names = " or ".join(f"'{choice}'" for choice in choices)
            _problem(problems, "literal_error", loc, f"Input should be {names}", value)
        return value

    return check


def listing(item: Check, *, min_items: int = 0, max_items: int, noun: str = "List") -> Check:
    def check(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
        if not isinstance(value, list):
            _problem(problems, "list_type", loc, "Input should be a valid list", value)
            return value
        if len(value) < min_items:
            _problem(
                problems,
                "too_short",
                loc,
                f"{noun} should have at least {min_items} item after validation, not {len(value)}",
                None,
            )
            return value
        if len(value) > max_items:
            _problem(
                problems,
                "too_long",
                loc,
                f"{noun} should have at most {max_items} items after validation, not {len(value)}",
                None,
            )
            return value
        return [item(entry, (*loc, index), problems) for index, entry in enumerate(value)]

    return check


def either(*checks: Check) -> Check:
    """The first of ``checks`` the value passes; otherwise the problems of the first one
    whose type it has (a list's, for a list), or of the first one."""

    def check(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
        failures: list[Problems] = []
        for one in checks:
            found: Problems = []
            checked = one(value, loc, found)
            if not found:
                return checked
            failures.append(found)
        typed = [found for found in failures if not found[0]["type"].endswith("_type")]
        problems.extend((typed or failures)[0])
        return value

    return check


def anything() -> Check:
    return lambda value, loc, problems: value


def mapping(fields: dict[str, tuple[Check, Any]], *, extra: bool = False) -> Check:
    """An object with ``fields`` (name -> (check, default; ``REQUIRED`` when required));
    unknown fields are refused unless ``extra``."""

    def check(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
        if not isinstance(value, dict):
            _problem(problems, "dict_type", loc, "Input should be a valid dictionary", value)
            return value
        checked: dict[str, Any] = {}
        for name, (field_check, default) in fields.items():
            given = value.get(name, _MISSING)
            if given is _MISSING:
                if default is REQUIRED:
                    _problem(problems, "missing", (*loc, name), "Field required", None)
                else:
                    checked[name] = default
                continue
            if given is None and default is not REQUIRED:
                checked[name] = None  # optional, and null as given
                continue
            checked[name] = field_check(given, (*loc, name), problems)
        for name in value:
            if name not in fields:
                if extra:
                    checked[name] = value[name]
                else:
                    _problem(
                        problems,
                        "extra_forbidden",
                        (*loc, name),
                        "Extra inputs are not permitted",
                        None,
                    )
        if not extra:
            checked["_given"] = frozenset(value)  # the fields the client set
        return checked

    return check


#: a field's default that marks it required
REQUIRED: Any = object()


def validate(check: Check, doc: Any) -> dict[str, Any]:
    """``doc`` checked; raises a 422 :class:`~triton_core_openai.errors.OpenAIError`."""
    problems: Problems = []
    checked = check(doc, (), problems)
    if problems:
        raise schema_error(problems)
    return checked  # type: ignore[no-any-return]


# -- the pieces the requests share

_STOP = either(string(), listing(string(), max_items=MAX_STOP))
_STREAM_OPTIONS = mapping({"include_usage": (boolean(), None)})
_SAMPLING: dict[str, tuple[Check, Any]] = {
    "model": (string(), REQUIRED),
    "frequency_penalty": (number(-2.0, 2.0), 0),
    "presence_penalty": (number(-2.0, 2.0), 0),
    "ignore_eos": (boolean(), False),
    "logit_bias": (mapping({}, extra=True), None),
    "max_tokens": (integer(0), None),
    "min_tokens": (integer(0), None),
    "n": (integer(1, MAX_CHOICES), 1),
    "seed": (integer(*_INT64), None),
    "stop": (_STOP, None),
    "stream": (boolean(), False),
    "stream_options": (_STREAM_OPTIONS, None),
    "top_p": (number(0.0, 1.0), 1),
    "user": (string(), None),
}

_TOKEN_IDS = listing(integer(0), min_items=1, max_items=MAX_TOKEN_IDS)

COMPLETION = mapping(
    {
        **_SAMPLING,
        "prompt": (
            either(
                string(),
                listing(string(), max_items=MAX_MESSAGES),
                _TOKEN_IDS,
                listing(_TOKEN_IDS, max_items=MAX_MESSAGES),
            ),
            REQUIRED,
        ),
        "best_of": (integer(0, 20), 1),
        "echo": (boolean(), None),
        "logprobs": (integer(0, 5), None),
        "suffix": (string(), None),
        "temperature": (number(0.0, 2.0), 1),
    }
)

_TEXT_PART = mapping({"type": (literal("text"), REQUIRED), "text": (string(), REQUIRED)})
#: other parts (images, audio) pass the schema and are refused by name after it
_OTHER_PART = mapping({"type": (string(), REQUIRED)}, extra=True)
_CONTENT = either(string(), listing(either(_TEXT_PART, _OTHER_PART), max_items=MAX_CONTENT_PARTS))
_FUNCTION_CALL = mapping({"name": (string(), REQUIRED), "arguments": (string(), REQUIRED)})
_TOOL_CALL = mapping(
    {
        "id": (string(), REQUIRED),
        "type": (literal("function"), REQUIRED),
        "function": (_FUNCTION_CALL, REQUIRED),
    }
)
_MESSAGE = mapping(
    {
        "role": (literal("system", "developer", "user", "assistant", "tool", "function"), REQUIRED),
        "content": (_CONTENT, None),
        "name": (string(), None),
        "tool_calls": (listing(_TOOL_CALL, max_items=MAX_TOOL_CALLS), None),
        "tool_call_id": (string(), None),
        "function_call": (mapping({}, extra=True), None),
        "refusal": (string(), None),
    }
)
_FUNCTION = mapping(
    {
        "name": (string(min_length=1), REQUIRED),
        "description": (string(), None),
        "parameters": (mapping({}, extra=True), None),
        "strict": (boolean(), None),
    }
)
_TOOL = mapping({"type": (literal("function"), REQUIRED), "function": (_FUNCTION, REQUIRED)})
_NAMED_TOOL = mapping(
    {
        "type": (literal("function"), REQUIRED),
        "function": (mapping({"name": (string(), REQUIRED)}), REQUIRED),
    }
)
_RESPONSE_FORMAT = mapping(
    {
        "type": (literal("text", "json_object", "json_schema"), REQUIRED),
        "json_schema": (mapping({}, extra=True), None),
    }
)

CHAT = mapping(
    {
        **_SAMPLING,
        "messages": (listing(_MESSAGE, min_items=1, max_items=MAX_MESSAGES), REQUIRED),
        "logprobs": (boolean(), False),
        "top_logprobs": (integer(0, 20), None),
        "max_completion_tokens": (integer(0), None),
        "response_format": (_RESPONSE_FORMAT, None),
        "temperature": (number(0.0, 2.0), 0.7),
        "tools": (listing(_TOOL, max_items=MAX_TOOLS), None),
        "tool_choice": (either(literal("none", "auto", "required"), _NAMED_TOOL), None),
        "parallel_tool_calls": (boolean(), None),
        "function_call": (anything(), None),
        "functions": (anything(), None),
    }
)


def _embedding_input(value: Any, loc: tuple[Any, ...], problems: Problems) -> Any:
    if isinstance(value, str | list) and len(value) == 0:
        _problem(
            problems,
            "too_short",
            loc,
            "Value should have at least 1 item after validation, not 0",
            None,
        )
        return value
    return either(string(), listing(integer(0), max_items=MAX_TOKEN_IDS))(value, loc, problems)


EMBEDDING = mapping(
    {
        "input": (_embedding_input, REQUIRED),
        "model": (string(), REQUIRED),
        "dimensions": (integer(1, 1 << 16), None),
        "encoding_format": (literal("float", "base64"), "float"),
        "user": (string(), None),
    }
)
