"""The HTTP endpoint's ASGI app: ``POST .../infer`` through the one infer path
(:class:`~.infer.HttpInfer`), everything else through the falcon app (:mod:`.app`), and the
header helpers both share.

The HTTP/1.1 protocol (:mod:`.protocol`) answers infer requests itself from its parser's
callbacks, with the same :class:`~.infer.HttpInfer`; :class:`InferRoute` is the way in for
any other ASGI server (Ray Serve's proxy) and for the cloud endpoints' v2 routes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any, Final

from triton_core.errors import TritonError
from triton_core.frontends.http import compression
from triton_core.frontends.http.codec import DEFAULT_JSON_LIMITS, JsonLimits
from triton_core.frontends.http.decoding import error_body
from triton_core.frontends.http.infer import JSON_CONTENT, HttpInfer, infer_target

if TYPE_CHECKING:
    from triton_core.frontends.header_forwarding import HeaderForwarder
    from triton_core.frontends.restricted import Restrictions
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.threads import OffloadThreads

logger = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

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


class InferRoute:
    """An ASGI app: every ``POST .../infer`` through :class:`~.infer.HttpInfer`, whatever its
    body, encoding or headers; every other request to ``app`` (the falcon app)."""

    def __init__(self, app: ASGIApp, infer: HttpInfer) -> None:
        self.app = app
        self.infer = infer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            raw = scope.get("raw_path") or scope["path"].encode("utf-8")
            target = infer_target(raw.partition(b"?")[0].decode("latin-1"))
            if target is not None:
                await self._infer(target, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _infer(
        self, target: tuple[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        infer = self.infer
        since = infer.received()
        headers = [(bytes(name).lower(), bytes(value)) for name, value in scope["headers"]]
        try:
            _check_length(headers, infer.max_input_size)
            body = await read_body(receive, infer.max_input_size)
        except TritonError as error:
            status, body_out = error.status.http_status, error_body(error.message)
            await _send(send, status, JSON_CONTENT, [body_out])
            return
        if body is None:
            return  # the client went away
        status, headers_out, parts = await infer.answered(target, headers, body, since)
        await _send(send, status, headers_out, parts)


def _check_length(headers: list[tuple[bytes, bytes]], limit: int) -> None:
    """Refuse a declared body over ``limit`` before reading it, naming its size."""
    for name, value in headers:
        if name != b"content-length" or not value.isdigit():
            continue
        size = int(value) if len(value) < 19 else None  # no int() of a client's 4000 digits
        if size is None or size > limit:
            raise compression.too_large("request body", size, limit)


async def _send(send: Send, status: int, headers: dict[str, str], parts: list[Any]) -> None:
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    wire = wire_headers(headers)
    wire.append((b"content-length", str(len(data)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": wire})
    await send({"type": "http.response.body", "body": bytes(data)})


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None when the client disconnects first; a body over ``limit``
    is refused as it arrives."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise compression.too_large("request body", None, limit)
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
    threads: OffloadThreads | None = None,
) -> InferRoute:
    """The HTTP frontend as served: infer through :class:`~.infer.HttpInfer`, the rest
    through the falcon app."""
    from triton_core.frontends.http.app import create_app

    app = create_app(
        server,
        max_input_size=max_input_size,
        restrictions=restrictions,
        json_limits=json_limits,
    )
    infer = HttpInfer(
        server,
        max_input_size=max_input_size,
        json_limits=json_limits,
        restrictions=restrictions,
        header_forwarder=header_forwarder,
        threads=threads,
    )
    return InferRoute(app, infer)
