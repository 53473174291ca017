"""The HTTP/1.1 protocol the frontend is served with: uvicorn's, with two changes.

- The writes of one loop turn leave in one system call. uvicorn writes an answer's status
  line and headers, then its body: two system calls, and on loopback two wake-ups of the
  client, for every answer.
- A plain ``POST .../infer`` (what :class:`~.fast_path.InferFastPath` answers) is decoded,
  scheduled and answered from the parser's and the response future's callbacks, without
  uvicorn's task, ASGI messages and events per request (about 115 us of a round trip on
  the CI class of machine, bench/http_stack.py). Everything else goes to the ASGI app.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from triton_core.frontends.http.app import (
    check_not_decoupled,
    decode_infer_body,
    encode_infer_answer,
)
from triton_core.frontends.http.fast_path import (
    DECIDING_HEADERS,
    JSON_HEADER_BLOCK,
    InferFastPath,
    header_block,
    header_lines,
    infer_failure,
    infer_target,
    plain_infer_request,
)

if TYPE_CHECKING:
    from triton_core.types import InferenceResponse

_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"


class CorkedTransport:
    """A transport whose writes leave together at the end of the loop turn they were made in."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def write_whole(self, data: bytes) -> None:
        """Send a whole answer at once: nothing else of this turn needs to go with it."""
        if self._pending:
            self._pending.append(data)
            self.flush()
        elif not self._transport.is_closing():
            self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what was written so far (called at the end of the loop turn)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


#: request targets by raw URL (a client sends the same few again and again)
_TARGETS: dict[bytes, tuple[str, int] | None] = {}
_TARGETS_MAX: Final = 1024


def _url_target(url: bytes) -> tuple[str, int] | None:
    """(model, version) of a plain infer URL, or None: from a small cache by raw URL."""
    try:
        return _TARGETS[url]
    except KeyError:
        pass
    path = httptools.parse_url(url).path
    target = None if b"%" in path else infer_target(path.decode("ascii", "replace"))
    if len(_TARGETS) >= _TARGETS_MAX:
        _TARGETS.clear()
    _TARGETS[url] = target
    return target


#: (uvicorn's default headers, as header lines): uvicorn makes a new list once a second
_default_lines: tuple[object, bytes] = (None, b"")


