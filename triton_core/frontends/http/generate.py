"""The generate extension (PROTOCOL 1.16): ``/generate`` and ``/generate_stream``.

A request is one JSON object. Every key that names a model input (at the top level or
inside ``parameters``) becomes that input: a JSON scalar or (nested) list, converted to the
input's datatype, shaped from the model metadata (fixed dims divide the element count, the
innermost variable dim takes the rest, other variable dims are 1). ``id`` is the request
id; every other key is a request parameter. Both endpoints run the request through
``Server.infer_stream``, so decoupled models are served too:

* ``/generate`` answers one JSON object: ``id`` (when given), ``model_name``,
  ``model_version``, the response parameters and each output as a field (one element: the
  value, else a flat list; BYTES as text). The model must produce exactly one response.
* ``/generate_stream`` answers Server-Sent Events, one ``data: <json>\\n\\n`` per response.
  A request refused before it reaches the model (bad JSON, unknown model, missing inputs) gets
  a plain JSON error with its status. Once the model has it, as in Triton, the first response
  sets the status and every response is an event: an error is ``data: {"error": "..."}``
  (status 200 when a response went out before it, else the error's own status).

The words of the errors are Triton's (2.51): input values of the wrong JSON type and an ``id``
that is not a string are ``Unable to parse ...`` (500, as Triton answers them), a nested
``parameters`` key is ``Converting keyword: 'parameters': ...``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from time import monotonic_ns
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

import numpy as np
import orjson

from triton_core.errors import TritonError, internal, invalid_arg
from triton_core.frontends.common import apply_request_parameters, parse_version
from triton_core.frontends.http import compression
from triton_core.frontends.http.codec import (
    DEFAULT_JSON_LIMITS,
    JsonLimits,
    check_json_depth,
    check_json_elements,
)
from triton_core.frontends.infer import InferPath
from triton_core.frontends.server_api import ServerAPI
from triton_core.frontends.tracing import sent
from triton_core.tensors.dtypes import NUMPY_DTYPES
from triton_core.types import InferenceRequest, Tensor

if TYPE_CHECKING:
    import falcon.asgi

    from triton_core.frontends.header_forwarding import HeaderForwarder
    from triton_core.observability.tracing import Trace
    from triton_core.types import InferenceResponse, ModelMetadata, TensorMetadata

SSE_CONTENT_TYPE: Final = "text/event-stream; charset=utf-8"
_JSON: Final = "application/json"


# ------------------------------------------------------------------------------------------
# request decoding


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _Duplicate(key)
        result[key] = value
    return result


class _Duplicate(Exception):
    pass


def decode_generate_request(
    model_name: str,
    model_version: int,
    body: bytes,
    metadata: ModelMetadata,
    json_limits: JsonLimits = DEFAULT_JSON_LIMITS,
) -> InferenceRequest:
    """A generate request body as an :class:`InferenceRequest` (raises INVALID_ARG)."""
    inputs = {tensor.name: tensor for tensor in metadata.inputs}
    check_json_elements(body, json_limits)
    try:
        doc = json.loads(body or b"{}", object_pairs_hook=_unique_keys)
    except _Duplicate as duplicate:
        key = duplicate.args[0]
        if key in inputs:
            raise invalid_arg(f"input '{key}' already exists in request") from None
        raise invalid_arg(f"key '{key}' appears more than once in the generate request") from None
    except (ValueError, RecursionError) as exc:  # json nests by recursion
        raise invalid_arg(f"failed to parse the generate request JSON: {exc}") from None
    check_json_depth(doc, body, json_limits)
    if not isinstance(doc, dict):
        raise invalid_arg("the generate request must be a JSON object")

    request = InferenceRequest(model_name, {}, model_version)
    parameters: dict[str, Any] = {}
    for key, value, keyword in _fields(doc):
        spec = inputs.get(key)
        if spec is not None:
            if key in request.inputs:
                raise invalid_arg(f"input '{key}' already exists in request")
            request.inputs[key] = _input_tensor(spec, value, model_name)
        elif key == "id" and not keyword:
            if not isinstance(value, str):
                raise internal("Unable to parse 'id': attempt to access JSON non-string as string")
            request.id = value
        else:
            if isinstance(value, dict | list) or value is None:
                within = f"Converting keyword: '{keyword}': " if keyword else ""
                raise invalid_arg(
                    f"{within}parameter '{key}' has invalid type. It should be either 'int', "
                    "'bool', or 'string'."
                )
            if key in parameters:
                raise invalid_arg(f"parameter '{key}' appears more than once")
            parameters[key] = value
    apply_request_parameters(request, parameters)
    return request


def _fields(doc: dict[str, Any]) -> list[tuple[str, Any, str]]:
    """(key, value, keyword) in the request's order; ``parameters``' keys carry its keyword."""
    fields: list[tuple[str, Any, str]] = []
    for key, value in doc.items():
        if key != "parameters":
            fields.append((key, value, ""))
        elif isinstance(value, dict):
            fields.extend((name, item, key) for name, item in value.items())
        else:
            raise internal(
                "Expected JSON object for keyword: 'parameters': attempt to access JSON "
                "non-object as object"
            )
    return fields


#: what each datatype accepts from JSON, and TritonJson's words when it gets something else
_KINDS: Final[dict[str, tuple[str, str]]] = {
    "BYTES": ("string", "attempt to access JSON non-string as string"),
    "BOOL": ("bool", "attempt to access JSON non-boolean as boolean"),
    **{
        name: ("int", "attempt to access JSON non-signed-integer as signed-integer")
        for name in ("INT8", "INT16", "INT32", "INT64")
    },
    **{
        name: ("uint", "attempt to access JSON non-unsigned-integer as unsigned-integer")
        for name in ("UINT8", "UINT16", "UINT32", "UINT64")
    },
    **{
        name: ("float", "attempt to access JSON non-double as double")
        for name in ("FP16", "FP32", "FP64")
    },
}


def _accepts(kind: str, item: Any) -> bool:
    if kind == "string":
        return isinstance(item, str)
    if kind == "bool":
        return isinstance(item, bool)
    if isinstance(item, bool):
        return False
    if kind == "int":
        return isinstance(item, int)
    if kind == "uint":
        return isinstance(item, int) and item >= 0
    return isinstance(item, int | float)


def _flatten(value: Any, out: list[Any]) -> None:
    if isinstance(value, list):
        for item in value:
            _flatten(item, out)
    else:
        out.append(value)


def _input_tensor(spec: TensorMetadata, value: Any, model_name: str) -> Tensor:
    name, datatype = spec.name, spec.datatype
    kind_message = _KINDS.get(datatype)
    if kind_message is None:
        raise invalid_arg(
            f"input '{name}' of model '{model_name}' has datatype {datatype}, which the "
            "generate endpoints cannot fill from JSON"
        )
    kind, message = kind_message
    items: list[Any] = []
    _flatten(value, items)
    for item in items:
        if not _accepts(kind, item):
            # Triton's words, and its status: TritonJson's errors are INTERNAL
            what = "JSON bytes array" if datatype == "BYTES" else "'data'"
            raise internal(
                f"Unable to parse {what}: {message} (input '{name}' of model '{model_name}')"
            )
    if datatype == "BYTES":
        data = np.empty(len(items), dtype=object)
        data[:] = [item.encode("utf-8") for item in items]
    else:
        try:
            data = np.array(items, dtype=NUMPY_DTYPES[datatype])
        except OverflowError:
            raise invalid_arg(
                f"a value of input '{name}' of model '{model_name}' is out of range for {datatype}"
            ) from None
    return Tensor(name, datatype, data.reshape(_shape(spec, len(items), model_name)))


def _shape(spec: TensorMetadata, count: int, model_name: str) -> tuple[int, ...]:
    dims = spec.shape
    fixed = 1
    for dim in dims:
        if dim >= 0:
            fixed *= dim
    variable = [index for index, dim in enumerate(dims) if dim < 0]
    if not variable:
        if count != fixed:
            raise invalid_arg(
                f"input '{spec.name}' of model '{model_name}' needs {fixed} elements for its "
                f"shape {list(dims)}, got {count}"
            )
        return tuple(dims)
    if fixed == 0 or count % fixed:
        raise invalid_arg(
            f"{count} elements do not fit the shape {list(dims)} of input '{spec.name}' of "
            f"model '{model_name}'"
        )
    shape = [dim if dim >= 0 else 1 for dim in dims]
    shape[variable[-1]] = count // fixed
    return tuple(shape)


# ------------------------------------------------------------------------------------------
# response encoding


def _output_value(tensor: Tensor) -> Any:
    data = tensor.data
    if tensor.datatype == "BYTES":
        flat = [
            item.decode("utf-8", errors="replace") if isinstance(item, bytes) else str(item)
            for item in data.reshape(-1).tolist()
        ]
    elif tensor.datatype == "BF16":
        raise invalid_arg(f"output '{tensor.name}' is BF16, which JSON cannot carry")
    else:
        flat = data.reshape(-1).tolist()
    return flat[0] if len(flat) == 1 else flat


def encode_generate_response(response: InferenceResponse) -> bytes:
    """One generate response object (JSON bytes)."""
    doc: dict[str, Any] = {}
    if response.id:
        doc["id"] = response.id
    doc["model_name"] = response.model_name
    doc["model_version"] = str(response.model_version)
    doc.update(response.parameters)
    for tensor in response.outputs:
        doc[tensor.name] = _output_value(tensor)
    return orjson.dumps(doc)


def sse_event(payload: bytes) -> bytes:
    """A Server-Sent Event carrying ``payload``: ``data: <payload>\\n\\n``."""
    return b"data: " + payload + b"\n\n"


def _is_empty_final(response: InferenceResponse) -> bool:
    """A decoupled model's flag-only completion: nothing to show a client."""
    return response.final and not response.outputs and not response.parameters


