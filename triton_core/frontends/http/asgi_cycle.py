"""One HTTP/1.1 request answered by an ASGI app (every request the infer cycle does not take).

The protocol builds the scope from the parser's callbacks and hands the body over as it
arrives; the app reads it with ``receive`` and answers with ``send``, held to ASGI's rules:
one ``http.response.start``, then body messages until ``more_body`` is false; an answer
without a Content-Length is sent chunked; a HEAD answer's body is dropped. An app that
raises before it starts its answer gets a 500 sent for it; after, the connection closes.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, MutableMapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

import httptools

from triton_core.frontends.http.wire import CONTINUE, STATUS_LINE, CorkedTransport, FlowControl

if TYPE_CHECKING:
    from triton_core.frontends.http.fast_path import ASGIApp, Scope

logger = logging.getLogger(__name__)

#: body bytes read ahead of the app; past them the connection reads no more until it asks
HIGH_WATER: Final = 1 << 16

# what an answer's header names and values must not hold (no header or answer splitting)
_BAD_NAME: Final = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_BAD_VALUE: Final = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")

_INTERNAL_ERROR: Final = b"Internal Server Error"
_ERROR_HEADERS: Final = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"%d" % len(_INTERNAL_ERROR)),
    (b"connection", b"close"),
]


def http_scope(
    method: bytes,
    url: bytes,
    http_version: str,
    headers: list[tuple[bytes, bytes]],
    connection: tuple[str, Any, Any],
) -> Scope:
    """The ASGI scope of a request; ``connection``: (scheme, client, server) addresses.

    Raises on a URL that is no request target or a path that is not ASCII (a 400).
    """
    parsed = httptools.parse_url(url)
    raw_path = parsed.path
    path = raw_path.decode("ascii")
    scheme, client, server = connection
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": http_version,
        "method": method.decode("ascii"),
        "scheme": scheme,
        "path": unquote(path) if "%" in path else path,
        "raw_path": raw_path,
        "query_string": parsed.query or b"",
        "root_path": "",
        "headers": headers,
        "client": client,
        "server": server,
    }


def _nothing() -> None:
    pass


class AsgiCycle:
    """One request and its answer through an ASGI app.

    ``on_response`` is called once the answer is complete (the connection goes on to its
    next request); ``default_lines`` are header lines every answer carries (date, server).
    """

    __slots__ = (
        "_buffered",
        "_chunked",
        "_chunks",
        "_delivered",
        "_expected_length",
        "_flow",
        "_transport",
        "_waiter",
        "default_lines",
        "disconnected",
        "keep_alive",
        "more_body",
        "on_response",
        "response_complete",
        "response_started",
        "scope",
        "waiting_for_continue",
    )

    def __init__(
        self,
        scope: Scope,
        transport: CorkedTransport,
        flow: FlowControl,
        default_lines: bytes,
        on_response: Callable[[], None],
        expect_100_continue: bool,
        keep_alive: bool,
    ) -> None:
        self.scope = scope
        self._transport = transport
        self._flow = flow
        self.default_lines = default_lines
        self.on_response = on_response
        self.waiting_for_continue = expect_100_continue
        self.keep_alive = keep_alive
        self.disconnected = False
        # the request body: chunks not yet received by the app, their bytes
        self._chunks: list[bytes] = []
        self._buffered = 0
        self.more_body = True
        #: the last http.request message (more_body false) was received
        self._delivered = False
        self._waiter: asyncio.Future[None] | None = None
        self.response_started = False
        self.response_complete = False
        self._chunked: bool | None = None
        self._expected_length = 0

    # the protocol's side

    def add_body(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > HIGH_WATER:
            self._flow.pause_reading()
        self._wake()

    def body_complete(self) -> None:
        self.more_body = False
        self._wake()

    def lost(self) -> None:
        """The connection closed or was refused: the app's next receive says so."""
        self.disconnected = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run(self, app: ASGIApp) -> None:
        """Call the app; answer 500 for it when it fails before it starts an answer."""
        try:
            await app(self.scope, self.receive, self.send)
        except asyncio.CancelledError:
            self._transport.abort()  # stopped past its deadline: nothing more goes out
            raise
        except Exception as exc:
            logger.error("Exception in ASGI application", exc_info=exc)
            self._fail()
        else:
            if not self.response_complete and not self.disconnected:
                logger.error("the ASGI app returned without completing its answer")
                self._fail()
        finally:
            self.on_response = _nothing

    def _fail(self) -> None:
        if self.response_started or self.disconnected:
            self._transport.close()
            return
        self._start(500, _ERROR_HEADERS)
        self._body(_INTERNAL_ERROR, False)

    # the app's side

    async def receive(self) -> dict[str, Any]:
        if self.waiting_for_continue:
            self.waiting_for_continue = False
            if not self._transport.is_closing():
                self._transport.write(CONTINUE)
        while not self._has_message():
            if self.more_body:
                self._flow.resume_reading()  # the app waits for the body: read it
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        chunks = self._chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._chunks = []
        self._buffered = 0
        self._delivered = not self.more_body
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    def _has_message(self) -> bool:
        if self.disconnected or self.response_complete:
            return True
        return not self._delivered and (bool(self._chunks) or not self.more_body)

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self._flow.write_paused and not self.disconnected:
            await self._flow.drain()  # the client does not take its answers yet
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected ASGI message 'http.response.start', got '{kind}'")
            self._start(message["status"], message.get("headers", ()))
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"expected ASGI message 'http.response.body', got '{kind}'")
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"ASGI message '{kind}' sent after the answer was complete")

    def _start(self, status: int, headers: Iterable[tuple[bytes, bytes]]) -> None:
        status_line = STATUS_LINE.get(status)
        if status_line is None:
            raise RuntimeError(f"invalid HTTP status {status!r}")
        self.response_started = True
        self.waiting_for_continue = False
        lines = [status_line, self.default_lines]
        for name, value in headers:
            lines.append(self._header(name.lower(), value))
        if not self.keep_alive and b"connection: close\r\n" not in lines:
            lines.append(b"connection: close\r\n")
        bodiless = self.scope["method"] == "HEAD" or status in (204, 304)
        if self._chunked is None and not bodiless:
            self._chunked = True  # no length given: the body's end is its last chunk
            lines.append(b"transfer-encoding: chunked\r\n")
        lines.append(b"\r\n")
        self._transport.write(b"".join(lines))

    def _header(self, name: bytes, value: bytes) -> bytes:
        """One header line of the answer, noting what it says of the body and connection."""
        if _BAD_NAME.search(name) or _BAD_VALUE.search(value):
            raise RuntimeError(f"invalid HTTP header {name!r}: {value!r}")
        if name == b"content-length" and self._chunked is None:
            if not value.isdigit():
                raise RuntimeError(f"invalid Content-Length {value!r}")
            self._expected_length = int(value)
            self._chunked = False
        elif name == b"transfer-encoding" and value.lower() == b"chunked":
            self._expected_length = 0
            self._chunked = True
        elif name == b"connection" and b"close" in (t.strip() for t in value.lower().split(b",")):
            self.keep_alive = False
            return b"connection: close\r\n"
        return name + b": " + value + b"\r\n"

    def _body(self, body: bytes, more_body: bool) -> None:
        if self.scope["method"] == "HEAD":
            self._expected_length = 0  # a HEAD answer has headers only
        elif self._chunked:
            chunk = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
            self._transport.write(chunk if more_body else chunk + b"0\r\n\r\n")
        else:
            if len(body) > self._expected_length:
                raise RuntimeError("the answer's body is longer than its Content-Length")
            self._expected_length -= len(body)
            self._transport.write(body)
        if more_body:
            return
        if self._expected_length:
            raise RuntimeError("the answer's body is shorter than its Content-Length")
        self.response_complete = True
        self._wake()
        if not self.keep_alive:
            self._transport.close()
        self.on_response()
