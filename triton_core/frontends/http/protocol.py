"""The HTTP/1.1 protocol of the HTTP endpoints: httptools' parser under the project's own
connection handling.

- The writes of one loop turn leave in one system call (:class:`~.wire.CorkedTransport`):
  an answer's status line, headers and body reach the client in one write.
- A plain ``POST .../infer`` (what :class:`~.fast_path.InferRoute` answers) is decoded,
  scheduled and answered from the parser's and the response future's callbacks
  (:class:`_InferCycle`), without a task or ASGI messages per request. Everything else goes
  to the ASGI app (:class:`~.asgi_cycle.AsgiCycle`).
- Requests on one connection are answered one at a time, in order (pipelining); HTTP/1.0
  connections close after their answer; an upgrade request is answered as plain HTTP.

And it holds every client to :class:`HttpLimits`: header and body deadlines, header bytes
and counts, the body size (refused from its Content-Length, before it is read) and the
number of connections. :class:`~.server.HttpServer` serves it on a listening socket.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

import httptools

from triton_core.frontends.common import idle_longest, join_buffers
from triton_core.frontends.http.asgi_cycle import AsgiCycle, http_scope
from triton_core.frontends.http.decoding import error_body
from triton_core.frontends.http.fast_path import JSON_HEADER_BLOCK, InferRoute, header_block
from triton_core.frontends.http.infer import DECIDING_HEADERS, InferExchange, infer_target
from triton_core.frontends.http.wire import (
    CONTINUE,
    JOIN_LIMIT,
    STATUS_LINE,
    CorkedTransport,
    FlowControl,
    nbytes,
)

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from triton_core.frontends.http.fast_path import ASGIApp

logger = logging.getLogger(__name__)


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


#: request targets by the URL up to its query (a client sends the same few again and again)
_TARGETS: dict[bytes, tuple[str, str] | None] = {}
_TARGETS_MAX: Final = 1024
#: longer keys are not kept: the cache holds at most _TARGETS_MAX * _TARGET_KEY_MAX bytes
_TARGET_KEY_MAX: Final = 256


def _url_target(url: bytes) -> tuple[str, str] | None:
    """(model, version text) of an infer URL, or None: from a small cache by path."""
    key = url.partition(b"?")[0] if b"?" in url else url
    try:
        return _TARGETS[key]
    except KeyError:
        pass
    path = httptools.parse_url(url).path
    target = infer_target(path.decode("latin-1"))
    if len(key) <= _TARGET_KEY_MAX:
        if len(_TARGETS) >= _TARGETS_MAX:
            _TARGETS.clear()
        _TARGETS[key] = target
    return target


class _InferCycle:
    """One ``POST .../infer`` answered by :class:`HttpProtocol` itself, through the
    endpoint's :class:`~.infer.HttpInfer` (the one infer path).

    Scheduled from the parser's callbacks and answered from the response future's
    callback: no task, no ASGI messages, no falcon. It stands where an :class:`AsgiCycle`
    would, so keep-alive, pipelining and shutdown work as for every other request.
    """

    __slots__ = (
        "_body",
        "_body_complete",
        "_deciding",
        "_exchange",
        "_expect_100_continue",
        "_headers",
        "_protocol",
        "_since",
        "_started",
        "_target",
        "disconnected",
        "keep_alive",
        "response_complete",
    )

    def __init__(
        self,
        protocol: HttpProtocol,
        target: tuple[str, str],
        expect_100_continue: bool,
        keep_alive: bool,
    ) -> None:
        self._protocol = protocol
        self._target = target
        self._expect_100_continue = expect_100_continue
        self.keep_alive = keep_alive
        self._body: list[bytes] = []
        self._body_complete = False
        self._started = False
        self._exchange: InferExchange | None = None
        self.disconnected = False
        self.response_complete = False
        #: the request's headers (header forwarding, traceparent), and those that decide
        #: its answer (encodings, sizes)
        self._headers = protocol.headers
        self._deciding = protocol.deciding
        self._since = cast(InferRoute, protocol.fast_path).infer.received()

    @property
    def response_started(self) -> bool:
        return self.response_complete  # an answer leaves whole

    def start(self) -> None:
        """Its turn on the connection has come (at once, or after pipelined ones before it)."""
        self._started = True
        if self._body_complete:
            self._submit()
        elif self._expect_100_continue:
            self._protocol.transport.write(CONTINUE)

    def add_body(self, data: bytes) -> None:
        self._body.append(data)

    def body_complete(self) -> None:
        self._body_complete = True
        if self._started:
            self._submit()

    def lost(self) -> None:
        """The connection closed before the answer: the work is not wanted any more."""
        self.disconnected = True
        if self._exchange is not None:
            self._exchange.cancel()

    def _submit(self) -> None:
        parts = self._body
        body = parts[0] if len(parts) == 1 else join_buffers(parts, sum(map(len, parts)))
        self._body = []
        infer = cast(InferRoute, self._protocol.fast_path).infer
        self._exchange = infer.answer(
            self._target,
            self._headers,
            body,
            self._since,
            self._respond,
            deciding=self._deciding,
        )

    def _respond(
        self, status: int, headers: dict[str, str], body: list[bytes | memoryview]
    ) -> None:
        self._exchange = None  # it holds this method: no reference cycle left for the GC
        if self.disconnected:
            return
        protocol = self._protocol
        size = len(body[0]) if len(body) == 1 else sum(map(nbytes, body))
        answer = [
            STATUS_LINE[status],
            protocol.listener.default_lines,
            header_block(headers),
            b"content-length: %d\r\n" % size,
            b"\r\n" if self.keep_alive else b"connection: close\r\n\r\n",
            *body,
        ]
        if size < JOIN_LIMIT:
            protocol.transport.write_whole(b"".join(answer))
        else:  # large outputs go out as they are, not copied into one buffer first
            protocol.transport.write_parts(answer)
        self.response_complete = True
        if not self.keep_alive:
            protocol.transport.close()
        protocol.on_response_complete()


class _Deadlines:
    """One timer per listener that ends the connections past their header or body deadline.

    A connection only notes when its current phase began (a float per request and per body
    chunk); this timer, not one armed and cancelled per request, compares.
    """

    def __init__(self, connections: set[HttpProtocol], limits: HttpLimits) -> None:
        self._connections = connections
        shortest = min(limits.header_timeout, limits.body_timeout)
        self._interval = min(1.0, max(0.05, shortest / 4))
        self._timer: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Check the connections every interval while there are any."""
        if self._timer is None:
            self._timer = loop.call_later(self._interval, self._check, loop)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        now = loop.time()
        for connection in list(self._connections):
            connection.check_deadlines(now)
        if self._connections:
            self.start(loop)


