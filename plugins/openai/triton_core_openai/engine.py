"""OpenAI requests as Triton inference requests, and the model's answers back, in the two
conventions Triton's OpenAI frontend speaks:

- ``vllm`` (a model whose config says ``backend: "vllm"``, or ``--backend vllm``): inputs
  ``text_input``, ``stream``, ``sampling_parameters`` (the request's sampling fields as one
  JSON string), ``exclude_input_in_output`` (``not echo``), ``return_num_input_tokens``,
  ``return_num_output_tokens``, ``return_logprobs``; shape ``[1]`` (``[1, 1]`` for a model
  with ``max_batch_size`` > 0, such as one that batches requests by iterative sequences).
- ``tensorrtllm`` (every other model: TensorRT-LLM, an ensemble, a BLS or Python model):
  one input per parameter (``max_tokens`` INT32, ``temperature``/``top_p``/penalties FP32,
  ``seed`` UINT64, ``stop_words`` BYTES, ``stream`` BOOL ...); shape ``[1, 1]``.

Both answer ``text_output`` and, when asked, ``num_input_tokens`` / ``num_output_tokens``
(the usage). Beyond Triton, an optional input the model does not declare is left out of
the request rather than refused by the server, so that a model declaring a subset (a mock,
a simple Python model) is served.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from triton_core_openai.errors import client_error, server_error

from triton_core import InferenceRequest, InferenceResponse, ServerAPI, Tensor

VLLM = "vllm"
TENSORRTLLM = "tensorrtllm"
CONVENTIONS = (VLLM, TENSORRTLLM)

#: the inputs that name the "echo" switch (its value is ``not echo``)
_ECHO_INPUTS = ("exclude_input_in_output", "sampling_param_exclude_input_from_output")

#: request fields that are not vLLM sampling parameters (Triton's list, plus ours)
_NOT_SAMPLING = frozenset(
    {
        "_given",
        "model",
        "stream",
        "messages",
        "prompt",
        "echo",
        "store",
        "metadata",
        "response_format",
        "service_tier",
        "stream_options",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "function_call",
        "functions",
        "suffix",
        "max_completion_tokens",
        "max_tokens",
        "logprobs",
        "top_logprobs",
        "best_of",
    }
)


@dataclass(slots=True)
class ModelInfo:
    """What the frontend needs of a served model."""

    name: str
    #: the config's backend ("ensemble" for an ensemble)
    backend: str
    #: how requests are written: VLLM or TENSORRTLLM
    convention: str
    #: declared inputs: name -> datatype (config form, TYPE_*)
    inputs: dict[str, str] = field(default_factory=dict)
    echo_input: str | None = None
    #: ``max_batch_size`` > 0: inputs have a batch dimension
    batching: bool = False


def model_info(server: ServerAPI, name: str, override: str | None) -> ModelInfo:
    config = server.model_config(name)
    backend = config.backend or ("ensemble" if config.platform == "ensemble" else config.platform)
    inputs = {tensor.name: tensor.data_type for tensor in config.input}
    convention = override or (VLLM if backend == VLLM else TENSORRTLLM)
    echo = next((candidate for candidate in _ECHO_INPUTS if candidate in inputs), None)
    return ModelInfo(name, backend, convention, inputs, echo, config.max_batch_size > 0)


def _bytes(value: str) -> np.ndarray:
    return np.array([value.encode()], dtype=object)


class _Inputs:
    """The request's tensors, in the convention's shape, leaving out optional inputs the
    model does not declare."""

    def __init__(self, info: ModelInfo) -> None:
        self.info = info
        self.tensors: dict[str, Tensor] = {}
        self.batched = info.convention == TENSORRTLLM or info.batching  # shape [1, ...]

    def add(self, name: str, datatype: str, values: np.ndarray, required: bool = False) -> None:
        if not required and name not in self.info.inputs:
            return
        data = values.reshape(1, -1) if self.batched else values.reshape(-1)
        self.tensors[name] = Tensor(name, datatype, data)

    def text(self, name: str, value: str, required: bool = False) -> None:
        self.add(name, "BYTES", _bytes(value), required)

    def flag(self, name: str, value: bool) -> None:
        self.add(name, "BOOL", np.array([value], dtype=np.bool_))


def _max_tokens(body: dict[str, Any], default: int) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is not None:
            return int(value)
    return default


def guided_json(body: dict[str, Any]) -> str | None:
    """The JSON schema a named (or required) tool choice forces the output to, as Triton
    passes it to the model's guided decoding."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if not tools or choice is None or choice == "auto" or choice == "none":
        return None
    name = tools[0]["function"]["name"] if choice == "required" else choice["function"]["name"]
    functions = {tool["function"]["name"]: tool["function"] for tool in tools}
    if name not in functions:
        raise client_error(f"Tool '{name}' has not been passed in `tools`.")
    return json.dumps(functions[name]["parameters"] or {})


