"""gRPC over this project's HTTP/2 (:mod:`.http2`): calls, their servicer context, the server.

The servicers are the same ones grpc.aio runs: handlers ``async def Method(request, context)``
(or ``(request_iterator, context)`` for client streams), found through the services'
protobuf descriptors. The context offers what grpc.aio's does for such handlers:
``abort``, ``write``, ``read``, ``invocation_metadata``, ``set_code``/``set_details``,
``set_trailing_metadata``, ``time_remaining``, ``cancelled``, ``peer``.

Per call, the work in Python is small and fixed: a cached header block, one task, the
message parsed by protobuf, and the answer written as three frames in one system call.
Messages compressed with ``gzip`` or ``deflate`` are accepted; answers of the methods given a
``compress_level`` (``--grpc-infer-response-compression-level``) are compressed as gRPC core
(so Triton) compresses them, others are not.
A request message is bounded by ``--grpc-max-message-size`` before it is buffered (from its
5-byte prefix) and while it is inflated, and a client stream's messages wait in a bounded
queue: past it, the stream's flow-control window stays shut until the handler catches up.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import inspect
import logging
import socket
import ssl as ssl_module
import struct
import zlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message

from triton_core.frontends.common import idle_longest, join_buffers
from triton_core.frontends.grpc.fields import (
    COMPRESSORS,
    OK,
    algorithm_for_level,
    call_fields,
    encode_metadata,
    encode_status,
    parse_timeout,
)
from triton_core.frontends.grpc.hpack_codec import Headers, encode_literal
from triton_core.frontends.grpc.http2 import Http2Connection
from triton_core.frontends.grpc.limits import DEFAULT_LIMITS, GrpcLimits
from triton_core.frontends.grpc.output import StreamHandler
from triton_core.frontends.grpc.wire import EncodedMessage
from triton_core.frontends.inflate import WBITS, InflatedTooLarge, inflate
from triton_core.frontends.receive_buffers import DEFAULT_COUNT, BufferPool
from triton_core.threads import OffloadThreads

log = logging.getLogger(__name__)

#: ``:status: 200`` is entry 8 of HPACK's static table
_ANSWER_HEADERS: Final = (
    b"\x88"
    + encode_literal("content-type", "application/grpc")
    + encode_literal("grpc-accept-encoding", "identity,deflate,gzip")
)


def _inflate_message(data: bytes | memoryview, limit: int, *, encoding: str) -> bytearray:
    """A compressed message inflated, ``limit`` bytes at most (protobuf parses any buffer)."""
    return inflate(data, encoding, limit)


_DECOMPRESSORS: Final = {
    encoding: functools.partial(_inflate_message, encoding=encoding) for encoding in WBITS
}
#: messages a client stream may queue for its handler before its window stays shut
_STREAM_QUEUE: Final = 16
#: a message's 5-byte prefix: the compressed flag and the length
_prefix: Final = struct.Struct(">BL").pack
#: request headers that are transport, not metadata
_RESERVED: Final = frozenset(
    ("content-type", "te", "grpc-encoding", "grpc-accept-encoding", "grpc-timeout")
)


@dataclass(frozen=True, slots=True)
class RpcMethod:
    """One RPC: its handler, request message class and streaming shape.

    ``callback``: the handler is a plain function ``handler(request, call)`` that answers
    through ``call.respond(message)`` or ``call.fail(code, details)``, now or from a
    callback later, with no task per call; ``call.cancel_with(future)`` cancels
    ``future`` if the client goes away first. Unary calls only. ``parse`` reads a request
    message (raising DecodeError); an answer may be an :class:`~.wire.EncodedMessage`.
    """

    handler: Callable[..., Any]
    request_type: type[Message]
    client_streaming: bool
    server_streaming: bool
    callback: bool = False
    #: gRPC core's compression level of the answers (1 low, 2 medium, 3 high); None: none
    compress_level: int | None = None
    parse: Callable[[Any], Any] | None = None


def method_table(
    services: Iterable[tuple[ServiceDescriptor, object]],
    callbacks: dict[str, Callable[[Any, Any], None]] | None = None,
    parsers: dict[str, Callable[[Any], Any]] | None = None,
) -> dict[str, RpcMethod]:
    """``/package.Service/Method`` -> :class:`RpcMethod`, for each service and its servicer.

    ``callbacks`` replaces some unary handlers (by method path) with callback handlers;
    ``parsers`` some request parsers (protobuf's ``FromString`` otherwise).
    """
    callbacks = callbacks or {}
    parsers = parsers or {}
    table = {}
    for service, servicer in services:
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            callback = callbacks.get(path)
            if callback is not None and (method.client_streaming or method.server_streaming):
                raise ValueError(f"{path} streams: only unary methods take callback handlers")
            request_type = message_factory.GetMessageClass(method.input_type)
            table[path] = RpcMethod(
                callback or getattr(servicer, method.name),
                request_type,
                method.client_streaming,
                method.server_streaming,
                callback is not None,
                parse=parsers.get(path, request_type.FromString),
            )
    return table


class _RequestIterator:
    """The messages of a client stream, as an async iterator for the handler.

    Messages wait as they came (compressed or not) and are inflated and parsed when the
    handler asks for them, so that what waits is what the client sent. Past
    :data:`_STREAM_QUEUE` messages, or a window's bytes, the stream's window stays shut
    until the handler catches up: a slow handler bounds what the client can make this side
    hold.
    """

    __slots__ = (
        "_bytes",
        "_conn",
        "_decode",
        "_ended",
        "_held",
        "_items",
        "_stream_id",
        "_waiter",
        "_window",
    )

    def __init__(
        self,
        conn: Http2Connection,
        stream_id: int,
        decode: Callable[[int, bytes], Awaitable[Message | None]],
        window: int,
    ) -> None:
        self._conn = conn
        self._stream_id = stream_id
        self._decode = decode  # None: the message was bad, and the call has failed
        self._window = window
        self._items: deque[tuple[int, bytes]] = deque()
        self._bytes = 0
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._held = False

    def push(self, compressed: int, payload: bytes) -> None:
        self._items.append((compressed, payload))
        self._bytes += len(payload)
        if not self._held and (len(self._items) >= _STREAM_QUEUE or self._bytes >= self._window):
            self._held = True
            self._conn.hold_window(self._stream_id)
        self._wake()

    def end(self) -> None:
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> _RequestIterator:
        return self

    async def __anext__(self) -> Message:
        while not self._items:
            if self._ended:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        compressed, payload = self._items.popleft()
        self._bytes -= len(payload)
        if self._held and len(self._items) <= _STREAM_QUEUE // 2 and self._bytes < self._window:
            self._held = False
            self._conn.release_window(self._stream_id)
        message = await self._decode(compressed, payload)
        if message is None:
            self._items.clear()
            raise StopAsyncIteration
        return message


class _Call:
    """One RPC on one stream; also the servicer context its handler gets."""

    __slots__ = (
        "_accounted",
        "_cancelled",
        "_code",
        "_compressed",
        "_conn",
        "_deadline",
        "_decompress",
        "_details",
        "_done",
        "_gathered",
        "_headers",
        "_headers_sent",
        "_id",
        "_method",
        "_need",
        "_parts",
        "_pending",
        "_requests",
        "_server",
        "_task",
        "_timer",
        "_trailing",
        "_unary_request",
    )

    def __init__(
        self,
        server: GrpcServer,
        conn: Http2Connection,
        stream_id: int,
        method: RpcMethod,
        headers: Headers,
        decompress: Callable[[bytes | memoryview, int], bytearray] | None,
        timeout: float | None,
    ) -> None:
        self._server = server
        self._conn = conn
        self._id = stream_id
        self._method = method
        self._headers = headers
        self._decompress = decompress
        self._parts: list[bytes] = []  # the frames of a message that have arrived so far
        self._gathered = 0  # their bytes
        self._accounted = 0  # the bytes of _parts counted in the server's buffered input
        self._need = 0  # how many bytes complete that message
        self._unary_request: Message | None = None
        self._compressed: bytes | None = None  # a unary request to inflate once it has ended
        self._requests: _RequestIterator | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: asyncio.Future[Any] | None = None  # what a callback handler awaits
        self._headers_sent = False
        self._done = False
        self._cancelled = False  # by the client (reset) or by its deadline
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: tuple = ()
        self._deadline: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        if timeout is not None:
            loop = asyncio.get_running_loop()
            self._deadline = loop.time() + timeout
            self._timer = loop.call_at(self._deadline, self._deadline_exceeded)
        if method.client_streaming:
            window = server.stream_window_size
            self._requests = _RequestIterator(conn, stream_id, self._decode_queued, window)
            self._start(self._requests)

    # -- from the connection ----------------------------------------------------------------

    def data_received(self, data: bytes, end_stream: bool) -> None:
        if self._done:
            return
        if self._parts:
            # a message spread over frames: joined once, when it is whole (no regrowing)
            self._parts.append(data)
            self._gathered += len(data)
            if self._gathered < self._need and not end_stream:
                self._account()
                return
            buffer: bytes | memoryview = join_buffers(
                self._parts, self._gathered, self._server.message_buffers
            )
            self._parts = []
            self._gathered = 0
        else:
            buffer = data if len(data) < 65536 else memoryview(data)  # large: no slice copies
        position = 0
        available = len(buffer)
        while available - position >= 5:
            length = int.from_bytes(buffer[position + 1 : position + 5], "big")
            if length > self._server.max_message_size:  # before a byte of it is kept
                self._fail_too_large(length)
                return
            end = position + 5 + length
            if end > available:
                break
            compressed = buffer[position]
            payload = buffer[position + 5 : end]
            position = end
            if not self._message_received(compressed, payload):
                return
        if position < available:
            rest = bytes(buffer[position:])
            self._parts = [rest]
            self._gathered = len(rest)
            self._need = end - position if available - position >= 5 else 5
        if (self._parts or self._accounted) and not self._account():
            return
        if not end_stream:
            return
        if self._parts:
            self._fail(grpc.StatusCode.INTERNAL, "the request stream ended inside a message")
        elif self._requests is not None:
            self._requests.end()
        elif self._compressed is not None:
            if self._task is None:
                payload, self._compressed = self._compressed, None
                self._task = asyncio.get_running_loop().create_task(
                    self._inflate_then_start(payload)
                )
                self._server.track(self._task)
        elif self._unary_request is None:
            self._fail(grpc.StatusCode.INTERNAL, "the request carried no message")
        elif self._task is None:
            self._start(self._unary_request)

    def stream_reset(self) -> None:
        if self._done:
            return
        if self._accounted:
            self._release_buffer()
        self._done = self._cancelled = True
        self._cancel_timer()
        if self._task is not None:
            self._task.cancel()
        if self._pending is not None:
            self._pending.cancel()

    def _message_received(self, compressed: int, payload: bytes | memoryview) -> bool:
        if self._requests is not None:
            self._requests.push(compressed, bytes(payload))  # decoded when the handler asks
            return True
        if self._unary_request is not None or self._compressed is not None:
            self._fail(grpc.StatusCode.INTERNAL, "more than one message for a unary call")
            return False
        if compressed:
            self._compressed = bytes(payload)  # inflated off the event loop at the end
            return True
        self._unary_request = self._parse(payload)
        return self._unary_request is not None

    def _parse(self, payload: bytes | bytearray | memoryview) -> Message | None:
        """The request message; None when it does not parse (the call has failed)."""
        try:
            parse = self._method.parse
            if parse is not None:
                return parse(payload)
            # upb parses any buffer without a copy; the stubs say bytes
            return self._method.request_type.FromString(payload)  # type: ignore[arg-type]
        except DecodeError:
            self._fail(grpc.StatusCode.INTERNAL, "Exception deserializing request!")
            return None

    async def _inflate(self, payload: bytes) -> bytearray | None:
        """``payload`` inflated in a worker thread (zlib lets the GIL go), so that a large
        message does not stall the event loop; None when it fails (the call has failed)."""
        if self._decompress is None:
            self._fail(grpc.StatusCode.INTERNAL, "a compressed message without grpc-encoding")
            return None
        limit = self._server.max_message_size
        try:
            return await self._server.inflaters.run(self._decompress, payload, limit)
        except InflatedTooLarge:
            self._fail_too_large(None)
        except zlib.error as exc:
            self._fail(grpc.StatusCode.INTERNAL, f"failed to decompress the message: {exc}")
        return None

    async def _decode_queued(self, compressed: int, payload: bytes) -> Message | None:
        """A client stream's message, when its handler asks for it."""
        if compressed:
            inflated = await self._inflate(payload)
            return None if inflated is None else self._parse(inflated)
        return self._parse(payload)

    async def _inflate_then_start(self, payload: bytes) -> None:
        inflated = await self._inflate(payload)
        request = None if inflated is None else self._parse(inflated)
        if request is not None and not self._done:
            self._task = None
            self._start(request)

    # -- running the handler ----------------------------------------------------------------

    def _start(self, request: Any) -> None:
        if self._method.callback:
            try:
                self._method.handler(request, self)
            except Exception as exc:
                log.exception("unexpected error in gRPC handler %s", self._method.handler)
                self._finish(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")
            return
        task = asyncio.get_running_loop().create_task(self._run(request))
        self._task = task
        self._server.track(task)

    async def _run(self, request: Any) -> None:
        method = self._method
        try:
            result = method.handler(request, self)
            if inspect.isawaitable(result):
                result = await result
            if method.server_streaming:
                if result is not None and hasattr(result, "__aiter__"):
                    async for message in result:
                        await self.write(message)
                self._finish(self._code or OK, self._details)
            else:
                self._answer(result)
        except grpc.aio.AbortError:
            pass  # abort() already ended the call
        except asyncio.CancelledError:
            if not self._done:  # cancelled from inside the server, not by the client
                self._finish(grpc.StatusCode.CANCELLED, "Cancelled")
            raise
        except Exception as exc:
            if self._code is None or self._code is OK:
                log.exception("unexpected error in gRPC handler %s", method.handler.__name__)
                self._finish(grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}")
            else:
                self._finish(self._code, self._details)

    def _answer(self, response: Message | None) -> None:
        if self._done:
            return
        if response is None:
            if self._code is not None and self._code is not OK:
                self._finish(self._code, self._details)
            else:
                self._finish(grpc.StatusCode.INTERNAL, "the handler returned no response")
            return
        encoded = type(response) is EncodedMessage
        data = b"" if encoded else response.SerializeToString()
        self._done = True
        self._cancel_timer()
        if self._accounted:
            self._release_buffer()
        headers = None if self._headers_sent else _ANSWER_HEADERS
        self._headers_sent = True
        trailers = encode_status(self._code or OK, self._details, self._trailing)
        if self._method.compress_level is not None:
            if encoded:  # compression needs the message whole
                data = b"".join(response.parts)  # type: ignore[attr-defined]
            headers, prefix, data = self._compressed_message(headers, data)
            self._conn.send_message(self._id, headers, prefix, data, trailers)
        elif encoded:
            # a large answer: its buffers go out as they are, framed, never joined
            parts = [_prefix(0, response.size), *response.parts]  # type: ignore[attr-defined]
            self._conn.send_message_parts(self._id, headers, parts, trailers)
        else:
            self._conn.send_message(self._id, headers, _prefix(0, len(data)), data, trailers)

    def _compressed_message(
        self, headers: bytes | None, data: bytes
    ) -> tuple[bytes | None, bytes, bytes]:
        """The answer's headers, prefix and message, compressed as gRPC core picks for the
        level and what the client accepts (see :func:`algorithm_for_level`)."""
        algorithm = algorithm_for_level(self._method.compress_level or 0, self._headers)
        if algorithm is None:
            return headers, _prefix(0, len(data)), data
        if headers is not None:
            headers += COMPRESSORS[algorithm][1]
        packer = zlib.compressobj(-1, zlib.DEFLATED, COMPRESSORS[algorithm][0])
        packed = packer.compress(data) + packer.flush()
        if len(packed) >= len(data):  # as gRPC core: a message compression would grow goes as is
            return headers, _prefix(0, len(data)), data
        return headers, _prefix(1, len(packed)), packed

    def _finish(self, code: grpc.StatusCode, details: str) -> None:
        """End the call with a status: trailers, or a trailers-only answer."""
        if self._done:
            return
        self._done = True
        self._cancel_timer()
        if self._accounted:
            self._release_buffer()
        trailers = encode_status(code, details, self._trailing)
        if not self._headers_sent:
            self._headers_sent = True
            trailers = _ANSWER_HEADERS + trailers
        self._conn.send_headers(self._id, trailers, end_stream=True)

    def _fail(self, code: grpc.StatusCode, details: str) -> None:
        self._finish(code, details)
        if self._task is not None:
            self._task.cancel()
        if self._pending is not None:
            self._pending.cancel()

    def _account(self) -> bool:
        """Count the partial message in the server's buffered input; False: over the bound."""
        server = self._server
        size = self._gathered
        server.buffered_input += size - self._accounted
        self._accounted = size
        if size and server.buffered_input > server.max_buffered_input:
            self._fail(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the server holds more than {server.max_buffered_input} bytes of request"
                " messages still arriving (--grpc-max-buffered-input)",
            )
            return False
        return True

    def _release_buffer(self) -> None:
        self._server.buffered_input -= self._accounted
        self._accounted = 0
        self._parts = []
        self._gathered = 0

    def _fail_too_large(self, length: int | None) -> None:
        limit = self._server.max_message_size
        size = f"{length}" if length is not None else f"more than {limit} once inflated"
        self._parts = []
        self._gathered = 0
        self._fail(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"Received message larger than max ({size} vs. {limit})",
        )

    def _deadline_exceeded(self) -> None:
        self._timer = None
        self._cancelled = not self._done
        self._fail(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- for callback handlers --------------------------------------------------------------

    def respond(self, message: Message) -> None:
        """Answer a unary call with ``message`` and status OK."""
        self._pending = None
        self._answer(message)

    def fail(self, code: grpc.StatusCode, details: str) -> None:
        """End the call with an error status."""
        self._pending = None
        self._finish(code, details)

    def cancel_with(self, future: asyncio.Future[Any]) -> None:
        """Cancel ``future`` if the call ends (client reset, deadline) before it is done."""
        self._pending = future

    # -- the servicer context ---------------------------------------------------------------

    async def abort(
        self, code: grpc.StatusCode, details: str = "", trailing_metadata: tuple = ()
    ) -> None:
        """End the call with ``code`` and ``details``; raises ``grpc.aio.AbortError``."""
        if code is OK:
            raise ValueError("abort() needs a status code other than OK")
        if trailing_metadata:
            self._trailing = tuple(trailing_metadata)
        self._finish(code, details)
        raise grpc.aio.AbortError(f"Locally aborted: {code} {details}")

    async def write(self, message: Message) -> None:
        """Send one message of a server stream."""
        if self._done:
            return
        data = message.SerializeToString()
        headers = None if self._headers_sent else _ANSWER_HEADERS
        self._headers_sent = True
        if self._method.compress_level is not None:
            headers, prefix, data = self._compressed_message(headers, data)
        else:
            prefix = _prefix(0, len(data))
        self._conn.send_message(self._id, headers, prefix, data, None)
        drained = self._conn.drained(self._id)
        if drained is not None:
            await drained

    async def read(self) -> Message | Any:
        """The next message of a client stream, or ``grpc.aio.EOF`` after the last."""
        if self._requests is None:
            raise RuntimeError("read() is for client-streaming calls")
        try:
            return await self._requests.__anext__()
        except StopAsyncIteration:
            return grpc.aio.EOF

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        """The client's metadata: its headers, less pseudo-headers and transport headers."""
        metadata: list[tuple[str, str | bytes]] = []
        for name, value in self._headers:
            if name.startswith(":") or name in _RESERVED:
                continue
            if name.endswith("-bin"):
                metadata.append((name, base64.b64decode(value + "=" * (-len(value) % 4))))
            else:
                metadata.append((name, value))
        return tuple(metadata)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, trailing_metadata: tuple) -> None:
        self._trailing = tuple(trailing_metadata)

    async def send_initial_metadata(self, initial_metadata: tuple) -> None:
        """Send the answer headers now, with ``initial_metadata`` among them."""
        if self._headers_sent or self._done:
            raise RuntimeError("the answer headers were already sent")
        self._headers_sent = True
        self._conn.send_headers(self._id, _ANSWER_HEADERS + encode_metadata(initial_metadata))

    def time_remaining(self) -> float | None:
        if self._deadline is None:
            return None
        return max(self._deadline - asyncio.get_running_loop().time(), 0.0)

    def cancelled(self) -> bool:
        """Whether the client reset the call or its deadline passed before it was answered."""
        return self._cancelled

    def done(self) -> bool:
        return self._done

    def peer(self) -> str:
        return self._conn.peer


class _Refused:
    """A stream answered before any handler ran: its data is dropped."""

    def data_received(self, data: bytes, end_stream: bool) -> None:
        pass

    def stream_reset(self) -> None:
        pass


_REFUSED: Final = _Refused()


#: ``--grpc-infer-thread-count`` when not given (Triton's default)
DEFAULT_INFER_THREADS: Final = 2


class GrpcServer:
    """gRPC services on a bound socket; ``start``/``stop`` as grpc.aio's server has them."""

    def __init__(
        self,
        methods: dict[str, RpcMethod],
        sock: socket.socket,
        limits: GrpcLimits = DEFAULT_LIMITS,
        *,
        ssl: ssl_module.SSLContext | None = None,
        ssl_handshake_timeout: float = 10.0,
        infer_threads: int = DEFAULT_INFER_THREADS,
        allocation_pool: int = DEFAULT_COUNT,
    ) -> None:
        self._methods = methods
        #: ``--grpc-infer-allocation-pool-size``: buffers of large messages kept for reuse
        self.message_buffers = BufferPool(allocation_pool)
        #: ``--grpc-infer-thread-count``: the threads that inflate compressed requests
        self.inflaters = OffloadThreads(infer_threads, "grpc-infer")
        self._socket = sock
        #: TLS (ALPN h2) when set; a handshake longer than the timeout closes its connection
        self._ssl = ssl
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._limits = limits
        self.max_message_size = limits.max_message_size
        self.max_buffered_input = limits.max_buffered_input
        self.stream_window_size = limits.stream_window_size
        #: bytes of request messages received in part, over all calls
        self.buffered_input = 0
        self._server: asyncio.Server | None = None
        self._connections: set[Http2Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = asyncio.Event()
        self._fields: dict[Headers, tuple[str | None, ...]] = {}

    @property
    def port(self) -> int:
        return self._socket.getsockname()[1]

    async def start(self) -> None:
        """Accept connections."""
        loop = asyncio.get_running_loop()
        if self._ssl is None:
            self._server = await loop.create_server(self._connection, sock=self._socket)
        else:
            self._server = await loop.create_server(
                self._connection,
                sock=self._socket,
                ssl=self._ssl,
                ssl_handshake_timeout=self._ssl_handshake_timeout,
            )

    async def stop(self, grace: float | None) -> None:
        """Stop accepting; let calls in flight finish for ``grace`` seconds, then cancel them."""
        if self._server is not None:
            self._server.close()
        for conn in list(self._connections):
            conn.go_away()
        if grace:
            deadline = asyncio.get_running_loop().time() + grace
            while self._connections and asyncio.get_running_loop().time() < deadline:
                if not any(conn.open_streams for conn in self._connections):
                    break
                await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        self.message_buffers.close()
        self._stopped.set()

    async def wait_for_termination(self) -> None:
        await self._stopped.wait()

    def track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _connection(self) -> Http2Connection:
        conn = Http2Connection(self._open_stream, self._connections.discard, self._limits)
        if len(self._connections) >= self._limits.max_connections and not self._shed_idle():
            limit = self._limits.max_connections
            conn.refuse(
                f"more than {limit} connections, none of them idle (--grpc-max-connections)"
            )
            return conn
        self._connections.add(conn)
        return conn

    def _shed_idle(self) -> bool:
        """Send away the connection idle the longest (no call open) to make room for a new
        one, as a flood of idle connections must not lock clients out (they connect again
        on GOAWAY); False when every connection has a call open."""
        oldest = idle_longest(self._connections, lambda connection: connection.idle_since)
        if oldest is None:
            return False
        log.debug("gRPC connection %s idle the longest: sent away for a new one", oldest.peer)
        oldest.go_away(reason="idle connection closed to make room (--grpc-max-connections)")
        return True

    def _open_stream(
        self, conn: Http2Connection, stream_id: int, headers: Headers, end_stream: bool
    ) -> StreamHandler:
        # a client repeats the same header block: the same tuple, from the decoder's cache
        fields = self._fields.get(headers)
        if fields is None:
            fields = call_fields(headers)
            if fields[3] is None and len(self._fields) < 256:  # timeouts differ every call
                self._fields[headers] = fields
        path, content_type, encoding, timeout = fields
        if content_type is None or not content_type.startswith("application/grpc"):
            # not a gRPC call: an HTTP answer, as the gRPC protocol asks
            conn.send_headers(stream_id, encode_literal(":status", "415"), end_stream=True)
            return _REFUSED
        method = self._methods.get(path or "")
        if method is None:
            self._refuse(conn, stream_id, grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            return _REFUSED
        decompress = None
        if encoding is not None and encoding != "identity":
            decompress = _DECOMPRESSORS.get(encoding)
            if decompress is None:
                self._refuse(
                    conn,
                    stream_id,
                    grpc.StatusCode.UNIMPLEMENTED,
                    f"Compression algorithm '{encoding}' is not supported",
                )
                return _REFUSED
        seconds = parse_timeout(timeout) if timeout is not None else None
        call = _Call(self, conn, stream_id, method, headers, decompress, seconds)
        if end_stream:
            call.data_received(b"", True)
        return call

    @staticmethod
    def _refuse(conn: Http2Connection, stream_id: int, code: grpc.StatusCode, message: str):
        conn.send_headers(stream_id, _ANSWER_HEADERS + encode_status(code, message), True)
