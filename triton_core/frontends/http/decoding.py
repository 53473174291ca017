"""Decoding and encoding infer bodies for every HTTP way in (the HTTP/1.1 protocol, ASGI,
falcon, the cloud endpoints): the checks before a body is looked at, decoding in a thread
when it is large, and Triton's error document."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

import orjson

from triton_core.errors import invalid_arg
from triton_core.frontends.http.answers import encode_response_parts
from triton_core.frontends.http.codec import (
    DEFAULT_JSON_LIMITS,
    HEADER_LENGTH,
    DecodedRequest,
    JsonLimits,
    decode_raw_request,
    decode_request,
)
from triton_core.threads import OffloadThreads

if TYPE_CHECKING:
    import asyncio

    from triton_core.frontends.server_api import ServerAPI
    from triton_core.types import InferenceResponse

#: bodies larger than this are decoded in a thread
_OFFLOAD_BYTES: Final = 1 << 20
#: infer bodies with more JSON than this, or larger than _OFFLOAD_BYTES, are decoded in a
#: thread: parsing them would stall every client of the loop (HTTP and gRPC alike)
_OFFLOAD_JSON_BYTES: Final = 1 << 16
#: ``--http-thread-count`` when not given: few threads, as a decode holds the GIL much of the
#: time, so more would not go faster and would take turns from the event loop
DEFAULT_DECODE_THREADS: Final = 2


def decode_infer_body(
    server: ServerAPI,
    model_name: str,
    model_version: int,
    body: bytes | memoryview,
    header_length: str | None,
    json_limits: JsonLimits = DEFAULT_JSON_LIMITS,
) -> DecodedRequest:
    """Decode an (uncompressed) infer body.

    ``header_length`` is the ``Inference-Header-Content-Length`` header's value, if any.
    """
    length = _header_length(header_length, len(body))
    if length == 0:
        return decode_raw_request(
            model_name, model_version, body, server.model_config_json(model_name, model_version)
        )

    def model_inputs() -> list[str]:
        return model_input_names(server, model_name, model_version)

    return decode_request(model_name, model_version, body, length, json_limits, model_inputs)


def model_input_names(server: ServerAPI, model_name: str, model_version: int) -> list[str]:
    return [tensor.name for tensor in server.model_metadata(model_name, model_version).inputs]


def decodes_off_loop(body: bytes | memoryview, header_length: str | None) -> bool:
    """Whether decoding ``body`` could stall the event loop, so that a thread should do it."""
    size = len(body)
    if size <= _OFFLOAD_JSON_BYTES:
        return False
    if header_length is None:
        return True
    if not header_length.isdigit() or len(header_length) > 9:  # not a length of this body:
        return True  # decoding refuses it (int() would raise on 4301 digits and more)
    json_size = int(header_length)
    if json_size > _OFFLOAD_JSON_BYTES:
        return True
    if size <= _OFFLOAD_BYTES:
        return False
    if json_size == 0:
        return True  # a raw binary body: its datatype is the model's, BYTES perhaps
    # a large binary part: fixed-size tensors become views at once, whatever their size;
    # only BYTES elements cost work per element (a datatype escaped in JSON may hide one)
    header = body[:json_size] if type(body) is bytes else bytes(body[:json_size])
    return b"BYTES" in header or b"\\" in header


#: the HTTP endpoint's decoding threads (``--http-thread-count``)
_http_decoders = OffloadThreads(DEFAULT_DECODE_THREADS, "http-decode")


def set_decode_threads(count: int) -> OffloadThreads:
    """Size the HTTP endpoint's decoding threads (``--http-thread-count``), before it serves."""
    global _http_decoders
    _http_decoders.shutdown()
    _http_decoders = OffloadThreads(count, "http-decode")
    return _http_decoders


def decode_threads() -> OffloadThreads:
    """The HTTP endpoint's decoding threads."""
    return _http_decoders


def decode_in_thread(
    server: ServerAPI,
    model_name: str,
    model_version: int,
    body: bytes | memoryview,
    header_length: str | None,
    json_limits: JsonLimits,
    threads: OffloadThreads | None = None,
) -> asyncio.Future[DecodedRequest]:
    """:func:`decode_infer_body` in one of a few decoding threads (``threads``, by default
    the HTTP endpoint's), as a future of the loop.

    What it needs of the server is read first, here on the loop: the server is not made to
    be read from other threads while the loop changes it (a model loading).
    """
    length = _header_length(header_length, len(body))
    if length == 0:
        config = server.model_config_json(model_name, model_version)
        decode = functools.partial(decode_raw_request, model_name, model_version, body, config)
    else:
        names = model_input_names(server, model_name, model_version)
        decode = functools.partial(
            decode_request, model_name, model_version, body, length, json_limits, lambda: names
        )
    return (threads or _http_decoders).run(decode)


def encode_infer_answer(
    response: InferenceResponse, decoded: DecodedRequest
) -> tuple[bytes, dict[str, str]]:
    """The answer to a decoded infer body as (body, headers); a failed response raises."""
    parts, headers = encode_infer_answer_parts(response, decoded)
    return b"".join(parts), headers  # one part: that same object, not a copy


def encode_infer_answer_parts(
    response: InferenceResponse, decoded: DecodedRequest
) -> tuple[list[bytes | memoryview], dict[str, str]]:
    """:func:`encode_infer_answer` with the body in parts, not joined (large outputs)."""
    if response.error is not None:
        raise response.error
    request = decoded.request
    if not response.model_name:
        response.model_name = request.model_name
    if not response.id:
        response.id = request.id
    return encode_response_parts(response, decoded.binary_outputs, decoded.default_binary)


def error_body(message: str) -> bytes:
    """Triton's error document."""
    return orjson.dumps({"error": message})


def _header_length(value: str | None, body_length: int) -> int | None:
    """``Inference-Header-Content-Length``: None when absent (the whole body is JSON)."""
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        raise invalid_arg(f"Unable to parse {HEADER_LENGTH}, got: {value}") from None
    if length < 0 or length > body_length:
        raise invalid_arg(
            f"inference header size should be in range (0, {body_length}), got: {value}"
        )
    return length