def triton_error_body(status: int, message: str) -> bytes:
    """Triton's error document for a refusal: ``{"error": message}``."""
    return error_body(message)


#: the JSON body of a refusal the protocol answers itself, from its status and message
ErrorBody = Callable[[int, str], bytes]


def _refusal(
    status: int, message: str, default_lines: bytes, body_of: ErrorBody = triton_error_body
) -> bytes:
    """A whole error answer (JSON, in Triton's shape unless ``body_of`` says otherwise)
    that closes the connection."""
    body = body_of(status, message)
    return b"".join(
        (
            STATUS_LINE[status],
            default_lines,
            JSON_HEADER_BLOCK,
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body),
            body,
        )
    )


_BAD_REQUEST: Final = b"Invalid HTTP request received."


class Listener:
    """What the connections of one listening socket share: the app they serve, their
    limits, the connections themselves, the ASGI tasks, and the body bytes they hold."""

    def __init__(
        self,
        app: ASGIApp,
        limits: HttpLimits,
        keep_alive_timeout: float,
        error_body: ErrorBody = triton_error_body,
    ) -> None:
        self.app = app
        #: shapes the refusals the protocol answers itself (413, 431, 408, 503): an
        #: endpoint with an error document of its own (OpenAI's) passes its own
        self.error_body = error_body
        self.fast_path = app if isinstance(app, InferRoute) else None
        self.limits = limits
        self.keep_alive_timeout = keep_alive_timeout
        #: digits of the body size limit: a Content-Length with fewer is within it
        self.body_size_digits = len(str(limits.max_body_size))
        self.connections: set[HttpProtocol] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.deadlines = _Deadlines(self.connections, limits)
        #: bytes of request bodies held, over every connection (--http-max-buffered-input)
        self.held_input = 0
        #: answers completed
        self.total_requests = 0
        #: header lines every answer starts with (date, server), kept by the server
        self.default_lines = b""
        #: the server stops: no new connection is served, none is kept alive
        self.stopping = False
        #: set once, while stopping, no connection and no task is left
        self._drained: asyncio.Future[None] | None = None

    def run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run an ASGI cycle as a task the server waits for when it stops."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self._check_drained()

    def closed(self, connection: HttpProtocol) -> None:
        self.connections.discard(connection)
        self._check_drained()

    def drained(self) -> asyncio.Future[None]:
        """A future done once no connection and no ASGI task is left."""
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
            self._check_drained()
        return self._drained

    def _check_drained(self) -> None:
        drained = self._drained
        if drained is not None and not drained.done() and not self.connections and not self.tasks:
            drained.set_result(None)


