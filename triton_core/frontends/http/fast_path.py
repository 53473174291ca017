"""``POST /v2/models/<name>[/versions/<n>]/infer`` answered straight from ASGI, ahead of falcon.

falcon's request and response objects, routing and error handling cost more per call than
the infer codec itself, and infer is the one route on the hot path. This layer answers the
plain case with the same functions the falcon resource uses (:func:`~.app.infer_body`);
everything else goes to the falcon app untouched: other routes and methods, compressed
bodies or answers, chunked bodies, percent-encoded names, bodies over the size limit. Both
paths answer alike, and the HTTP tests run against both.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from time import monotonic_ns
from typing import Any, Final

from triton_core.errors import TritonError
from triton_core.frontends.header_forwarding import HeaderForwarder
from triton_core.frontends.http import compression
from triton_core.frontends.http.app import (
    check_not_decoupled,
    error_body,
    infer_body,
)
from triton_core.frontends.http.codec import DEFAULT_JSON_LIMITS, JsonLimits
from triton_core.frontends.http.restricted import HeaderCheck
from triton_core.frontends.restricted import Restrictions
from triton_core.frontends.server_api import ServerAPI
from triton_core.frontends.tracing import sent, start_http_trace, tracer_of

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_PREFIX: Final = "/v2/models/"
_SUFFIX: Final = "/infer"
#: the headers of an error answer (its length is added)
JSON_HEADERS: Final = [(b"content-type", b"application/json")]
#: answer headers as written, by (name, value): an infer answer's are the same every time
_HEADER_LINES: dict[tuple[str, str], tuple[bytes, bytes]] = {}
_HEADER_LINES_MAX: Final = 1024


def wire_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """``{"Content-Type": ...}`` as a new list of lowercase ``(name, value)`` bytes pairs."""
    pairs = []
    for item in headers.items():
        pair = _HEADER_LINES.get(item)
        if pair is None:
            if len(_HEADER_LINES) >= _HEADER_LINES_MAX:
                _HEADER_LINES.clear()
            pair = _HEADER_LINES[item] = (item[0].lower().encode(), item[1].encode("latin-1"))
        pairs.append(pair)
    return pairs


def header_lines(pairs: Iterable[tuple[bytes, bytes]]) -> bytes:
    """``(name, value)`` pairs as the header lines of an answer, ``name: value\\r\\n`` each."""
    return b"".join(name + b": " + value + b"\r\n" for name, value in pairs)


#: header blocks as written, by the answer's headers: an infer answer's repeat
_HEADER_BLOCKS: dict[tuple[tuple[str, str], ...], bytes] = {}


def header_block(headers: dict[str, str]) -> bytes:
    """``{"Content-Type": ...}`` as the header lines of an answer, ``name: value\\r\\n`` each."""
    key = tuple(headers.items())
    block = _HEADER_BLOCKS.get(key)
    if block is None:
        if len(_HEADER_BLOCKS) >= _HEADER_LINES_MAX:
            _HEADER_BLOCKS.clear()
        block = _HEADER_BLOCKS[key] = header_lines(wire_headers(headers))
    return block


#: the header lines of an error answer (its length is added)
JSON_HEADER_BLOCK: Final = header_lines(JSON_HEADERS)


def infer_failure(exc: BaseException, model_name: str) -> tuple[int, bytes]:
    """(status, Triton's error document) of a failed infer; an unexpected error is logged."""
    if isinstance(exc, TritonError):
        return exc.status.http_status, error_body(exc.message)
    logger.error("unexpected error handling POST %s infer", model_name, exc_info=exc)
    return 500, error_body(str(exc) or type(exc).__name__)


def infer_target(path: str) -> tuple[str, int] | None:
    """(model name, version) of an infer path; -1 when it names no version; None otherwise."""
    if not path.startswith(_PREFIX) or not path.endswith(_SUFFIX):
        return None
    parts = path[len(_PREFIX) : -len(_SUFFIX)].split("/")
    if not parts[0]:
        return None
    if len(parts) == 1:
        return parts[0], -1
    version = parts[2] if len(parts) == 3 and parts[1] == "versions" else ""
    # a version past int64 goes the slow way, which answers Triton's message for it
    if version.isascii() and version.isdigit() and len(version) < 19:
        return parts[0], int(version)
    return None


#: the request headers that decide whether a request stays on the fast path, and how it is
#: answered (``connection``: whether an HTTP/1.0 client asked to keep the connection)
DECIDING_HEADERS: Final = frozenset(
    (
        b"content-length",
        b"inference-header-content-length",
        b"accept-encoding",
        b"content-encoding",
        b"transfer-encoding",
        b"connection",
    )
)


def plain_infer_headers(
    headers: list[tuple[bytes, bytes]], max_input_size: int
) -> tuple[int, str | None] | None:
    """(body length, Inference-Header-Content-Length) when nothing needs falcon, else None."""
    deciding = {}
    for raw_name, value in headers:
        name = raw_name.lower()  # ASGI servers send lowercase names; not every client does
        if name in DECIDING_HEADERS:
            deciding[name] = value
    return plain_infer_request(deciding, max_input_size)


def plain_infer_request(
    deciding: dict[bytes, bytes], max_input_size: int
) -> tuple[int, str | None] | None:
    """:func:`plain_infer_headers` from the :data:`DECIDING_HEADERS` a request has, by name."""
    if b"content-encoding" in deciding or b"transfer-encoding" in deciding:
        return None
    accept_encoding = deciding.get(b"accept-encoding")
    if accept_encoding:
        text = accept_encoding.decode("latin-1")
        if compression.response_encoding(text) != compression.IDENTITY:
            return None
    length = deciding.get(b"content-length")
    if length is None or not length.isdigit():
        return None
    size = int(length)
    if size > max_input_size:
        return None  # falcon words the size error
    header_length = deciding.get(b"inference-header-content-length")
    return size, None if header_length is None else header_length.decode("latin-1")


class InferFastPath:
    """An ASGI app: the plain infer case here, the rest to ``app`` (the falcon app).

    ``inference_check``: the header the ``inference`` group requires, when restricted; a
    request without it goes to ``app``, whose middleware answers 403.
    """

    def __init__(
        self,
        app: ASGIApp,
        server: ServerAPI,
        max_input_size: int,
        inference_check: HeaderCheck | None = None,
        json_limits: JsonLimits = DEFAULT_JSON_LIMITS,
    ) -> None:
        self.app = app
        self.server = server
        self.max_input_size = max_input_size
        self.inference_check = inference_check
        self.json_limits = json_limits
        self.tracer = tracer_of(server)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and b"%" not in scope.get("raw_path", b"")
        ):
            target = infer_target(scope["path"])
            if target is not None:
                headers = scope["headers"]
                if not isinstance(headers, list):  # ASGI allows any iterables: keep them for falcon
                    headers = scope["headers"] = [tuple(pair) for pair in headers]
                plain = plain_infer_headers(headers, self.max_input_size)
                check = self.inference_check
                if plain is not None and (check is None or check.allows(headers)):
                    await self._infer(target, plain, receive, send, headers)
                    return
        await self.app(scope, receive, send)

    async def _infer(
        self,
        target: tuple[str, int],
        plain: tuple[int, str | None],
        receive: Receive,
        send: Send,
        headers_in: list[tuple[bytes, bytes]],
    ) -> None:
        model_name, model_version = target
        header_length = plain[1]
        tracing_since = monotonic_ns() if self.tracer.enabled else 0
        trace = None
        try:
            check_not_decoupled(self.server, model_name, model_version)
            body = await _read_body(receive)
            if body is None:
                return  # the client went away
            if tracing_since:
                trace = start_http_trace(self.tracer, model_name, headers_in, tracing_since)
            data, headers = await infer_body(
                self.server,
                model_name,
                model_version,
                body,
                header_length,
                self.json_limits,
                trace,
            )
            status, headers_out = 200, wire_headers(headers)
        except Exception as exc:
            status, data = infer_failure(exc, model_name)
            headers_out = list(JSON_HEADERS)
        headers_out.append((b"content-length", str(len(data)).encode()))
        send_start = monotonic_ns() if trace is not None else 0
        await send({"type": "http.response.start", "status": status, "headers": headers_out})
        await send({"type": "http.response.body", "body": data})
        if trace is not None:
            sent(trace, "HTTP", send_start)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole body, or None when the client disconnects first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        if chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    if len(chunks) == 1:
        return chunks[0]
    return b"".join(chunks)


def create_asgi_app(
    server: ServerAPI,
    *,
    max_input_size: int = 1 << 26,
    restrictions: Restrictions | None = None,
    json_limits: JsonLimits = DEFAULT_JSON_LIMITS,
    header_forwarder: HeaderForwarder | None = None,
) -> ASGIApp:
    """The HTTP frontend as served: the falcon app behind the infer fast path.

    With a ``header_forwarder`` (``--http-header-forward-pattern``) the falcon app answers
    infer too: the fast paths never look at headers beyond the few that decide them.
    """
    from triton_core.frontends.http.app import create_app

    app = create_app(
        server,
        max_input_size=max_input_size,
        restrictions=restrictions,
        json_limits=json_limits,
        header_forwarder=header_forwarder,
    )
    if header_forwarder is not None:
        return app
    inference = (restrictions or {}).get("inference")
    check = None if inference is None else HeaderCheck(inference)
    return InferFastPath(
        app, server, max_input_size, inference_check=check, json_limits=json_limits
    )