def generate_request(
    info: ModelInfo,
    prompt: str,
    body: dict[str, Any],
    *,
    chat: bool,
    default_max_tokens: int,
    lora: str | None,
) -> InferenceRequest:
    inputs = _Inputs(info)
    inputs.text("text_input", prompt, required=True)
    inputs.add("stream", "BOOL", np.array([bool(body["stream"])]), required=True)
    echo = body.get("echo")
    max_tokens = _max_tokens(body, default_max_tokens)
    guide = guided_json(body) if chat else None
    if info.convention == VLLM:
        sampling = {
            key: value
            for key, value in body.items()
            if key not in _NOT_SAMPLING and value is not None
        }
        sampling["max_tokens"] = max_tokens
        logprobs = 0
        if chat and body["logprobs"]:
            logprobs = body["top_logprobs"] if body["top_logprobs"] is not None else 1
        elif not chat and body["logprobs"]:
            logprobs = body["logprobs"]
        if logprobs:
            sampling["logprobs"] = logprobs
        if lora is not None:
            sampling["lora_name"] = lora
        if guide is not None:
            sampling["structured_outputs"] = json.dumps({"json": guide})
        inputs.text("sampling_parameters", json.dumps(sampling))
        inputs.flag("return_logprobs", bool(logprobs))
        if info.echo_input is not None:
            inputs.flag(info.echo_input, not echo if echo is not None else True)
    else:
        inputs.add("max_tokens", "INT32", np.array([max_tokens], dtype=np.int32))
        stop = body.get("stop")
        if stop:
            words = [stop] if isinstance(stop, str) else stop
            inputs.add("stop_words", "BYTES", np.array([w.encode() for w in words], dtype=object))
        for name in ("top_p", "frequency_penalty", "presence_penalty", "temperature"):
            if body.get(name) is not None:
                inputs.add(name, "FP32", np.array([body[name]], dtype=np.float32))
        if body.get("seed") is not None:
            inputs.add("seed", "UINT64", np.array([body["seed"]], dtype=np.int64).view(np.uint64))
        if echo is not None and info.echo_input is not None:
            inputs.flag(info.echo_input, not echo)
        if guide is not None:
            inputs.text("guided_decoding_guide_type", "json_schema")
            inputs.text("guided_decoding_guide", guide)
    inputs.flag("return_num_input_tokens", True)
    inputs.flag("return_num_output_tokens", True)
    return InferenceRequest(model_name=info.name, inputs=inputs.tensors)


def embedding_request(info: ModelInfo, body: dict[str, Any]) -> InferenceRequest:
    if info.convention != VLLM:
        raise client_error("TRT-LLM backend and Python backend do not support embedding requests")
    pooling = {} if body["dimensions"] is None else {"dimensions": [body["dimensions"]]}
    document = {"input": body["input"], "pooling_params": pooling}
    inputs = _Inputs(info)
    inputs.text("embedding_request", json.dumps(document), required=True)
    inputs.flag("return_num_input_tokens", True)
    inputs.flag("return_num_output_tokens", True)
    return InferenceRequest(model_name=info.name, inputs=inputs.tensors)


