"""What the SageMaker and Vertex AI endpoints share: plain ASGI answers, health, and infer
with the binary-extension header size taken from a platform MIME type.

Both endpoints are listeners of their own served by the HTTP frontend's protocol (its limits
and timeouts hold), decoding with its codec; what they add is routing.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from triton_core.errors import TritonError, invalid_arg
from triton_core.frontends.http.codec import JsonLimits
from triton_core.frontends.http.decoding import error_body
from triton_core.frontends.http.fast_path import (
    JSON_HEADERS,
    ASGIApp,
    Receive,
    Scope,
    Send,
    infer_failure,
    read_body,
    wire_headers,
)
from triton_core.frontends.http.infer import HttpInfer
from triton_core.frontends.http.restricted import HeaderCheck
from triton_core.frontends.restricted import Restrictions, first_value
from triton_core.frontends.server_api import ServerAPI
from triton_core.threads import OffloadThreads

_CONTENT_TYPE: Final = b"content-type"
_HEADER_LENGTH: Final = b"inference-header-content-length"
_CONTENT_LENGTH: Final = b"content-length"
#: what C's stoi reads of a header size: blanks, a sign, digits (the rest is ignored)
_LEADING_INTEGER: Final = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")
_INT32_MAX: Final = (1 << 31) - 1
#: Triton answers a wrong method on these routes with this body
METHOD_NOT_ALLOWED: Final = error_body("Method Not Allowed")


async def respond(
    send: Send,
    status: int,
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """A whole answer; an error document when ``headers`` is None and ``body`` is not empty."""
    if headers is None:
        headers = list(JSON_HEADERS) if body else []
    headers.append((_CONTENT_LENGTH, str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def raw_path(scope: Scope) -> str:
    """The path as the client sent it (Triton matches routes on it, undecoded)."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else str(scope["path"])


def header(scope: Scope, name: bytes) -> str | None:
    value = first_value(scope["headers"], name)
    return value.decode("latin-1") if isinstance(value, bytes) else None


def checks_of(restrictions: Restrictions) -> dict[str, HeaderCheck]:
    return {group: HeaderCheck(restriction) for group, restriction in restrictions.items()}


def header_size_from_mime(content_type: str | None, mime: str, body_length: int) -> str | None:
    """The JSON header's size a ``<mime><size>`` Content-Type gives, as the codec takes it.

    None: the whole body is JSON. Triton's checks and words (the size is read as C's stoi
    reads it: what follows the digits is ignored).
    """
    if content_type is None:
        return None
    position = content_type.find(mime)
    if position < 0:
        return None
    if position:
        raise invalid_arg(
            f"expect MIME type for binary data starts with '{mime}', got: {content_type}"
        )
    text = content_type[len(mime) :]
    match = _LEADING_INTEGER.match(text)
    if match is None:
        raise invalid_arg(f"Unable to parse inference header size, got: {text}")
    digits = match.group(1)
    if len(digits.lstrip("+-0")) > 10 or abs(int(digits)) > _INT32_MAX:
        raise invalid_arg(
            f"Unable to parse inference header size, value is out of range, got: {text}"
        )
    size = int(digits)
    if size < 0 or size > body_length:
        raise invalid_arg(
            f"inference header size should be in range (0, {body_length}), got: {text}"
        )
    return str(size)


class CloudEndpoint:
    """The parts of one platform endpoint's ASGI app that both platforms share."""

    #: the platform's MIME type for a binary-extension body, before its JSON header size
    binary_mime: str = ""

    def __init__(
        self,
        server: ServerAPI,
        app: ASGIApp,
        *,
        max_input_size: int,
        restrictions: Restrictions,
        json_limits: JsonLimits,
        threads: OffloadThreads | None = None,
    ) -> None:
        self.server = server
        #: the listener's decoding threads (``--sagemaker-thread-count``, ...); None: HTTP's
        self.threads = threads
        #: the v2 falcon app, for the routes both serve alike
        self.app = app
        self.max_input_size = max_input_size
        self.checks = checks_of(restrictions)
        self.json_limits = json_limits
        #: the one infer path, restricted here per platform route (:meth:`refused`)
        self._infer = HttpInfer(
            server, max_input_size=max_input_size, json_limits=json_limits, threads=threads
        )

    async def refused(self, scope: Scope, send: Send, group: str) -> bool:
        """Answer 403 when ``group`` is restricted and the request lacks its header."""
        check = self.checks.get(group)
        if check is None or check.allows(scope["headers"]):
            return False
        await respond(send, 403, check.body)
        return True

    async def health(self, scope: Scope, send: Send, live: bool) -> None:
        """Triton's health answer: 200 or 400, no body; GET only."""
        if await self.refused(scope, send, "health"):
            return
        if scope["method"] != "GET":
            await respond(send, 405, METHOD_NOT_ALLOWED)
            return
        ok = self.server.is_live() if live else await self.server.check_ready()
        await respond(send, 200 if ok else 400)

    async def infer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        model_name: str,
        model_version: int = -1,
        failure: Callable[[TritonError], tuple[int, bytes]] | None = None,
    ) -> None:
        """Infer on ``model_name``, the binary header's size from the platform's MIME type.

        ``failure``: (status, body) of a failed request; None: the v2 endpoint's."""
        if await self.refused(scope, send, "inference"):
            return
        if scope["method"] != "POST":
            await respond(send, 405, METHOD_NOT_ALLOWED)
            return
        since = self._infer.received()
        try:
            body = await read_body(receive, self.max_input_size)
            if body is None:
                return  # the client went away
            size = header_size_from_mime(header(scope, _CONTENT_TYPE), self.binary_mime, len(body))
        except Exception as exc:
            await respond(send, *infer_failure(exc, model_name))
            return
        # these platforms define no compression: only the binary header's size is passed on
        headers = [] if size is None else [(_HEADER_LENGTH, size.encode("latin-1"))]
        version = "" if model_version < 0 else str(model_version)
        target = (model_name, version)
        status, headers_out, parts = await self._infer.answered(
            target, headers, body, since, failure
        )
        data = bytes(parts[0]) if len(parts) == 1 else b"".join(parts)
        wire = self.answer_headers(headers_out) if status == 200 else None
        await respond(send, status, data, wire)

    def answer_headers(self, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
        """The headers of a successful infer answer (the v2 endpoint's, by default)."""
        return wire_headers(headers)

    async def forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        path: str,
        method: str,
        raw_path: str | None = None,
        app: ASGIApp | None = None,
    ) -> None:
        """Answer as the v2 endpoint (or ``app``) answers ``method path``, uncompressed (these
        platforms define no compression); ``raw_path``: ``path`` percent-encoded, if not the
        same."""
        headers = [
            (name, value)
            for name, value in scope["headers"]
            if name not in (b"content-encoding", b"accept-encoding")
        ]
        inner = dict(scope)
        inner.update(
            path=path,
            raw_path=(raw_path or path).encode("latin-1"),
            method=method,
            query_string=b"",
            headers=headers,
        )
        await (app or self.app)(inner, receive, send)