def default_header_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers (date, server) as header lines, joined once per list."""
    global _default_lines
    cached, lines = _default_lines
    if cached is not headers:
        lines = header_lines(headers)
        _default_lines = (headers, lines)
    return lines


class _InferCycle:
    """One plain ``POST .../infer`` answered by :class:`HttpProtocol` itself.

    Scheduled from the parser's callbacks and answered from the response future's
    callback: no task, no ASGI messages, no falcon. It stands where uvicorn keeps its
    request cycle, so keep-alive, pipelining and shutdown work as for every other request.
    """

    __slots__ = (
        "_body",
        "_body_complete",
        "_expect_100_continue",
        "_future",
        "_header_length",
        "_protocol",
        "_started",
        "_target",
        "disconnected",
        "keep_alive",
        "response_complete",
    )

    def __init__(
        self,
        protocol: HttpProtocol,
        target: tuple[str, int],
        header_length: str | None,
        expect_100_continue: bool,
        keep_alive: bool,
    ) -> None:
        self._protocol = protocol
        self._target = target
        self._header_length = header_length
        self._expect_100_continue = expect_100_continue
        self.keep_alive = keep_alive
        self._body: list[bytes] = []
        self._body_complete = False
        self._started = False
        self._future: asyncio.Future[InferenceResponse] | None = None
        self.disconnected = False
        self.response_complete = False

    def start(self) -> None:
        """Its turn on the connection has come (at once, or after pipelined ones before it)."""
        self._started = True
        if self._body_complete:
            self._submit()
        elif self._expect_100_continue:
            self._protocol.transport.write(_CONTINUE)

    def add_body(self, data: bytes) -> None:
        self._body.append(data)

    def body_complete(self) -> None:
        self._body_complete = True
        if self._started:
            self._submit()

    def lost(self) -> None:
        """The connection closed before the answer: the work is not wanted any more."""
        self.disconnected = True
        if self._future is not None:
            self._future.cancel()

    def _submit(self) -> None:
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []
        server = self._protocol.fast_path.server
        model_name, model_version = self._target
        try:
            check_not_decoupled(server, model_name, model_version)
            decoded = decode_infer_body(
                server, model_name, model_version, body, self._header_length
            )
            future = server.submit(decoded.request)
        except Exception as exc:
            self._fail(exc)
            return
        self._future = future

        def answer(done: asyncio.Future[InferenceResponse]) -> None:
            if done.cancelled() or self.disconnected:
                return
            try:
                data, headers = encode_infer_answer(done.result(), decoded)
            except Exception as exc:
                self._fail(exc)
                return
            self._respond(200, header_block(headers), data)

        future.add_done_callback(answer)

    def _fail(self, exc: BaseException) -> None:
        status, data = infer_failure(exc, self._target[0])
        self._respond(status, JSON_HEADER_BLOCK, data)

    def _respond(self, status: int, headers: bytes, data: bytes) -> None:
        protocol = self._protocol
        answer = (
            STATUS_LINE[status],
            default_header_lines(protocol.server_state.default_headers),
            headers,
            b"content-length: %d\r\n" % len(data),
            b"\r\n" if self.keep_alive else b"connection: close\r\n\r\n",
            data,
        )
        protocol.transport.write_whole(b"".join(answer))
        self.response_complete = True
        if not self.keep_alive:
            protocol.transport.close()
        protocol.on_response_complete()


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol, corked, answering plain infer requests itself.

    When the app it serves is an :class:`~.fast_path.InferFastPath`, the requests that path
    would answer are answered here from the parser's callbacks (:class:`_InferCycle`); the
    rest take uvicorn's ASGI cycle to the app as before. The headers that decide between the
    two are noted as they are parsed, and uvicorn's ASGI scope is made only for the rest. The
    keep-alive timeout is one timer per idle spell rather than one armed and cancelled per
    request.
    """

    transport: CorkedTransport  # type: ignore[assignment]
    fast_path: InferFastPath | None
    #: loop time the connection went idle (its last answer); None while a request is open
    _idle_since: float | None = None
    #: the request's :data:`~.fast_path.DECIDING_HEADERS`, by lowercase name
    _deciding: dict[bytes, bytes]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        super().connection_made(CorkedTransport(transport, loop))  # type: ignore[arg-type]
        app = self.config.app
        self.fast_path = app if isinstance(app, InferFastPath) else None

    def on_message_begin(self) -> None:
        # uvicorn's ASGI scope is made in on_headers_complete, for requests that need it
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self._deciding = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        self.headers.append((name, value))
        if name in DECIDING_HEADERS:
            self._deciding[name] = value
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True

    def on_headers_complete(self) -> None:
        cycle = self._infer_cycle()
        if cycle is None:
            self._make_scope()
            super().on_headers_complete()
            return
        existing = self.cycle
        self.cycle = cycle  # type: ignore[assignment]
        if existing is None or existing.response_complete:
            cycle.start()
        else:  # pipelined behind a request still being answered: wait, as uvicorn does
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))  # type: ignore[arg-type]

    def _make_scope(self) -> None:
        """uvicorn's ASGI scope for this request, as its on_message_begin makes it."""
        url, headers, expect_100_continue = self.url, self.headers, self.expect_100_continue
        super().on_message_begin()
        self.url, self.expect_100_continue = url, expect_100_continue
        self.headers.extend(headers)  # the scope's list

    def _infer_cycle(self) -> _InferCycle | None:
        """The cycle for a request the fast path answers; None for everything else."""
        fast_path = self.fast_path
        if fast_path is None or self.parser.get_method() != b"POST":
            return None
        if self.parser.should_upgrade():
            return None
        target = _url_target(self.url)
        if target is None:
            return None
        plain = plain_infer_request(self._deciding, fast_path.max_input_size)
        if plain is None:
            return None
        check = fast_path.inference_check
        if check is not None and not check.allows(self.headers):
            return None  # the ASGI path answers 403
        keep_alive = self.parser.should_keep_alive()
        if keep_alive and b"connection" in self._deciding:
            # HTTP/1.0 keeps a connection only when asked to; uvicorn closes those anyway
            keep_alive = self.parser.get_http_version() != "1.0"
        return _InferCycle(self, target, plain[1], self.expect_100_continue, keep_alive)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        if isinstance(cycle, _InferCycle):
            cycle.start()
        else:
            super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if isinstance(cycle, _InferCycle):
            cycle.add_body(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if isinstance(cycle, _InferCycle):
            cycle.body_complete()
        else:
            super().on_message_complete()

    def _unset_keepalive_if_required(self) -> None:
        self._idle_since = None  # data arrived: busy until the next answer is complete

    def on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self.flow.read_paused:
            self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self.timeout_keep_alive_task is None:
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self._keep_alive_expired
            )

    def _keep_alive_expired(self) -> None:
        """Close the connection if it stayed idle for the whole keep-alive timeout."""
        self.timeout_keep_alive_task = None
        idle_since = self._idle_since
        if idle_since is None or self.transport.is_closing():
            return  # busy: the next complete answer arms the timer again
        remaining = idle_since + self.timeout_keep_alive - self.loop.time()
        if remaining > 0:
            self.timeout_keep_alive_task = self.loop.call_later(remaining, self._keep_alive_expired)
        else:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        cycle = self.cycle
        if isinstance(cycle, _InferCycle):
            if not cycle.response_complete:
                cycle.lost()
            self.cycle = None  # type: ignore[assignment]
        super().connection_lost(exc)