@dataclass(slots=True)
class Output:
    """One response of the model, read."""

    text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    #: vLLM's logprobs: per token, {token id: {"logprob", "rank", "decoded_token"}}
    logprobs: list[dict[str, Any]] | None = None
    final: bool = True


def _first(tensor: Tensor) -> Any:
    data = tensor.data
    if not isinstance(data, np.ndarray) or data.size == 0:
        return None
    return data.reshape(-1)[0]


def _string(tensor: Tensor) -> str:
    value = _first(tensor)
    if value is None:
        return ""
    if isinstance(value, bytes | np.bytes_):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _count(tensor: Tensor) -> int | None:
    value = _first(tensor)
    return int(value) if isinstance(value, np.integer | int) else None


def read(response: InferenceResponse) -> Output:
    if response.error is not None:
        raise server_error(response.error.message)
    output = Output(final=response.final)
    for tensor in response.outputs:
        if tensor.name == "text_output":
            output.text = _string(tensor)
        elif tensor.name == "num_input_tokens":
            output.prompt_tokens = _count(tensor)
        elif tensor.name == "num_output_tokens":
            output.completion_tokens = _count(tensor)
        elif tensor.name == "logprobs":
            text = _string(tensor)
            try:
                parsed = json.loads(text) if text and text != "null" else None
            except ValueError:
                parsed = None
            output.logprobs = parsed if isinstance(parsed, list) else None
    return output


class Usage:
    """Token usage over a request's responses: the prompt's once, the completion's summed."""

    def __init__(self) -> None:
        self.prompt: int | None = None
        self.completion = 0
        self.seen = False

    def add(self, output: Output) -> None:
        if output.prompt_tokens is None or output.completion_tokens is None:
            return
        if not self.seen:
            self.prompt = output.prompt_tokens
            self.seen = True
        self.completion += output.completion_tokens

    def document(self) -> dict[str, int] | None:
        if not self.seen or self.prompt is None:
            return None
        return {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.completion,
            "total_tokens": self.prompt + self.completion,
        }


def _ranked(position: dict[str, Any]) -> list[dict[str, Any]]:
    entries = [entry for entry in position.values() if isinstance(entry, dict)]
    return sorted(entries, key=lambda entry: entry.get("rank", 1 << 62))


def chat_logprobs(raw: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """vLLM's logprobs in chat's shape (``content``: token, logprob, bytes, top_logprobs)."""
    if not raw:
        return None
    content = []
    for position in raw:
        ranked = _ranked(position) if isinstance(position, dict) else []
        if not ranked:
            continue
        top = [
            {
                "token": str(entry.get("decoded_token", "")),
                "logprob": entry.get("logprob"),
                "bytes": list(str(entry.get("decoded_token", "")).encode()),
            }
            for entry in ranked
        ]
        content.append({**top[0], "top_logprobs": top})
    return content or None


def completion_logprobs(raw: list[dict[str, Any]] | None, offset: int = 0) -> dict[str, Any] | None:
    """vLLM's logprobs in the completions' shape (tokens, token_logprobs, text_offset,
    top_logprobs), offsets counted from ``offset``."""
    if not raw:
        return None
    tokens, token_logprobs, offsets, tops = [], [], [], []
    for position in raw:
        ranked = _ranked(position) if isinstance(position, dict) else []
        if not ranked:
            continue
        token = str(ranked[0].get("decoded_token", ""))
        tokens.append(token)
        token_logprobs.append(ranked[0].get("logprob"))
        offsets.append(offset)
        tops.append({str(entry.get("decoded_token", "")): entry.get("logprob") for entry in ranked})
        offset += len(token)
    if not tokens:
        return None
    return {
        "text_offset": offsets,
        "token_logprobs": token_logprobs,
        "tokens": tokens,
        "top_logprobs": tops,
    }