# ------------------------------------------------------------------------------------------
# the resource


class GenerateResource:
    """``POST /v2/models/{m}[/versions/{v}]/generate`` or ``.../generate_stream``."""

    def __init__(
        self,
        server: ServerAPI,
        max_input_size: int,
        *,
        streaming: bool,
        json_limits: JsonLimits = DEFAULT_JSON_LIMITS,
        header_forwarder: HeaderForwarder | None = None,
    ) -> None:
        self._server = server
        self._max_input_size = max_input_size
        self._streaming = streaming
        self._json_limits = json_limits
        #: forwarding and tracing, as for every inference (frontends/infer.py)
        self._infer = InferPath(server, "HTTP", forwarder=header_forwarder)

    async def on_post(
        self,
        req: falcon.asgi.Request,
        resp: falcon.asgi.Response,
        model_name: str,
        version: str = "",
    ) -> None:
        if getattr(req, "encoded_path", False):
            model_name = unquote(model_name)
        model_version = parse_version(version) if version else -1
        metadata = self._server.model_metadata(model_name, model_version)
        since = self._infer.received()
        body = await self._read_body(req)
        request = decode_generate_request(
            model_name, model_version, body, metadata, self._json_limits
        )

        def headers() -> list[tuple[str, str]]:
            return [(name.lower(), value) for name, value in req.headers.items()]

        trace = self._infer.prepare(request, headers, since, one_answer=False)
        if self._streaming:
            await self._stream(request, resp, trace)
            return
        try:
            await self._generate(request, resp)
        finally:
            if trace is not None:  # falcon writes the answer after this returns
                trace.timestamp("INFER_RESPONSE_COMPLETE")
                sent(trace, "HTTP", monotonic_ns())

    async def _read_body(self, req: falcon.asgi.Request) -> bytes:
        limit = self._max_input_size
        if req.content_length is not None and req.content_length > limit:
            raise compression.too_large("request body", req.content_length, limit)
        body = await req.stream.readall()
        if len(body) > limit:
            raise compression.too_large("request body", None, limit)
        return body

    async def _generate(self, request: InferenceRequest, resp: falcon.asgi.Response) -> None:
        answers = []
        stream = self._server.infer_stream(request)
        try:
            async for response in stream:
                if not _is_empty_final(response):
                    answers.append(response)
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        if len(answers) != 1:
            raise invalid_arg(
                f"generate expects model to produce exactly 1 response, model "
                f"'{request.model_name}' produced {len(answers)}; use generate_stream"
            )
        resp.content_type = _JSON
        resp.data = encode_generate_response(answers[0])

    async def _stream(
        self, request: InferenceRequest, resp: falcon.asgi.Response, trace: Trace | None
    ) -> None:
        stream = self._server.infer_stream(request)
        # The status goes out with the first event: wait for it, so that a request that
        # fails at once gets its error status (and a plain JSON error).
        first: InferenceResponse | TritonError | None
        try:
            first = await stream.__anext__()
        except StopAsyncIteration:
            first = None
        except TritonError as error:
            if not _reached_the_model(request, error):
                await _abandon(stream, trace)
                raise
            first = error  # as in Triton: the status is the error's, the body an event
            resp.status = error.status.http_status
        except BaseException:
            await _abandon(stream, trace)
            raise
        resp.content_type = SSE_CONTENT_TYPE
        resp.set_header("Cache-Control", "no-cache")
        resp.stream = _events(first, stream, trace)


