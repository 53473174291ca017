"""The HTTP/1.1 protocol the frontend is served with: uvicorn's, with two changes.

- The writes of one loop turn leave in one system call. uvicorn writes an answer's status
  line and headers, then its body: two system calls, and on loopback two wake-ups of the
  client, for every answer.
- A plain ``POST .../infer`` (what :class:`~.fast_path.InferFastPath` answers) is decoded,
  scheduled and answered from the parser's and the response future's callbacks, without
  uvicorn's task, ASGI messages and events per request (about 115 us of a round trip on
  the CI class of machine, bench/http_stack.py). Everything else goes to the ASGI app.

And it holds every client to :class:`HttpLimits`: header and body deadlines, header bytes
and counts, the body size (refused from its Content-Length, before it is read) and the
number of connections. It overrides private methods of uvicorn's protocol, which is why
pyproject.toml pins uvicorn to the versions it is tested with.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from dataclasses import dataclass
from time import monotonic_ns
from typing import TYPE_CHECKING, Any, ClassVar, Final

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from triton_core.frontends.common import idle_longest, join_buffers
from triton_core.frontends.http.app import (
    check_not_decoupled,
    decode_in_thread,
    decode_infer_body,
    decodes_off_loop,
    encode_infer_answer_parts,
    error_body,
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
from triton_core.frontends.tracing import sent, start_http_trace

if TYPE_CHECKING:
    from collections.abc import Callable

    from uvicorn.server import ServerState

    from triton_core.frontends.http.codec import DecodedRequest
    from triton_core.tracing import Trace
    from triton_core.types import InferenceResponse

logger = logging.getLogger(__name__)

_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """What one HTTP/1.1 client may make the server hold or wait for (docs/security.md)."""

    #: ``--http-header-timeout-secs``: the request line and headers must be complete this
    #: long after the connection is made or the request's first byte arrives (else 408)
    header_timeout: float = 10.0
    #: ``--http-body-timeout-secs``: longest wait for the next bytes of a body owed (else
    #: 408), or for a client to take any bytes of its answers (else the connection closes)
    body_timeout: float = 30.0
    #: ``--http-max-header-size``: bytes of the URL and headers (else 414 / 431)
    max_header_size: int = 16384
    #: ``--http-max-header-count``: headers in one request (else 431)
    max_header_count: int = 100
    #: ``--http-max-connections``: open connections; more are answered 503 and closed
    max_connections: int = 1024
    #: ``--http-max-input-size``: body bytes, refused from Content-Length before reading
    max_body_size: int = 1 << 26
    #: ``--http-max-buffered-input``: bytes of request bodies held at once over every
    #: connection of the listener, from their first byte until their answer (else 503)
    max_buffered_input: int = 1 << 30


class _BufferedInput:
    """Bytes of request bodies one listener holds, over all its connections."""

    __slots__ = ("held",)

    def __init__(self) -> None:
        self.held = 0


class _Refused(Exception):
    """Raised in a parser callback to end the request with ``status`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


#: seconds a connection refused while its client may still be sending is still read, what
#: arrives dropped, so that the client reads the answer rather than a reset (as nginx's
#: lingering close)
_LINGER_SECS: Final = 2.0

# what a connection is doing, for its deadlines
_IDLE: Final = 0  # between requests: the keep-alive timeout applies
_HEADERS: Final = 1  # reading a request line and headers: the header deadline applies
_BODY: Final = 2  # reading a body: the body inactivity timeout applies
_BUSY: Final = 3  # the request is read: the server owes the answer, no client deadline


#: answers up to this size are joined into one buffer; larger ones are written in parts
_JOIN_LIMIT: Final = 1 << 16


def _nbytes(part: bytes | memoryview) -> int:
    return len(part) if type(part) is bytes else memoryview(part).nbytes


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

    def write_parts(self, parts: list[bytes | memoryview]) -> None:
        """Send a whole answer as its parts, in one system call where the transport can."""
        self.flush()
        if not self._transport.is_closing():
            self._transport.writelines(parts)

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


#: request targets by the URL up to its query (a client sends the same few again and again)
_TARGETS: dict[bytes, tuple[str, int] | None] = {}
_TARGETS_MAX: Final = 1024
#: longer keys are not kept: the cache holds at most _TARGETS_MAX * _TARGET_KEY_MAX bytes
_TARGET_KEY_MAX: Final = 256


def _url_target(url: bytes) -> tuple[str, int] | None:
    """(model, version) of a plain infer URL, or None: from a small cache by path."""
    key = url.partition(b"?")[0] if b"?" in url else url
    try:
        return _TARGETS[key]
    except KeyError:
        pass
    path = httptools.parse_url(url).path
    target = None if b"%" in path else infer_target(path.decode("ascii", "replace"))
    if len(key) <= _TARGET_KEY_MAX:
        if len(_TARGETS) >= _TARGETS_MAX:
            _TARGETS.clear()
        _TARGETS[key] = target
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
    A large body is decoded in a thread (:func:`~.app.decodes_off_loop`).
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
        "_trace",
        "_traced_headers",
        "_tracing_since",
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
        self._future: asyncio.Future[Any] | None = None
        self.disconnected = False
        self.response_complete = False
        self._trace: Trace | None = None
        #: while tracing is on: when the request began, and its headers (for traceparent)
        self._tracing_since = 0
        if protocol.fast_path.tracer.enabled:  # type: ignore[union-attr]
            self._tracing_since = monotonic_ns()
            self._traced_headers = protocol.headers

    @property
    def response_started(self) -> bool:
        return self.response_complete  # an answer leaves whole

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
        parts = self._body
        body = parts[0] if len(parts) == 1 else join_buffers(parts, sum(map(len, parts)))
        self._body = []
        fast_path = self._protocol.fast_path
        assert fast_path is not None
        model_name, model_version = self._target
        args = (
            fast_path.server,
            model_name,
            model_version,
            body,
            self._header_length,
            fast_path.json_limits,
        )
        try:
            check_not_decoupled(fast_path.server, model_name, model_version)
            if decodes_off_loop(body, self._header_length):
                self._future = decoding = decode_in_thread(*args)
                decoding.add_done_callback(self._decoded)
                return
            decoded = decode_infer_body(*args)
        except Exception as exc:
            self._fail(exc)
            return
        self._schedule(decoded)

    def _decoded(self, done: asyncio.Future[DecodedRequest]) -> None:
        if done.cancelled() or self.disconnected:
            return
        try:
            decoded = done.result()
        except Exception as exc:
            self._fail(exc)
            return
        self._schedule(decoded)

    def _schedule(self, decoded: DecodedRequest) -> None:
        fast_path = self._protocol.fast_path
        assert fast_path is not None
        server = fast_path.server
        if self._tracing_since:
            self._trace = decoded.request.trace = start_http_trace(
                fast_path.tracer, self._target[0], self._traced_headers, self._tracing_since
            )
        try:
            future = server.submit(decoded.request)
        except Exception as exc:
            self._fail(exc)
            return
        self._future = future

        def answer(done: asyncio.Future[InferenceResponse]) -> None:
            if done.cancelled() or self.disconnected:
                if self._trace is not None:
                    self._trace.end()  # written as far as it got
                return
            if self._trace is not None:
                self._trace.timestamp("INFER_RESPONSE_COMPLETE")
            try:
                parts, headers = encode_infer_answer_parts(done.result(), decoded)
            except Exception as exc:
                self._fail(exc)
                return
            self._respond(200, header_block(headers), parts)

        future.add_done_callback(answer)

    def _fail(self, exc: BaseException) -> None:
        status, data = infer_failure(exc, self._target[0])
        self._respond(status, JSON_HEADER_BLOCK, [data])

    def _respond(self, status: int, headers: bytes, body: list[bytes | memoryview]) -> None:
        protocol = self._protocol
        size = len(body[0]) if len(body) == 1 else sum(map(_nbytes, body))
        answer = [
            STATUS_LINE[status],
            default_header_lines(protocol.server_state.default_headers),
            headers,
            b"content-length: %d\r\n" % size,
            b"\r\n" if self.keep_alive else b"connection: close\r\n\r\n",
            *body,
        ]
        send_start = monotonic_ns() if self._trace is not None else 0
        if size < _JOIN_LIMIT:
            protocol.transport.write_whole(b"".join(answer))
        else:  # large outputs go out as they are, not copied into one buffer first
            protocol.transport.write_parts(answer)
        if self._trace is not None:
            sent(self._trace, "HTTP", send_start)
        self.response_complete = True
        if not self.keep_alive:
            protocol.transport.close()
        protocol.on_response_complete()


class _Deadlines:
    """One timer per server that ends the connections past their header or body deadline.

    A connection only notes when its current phase began (a float per request and per body
    chunk); this timer, not one armed and cancelled per request, compares.
    """

    def __init__(self, connections: set[Any], limits: HttpLimits) -> None:
        self._connections = connections
        shortest = min(limits.header_timeout, limits.body_timeout)
        self._interval = min(1.0, max(0.05, shortest / 4))
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Check the connections every interval while there are any."""
        if self._timer is None:
            self._timer = loop.call_later(self._interval, self._check, loop)

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        for connection in list(self._connections):
            if isinstance(connection, HttpProtocol):
                connection.check_deadlines(now)
        if self._connections:
            self.start(loop)


#: the deadline timer of each uvicorn server, by its shared state
_DEADLINES: weakref.WeakKeyDictionary[ServerState, _Deadlines] = weakref.WeakKeyDictionary()


def triton_error_body(status: int, message: str) -> bytes:
    """Triton's error document for a refusal: ``{"error": message}``."""
    return error_body(message)


def _refusal(
    status: int,
    message: str,
    default_headers: bytes,
    body_of: Callable[[int, str], bytes] = triton_error_body,
) -> bytes:
    """A whole error answer (JSON, in Triton's shape unless ``body_of`` says otherwise)
    that closes the connection."""
    body = body_of(status, message)
    return b"".join(
        (
            STATUS_LINE[status],
            default_headers,
            JSON_HEADER_BLOCK,
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body),
            body,
        )
    )


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's ``httptools`` protocol, corked, answering plain infer requests itself.

    When the app it serves is an :class:`~.fast_path.InferFastPath`, the requests that path
    would answer are answered here from the parser's callbacks (:class:`_InferCycle`); the
    rest take uvicorn's ASGI cycle to the app as before. The headers that decide between the
    two are noted as they are parsed, and uvicorn's ASGI scope is made only for the rest. The
    keep-alive timeout is one timer per idle spell rather than one armed and cancelled per
    request. Every request, on either path, is held to :attr:`limits`.
    """

    transport: CorkedTransport  # type: ignore[assignment]
    fast_path: InferFastPath | None
    limits: ClassVar[HttpLimits] = HttpLimits()
    #: loop time the connection went idle (its last answer); None while a request is open
    _idle_since: float | None = None
    #: the request's :data:`~.fast_path.DECIDING_HEADERS`, by lowercase name
    _deciding: dict[bytes, bytes]
    #: what the connection is doing (_IDLE, _HEADERS, _BODY, _BUSY) and since when
    _phase: int = _HEADERS
    _phase_since: float = 0.0
    #: requests begun on the connection, to tell whose headers a chunk of bytes holds
    _begun: int = 0
    #: bytes of the URL and headers kept so far, headers counted, and bytes of the chunks
    #: that arrived while the headers were incomplete (httptools buffers a header it has
    #: not seen the end of, so a huge one is counted here before it is complete)
    _header_bytes: int = 0
    _header_count: int = 0
    _header_chunks: int = 0
    _body_bytes: int = 0
    #: refused and answered: what still arrives is dropped until the connection closes
    _lingering: bool = False
    #: loop time the transport last asked to stop writing (its buffer is full)
    _write_paused_since: float = 0.0
    #: the listener's body bytes held (one per protocol class, see :meth:`with_limits`)
    buffered_input: ClassVar[_BufferedInput] = _BufferedInput()

    @staticmethod
    def error_body(status: int, message: str) -> bytes:
        """The body of the refusals answered here (413, 431, 408 ...): Triton's, or the
        endpoint's own error document (see :meth:`with_limits`)."""
        return triton_error_body(status, message)

    #: body bytes held for each request read and not yet answered, oldest first (answers
    #: complete in request order)
    _held: deque[int]

    #: digits of the body size limit: a Content-Length with fewer is within it
    _body_size_digits: ClassVar[int] = len(str(limits.max_body_size))

    @classmethod
    def with_limits(
        cls, limits: HttpLimits, error_body: Callable[[int, str], bytes] | None = None
    ) -> type[HttpProtocol]:
        """This protocol holding its clients to ``limits`` (uvicorn makes the instances);
        ``error_body`` shapes the refusals it answers itself (default: Triton's)."""
        attributes: dict[str, Any] = {
            "limits": limits,
            "_body_size_digits": len(str(limits.max_body_size)),
            "buffered_input": _BufferedInput(),
        }
        if error_body is not None:
            attributes["error_body"] = staticmethod(error_body)
        return type(cls.__name__, (cls,), attributes)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        loop = asyncio.get_running_loop()
        limits = self.limits
        over_capacity = len(self.connections) >= limits.max_connections
        super().connection_made(CorkedTransport(transport, loop))  # type: ignore[arg-type]
        app = self.config.app
        self.fast_path = app if isinstance(app, InferFastPath) else None
        self._phase_since = loop.time()  # the first request's header deadline counts from now
        self._held = deque()
        if over_capacity and not self._shed_idle_connection():
            message = (
                f"the server has {limits.max_connections} connections open, none of them "
                "idle, its limit (--http-max-connections)"
            )
            self._refuse(503, message)
            return
        self._idle_since = self._phase_since  # idle until its first request arrives
        deadlines = _DEADLINES.get(self.server_state)
        if deadlines is None:
            deadlines = _DEADLINES[self.server_state] = _Deadlines(self.connections, limits)
        deadlines.start(loop)

    @property
    def idle(self) -> bool:
        """No request begun or unanswered on the connection."""
        return self.idle_since is not None

    @property
    def idle_since(self) -> float | None:
        """Loop time since which the connection is idle; None while busy or closing."""
        return None if self._lingering else self._idle_since

    def _shed_idle_connection(self) -> bool:
        """Close the connection idle the longest to make room for this one, as a flood of
        idle connections must not lock clients out; False when every connection is busy."""
        oldest = idle_longest(
            (c for c in self.connections if isinstance(c, HttpProtocol) and c is not self),
            lambda connection: connection.idle_since,
        )
        if oldest is None:
            return False
        logger.debug("HTTP connection %s idle the longest: closed for a new one", oldest.client)
        oldest._idle_since = None
        oldest._phase = _BUSY
        oldest.transport.close()
        return True

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return
        self._idle_since = None  # busy until the next answer is complete
        if self._phase == _IDLE:  # bytes of the next request (or line breaks before it)
            self._phase = _HEADERS
            self._phase_since = self.loop.time()
        begun = self._begun
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            refused = exc.__context__
            if isinstance(refused, _Refused):
                self._refuse(refused.status, refused.message, linger=True)
            else:
                self._bad_request()
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        if self._phase == _HEADERS and self._begun == begun:
            # the whole chunk belongs to headers that are still not complete
            self._header_chunks += len(data)
            if self._header_chunks > self.limits.max_header_size:
                self._refuse(431, self._header_size_message(), linger=True)

    def _bad_request(self) -> None:
        message = "Invalid HTTP request received."
        self.logger.warning(message)
        self.send_400_response(message)

    def on_message_begin(self) -> None:
        # uvicorn's ASGI scope is made in on_headers_complete, for requests that need it
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self._deciding = {}
        self._phase = _HEADERS
        self._phase_since = self.loop.time()
        self._begun += 1
        self._header_bytes = self._header_count = self._header_chunks = self._body_bytes = 0
        self._held.append(0)

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._header_bytes += len(url)
        if self._header_bytes > self.limits.max_header_size:
            raise _Refused(414, self._header_size_message())

    def on_header(self, name: bytes, value: bytes) -> None:
        limits = self.limits
        self._header_bytes += len(name) + len(value) + 4  # ': ' and CRLF
        self._header_count += 1
        if self._header_bytes > limits.max_header_size:
            raise _Refused(431, self._header_size_message())
        if self._header_count > limits.max_header_count:
            raise _Refused(
                431,
                f"the request has more than {limits.max_header_count} headers, the limit "
                "(--http-max-header-count)",
            )
        name = name.lower()
        self.headers.append((name, value))
        if name in DECIDING_HEADERS:
            self._deciding[name] = value
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True

    def _header_size_message(self) -> str:
        return (
            f"the request line and headers exceed {self.limits.max_header_size} bytes, the "
            "limit (--http-max-header-size)"
        )

    def on_headers_complete(self) -> None:
        length = self._deciding.get(b"content-length")
        if length is not None and len(length) >= self._body_size_digits:
            self._check_body_size(int(length) if length.isdigit() else 0)
        cycle = self._infer_cycle()
        if cycle is None:
            version = self.parser.get_http_version()
            if version != "1.1" and version != "1.0":  # falcon raises on others: a 500
                raise _Refused(505, f"HTTP/{version} is not supported; HTTP/1.1 and 1.0 are")
        self._phase = _BODY
        self._phase_since = self.loop.time()
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

    def _check_body_size(self, size: int) -> None:
        """413 for a body over the limit, before any of it is read or 100-continue sent."""
        limit = self.limits.max_body_size
        if size > limit:
            raise _Refused(
                413,
                f"request body size ({size} bytes) exceeds the maximum allowed value of {limit} "
                "bytes. Use --http-max-input-size to increase the limit.",
            )

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
        self._phase_since = self.loop.time()
        size = len(body)
        self._body_bytes += size
        if self._body_bytes > self.limits.max_body_size:  # a chunked body
            self._check_body_size(self._body_bytes)
        buffered = self.buffered_input
        if buffered.held + size > self.limits.max_buffered_input:
            raise _Refused(
                503,
                f"the server holds {buffered.held} bytes of request bodies; this one would pass "
                f"the limit of {self.limits.max_buffered_input} (--http-max-buffered-input)",
            )
        buffered.held += size
        self._held[-1] += size
        cycle = self.cycle
        if isinstance(cycle, _InferCycle):
            cycle.add_body(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._phase = _BUSY
        cycle = self.cycle
        if isinstance(cycle, _InferCycle):
            cycle.body_complete()
        else:
            super().on_message_complete()

    def _unset_keepalive_if_required(self) -> None:
        self._idle_since = None  # data arrived: busy until the next answer is complete

    def on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        if self._held:
            self.buffered_input.held -= self._held.popleft()
        if self.transport.is_closing():
            return
        flow = self.flow
        if flow.write_paused:  # the client does not take its answers: read no more requests
            flow.pause_reading()
        elif flow.read_paused and len(self.pipeline) <= 1:  # read more once none is queued
            flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        if self._phase == _BUSY:  # not already reading the next request
            self._phase = _IDLE
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

    def pause_writing(self) -> None:
        super().pause_writing()
        self._write_paused_since = self.loop.time()

    def resume_writing(self) -> None:
        super().resume_writing()
        cycle = self.cycle
        answered = cycle is None or cycle.response_complete
        if self.flow.read_paused and not self.pipeline and answered:
            self.flow.resume_reading()  # paused for want of a reader of the answers: go on

    def check_deadlines(self, now: float) -> None:
        """408 and close when the headers or the body owed are late (see :class:`_Deadlines`);
        close when the client has taken none of its answer for as long as a body may stall."""
        if self.flow.write_paused:
            if now - self._write_paused_since >= self.limits.body_timeout:
                logger.debug("HTTP client %s took no answer bytes: closing", self.client)
                self._phase = _BUSY
                self.transport.abort()
            return
        phase = self._phase
        if phase != _HEADERS and phase != _BODY:
            return
        if self.flow.read_paused:  # the server stopped reading, not the client sending
            self._phase_since = now
            return
        limits = self.limits
        if phase == _HEADERS:
            if now - self._phase_since < limits.header_timeout:
                return
            message = (
                f"the request headers were not complete within {limits.header_timeout:g} s "
                "(--http-header-timeout-secs)"
            )
        else:
            if now - self._phase_since < limits.body_timeout:
                return
            message = (
                f"no bytes of the request body arrived for {limits.body_timeout:g} s "
                "(--http-body-timeout-secs)"
            )
        self._refuse(408, message)

    def _refuse(self, status: int, message: str, linger: bool = False) -> None:
        """End the connection, answering ``status`` first when no other answer is owed.

        ``linger``: the client may still be sending; read and drop what it sends for a
        while after the answer, so that closing does not reset the answer away.
        """
        phase, self._phase = self._phase, _BUSY
        if self.transport.is_closing():
            return
        logger.debug("HTTP %d to %s: %s", status, self.client, message)
        cycle = self.cycle
        answered = self._can_answer(cycle, phase)
        if answered:
            lines = default_header_lines(self.server_state.default_headers)
            self.transport.write_whole(_refusal(status, message, lines, self.error_body))
        if answered and linger:
            self._linger()
        else:
            self.transport.close()
        if isinstance(cycle, _InferCycle):
            cycle.lost()
        elif cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app's next receive() says so
            cycle.message_event.set()

    def _linger(self) -> None:
        """Send the end of the stream after the answer, drop what arrives, close soon."""
        self._lingering = True
        transport = self.transport
        if transport.can_write_eof():
            transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(_LINGER_SECS, transport.close)

    def _can_answer(self, cycle: Any, phase: int) -> bool:
        """Whether an answer may go now: none is owed before it and none was begun for the
        refused request (in _BODY, ``cycle`` is its own; before, the one before it)."""
        if self.pipeline:
            return False
        if phase == _BODY:
            return cycle is not None and not cycle.response_started
        return cycle is None or cycle.response_complete

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = _BUSY
        self.buffered_input.held -= sum(self._held)
        self._held.clear()
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        cycle = self.cycle
        if isinstance(cycle, _InferCycle):
            if not cycle.response_complete:
                cycle.lost()
            self.cycle = None  # type: ignore[assignment]
        super().connection_lost(exc)
