"""The streams of a server's HTTP/2 connection, and what goes out on them.

:class:`Http2Output` is the writing half of :class:`~.http2.Http2Connection`: what the
streams' handlers send (header blocks, data, whole gRPC messages), framed as the peer's
flow-control windows and frame size allow, with what waits for those windows queued on its
:class:`Stream`; back-pressure both ways (a handler waits until its stream's queue is sent,
and a client that lets more than ``--grpc-http2-max-queued-output`` pile up unread is
dropped); and the connection's end: GOAWAY, then lingering until the client closes. The
connection reads the frames and changes the state kept here as they say (streams opened and
ended, the peer's windows and frame size).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any, Final, Protocol

from triton_core.frontends.grpc.frames import (
    CANCEL,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    NO_ERROR,
    RST_STREAM,
    U32,
    Http2Error,
    frame,
    frame_header,
    goaway_frame,
    header_frames,
    pack_frame_header,
)
from triton_core.frontends.grpc.limits import GrpcLimits

log = logging.getLogger(__name__)

#: data written at once up to this size is joined into one buffer; more is written as it is
_JOIN_LIMIT: Final = 1 << 16


class StreamHandler(Protocol):
    """What a connection tells about one stream."""

    def data_received(self, data: bytes, end_stream: bool) -> None:
        """Data arrived on the stream; ``end_stream``: the peer sends nothing more."""

    def stream_reset(self) -> None:
        """The stream ended before its answer did (peer reset, or the connection is gone)."""


class Stream:
    """One stream's state: its windows both ways, how far each side is, what waits to go out."""

    __slots__ = (
        "handler",
        "held",
        "id",
        "local_closed",
        "outbound",
        "received",
        "recv_window",
        "remote_closed",
        "send_window",
    )

    def __init__(self, stream_id: int, send_window: int, recv_window: int) -> None:
        self.id = stream_id
        self.handler: StreamHandler | None = None
        self.send_window = send_window
        self.recv_window = recv_window  # what the peer may still send before a window update
        self.received = 0  # bytes received since this side last opened the peer's window
        self.held = False  # the handler is behind: its window stays shut until it catches up
        self.remote_closed = False
        self.local_closed = False
        #: what waits for the peer to open its windows: [data, end_stream] or headers
        self.outbound: deque[list] = deque()