def _reached_the_model(request: InferenceRequest, error: TritonError) -> bool:
    """Whether an error came after the model's scheduler took the request (its queue time is
    set then), not from checks before it nor from a full queue's rejection."""
    return request.queued_ns != 0 and error.failure_reason != "REJECTED"


async def _abandon(stream: AsyncIterator[InferenceResponse], trace: Trace | None) -> None:
    await stream.aclose()  # type: ignore[attr-defined]
    if trace is not None:
        trace.end()


async def _events(
    first: InferenceResponse | TritonError | None,
    stream: AsyncIterator[InferenceResponse],
    trace: Trace | None = None,
) -> AsyncIterator[bytes]:
    """The SSE body; closing it (the client went away) cancels the request.

    A traced request's trace ends with the stream (no send timestamps: events are written
    one by one)."""
    try:
        if first is None:
            return
        if isinstance(first, TritonError):
            raise first
        if not _is_empty_final(first):
            yield sse_event(encode_generate_response(first))
        if first.final:
            return
        async for response in stream:
            if not _is_empty_final(response):
                yield sse_event(encode_generate_response(response))
    except TritonError as error:
        yield sse_event(orjson.dumps({"error": error.message}))
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
        if trace is not None:
            trace.timestamp("INFER_RESPONSE_COMPLETE")
            trace.end()
