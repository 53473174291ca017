"""A mock LLM in the request convention of Triton's vLLM backend, for the OpenAI frontend's
tests: it reads what the frontend sends (``text_input``, ``stream``, ``sampling_parameters``
JSON, ``exclude_input_in_output``, ``return_*``) and answers as the vLLM backend does.

What it writes:
- words from a fixed vocabulary, one per token, ``max_tokens`` of them: the same words for
  the same seed, or for the same prompt at temperature 0; different ones otherwise;
- cut at the first stop string (``stop``), as vLLM does;
- a tool call (llama3 JSON) when the prompt offers tools and the last turn asks for the
  weather, a reply after a tool's answer, and JSON that fits the schema when the frontend
  asks for guided decoding (a named or required tool choice);
- an embedding (``embedding_request``): a deterministic vector from the input.

Streamed (``stream`` true), each token is one response, then an empty final one.
"""

from __future__ import annotations

import hashlib
import json
import random

import numpy as np
import triton_python_backend_utils as pb_utils

VOCABULARY = [
    *("data", "models", "learn", "patterns", "from", "examples", "and", "then", "predict"),
    *("new", "outcomes", "with", "numbers", "training", "weights", "layers", "tokens"),
    *("gradients", "networks", "inference", "features"),
]
TOOL_HEADER = "You have access to these tools"
TOOL_TURN = "<|start_header_id|>tool<|end_header_id|>"
USER_TURN = "<|start_header_id|>user<|end_header_id|>"
WEATHER_CALL = {
    "name": "get_current_weather",
    "parameters": {"city": "Dallas", "state": "TX", "unit": "fahrenheit"},
}
KNOWN_VALUES = {"city": "Dallas", "state": "TX", "unit": "fahrenheit", "num_days": 5}


def _input(request, name, default=None):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    value = tensor.as_numpy().reshape(-1)[0]
    return value.decode() if isinstance(value, bytes) else value


def _fill(schema):
    """A JSON value that fits ``schema`` (the weather tools' arguments)."""
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: KNOWN_VALUES.get(name, _fill(spec)) for name, spec in properties.items()}
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.0
    if kind == "boolean":
        return True
    if "enum" in schema:
        return schema["enum"][0]
    return "x"


def _pieces(text, size=8):
    return [text[start : start + size] for start in range(0, len(text), size)]


def _words(prompt, sampling):
    seed = sampling.get("seed")
    if seed is not None:
        rng = random.Random(int(seed))
    elif sampling.get("temperature", 1.0) == 0:
        rng = random.Random(hashlib.sha256(prompt.encode()).digest())
    else:
        rng = random.Random()
    count = int(sampling.get("max_tokens", 16))
    return [" " + rng.choice(VOCABULARY) for _ in range(count)]


def _generate(prompt, sampling):
    """The tokens of the answer."""
    structured = sampling.get("structured_outputs")
    if structured:
        schema = json.loads(json.loads(structured)["json"])
        return _pieces(json.dumps(_fill(schema)))
    if TOOL_HEADER in prompt:
        if prompt.rfind(TOOL_TURN) > prompt.rfind(USER_TURN):
            return [" The", " weather", " in", " Dallas", " is", " 98", " degrees."]
        if "weather" in prompt[prompt.rfind(USER_TURN) :].lower():
            return _pieces(json.dumps(WEATHER_CALL))
    tokens = _words(prompt, sampling)
    stops = sampling.get("stop") or []
    stops = [stops] if isinstance(stops, str) else stops
    text, kept = "", []
    for token in tokens:
        text += token
        cut = min((text.find(stop) for stop in stops if stop and stop in text), default=-1)
        if cut >= 0:
            kept.append(token[: len(token) - (len(text) - cut)])
            break
        kept.append(token)
    return [token for token in kept if token]


def _logprobs(tokens, count):
    return [
        {
            str(rank): {
                "logprob": -0.5 * rank,
                "rank": rank,
                "decoded_token": token if rank == 1 else f"alt{rank}",
            }
            for rank in range(1, count + 1)
        }
        for token in tokens
    ]


def _response(text, input_tokens, output_tokens, logprobs=None):
    outputs = [
        pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object)),
        pb_utils.Tensor("num_input_tokens", np.array([input_tokens], dtype=np.uint32)),
        pb_utils.Tensor("num_output_tokens", np.array([output_tokens], dtype=np.uint32)),
    ]
    if logprobs is not None:
        document = json.dumps(logprobs).encode()
        outputs.append(pb_utils.Tensor("logprobs", np.array([document], dtype=object)))
    return pb_utils.InferenceResponse(outputs)


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                self._answer(request, sender)
            except Exception as error:  # the frontend reports it
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error))),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
        return None

    def _answer(self, request, sender):
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        embedding = _input(request, "embedding_request")
        if embedding is not None:
            document = json.loads(embedding)
            text = document["input"]
            text = text if isinstance(text, str) else " ".join(map(str, text))
            rng = random.Random(hashlib.sha256(text.encode()).digest())
            vector = [round(rng.uniform(-1, 1), 6) for _ in range(8)]
            count = len(text.split())
            sender.send(_response(json.dumps(vector), count, 0), flags=final)
            return
        prompt = _input(request, "text_input", "")
        sampling = json.loads(_input(request, "sampling_parameters", "{}"))
        exclude_input = bool(_input(request, "exclude_input_in_output", True))
        want_logprobs = bool(_input(request, "return_logprobs", False))
        tokens = _generate(prompt, sampling)
        prompt_tokens = max(1, len(prompt.split()))
        logprob_count = int(sampling.get("logprobs", 1)) if want_logprobs else 0
        if not bool(_input(request, "stream", False)):
            text = "".join(tokens) if exclude_input else prompt + "".join(tokens)
            logprobs = _logprobs(tokens, logprob_count) if logprob_count else None
            sender.send(_response(text, prompt_tokens, len(tokens), logprobs), flags=final)
            return
        for index, token in enumerate(tokens):
            if request.is_cancelled():
                break
            text = token if exclude_input or index else prompt + token
            logprobs = _logprobs([token], logprob_count) if logprob_count else None
            sender.send(_response(text, prompt_tokens, 1, logprobs))
        sender.send(_response("", prompt_tokens, 0), flags=final)
