"""Chat messages into a prompt: the tokenizer's chat template (``--tokenizer``, a local
folder with ``tokenizer.json`` and ``tokenizer_config.json``, as transformers saves one),
or the Jinja file of ``--chat-template`` in its place.

Nothing is downloaded: the tokenizer is loaded from the folder (or from the local
Hugging Face cache) with ``local_files_only``. It is loaded when the frontend starts, so
that a tokenizer that cannot be loaded stops the server at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from triton_core_openai.errors import client_error, server_error


def load_tokenizer(path: str) -> Any:
    """The tokenizer of ``path`` (transformers' ``AutoTokenizer``); ``ValueError`` naming the
    flag when it cannot be loaded."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as error:  # transformers raises OSError, ValueError, KeyError ...
        raise ValueError(f"--tokenizer {path}: cannot load a tokenizer from it: {error}") from error


def load_chat_template(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text()
    except OSError as error:
        raise ValueError(f"--chat-template {path}: {error.strerror}") from error


def conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Checked messages as a chat template takes them (Triton's ``parse_chat_messages``):
    text parts only, and tool-call arguments as objects rather than JSON strings."""
    turns = []
    for message in messages:
        role, content = message["role"], message["content"]
        turn: dict[str, Any] = {"role": role}
        if isinstance(content, list):
            parts = []
            for part in content:
                if part["type"] != "text":
                    raise client_error(f"only text message is supported, but got {part['type']}")
                parts.append({"type": "text", "text": part["text"]})
            turn["content"] = parts
        else:
            turn["content"] = content
        if role == "assistant" and message["tool_calls"]:
            turn["tool_calls"] = [_tool_call(call) for call in message["tool_calls"]]
        elif role == "tool" and message["tool_call_id"]:
            turn["tool_call_id"] = message["tool_call_id"]
        if role == "user" and isinstance(message["name"], str):
            turn["name"] = message["name"]
        turns.append(turn)
    return turns


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    try:
        arguments = json.loads(function["arguments"])
    except (ValueError, RecursionError) as error:
        raise client_error(
            f"the arguments of tool call '{call['id']}' are not JSON: {error}"
        ) from error
    return {
        "id": call["id"],
        "type": "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


def render(
    tokenizer: Any,
    turns: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    chat_template: str | None,
) -> str:
    """The prompt: the chat template applied, with the generation prompt added. A tokenizer
    without a template (or a template that fails) is a server error, as in Triton."""
    if tokenizer is None:
        raise server_error("Unknown tokenizer")
    try:
        prompt = tokenizer.apply_chat_template(
            conversation=turns,
            tokenize=False,
            add_generation_prompt=True,
            tools=tools,
            chat_template=chat_template,
        )
    except Exception as error:  # jinja2 and transformers raise many kinds
        raise server_error(str(error)) from error
    if not isinstance(prompt, str):
        raise server_error("the chat template did not render to text")
    return prompt