def _address(transport: asyncio.BaseTransport, name: str) -> tuple[str, int] | None:
    """(host, port) of a socket transport's ``peername`` or ``sockname``."""
    info = transport.get_extra_info(name)
    if isinstance(info, (list, tuple)) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


Cycle = _InferCycle | AsgiCycle


class HttpProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection: httptools' parser, corked writes, and the request cycles.

    When the app it serves is an :class:`~.fast_path.InferRoute`, the requests that path
    would answer are answered here from the parser's callbacks (:class:`_InferCycle`); the
    rest go to the app through an :class:`~.asgi_cycle.AsgiCycle`. The headers that decide
    between the two are noted as they are parsed, and the ASGI scope is made only for the
    rest. The keep-alive timeout is one timer per idle spell rather than one armed and
    cancelled per request. Every request, on either path, is held to the listener's limits.
    """

    transport: CorkedTransport
    flow: FlowControl
    #: loop time the connection went idle (its last answer); None while a request is open
    _idle_since: float | None = None
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
    #: the last request asked to switch protocols: what follows it is not HTTP, dropped
    _upgraded: bool = False
    #: loop time the transport last asked to stop writing (its buffer is full)
    _write_paused_since: float = 0.0

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.limits = listener.limits
        self.fast_path = listener.fast_path
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        # answer a request that says Connection: close even when bytes follow it
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        #: the newest request's cycle (its body goes there); the one being answered; the
        #: requests read while another is answered, oldest on the right
        self.cycle: Cycle | None = None
        self._answering: Cycle | None = None
        self.pipeline: deque[Cycle] = deque()
        #: the request being read: its URL, headers, :data:`~.fast_path.DECIDING_HEADERS`
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.deciding: dict[bytes, bytes] = {}
        self.expect_100_continue = False
        #: body bytes held for each request read and not yet answered, oldest first
        #: (answers complete in request order)
        self._held: deque[int] = deque()
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        self.client: tuple[str, int] | None = None
        self._addresses: tuple[str, Any, Any] = ("http", None, None)

    @property
    def idle(self) -> bool:
        """No request begun or unanswered on the connection."""
        return self.idle_since is not None

    @property
    def idle_since(self) -> float | None:
        """Loop time since which the connection is idle; None while busy or closing."""
        return None if self._lingering else self._idle_since

    # the connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        listener, limits = self.listener, self.limits
        over_capacity = len(listener.connections) >= limits.max_connections
        self.transport = CorkedTransport(cast(asyncio.Transport, transport), self.loop)
        self.flow = FlowControl(self.transport)
        listener.connections.add(self)
        self.client = _address(transport, "peername")
        scheme = "https" if transport.get_extra_info("sslcontext") is not None else "http"
        self._addresses = (scheme, self.client, _address(transport, "sockname"))
        self._phase_since = self.loop.time()  # the first request's header deadline counts now
        if listener.stopping:
            self._phase = _BUSY
            self.transport.close()
            return
        if over_capacity and not self._shed_idle_connection():
            message = (
                f"the server has {limits.max_connections} connections open, none of them "
                "idle, its limit (--http-max-connections)"
            )
            self._refuse(503, message)
            return
        self._idle_since = self._phase_since  # idle until its first request arrives
        listener.deadlines.start(self.loop)

    def _shed_idle_connection(self) -> bool:
        """Close the connection idle the longest to make room for this one, as a flood of
        idle connections must not lock clients out; False when every connection is busy."""
        oldest = idle_longest(
            (c for c in self.listener.connections if c is not self),
            lambda connection: connection.idle_since,
        )
        if oldest is None:
            return False
        logger.debug("HTTP connection %s idle the longest: closed for a new one", oldest.client)
        oldest._idle_since = None
        oldest._phase = _BUSY
        oldest.transport.close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._phase = _BUSY
        self._idle_since = None
        self.listener.held_input -= sum(self._held)
        self._held.clear()
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
            self._keep_alive_timer = None
        for cycle in (self._answering, *self.pipeline, self.cycle):
            if cycle is not None and not cycle.response_complete:
                cycle.lost()
        self.pipeline.clear()
        self.flow.resume_writing()  # an app waiting to write learns it is gone
        self.listener.closed(self)

    def eof_received(self) -> None:
        """The client sends no more: the connection closes (its answers are not wanted)."""

    def shutdown(self) -> None:
        """The server stops: close now when no request is under way, else after its answer."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
        else:
            cycle.keep_alive = False

    def pause_writing(self) -> None:
        self.flow.pause_writing()
        self._write_paused_since = self.loop.time()

    def resume_writing(self) -> None:
        self.flow.resume_writing()
        answering = self._answering
        if self.flow.read_paused and not self.pipeline and answering is None:
            self.flow.resume_reading()  # paused for want of a reader of the answers: go on

    # the parser

    def data_received(self, data: bytes) -> None:
        if self._lingering or self._upgraded:
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
            # answered as plain HTTP (no WebSocket, as Triton); what follows is dropped
            self._upgraded = True
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
        logger.warning("Invalid HTTP request received.")
        self._phase = _BUSY
        self.transport.write_whole(
            b"".join(
                (
                    STATUS_LINE[400],
                    self.listener.default_lines,
                    b"content-type: text/plain; charset=utf-8\r\n",
                    b"content-length: %d\r\nconnection: close\r\n\r\n" % len(_BAD_REQUEST),
                    _BAD_REQUEST,
                )
            )
        )
        self.transport.close()

    def on_message_begin(self) -> None:
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.deciding = {}
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
            self.deciding[name] = value
        elif name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True

    def _header_size_message(self) -> str:
        return (
            f"the request line and headers exceed {self.limits.max_header_size} bytes, the "
            "limit (--http-max-header-size)"
        )

    def on_headers_complete(self) -> None:
        length = self.deciding.get(b"content-length")
        if length is not None and len(length) >= self.listener.body_size_digits:
            self._check_body_size(int(length) if length.isdigit() else 0)
        cycle: Cycle | None = self._infer_cycle()
        if cycle is None:
            cycle = self._asgi_cycle()
        self._phase = _BODY
        self._phase_since = self.loop.time()
        existing = self.cycle
        self.cycle = cycle
        if existing is None or existing.response_complete:
            self._begin(cycle)
        else:  # pipelined behind a request still being answered: wait for its turn
            self.flow.pause_reading()
            self.pipeline.appendleft(cycle)

    def _check_body_size(self, size: int) -> None:
        """413 for a body over the limit, before any of it is read or 100-continue sent."""
        limit = self.limits.max_body_size
        if size > limit:
            raise _Refused(
                413,
                f"request body size ({size} bytes) exceeds the maximum allowed value of {limit} "
                "bytes. Use --http-max-input-size to increase the limit.",
            )

    def _keep_alive(self) -> bool:
        """Whether the connection serves another request after this one's answer."""
        keep_alive = self.parser.should_keep_alive() and not self.listener.stopping
        if keep_alive and b"connection" in self.deciding:
            # HTTP/1.0 keeps a connection only when asked to: it closes here all the same
            keep_alive = self.parser.get_http_version() != "1.0"
        return keep_alive

    def _infer_cycle(self) -> _InferCycle | None:
        """The cycle of an infer request (the endpoint serves the v2 app); None for others."""
        if self.fast_path is None or self.parser.get_method() != b"POST":
            return None
        if self.parser.should_upgrade():
            return None
        target = _url_target(self.url)
        if target is None:
            return None
        return _InferCycle(self, target, self.expect_100_continue, self._keep_alive())

    def _asgi_cycle(self) -> AsgiCycle:
        parser = self.parser
        version = parser.get_http_version()
        if version != "1.1" and version != "1.0":  # falcon raises on others: a 500
            raise _Refused(505, f"HTTP/{version} is not supported; HTTP/1.1 and 1.0 are")
        scope = http_scope(parser.get_method(), self.url, version, self.headers, self._addresses)
        return AsgiCycle(
            scope,
            self.transport,
            self.flow,
            self.listener.default_lines,
            self.on_response_complete,
            self.expect_100_continue,
            # after an upgrade request, what follows is not HTTP: close after the answer
            self._keep_alive() and not parser.should_upgrade(),
        )

    def _begin(self, cycle: Cycle) -> None:
        """The cycle's turn on the connection has come: answer it."""
        self._answering = cycle
        if isinstance(cycle, _InferCycle):
            cycle.start()
        else:
            self.listener.run(cycle.run(self.listener.app))

    def on_body(self, body: bytes) -> None:
        self._phase_since = self.loop.time()
        size = len(body)
        self._body_bytes += size
        if self._body_bytes > self.limits.max_body_size:  # a chunked body
            self._check_body_size(self._body_bytes)
        listener = self.listener
        if listener.held_input + size > self.limits.max_buffered_input:
            raise _Refused(
                503,
                f"the server holds {listener.held_input} bytes of request bodies; this one "
                f"would pass the limit of {self.limits.max_buffered_input} "
                "(--http-max-buffered-input)",
            )
        cycle = self.cycle
        assert cycle is not None
        if cycle.response_complete:  # answered before its body was read: the rest is dropped
            return
        listener.held_input += size
        self._held[-1] += size
        cycle.add_body(body)

    def on_message_complete(self) -> None:
        self._phase = _BUSY
        cycle = self.cycle
        assert cycle is not None
        cycle.body_complete()
        if cycle.response_complete:  # answered before its body was read: idle now
            self._go_idle()

    # answers

    def on_response_complete(self) -> None:
        listener = self.listener
        listener.total_requests += 1
        self._answering = None
        if self._held:
            listener.held_input -= self._held.popleft()
        if self.transport.is_closing():
            return
        flow = self.flow
        if flow.write_paused:  # the client does not take its answers: read no more requests
            flow.pause_reading()
        elif flow.read_paused and len(self.pipeline) <= 1:  # read more once none is queued
            flow.resume_reading()
        if self.pipeline:
            self._begin(self.pipeline.pop())
        else:
            self._go_idle()

    def _go_idle(self) -> None:
        """Every request read is answered: wait for the next within the keep-alive timeout."""
        if self._phase == _BUSY:  # not already reading the next request
            self._phase = _IDLE
        self._idle_since = self.loop.time()
        if self.listener.stopping:
            self.transport.close()  # the last answer before the server stops
        elif self._keep_alive_timer is None:
            self._keep_alive_timer = self.loop.call_later(
                self.listener.keep_alive_timeout, self._keep_alive_expired
            )

    def _keep_alive_expired(self) -> None:
        """Close the connection if it stayed idle for the whole keep-alive timeout."""
        self._keep_alive_timer = None
        idle_since = self._idle_since
        if idle_since is None or self.transport.is_closing():
            return  # busy: the next complete answer arms the timer again
        remaining = idle_since + self.listener.keep_alive_timeout - self.loop.time()
        if remaining > 0:
            self._keep_alive_timer = self.loop.call_later(remaining, self._keep_alive_expired)
        else:
            self.transport.close()

    # limits

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
            listener = self.listener
            refusal = _refusal(status, message, listener.default_lines, listener.error_body)
            self.transport.write_whole(refusal)
        if answered and linger:
            self._linger()
        else:
            self.transport.close()
        if cycle is not None and not cycle.response_complete:
            cycle.lost()  # its work is not wanted; an app's next receive() says so

    def _linger(self) -> None:
        """Send the end of the stream after the answer, drop what arrives, close soon."""
        self._lingering = True
        transport = self.transport
        if transport.can_write_eof():
            transport.write_eof()
        self.flow.resume_reading()
        self.loop.call_later(_LINGER_SECS, transport.close)

    def _can_answer(self, cycle: Cycle | None, phase: int) -> bool:
        """Whether an answer may go now: none is owed before it and none was begun for the
        refused request (in _BODY, ``cycle`` is its own; before, the one before it)."""
        if self.pipeline:
            return False
        if phase == _BODY:
            return cycle is not None and not cycle.response_started
        return cycle is None or cycle.response_complete
