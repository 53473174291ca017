"""What the OpenAI endpoints do, apart from HTTP: models listed and loaded, completions,
chat completions and embeddings answered through :class:`~triton_core.ServerAPI`.

Each method takes a checked request body (:mod:`triton_core_openai.schema`) and returns the
answer document, or for a streamed request the server-sent events as bytes (ending with
``data: [DONE]``). Errors are :class:`~triton_core_openai.errors.OpenAIError`, with Triton's
messages and status codes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from triton_core_openai import chat, engine
from triton_core_openai.errors import OpenAIError, client_error, not_found, server_error
from triton_core_openai.lora import LoraCatalog
from triton_core_openai.tools import Streamed, StreamingToolCalls, ToolCallParser, parser_for

from triton_core import InferenceRequest, ServerAPI, TritonError

logger = logging.getLogger("triton_core_openai")

OWNED_BY = "Triton Inference Server"


@dataclass(slots=True)
class ServiceSettings:
    tokenizer: str | None = None
    chat_template: str | None = None
    tool_call_parser: str | None = None
    max_tool_call_parse_bytes: int = 128 * 1024
    default_max_tokens: int = 16
    lora_separator: str | None = None
    #: --backend: the request convention for every model, or None to follow each config
    backend: str | None = None
    #: --model-control-mode: load and unload are allowed in "explicit" only
    model_control_mode: str = "none"


def _content_delta(text: str) -> dict[str, Any]:
    return {"role": None, "content": text, "function_call": None}


def _streamed_deltas(streamed: Streamed) -> list[dict[str, Any]]:
    """A streamed tool-call reading's chat deltas: one per tool-call delta."""
    deltas = [{"tool_calls": [call]} for call in streamed.calls]
    if streamed.content:
        deltas.insert(0, _content_delta(streamed.content))
    return deltas