class Http2Output:
    """The streams of one connection and what goes out on them (see the module)."""

    def __init__(self, limits: GrpcLimits) -> None:
        self._limits = limits
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self._streams: dict[int, Stream] = {}
        self._last_stream_id = 0  # the last stream the client opened
        self._peer_max_frame = DEFAULT_MAX_FRAME
        self._send_window = DEFAULT_WINDOW  # the connection's window, towards the peer
        self._blocked: dict[int, Stream] = {}  # streams with data waiting for window
        self._control: list[bytes] = []  # frames to write at the end of this read
        self._going_away = False
        self._closed = False  # nothing more is written
        self._closing = False  # the transport is closing
        self._lost = False  # the transport is gone
        self._write_paused = False
        self._drain_waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._resume_waiters: list[asyncio.Future[None]] = []
        self._sent = 0  # answer frames sent, so far: pings between them are not abuse
        self._idle_since = self._loop.time()  # when its last stream ended (or it was made)

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    # -- the handlers' side -----------------------------------------------------------------

    def send_headers(self, stream_id: int, block: bytes, end_stream: bool = False) -> None:
        """Send a header block (answer headers or trailers) on a stream."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        self._sent += 1
        if end_stream:
            stream.local_closed = True
        if stream.outbound:  # behind data that waits for window
            stream.outbound.append([block, end_stream, True])
            return
        self._write(header_frames(stream_id, block, end_stream, self._peer_max_frame))
        if end_stream:
            self._finish_local(stream)

    def send_data(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        """Send data on a stream, as much as the windows allow now and the rest later."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        if end_stream:
            stream.local_closed = True
        stream.outbound.append([memoryview(data), end_stream, False])
        self._flush(stream)

    def send_message(
        self,
        stream_id: int,
        headers: bytes | None,
        prefix: bytes,
        data: bytes,
        trailers: bytes | None,
    ) -> None:
        """Headers (when given), ``prefix + data`` and trailers (when given) on a stream.

        The common answer to a unary call: three frames in one write, when the windows and
        the frame size allow; otherwise as :meth:`send_headers` and :meth:`send_data` do.
        """
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        size = len(prefix) + len(data)
        limit = self._peer_max_frame
        if (
            stream.outbound
            or size > self._send_window
            or size > stream.send_window
            or size > limit
            or (headers is not None and len(headers) > limit)
            or (trailers is not None and len(trailers) > limit)
        ):
            if headers is not None:
                self.send_headers(stream_id, headers)
            self.send_data(stream_id, prefix + data, end_stream=False)
            if trailers is not None:
                self.send_headers(stream_id, trailers, end_stream=True)
            return
        self._sent += 1
        self._send_window -= size
        stream.send_window -= size
        pack = pack_frame_header
        parts: list[bytes] = []
        if headers is not None:
            length = len(headers)
            parts += (pack(length >> 16, length & 0xFFFF, HEADERS, END_HEADERS, stream_id), headers)
        parts += (pack(size >> 16, size & 0xFFFF, DATA, 0, stream_id), prefix, data)
        if trailers is not None:
            stream.local_closed = True
            length = len(trailers)
            flags = END_HEADERS | END_STREAM
            parts += (pack(length >> 16, length & 0xFFFF, HEADERS, flags, stream_id), trailers)
        self._write(b"".join(parts))
        if trailers is not None:
            self._finish_local(stream)

    def send_message_parts(
        self,
        stream_id: int,
        headers: bytes | None,
        parts: Sequence[Any],
        trailers: bytes | None,
    ) -> None:
        """Headers (when given), the concatenation of ``parts`` (buffers) and trailers (when given).

        For large messages: the parts are framed as the windows allow and written as they
        are, never joined into one buffer; they must not change until sent.
        """
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        outbound = stream.outbound
        if headers is not None:  # queued too: headers, data and trailers leave in one write
            outbound.append([headers, False, True])
        for part in parts:
            if len(part):
                outbound.append([memoryview(part).cast("B"), False, False])
        if trailers is not None:
            stream.local_closed = True
            outbound.append([trailers, True, True])
        self._sent += 1
        self._flush(stream)

    def reset_stream(self, stream_id: int, code: int = CANCEL) -> None:
        """End a stream at once, dropping what waits to be sent on it."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._reset(stream, code)

    def drained(self, stream_id: int) -> asyncio.Future[None] | None:
        """A future done once the stream's queued data is sent and the client reads again.

        None when nothing waits: the handler may write its next message at once.
        """
        stream = self._streams.get(stream_id)
        if stream is None:
            return None
        if stream.outbound:
            future = self._loop.create_future()
            self._drain_waiters.setdefault(stream_id, []).append(future)
            return future
        if self._write_paused and not self._closed:
            future = self._loop.create_future()
            self._resume_waiters.append(future)
            return future
        return None

    # -- the connection's end ---------------------------------------------------------------

    def go_away(self, code: int = NO_ERROR, reason: str = "") -> None:
        """Refuse new streams; the connection closes once the open ones are done."""
        if self._closed or self._going_away:
            return
        self._going_away = True
        self._write(goaway_frame(self._last_stream_id, code, reason))
        self._close_if_idle()

    def close(self) -> None:
        """Close the connection once its output is sent; open streams are reset.

        A client that does not read that output is dropped after the close timeout.
        """
        if self.transport is not None and not self._lost and not self._closing:
            self._closed = self._closing = True  # a lingering connection closes now too
            self.transport.close()
            self._loop.call_later(self._limits.close_timeout, self._abort)

    def _linger(self) -> None:
        """Close after a GOAWAY: end the output and drop the input until the client closes.

        Closing at once would reset the connection while client frames are unread, and a
        reset may destroy the GOAWAY before the client reads it.
        """
        transport = self.transport
        if transport is None or self._closed:
            return
        if not transport.can_write_eof():
            self.close()
            return
        self._closed = True
        try:
            transport.write_eof()
        except OSError:  # the client is gone already
            self._abort()
            return
        if self._write_paused:
            transport.resume_reading()  # to see the client close
        self._loop.call_later(self._limits.close_timeout, self._abort)

    def _abort(self) -> None:
        if self.transport is not None and not self._lost:
            self._closed = True
            self.transport.abort()

    def _fail(self, error: Http2Error) -> None:
        log.debug("HTTP/2 connection error from %s: %s", self.peer, error.reason)
        self._write(goaway_frame(self._last_stream_id, error.code, error.reason))
        self._linger()

    # -- the transport's back-pressure (asyncio.Protocol) -----------------------------------

    def pause_writing(self) -> None:
        # the client does not read what it asked for: read nothing more from it until it does
        self._write_paused = True
        if self.transport is not None and not self._closed:
            self.transport.pause_reading()
        self._police_output()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.transport is not None and not self._closed:
            self.transport.resume_reading()
        self._release_resume_waiters()

    # -- sending ----------------------------------------------------------------------------

    def _flush(self, stream: Stream) -> None:
        parts: list[bytes | memoryview] = []
        written = 0
        outbound = stream.outbound
        while outbound:
            item = outbound[0]
            payload, end_stream, is_headers = item
            if is_headers:
                parts.append(header_frames(stream.id, payload, end_stream, self._peer_max_frame))
                outbound.popleft()
                continue
            size = len(payload)
            allowed = min(size, self._send_window, stream.send_window, self._peer_max_frame)
            if size and allowed <= 0:
                break
            allowed = max(allowed, 0)
            last = allowed == size
            flags = END_STREAM if (last and end_stream) else 0
            parts.append(frame_header(DATA, flags, stream.id, allowed))
            parts.append(payload[:allowed])
            written += allowed
            self._send_window -= allowed
            stream.send_window -= allowed
            if last:
                outbound.popleft()
            else:
                item[0] = payload[allowed:]
        if parts:
            self._sent += 1
            if written >= _JOIN_LIMIT:
                self._write_parts(parts)  # large data: the payloads are not copied here
            else:
                self._write(b"".join(parts))
        if outbound:
            self._blocked[stream.id] = stream
            return
        self._blocked.pop(stream.id, None)
        self._release_drain_waiters(stream.id)
        if stream.local_closed:
            self._finish_local(stream)

    def _flush_blocked(self) -> None:
        for stream in list(self._blocked.values()):
            if self._send_window <= 0:
                return
            self._flush(stream)

    def _finish_local(self, stream: Stream) -> None:
        if stream.outbound:
            return
        if not stream.remote_closed:
            # the answer is complete: tell the client to stop sending (as gRPC servers do)
            self._write(frame(RST_STREAM, 0, stream.id, U32.pack(NO_ERROR)))
        self._streams.pop(stream.id, None)
        self._close_if_idle()

    def _reset(self, stream: Stream, code: int, notify: bool = False) -> None:
        """A stream error: RST_STREAM; ``notify``: the handler learns its stream is gone."""
        self._streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        stream.outbound.clear()
        self._release_drain_waiters(stream.id)
        self._write(frame(RST_STREAM, 0, stream.id, U32.pack(code)))
        if notify and stream.handler is not None:
            stream.handler.stream_reset()
        self._close_if_idle()

    def _release_drain_waiters(self, stream_id: int | None = None) -> None:
        if stream_id is None:
            waiters = [f for group in self._drain_waiters.values() for f in group]
            self._drain_waiters.clear()
        else:
            waiters = self._drain_waiters.pop(stream_id, [])
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def _release_resume_waiters(self) -> None:
        waiters, self._resume_waiters = self._resume_waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def _close_if_idle(self) -> None:
        if self._streams:
            return
        self._idle_since = self._loop.time()
        if self._going_away:
            self._linger()

    def _write_control(self) -> None:
        if self._control:
            control, self._control = self._control, []
            self._write(b"".join(control))

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self._closed:
            self.transport.write(data)
            if self._write_paused:
                self._police_output()

    def _write_parts(self, parts: list[bytes | memoryview]) -> None:
        if self.transport is not None and not self._closed:
            self.transport.writelines(parts)
            if self._write_paused:
                self._police_output()

    def _police_output(self) -> None:
        """Drop a client that lets more than the queued-output bound pile up unread."""
        transport = self.transport
        limit = self._limits.max_queued_output
        if transport is None or self._closed or transport.get_write_buffer_size() <= limit:
            return
        log.info(
            "gRPC client %s reads nothing of %d queued bytes (--grpc-http2-max-queued-output"
            " %d): dropped",
            self.peer,
            transport.get_write_buffer_size(),
            limit,
        )
        # the GOAWAY goes into the same unread queue: the connection is dropped, not closed
        self._abort()
