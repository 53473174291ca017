"""The server side of HTTP/2 (RFC 9113) as gRPC uses it, on an asyncio protocol.

Frames, stream states, flow control in both directions and header compression, and no more:
streams are opened by the client only, server push is never used and priorities are ignored
(both as RFC 9113 allows). :class:`Http2Connection` reads the frames, opens and ends the
streams and grants the client's windows; what goes out, and the connection's end, is its
writing half, :class:`~.output.Http2Output`. The frames' numbers, packing and parsing are in
:mod:`.frames`, header compression (HPACK, with a cache for the blocks gRPC clients repeat)
in :mod:`.hpack_codec`.

Every client is hostile until checked: what a connection may make this side hold or do is
bounded by its :class:`~.limits.GrpcLimits` (frame and header sizes, streams, windows granted
as data is consumed, queued output, reset, SETTINGS and PING rates, and time), and a client
that goes beyond gets the RFC's answer: RST_STREAM, or GOAWAY and a close. Sizes are checked
here, as the frames are read; rates and deadlines by the connection's
:class:`~.watch.ConnectionWatch`.

A :class:`Http2Connection` hands each new stream to the ``open_stream`` callable it was given,
which returns the :class:`~.output.StreamHandler` that receives the stream's data; the
handler answers through :meth:`Http2Connection.send_headers`,
:meth:`~Http2Connection.send_data` and :meth:`~Http2Connection.reset_stream`. Data beyond the
peer's flow-control windows waits in the stream's queue until the peer opens them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from triton_core.frontends.grpc.frames import (
    ACK,
    CONTINUATION,
    DATA,
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
    initial_frames,
    read_settings,
    strip_padding,
    unpack_frame_header,
)
from triton_core.frontends.grpc.hpack_codec import HeaderDecoder, Headers
from triton_core.frontends.grpc.limits import DEFAULT_LIMITS, GrpcLimits
from triton_core.frontends.grpc.output import Http2Output, Stream, StreamHandler
from triton_core.frontends.grpc.watch import ConnectionWatch

OpenStream = Callable[["Http2Connection", int, Headers, bool], StreamHandler]


class Http2Connection(Http2Output, asyncio.Protocol):
    """One client connection: frames in, streams out to ``open_stream``'s handlers."""

    def __init__(
        self,
        open_stream: OpenStream,
        on_closed: Callable[[Http2Connection], None],
        limits: GrpcLimits = DEFAULT_LIMITS,
    ) -> None:
        super().__init__(limits)
        self._open_stream = open_stream
        self._on_closed = on_closed
        self._max_frame = limits.max_frame_size
        self._max_streams = limits.max_concurrent_streams
        self._stream_window = limits.stream_window_size
        self._pending = bytearray()
        self._need = len(PREFACE)
        self._preface_seen = False
        self._settings_seen = False
        self._decoder = HeaderDecoder(limits.max_header_list_size)
        # a header block split over frames: [stream id, end_stream, fragments, bytes]
        self._continuing: list | None = None
        self._peer_initial_window = DEFAULT_WINDOW
        self._recv_window = limits.connection_window_size  # what the peer may still send
        self._received = 0  # connection-level bytes since the last window update sent
        self._connection_update_at = limits.connection_window_size // 2
        self._stream_update_at = limits.stream_window_size // 2
        now = self._loop.time()
        #: rates and deadlines, checked by the timer
        self._watch = ConnectionWatch(limits, now)
        self._reads = 0  # data_received calls, so far
        self._partial_since = now  # when the frame in _pending began to arrive
        self._timer: asyncio.TimerHandle | None = None
        self._refusal: str | None = None

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
        stream = Stream(stream_id, self._peer_initial_window, self._stream_window)
        stream.remote_closed = end_stream
        self._streams[stream_id] = stream
        stream.handler = self._open_stream(self, stream_id, headers, end_stream)

    def _on_trailers(self, stream: Stream, end_stream: bool) -> None:
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

    # -- the receive windows ----------------------------------------------------------------

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

    def _open_stream_window(self, stream: Stream) -> None:
        self._control.append(frame(WINDOW_UPDATE, 0, stream.id, U32.pack(stream.received)))
        stream.recv_window += stream.received
        stream.received = 0

    def _forget_if_done(self, stream: Stream) -> None:
        if stream.local_closed and not stream.outbound:
            self._streams.pop(stream.id, None)
            self._close_if_idle()

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