def _event(document: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(document) + b"\n\n"


DONE = b"data: [DONE]\n\n"


class OpenAIService:
    def __init__(self, server: ServerAPI, settings: ServiceSettings) -> None:
        self.server = server
        self.settings = settings
        self.tokenizer: Any = None
        self.chat_template: str | None = None
        self.parser: ToolCallParser | None = None
        self._created: dict[str, int] = {}
        self._management = asyncio.Lock()
        self._loras = LoraCatalog()

    def load(self) -> None:
        """Load the tokenizer and template (the frontend's start; ValueError names the flag)."""
        settings = self.settings
        if settings.tool_call_parser:
            self.parser = parser_for(settings.tool_call_parser)
        if settings.tokenizer:
            self.tokenizer = chat.load_tokenizer(settings.tokenizer)
        self.chat_template = chat.load_chat_template(settings.chat_template)

    # -- models

    def _model_names(self) -> list[str]:
        names = sorted({entry.name for entry in self.server.repository_index(ready_only=True)})
        now = int(time.time())
        for name in names:
            self._created.setdefault(name, now)
        return names

    def _model(self, name: str, listed_as: str | None = None) -> dict[str, Any]:
        created = self._created.setdefault(name, int(time.time()))
        return {
            "id": listed_as or name,
            "object": "model",
            "created": created,
            "owned_by": OWNED_BY,
        }

    def _listed(self, name: str) -> list[dict[str, Any]]:
        """The model, then with --lora-separator one entry per LoRA it is known to have."""
        entries = [self._model(name)]
        separator = self.settings.lora_separator
        if separator:
            for lora in self._adapters(name) or ():
                entries.append(self._model(name, f"{name}{separator}{lora}"))
        return entries

    def models(self) -> dict[str, Any]:
        data = [entry for name in self._model_names() for entry in self._listed(name)]
        return {"object": "list", "data": data}

    def model(self, name: str) -> dict[str, Any]:
        base, _ = self._split(name)
        if base in self._model_names():
            for entry in self._listed(base):
                if entry["id"] == name:
                    return entry
        raise not_found(f"Unknown model: {name}")

    def _explicit_only(self) -> None:
        if self.settings.model_control_mode != "explicit":
            raise client_error("Model load/unload requires --model-control-mode=explicit")

    async def load_model(self, name: str) -> dict[str, Any]:
        self._explicit_only()
        async with self._management:
            if self.server.model_ready(name):
                raise client_error(f"Model '{name}' is already loaded")
            try:
                await self.server.load_model(name)
            except TritonError as error:
                status = 400 if error.status.name in ("INVALID_ARG", "NOT_FOUND") else 500
                raise OpenAIError(
                    status, f"Failed to load model '{name}': {error.message}"
                ) from error
            self._created[name] = int(time.time())
        return self._model(name)

    async def unload_model(self, name: str) -> dict[str, Any]:
        self._explicit_only()
        async with self._management:
            if not self.server.model_ready(name):
                raise client_error(f"Unknown model: {name}")
            try:
                await self.server.unload_model(name)
            except TritonError as error:
                raise server_error(f"Failed to unload model '{name}': {error.message}") from error
            self._created.pop(name, None)
        return {"status": "success", "model": name}

    def _split(self, requested: str) -> tuple[str, str | None]:
        """A requested name as (model, LoRA named after --lora-separator or None)."""
        separator = self.settings.lora_separator
        if separator:
            parts = requested.split(separator)
            if len(parts) == 2:
                return parts[0], parts[1]
        return requested, None

    def _adapters(self, name: str) -> tuple[str, ...] | None:
        """The model's LoRA names from its multi_lora.json (None: unknown, see
        :mod:`triton_core_openai.lora`); only a vLLM-convention model's are read, as Triton."""
        try:
            info = engine.model_info(self.server, name, self.settings.backend)
            folder = self.server.model_version_path(name)
        except TritonError:  # unloaded in between
            return None
        return self._loras.adapters(name, folder) if info.convention == engine.VLLM else None

    def _lora(self, name: str, lora: str | None, requested: str) -> str | None:
        """The LoRA passed to the model: a listed one, or None when the request names none or
        the model's are unknown. One the model does not list is refused, as Triton does."""
        if lora is None:
            return None
        adapters = self._adapters(name)
        if adapters is None:
            return None
        if lora not in adapters:
            raise client_error(f"Unknown LoRA: {lora}; for model: {requested}")
        return lora

    def _served(self, requested: str) -> tuple[engine.ModelInfo, str | None]:
        """The model a request names (and its LoRA after --lora-separator)."""
        name, lora = self._split(requested)
        if not name or not self.server.model_ready(name):
            raise client_error(f"Unknown model: {requested}")
        try:
            return engine.model_info(self.server, name, self.settings.backend), lora
        except TritonError as error:  # unloaded in between
            raise client_error(f"Unknown model: {requested}") from error

    # -- inference

    async def _responses(self, request: InferenceRequest) -> list[engine.Output]:
        outputs = []
        try:
            async with contextlib.aclosing(self.server.infer_stream(request)) as responses:
                async for response in responses:
                    outputs.append(engine.read(response))
        except TritonError as error:
            raise server_error(error.message) from error
        if not outputs:
            raise server_error("the model sent no response")
        return outputs

    async def _stream(self, request: InferenceRequest) -> AsyncIterator[engine.Output]:
        try:
            async with contextlib.aclosing(self.server.infer_stream(request)) as responses:
                async for response in responses:
                    yield engine.read(response)
        except TritonError as error:
            raise server_error(error.message) from error

    async def completion(self, body: dict[str, Any]) -> dict[str, Any] | AsyncIterator[bytes]:
        info, lora = self._served(body["model"])
        lora = self._lora(info.name, lora, body["model"])
        _check_completion(body, info)
        request = engine.generate_request(
            info,
            body["prompt"],
            body,
            chat=False,
            default_max_tokens=self.settings.default_max_tokens,
            lora=lora,
        )
        request_id, created = f"cmpl-{uuid.uuid1()}", int(time.time())
        if body["stream"]:
            return self._completion_events(request, body, request_id, created)
        outputs = await self._responses(request)
        usage = engine.Usage()
        for output in outputs:
            usage.add(output)
        text = "".join(output.text for output in outputs)
        logprobs = None
        if body["logprobs"]:
            logprobs = engine.completion_logprobs(
                [p for output in outputs for p in (output.logprobs or ())]
            )
        choice = {"finish_reason": "stop", "index": 0, "logprobs": logprobs, "text": text}
        return _document(
            "text_completion", request_id, created, body["model"], [choice], usage.document()
        )

    async def _completion_events(
        self, request: InferenceRequest, body: dict[str, Any], request_id: str, created: int
    ) -> AsyncIterator[bytes]:
        usage = engine.Usage()
        offset = 0
        async for output in self._stream(request):
            usage.add(output)
            logprobs = None
            if body["logprobs"]:
                logprobs = engine.completion_logprobs(output.logprobs, offset)
            offset += len(output.text)
            choice = {
                "finish_reason": "stop" if output.final else None,
                "index": 0,
                "logprobs": logprobs,
                "text": output.text,
            }
            yield _event(
                _document("text_completion", request_id, created, body["model"], [choice], None)
            )
        if _include_usage(body) and usage.document() is not None:
            yield _event(
                _document(
                    "text_completion", request_id, created, body["model"], [], usage.document()
                )
            )
        yield DONE

    async def chat(self, body: dict[str, Any]) -> dict[str, Any] | AsyncIterator[bytes]:
        info, lora = self._served(body["model"])
        if self.tokenizer is None:
            raise server_error("Unknown tokenizer")
        lora = self._lora(info.name, lora, body["model"])
        self._check_chat(body, info)
        turns = chat.conversation(body["messages"])
        tools = None if body["tools"] is None else [_tool_document(t) for t in body["tools"]]
        render = (self.tokenizer, turns, tools, self.chat_template)
        if _renders_quickly(body):
            # a hop to a thread would wait for the GIL while the loop is busy (up to the
            # 5 ms switch interval): a small conversation renders in tens of microseconds
            prompt = chat.render(*render)
        else:
            prompt = await asyncio.to_thread(chat.render, *render)
        request = engine.generate_request(
            info,
            prompt,
            body,
            chat=True,
            default_max_tokens=self.settings.default_max_tokens,
            lora=lora,
        )
        request_id, created = f"cmpl-{uuid.uuid1()}", int(time.time())
        named = _named_function(body)
        auto = (
            self.parser is not None
            and bool(body["tools"])
            and body["tool_choice"] in (None, "auto")
        )
        if body["stream"]:
            return self._chat_events(request, body, request_id, created, named, auto)
        outputs = await self._responses(request)
        usage = engine.Usage()
        for output in outputs:
            usage.add(output)
        text = "".join(output.text for output in outputs)
        message: dict[str, Any] = {"content": text, "role": "assistant", "tool_calls": None}
        finish = "stop"
        if named:
            call = {
                "id": request_id,
                "type": "function",
                "function": {"name": named, "arguments": text},
            }
            message = {"content": "", "role": "assistant", "tool_calls": [call]}
        elif auto:
            assert self.parser is not None
            parsed = self.parser.parse(text)
            if parsed is not None and parsed[1]:
                calls = [call.message() for call in parsed[1]]
                message = {"content": parsed[0], "role": "assistant", "tool_calls": calls}
                finish = "tool_calls"
        logprobs = None
        if body["logprobs"]:
            content = engine.chat_logprobs([p for o in outputs for p in (o.logprobs or ())])
            logprobs = None if content is None else {"content": content}
        choice = {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish}
        return _document(
            "chat.completion", request_id, created, body["model"], [choice], usage.document()
        )

    async def _chat_events(
        self,
        request: InferenceRequest,
        body: dict[str, Any],
        request_id: str,
        created: int,
        named: str | None,
        auto: bool,
    ) -> AsyncIterator[bytes]:
        model = body["model"]

        def chunk(delta: dict[str, Any], finish: str | None, logprobs: Any = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
            return _event(
                _document("chat.completion.chunk", request_id, created, model, [choice], None)
            )

        yield chunk({"role": "assistant", "content": "", "function_call": None}, None)
        usage = engine.Usage()
        held = (
            StreamingToolCalls(self.parser, self.settings.max_tool_call_parse_bytes)
            if auto and self.parser is not None
            else None
        )
        truncated = False
        named_sent = False
        async with contextlib.aclosing(self._stream(request)) as outputs:
            async for output in outputs:
                usage.add(output)
                logprobs = None
                if body["logprobs"]:
                    content = engine.chat_logprobs(output.logprobs)
                    logprobs = None if content is None else {"content": content}
                finish = None
                deltas: list[dict[str, Any]]
                if named:
                    function = {"arguments": output.text}
                    call: dict[str, Any] = {"index": 0, "function": function}
                    if not named_sent:
                        call.update(id=request_id, type="function")
                        function["name"] = named
                        named_sent = True
                    deltas = [{"tool_calls": [call]}]
                elif held is not None:
                    streamed = held.feed(output.text)
                    if streamed.over:
                        truncated = True
                        break  # leaving the loop cancels the generation
                    deltas = _streamed_deltas(streamed)
                    if output.final:
                        deltas += _streamed_deltas(held.finish())
                else:
                    deltas = [_content_delta(output.text)]
                if output.final:
                    finish = "tool_calls" if held is not None and held.called else "stop"
                if not deltas and finish is None:
                    continue
                deltas = deltas or [{"content": ""}]
                for number, delta in enumerate(deltas):
                    last = number == len(deltas) - 1
                    yield chunk(delta, finish if last else None, logprobs if number == 0 else None)
        if truncated:
            logger.warning(
                "streamed tool call of %s passed %d bytes (--max-tool-call-parse-bytes): "
                "answer truncated, generation cancelled",
                request_id,
                self.settings.max_tool_call_parse_bytes,
            )
            yield chunk({"content": ""}, "length")
        if _include_usage(body) and usage.document() is not None:
            yield _event(
                _document("chat.completion.chunk", request_id, created, model, [], usage.document())
            )
        yield DONE

    def _check_chat(self, body: dict[str, Any], info: engine.ModelInfo) -> None:
        if body["n"] and body["n"] > 1:
            raise client_error(
                f"Received n={body['n']}, but only single choice (n=1) is currently supported"
            )
        if body["logit_bias"] is not None:
            raise client_error("logit bias is not currently supported")
        if info.convention != engine.VLLM and (
            body["logprobs"] or body["top_logprobs"] is not None
        ):
            raise client_error("logprobs are currently available only for the vLLM backend")
        if body["top_logprobs"] is not None and not body["logprobs"]:
            raise client_error("`top_logprobs` can only be used when `logprobs` is True")
        choice, tools = body["tool_choice"], body["tools"]
        if choice == "required" and not tools:
            raise client_error(
                '"required" tool choice requires CreateChatCompletionRequest.tools to be provided'
            )
        if isinstance(choice, dict) and not tools:
            raise client_error(
                "Named tool choice requires CreateChatCompletionRequest.tools to be provided"
            )
        if choice == "auto" and self.parser is None:
            raise client_error('"auto" tool choice requires --tool-call-parser to be set')
        if choice is None and tools and self.parser is None:
            raise client_error("having tools in the request requires --tool-call-parser to be set")
        if body["stream_options"] and not body["stream"]:
            raise client_error("`stream_options` can only be used when `stream` is True")

    async def embedding(self, body: dict[str, Any]) -> dict[str, Any]:
        info, _ = self._served(body["model"])
        request = engine.embedding_request(info, body)
        outputs = await self._responses(request)
        try:
            values = orjson.loads(outputs[0].text)
        except orjson.JSONDecodeError as error:
            raise server_error(f"the model's embedding is not JSON: {error}") from error
        embedding: Any = values
        if body["encoding_format"] == "base64":
            embedding = base64.b64encode(np.asarray(values, dtype=np.float32).tobytes()).decode()
        usage = None
        first = outputs[0]
        if first.prompt_tokens is not None:
            usage = {"prompt_tokens": first.prompt_tokens, "total_tokens": first.prompt_tokens}
        return {
            "object": "list",
            "data": [{"object": "embedding", "embedding": embedding, "index": 0}],
            "model": body["model"],
            "usage": usage,
        }


def _check_completion(body: dict[str, Any], info: engine.ModelInfo) -> None:
    if body["suffix"] is not None:
        raise client_error("suffix is not currently supported")
    prompt = body["prompt"]
    if not prompt:
        raise client_error("prompt must be non-empty")
    if not isinstance(prompt, str):
        raise client_error("only single string input is supported")
    if "best_of" in body["_given"] and info.convention == engine.VLLM:
        raise client_error(
            "best_of is no longer supported in vLLM backend, removed from vLLM V1 engine"
        )
    if body["n"] and body["n"] > 1:
        raise client_error(
            f"Received n={body['n']}, but only single choice (n=1) is currently supported"
        )
    if body["best_of"] and body["best_of"] > 1:
        raise client_error(
            f"Received best_of={body['best_of']}, but only single choice (best_of=1) is "
            "currently supported"
        )
    if body["logit_bias"] is not None:
        raise client_error("logit bias is not supported")
    if body["logprobs"] and info.convention != engine.VLLM:
        raise client_error("logprobs are currently available only for the vLLM backend")
    if body["stream_options"] and not body["stream"]:
        raise client_error("`stream_options` can only be used when `stream` is True")


def _include_usage(body: dict[str, Any]) -> bool:
    options = body["stream_options"]
    return bool(options and options.get("include_usage"))


def _named_function(body: dict[str, Any]) -> str | None:
    choice, tools = body["tool_choice"], body["tools"]
    if isinstance(choice, dict):
        return str(choice["function"]["name"])
    if choice == "required" and tools:
        return str(tools[0]["function"]["name"])
    return None


#: conversations up to this size (messages and tools) render on the event loop
_RENDER_ON_LOOP_BYTES = 64 * 1024
_RENDER_ON_LOOP_MESSAGES = 256


def _renders_quickly(body: dict[str, Any]) -> bool:
    """A conversation small enough that its template renders on the loop (bounded work)."""
    messages = body["messages"]
    if len(messages) > _RENDER_ON_LOOP_MESSAGES or body["tools"]:
        return False
    size = 0
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            size += len(content)
        elif content is not None:
            size += sum(len(part.get("text") or "") for part in content)
        if message.get("tool_calls"):
            return False
    return size <= _RENDER_ON_LOOP_BYTES


def _tool_document(tool: dict[str, Any]) -> dict[str, Any]:
    """A checked tool as a chat template takes it (the schema's fields, no markers)."""
    function = {k: v for k, v in tool["function"].items() if k != "_given" and v is not None}
    return {"type": "function", "function": function}


def _document(
    kind: str,
    request_id: str,
    created: int,
    model: str,
    choices: list[dict[str, Any]],
    usage: dict[str, int] | None,
) -> dict[str, Any]:
    """An answer (or streamed chunk) of ``kind``: text_completion, chat.completion ..."""
    return {
        "id": request_id,
        "choices": choices,
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "object": kind,
        "usage": usage,
    }
