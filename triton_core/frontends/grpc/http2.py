"""The server side of HTTP/2 (RFC 9113) as gRPC uses it, on an asyncio protocol.

Frames, stream states, flow control in both directions and header compression, and no more:
streams are opened by the client only, server push is never used and priorities are ignored
(both as RFC 9113 allows). The frames' numbers, packing and parsing are in :mod:`.frames`,
header compression (HPACK, with a cache for the blocks gRPC clients repeat) in
:mod:`.hpack_codec`.

Every client is hostile until checked: what a connection may make this side hold or do is
bounded by its :class:`~.limits.GrpcLimits` (frame and header sizes, streams, windows granted
as data is consumed, queued output, reset, SETTINGS and PING rates, and time), and a client
that goes beyond gets the RFC's answer: RST_STREAM, or GOAWAY and a close. Sizes are checked
here, as the frames are read; rates and deadlines by the connection's
:class:`~.watch.ConnectionWatch`.

A :class:`Http2Connection` hands each new stream to the ``open_stream`` callable it was given,
which returns the :class:`StreamHandler` that receives the stream's data; the handler answers
through :meth:`Http2Connection.send_headers`, :meth:`~Http2Connection.send_data` and
:meth:`~Http2Connection.reset_stream`. Data beyond the peer's flow-control windows waits in
the stream's queue until the peer opens them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final, Protocol, cast

from triton_core.frontends.grpc.frames import (
    ACK,
    CANCEL,
    CONTINUATION,
    DATA,
    DEFAULT_MAX_FRAME,
    DEFAULT_WINDOW,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    MAX_WINDOW,
    NO_ERROR,
    PADDED,
    PING,
    PREFACE,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    STREAM_CLOSED,
    U32,
    WINDOW_UPDATE,
    Http2Error,
    frame,
    frame_header,
    goaway_frame,
    header_frames,
    initial_frames,
    pack_frame_header,
    read_settings,
    strip_padding,
    unpack_frame_header,
)
from triton_core.frontends.grpc.hpack_codec import HeaderDecoder, Headers
from triton_core.frontends.grpc.limits import DEFAULT_LIMITS, GrpcLimits
from triton_core.frontends.grpc.watch import ConnectionWatch

log = logging.getLogger(__name__)

#: data written at once up to this size is joined into one buffer; more is written as it is
_JOIN_LIMIT: Final = 1 << 16


class StreamHandler(Protocol):
    """What a connection tells about one stream."""

    def data_received(self, data: bytes, end_stream: bool) -> None:
        """Data arrived on the stream; ``end_stream``: the peer sends nothing more."""

    def stream_reset(self) -> None:
        """The stream ended before its answer did (peer reset, or the connection is gone)."""


OpenStream = Callable[["Http2Connection", int, Headers, bool], StreamHandler]


class _Stream:
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


class Http2Connection(asyncio.Protocol):
    """One client connection: frames in, streams out to ``open_stream``'s handlers."""

    def __init__(
        self,
        open_stream: OpenStream,
        on_closed: Callable[[Http2Connection], None],
        limits: GrpcLimits = DEFAULT_LIMITS,
    ) -> None:
        self._open_stream = open_stream
        self._on_closed = on_closed
        self._limits = limits
        self._max_frame = limits.max_frame_size
        self._max_streams = limits.max_concurrent_streams
        self._stream_window = limits.stream_window_size
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self._streams: dict[int, _Stream] = {}
        self._pending = bytearray()
        self._need = len(PREFACE)
        self._preface_seen = False
        self._settings_seen = False
        self._decoder = HeaderDecoder(limits.max_header_list_size)
        self._last_stream_id = 0
        # a header block split over frames: [stream id, end_stream, fragments, bytes]
        self._continuing: list | None = None
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_max_frame = DEFAULT_MAX_FRAME
        self._send_window = DEFAULT_WINDOW  # the connection's window, towards the peer
        self._recv_window = limits.connection_window_size  # what the peer may still send
        self._received = 0  # connection-level bytes since the last window update sent
        self._connection_update_at = limits.connection_window_size // 2
        self._stream_update_at = limits.stream_window_size // 2
        self._blocked: dict[int, _Stream] = {}  # streams with data waiting for window
        self._control: list[bytes] = []  # frames to write at the end of this read
        self._going_away = False
        self._closed = False  # nothing more is written
        self._closing = False  # the transport is closing
        self._lost = False  # the transport is gone
        self._write_paused = False
        self._drain_waiters: dict[int, list[asyncio.Future[None]]] = {}
        self._resume_waiters: list[asyncio.Future[None]] = []
        now = self._loop.time()
        #: rates and deadlines, checked by the timer
        self._watch = ConnectionWatch(limits, now)
        self._reads = 0  # data_received calls, so far
        self._partial_since = now  # when the frame in _pending began to arrive
        self._sent = 0  # answer frames sent, so far: pings between them are not abuse
        self._timer: asyncio.TimerHandle | None = None
        self._refusal: str | None = None
        self._idle_since = now  # when its last stream ended (or it was made)

    @property
    def idle_since(self) -> float | None:
        """Loop time since which no stream has been open; None while one is, or once the
        connection is going away."""
        if self._streams or self._going_away or self._closed or self._refusal is not None:
            return None
        return self._idle_since

    def refuse(self, reason: str) -> None:
        """Send the connection away as soon as it is made: GOAWAY ENHANCE_YOUR_CALM."""
        self._refusal = reason

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transport is no subclass of asyncio.Transport, but has its methods
        self.transport = writer = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            family = "ipv6" if ":" in str(peer[0]) else "ipv4"
            host = f"[{peer[0]}]" if family == "ipv6" else peer[0]
            self.peer = f"{family}:{host}:{peer[1]}"
        writer.write(initial_frames(self._limits))
        if self._limits.connection_window_size <= DEFAULT_WINDOW:
            self._recv_window = DEFAULT_WINDOW  # the protocol's initial window stands
        if self._refusal is not None:
            self._fail(Http2Error(ENHANCE_YOUR_CALM, self._refusal))
            return
        self._timer = self._loop.call_later(self._watch.interval, self._tick)

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return  # lingering after GOAWAY: what the client still sends is dropped
        self._reads += 1
        try:
            position = self._complete_pending(data) if self._pending else 0
            if position < 0:
                return  # still inside the frame that began in an earlier read
            if not self._preface_seen:
                if len(data) - position < len(PREFACE):
                    self._pending += data[position:]
                    self._partial_since = self._loop.time()
                    return
                position = self._read_preface(data, position)
            position = self._read_frames(data, position)
        except Http2Error as error:
            self._fail(error)
            return
        if position < len(data):
            # a frame begun here: only its bytes wait, not the whole read
            self._pending += memoryview(data)[position:]
            self._partial_since = self._loop.time()
        self._write_control()

    def _complete_pending(self, data: bytes) -> int:
        """Complete the preface or frame begun in earlier reads with the start of ``data``.

        Takes from ``data`` only the bytes that frame lacks, so that a read is copied once
        however its frames fall; the position in ``data`` after them, or -1 when ``data``
        ends before the frame does.
        """
        view = memoryview(data)
        taken = 0
        while True:
            missing = self._need - len(self._pending)
            if len(data) - taken < missing:
                self._pending += view[taken:]
                return -1
            self._pending += view[taken : taken + missing]
            taken += missing
            buffer = bytes(self._pending)
            if not self._preface_seen:
                self._pending = bytearray()
                self._read_preface(buffer, 0)
                return taken
            consumed = self._read_frames(buffer, 0)
            if consumed == len(buffer):
                self._pending = bytearray()
                return taken
            # the 9-byte header arrived and named the payload's length: read on

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = self._lost = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        streams = list(self._streams.values())
        self._streams.clear()
        self._blocked.clear()
        for stream in streams:
            if stream.handler is not None:
                stream.handler.stream_reset()
        self._release_drain_waiters()
        self._release_resume_waiters()
        self._on_closed(self)

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

    # -- reading ----------------------------------------------------------------------------

    def _read_preface(self, data: bytes, position: int) -> int:
        end = position + len(PREFACE)
        if data[position:end] != PREFACE:
            raise Http2Error(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
        self._preface_seen = True
        self._need = 9
        return end

    def _read_frames(self, data: bytes, position: int) -> int:
        end_of_data = len(data)
        max_frame = self._max_frame
        while end_of_data - position >= 9:
            high, low, frame_type, flags, stream_id = unpack_frame_header(data, position)
            length = (high << 16) | low
            if length > max_frame:
                raise Http2Error(
                    FRAME_SIZE_ERROR,
                    f"a frame of {length} bytes, over SETTINGS_MAX_FRAME_SIZE {max_frame}"
                    " (--grpc-http2-max-frame-size)",
                )
            end = position + 9 + length
            if end > end_of_data:
                self._need = end - position
                return position
            stream_id &= 0x7FFFFFFF
            payload = data[position + 9 : end]
            position = end
            if self._continuing is not None and frame_type != CONTINUATION:
                raise Http2Error(PROTOCOL_ERROR, "a header block was interrupted")
            if frame_type == DATA:
                self._on_data(stream_id, flags, payload)
            elif frame_type == HEADERS:
                self._on_headers(stream_id, flags, payload)
            elif frame_type == CONTINUATION:
                self._on_continuation(stream_id, flags, payload)
            elif frame_type == WINDOW_UPDATE:
                self._on_window_update(stream_id, payload)
            elif frame_type == RST_STREAM:
                self._on_rst_stream(stream_id, payload)
            elif frame_type == SETTINGS:
                self._on_settings(stream_id, flags, payload)
            elif frame_type == PING:
                self._on_ping(stream_id, flags, payload)
            elif frame_type == GOAWAY:
                self._going_away = True
                self._close_if_idle()
            elif frame_type == PUSH_PROMISE:
                raise Http2Error(PROTOCOL_ERROR, "a client cannot push")
            # PRIORITY and unknown frame types are ignored, as RFC 9113 allows
        self._need = 9
        return position

    def _on_data(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "DATA on stream 0")
        size = len(payload)  # padding included: flow control counts the whole payload
        self._recv_window -= size
        if self._recv_window < 0:
            raise Http2Error(
                FLOW_CONTROL_ERROR,
                f"DATA beyond the connection's window of {self._limits.connection_window_size}"
                " bytes (--grpc-http2-connection-window-size)",
            )
        # the connection's window reopens at once: each stream's own window bounds its data
        self._received += size
        if self._received >= self._connection_update_at:
            self._control.append(frame(WINDOW_UPDATE, 0, 0, U32.pack(self._received)))
            self._recv_window += self._received
            self._received = 0
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream_id:
                raise Http2Error(PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # a stream this side already finished: its data is dropped
        if stream.remote_closed:
            self._reset(stream, STREAM_CLOSED, notify=True)
            return
        stream.recv_window -= size
        if stream.recv_window < 0:
            self._reset(stream, FLOW_CONTROL_ERROR, notify=True)
            return
        if flags & PADDED:
            payload = strip_padding(payload)
        end_stream = bool(flags & END_STREAM)
        if end_stream:
            stream.remote_closed = True
        else:
            stream.received += size
            if stream.received >= self._stream_update_at and not stream.held:
                self._open_stream_window(stream)
        if stream.handler is not None:
            stream.handler.data_received(payload, end_stream)
        if end_stream:
            self._forget_if_done(stream)

    def _on_headers(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & PADDED:
            payload = strip_padding(payload)
        if flags & PRIORITY_FLAG:
            if len(payload) < 5:
                raise Http2Error(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
            payload = payload[5:]
        end_stream = bool(flags & END_STREAM)
        if flags & END_HEADERS:
            self._on_header_block(stream_id, end_stream, payload)
        else:
            self._continuing = [stream_id, end_stream, [payload], 0]
            self._count_fragment(self._continuing, len(payload))

    def _on_continuation(self, stream_id: int, flags: int, payload: bytes) -> None:
        continuing = self._continuing
        if continuing is None or continuing[0] != stream_id:
            raise Http2Error(PROTOCOL_ERROR, "CONTINUATION without a header block")
        fragments = continuing[2]
        fragments.append(payload)
        self._count_fragment(continuing, len(payload))
        if flags & END_HEADERS:
            self._continuing = None
            self._on_header_block(stream_id, continuing[1], b"".join(fragments))

    def _count_fragment(self, continuing: list, size: int) -> None:
        """Bound a header block as it arrives: its bytes (a running sum) and its frames."""
        continuing[3] += size
        limits = self._limits
        if continuing[3] > limits.max_header_list_size:
            raise Http2Error(
                ENHANCE_YOUR_CALM,
                f"a header block over {limits.max_header_list_size} bytes"
                " (--grpc-max-header-list-size)",
            )
        if len(continuing[2]) > limits.max_continuation_frames:
            raise Http2Error(
                ENHANCE_YOUR_CALM,
                f"a header block in more than {limits.max_continuation_frames} frames"
                " (--grpc-http2-max-continuation-frames)",
            )

    def _on_header_block(self, stream_id: int, end_stream: bool, block: bytes) -> None:
        headers = self._decoder.decode(block)  # always: the dynamic table must stay in step
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._on_trailers(stream, end_stream)
            return
        if stream_id % 2 == 0 or stream_id <= self._last_stream_id:
            raise Http2Error(PROTOCOL_ERROR, f"a client cannot open stream {stream_id}")
        self._last_stream_id = stream_id
        if self._going_away:
            self._control.append(frame(RST_STREAM, 0, stream_id, U32.pack(REFUSED_STREAM)))
            return
        if len(self._streams) >= self._max_streams:
            self._watch.resets.spend(self._loop.time())
            self._control.append(frame(RST_STREAM, 0, stream_id, U32.pack(REFUSED_STREAM)))
            return
        stream = _Stream(stream_id, self._peer_initial_window, self._stream_window)
        stream.remote_closed = end_stream
        self._streams[stream_id] = stream
        stream.handler = self._open_stream(self, stream_id, headers, end_stream)

    def _on_trailers(self, stream: _Stream, end_stream: bool) -> None:
        if stream.remote_closed:
            # half-closed (remote): a second block must not start the call again
            self._reset(stream, STREAM_CLOSED, notify=True)
            return
        # trailers from the client: gRPC has none, so only the end of the stream matters
        if not end_stream:
            raise Http2Error(PROTOCOL_ERROR, f"a second header block on stream {stream.id}")
        stream.remote_closed = True
        if stream.handler is not None:
            stream.handler.data_received(b"", True)
        self._forget_if_done(stream)

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise Http2Error(FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size")
        increment = U32.unpack(payload)[0] & 0x7FFFFFFF
        if stream_id == 0:
            if increment == 0:
                raise Http2Error(PROTOCOL_ERROR, "a connection WINDOW_UPDATE of 0")
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "connection window beyond 2^31-1")
            self._flush_blocked()
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            if stream_id > self._last_stream_id:
                raise Http2Error(PROTOCOL_ERROR, f"WINDOW_UPDATE on idle stream {stream_id}")
            return
        if increment == 0:
            self._reset(stream, PROTOCOL_ERROR, notify=True)
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._reset(stream, FLOW_CONTROL_ERROR, notify=True)
            return
        if stream.outbound:
            self._flush(stream)

    def _on_rst_stream(self, stream_id: int, payload: bytes) -> None:
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "RST_STREAM on stream 0")
        if len(payload) != 4:
            raise Http2Error(FRAME_SIZE_ERROR, "RST_STREAM of the wrong size")
        if stream_id > self._last_stream_id:
            raise Http2Error(PROTOCOL_ERROR, f"RST_STREAM on idle stream {stream_id}")
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        # a call started and dropped at once: rapid reset, when many
        self._watch.resets.spend(self._loop.time())
        del self._streams[stream_id]
        self._blocked.pop(stream_id, None)
        self._release_drain_waiters(stream_id)
        if stream.handler is not None:
            stream.handler.stream_reset()
        self._close_if_idle()

    def _on_settings(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id != 0:
            raise Http2Error(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            if payload:
                raise Http2Error(FRAME_SIZE_ERROR, "a SETTINGS ACK with a payload")
            return
        if len(payload) % 6:
            raise Http2Error(FRAME_SIZE_ERROR, "SETTINGS of the wrong size")
        limits = self._limits
        if len(payload) // 6 > limits.max_settings_entries:
            raise Http2Error(
                ENHANCE_YOUR_CALM,
                f"a SETTINGS frame of {len(payload) // 6} entries, over"
                f" {limits.max_settings_entries} (--grpc-http2-max-settings-entries)",
            )
        self._watch.settings.spend(self._loop.time())
        self._settings_seen = True
        window, max_frame = read_settings(payload)
        if max_frame is not None:
            self._peer_max_frame = max_frame
        if window is not None:
            self._apply_initial_window(window)  # once a frame, however many entries it repeats
        # the peer applies its new limits once it reads the ACK: send it before any data
        self._control.append(frame(SETTINGS, ACK, 0))
        self._write_control()
        self._flush_blocked()

    def _apply_initial_window(self, window: int) -> None:
        delta = window - self._peer_initial_window
        self._peer_initial_window = window
        for stream in self._streams.values():
            stream.send_window += delta
            if stream.send_window > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "a stream window beyond 2^31-1")

    def _on_ping(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id != 0:
            raise Http2Error(PROTOCOL_ERROR, "PING on a stream")
        if len(payload) != 8:
            raise Http2Error(FRAME_SIZE_ERROR, "PING of the wrong size")
        if flags & ACK:
            self._watch.ping_acked(payload)
            return
        self._watch.police_ping(self._loop.time(), self._sent, bool(self._streams))
        self._control.append(frame(PING, ACK, 0, payload))

    # -- writing ----------------------------------------------------------------------------

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

    def hold_window(self, stream_id: int) -> None:
        """Stop opening the stream's window: its handler has not caught up with its data."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            stream.held = True

    def release_window(self, stream_id: int) -> None:
        """Open the stream's window again for what its handler has consumed."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.held:
            return
        stream.held = False
        if stream.received and not stream.remote_closed:
            self._open_stream_window(stream)
            self._write_control()

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

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def _flush(self, stream: _Stream) -> None:
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

    def _open_stream_window(self, stream: _Stream) -> None:
        self._control.append(frame(WINDOW_UPDATE, 0, stream.id, U32.pack(stream.received)))
        stream.recv_window += stream.received
        stream.received = 0

    def _finish_local(self, stream: _Stream) -> None:
        if stream.outbound:
            return
        if not stream.remote_closed:
            # the answer is complete: tell the client to stop sending (as gRPC servers do)
            self._write(frame(RST_STREAM, 0, stream.id, U32.pack(NO_ERROR)))
        self._streams.pop(stream.id, None)
        self._close_if_idle()

    def _forget_if_done(self, stream: _Stream) -> None:
        if stream.local_closed and not stream.outbound:
            self._streams.pop(stream.id, None)
            self._close_if_idle()

    def _reset(self, stream: _Stream, code: int, notify: bool = False) -> None:
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

    def _fail(self, error: Http2Error) -> None:
        log.debug("HTTP/2 connection error from %s: %s", self.peer, error.reason)
        self._write(goaway_frame(self._last_stream_id, error.code, error.reason))
        self._linger()

    # -- time -------------------------------------------------------------------------------

    def _tick(self) -> None:
        """Every so often: the handshake, idle, partial-frame, keepalive and age deadlines."""
        self._timer = None
        if self._closed:
            return
        now = self._loop.time()
        watch = self._watch
        partial_since = self._partial_since if self._pending else None
        reason = watch.overdue(
            now, self._reads, self._settings_seen, partial_since, not self._streams
        )
        if reason is not None:
            self._fail(reason)
            return
        ping = watch.keepalive_ping(now, self._reads, self._sent)
        if ping is not None:
            self._write(frame(PING, 0, 0, ping))
        age = watch.age(now)
        if age == "go_away":
            self.go_away(NO_ERROR, "max_age")
        elif age == "close":
            self.close()
        if not self._closed:
            self._timer = self._loop.call_later(watch.interval, self._tick)
