"""The server side of HTTP/2 (RFC 9113) as gRPC uses it, on an asyncio protocol.

Frames, stream states, flow control in both directions and header compression, and no more:
streams are opened by the client only, server push is never used and priorities are ignored
(both as RFC 9113 allows). Header blocks are decoded with ``hpack``; a block made only of
references to the tables (what a gRPC client sends for every call after its first on a
connection) decodes from a cache, which stays valid while the dynamic table is unchanged.

A :class:`Http2Connection` hands each new stream to the ``open_stream`` callable it was given,
which returns the :class:`StreamHandler` that receives the stream's data; the handler answers
through :meth:`Http2Connection.send_headers`, :meth:`~Http2Connection.send_data` and
:meth:`~Http2Connection.reset_stream`. Data beyond the peer's flow-control windows waits in
the stream's queue until the peer opens them.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

import hpack

log = logging.getLogger(__name__)

PREFACE: Final = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

# frame types (RFC 9113 section 6)
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE = range(9)
CONTINUATION: Final = 9

# flags
END_STREAM: Final = 0x1
ACK: Final = 0x1
END_HEADERS: Final = 0x4
PADDED: Final = 0x8
PRIORITY_FLAG: Final = 0x20

# error codes (RFC 9113 section 7)
NO_ERROR: Final = 0x0
PROTOCOL_ERROR: Final = 0x1
INTERNAL_ERROR: Final = 0x2
FLOW_CONTROL_ERROR: Final = 0x3
STREAM_CLOSED: Final = 0x5
FRAME_SIZE_ERROR: Final = 0x6
REFUSED_STREAM: Final = 0x7
CANCEL: Final = 0x8
COMPRESSION_ERROR: Final = 0x9

# settings
SETTINGS_HEADER_TABLE_SIZE: Final = 0x1
SETTINGS_ENABLE_PUSH: Final = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS: Final = 0x3
SETTINGS_INITIAL_WINDOW_SIZE: Final = 0x4
SETTINGS_MAX_FRAME_SIZE: Final = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE: Final = 0x6

DEFAULT_WINDOW: Final = 65_535
DEFAULT_MAX_FRAME: Final = 16_384
MAX_WINDOW: Final = 2**31 - 1
#: what this side lets a peer send unacknowledged, per stream and per connection: large, so
#: that requests of any size flow without waiting for window updates round trips
LOCAL_WINDOW: Final = 1 << 30
#: the largest frame this side accepts (the protocol's maximum)
LOCAL_MAX_FRAME: Final = (1 << 24) - 1
#: the largest header list this side accepts, in HPACK's accounting
LOCAL_MAX_HEADER_LIST: Final = 1 << 20

_FRAME_HEADER: Final = struct.Struct(">BHBBL")
_pack_frame_header = _FRAME_HEADER.pack
_unpack_frame_header = _FRAME_HEADER.unpack_from
_SETTING: Final = struct.Struct(">HL")
_U32: Final = struct.Struct(">L")
_GOAWAY: Final = struct.Struct(">LL")

Headers = tuple[tuple[str, str], ...]


def frame(frame_type: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: the 9-byte header and its payload."""
    length = len(payload)
    return _pack_frame_header(length >> 16, length & 0xFFFF, frame_type, flags, stream_id) + payload


def frame_header(frame_type: int, flags: int, stream_id: int, length: int) -> bytes:
    """The 9-byte header of a frame whose payload is written separately."""
    return _pack_frame_header(length >> 16, length & 0xFFFF, frame_type, flags, stream_id)


def encode_integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 section 5.1) with ``first``'s flag bits above the prefix."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_literal(name: str, value: str) -> bytes:
    """A header field as a literal that never enters the dynamic table (RFC 7541 6.2.2).

    Answers are encoded this way only, so the peer's table size never matters to this side.
    """
    name_bytes = name.encode("ascii")
    value_bytes = value.encode("ascii")
    return (
        b"\x00"
        + encode_integer(len(name_bytes), 7)
        + name_bytes
        + encode_integer(len(value_bytes), 7)
        + value_bytes
    )


class Http2Error(Exception):
    """A connection error: the connection ends with GOAWAY carrying ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class StreamHandler(Protocol):
    """What a connection tells about one stream."""

    def data_received(self, data: bytes, end_stream: bool) -> None:
        """Data arrived on the stream; ``end_stream``: the peer sends nothing more."""

    def stream_reset(self) -> None:
        """The stream ended before its answer did (peer reset, or the connection is gone)."""


OpenStream = Callable[["Http2Connection", int, Headers, bool], StreamHandler]


class HeaderDecoder:
    """HPACK decoding with a cache for blocks that leave the dynamic table as it was."""

    __slots__ = ("_cache", "_decoder")

    def __init__(self) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=LOCAL_MAX_HEADER_LIST)
        self._cache: dict[bytes, Headers] = {}

    def decode(self, block: bytes) -> Headers:
        """The header fields of one complete block; raises :class:`Http2Error` when invalid."""
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        table = self._decoder.header_table
        before = _table_state(table)
        try:
            headers = tuple(self._decoder.decode(block))
        except hpack.HPACKError as exc:
            raise Http2Error(COMPRESSION_ERROR, f"invalid header block: {exc}") from exc
        if _table_state(table) != before:
            self._cache.clear()  # cached blocks may refer to entries that moved
        elif len(self._cache) < 512:
            self._cache[block] = headers
        return headers


def _table_state(table: hpack.table.HeaderTable) -> tuple[int, int, int]:
    entries = table.dynamic_entries
    # entries are added at the left: a new entry changes the identity of the first one
    return len(entries), id(entries[0]) if entries else 0, table.maxsize


class _Stream:
    __slots__ = (
        "handler",
        "id",
        "local_closed",
        "outbound",
        "received",
        "remote_closed",
        "send_window",
    )

    def __init__(self, stream_id: int, send_window: int) -> None:
        self.id = stream_id
        self.handler: StreamHandler | None = None
        self.send_window = send_window
        self.received = 0  # bytes received since this side last opened the peer's window
        self.remote_closed = False
        self.local_closed = False
        #: what waits for the peer to open its windows: [data, end_stream] or headers
        self.outbound: deque[list] = deque()


class Http2Connection(asyncio.Protocol):
    """One client connection: frames in, streams out to ``open_stream``'s handlers."""

    def __init__(self, open_stream: OpenStream, on_closed: Callable[[Http2Connection], None]):
        self._open_stream = open_stream
        self._on_closed = on_closed
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self._streams: dict[int, _Stream] = {}
        self._pending = bytearray()
        self._need = len(PREFACE)
        self._preface_seen = False
        self._decoder = HeaderDecoder()
        self._last_stream_id = 0
        # continuation of a header block split over frames: (stream id, end_stream, fragments)
        self._continuing: tuple[int, bool, list[bytes]] | None = None
        self._peer_initial_window = DEFAULT_WINDOW
        self._peer_max_frame = DEFAULT_MAX_FRAME
        self._send_window = DEFAULT_WINDOW  # the connection's window, towards the peer
        self._received = 0  # connection-level bytes since the last window update sent
        self._blocked: dict[int, _Stream] = {}  # streams with data waiting for window
        self._control: list[bytes] = []  # frames to write at the end of this read
        self._going_away = False
        self._closed = False
        self._drain_waiters: dict[int, list[asyncio.Future[None]]] = {}

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            family = "ipv6" if ":" in str(peer[0]) else "ipv4"
            host = f"[{peer[0]}]" if family == "ipv6" else peer[0]
            self.peer = f"{family}:{host}:{peer[1]}"
        settings = b"".join(
            _SETTING.pack(key, value)
            for key, value in (
                (SETTINGS_ENABLE_PUSH, 0),
                (SETTINGS_INITIAL_WINDOW_SIZE, LOCAL_WINDOW),
                (SETTINGS_MAX_FRAME_SIZE, LOCAL_MAX_FRAME),
                (SETTINGS_MAX_HEADER_LIST_SIZE, LOCAL_MAX_HEADER_LIST),
            )
        )
        transport.write(
            frame(SETTINGS, 0, 0, settings)
            + frame(WINDOW_UPDATE, 0, 0, _U32.pack(LOCAL_WINDOW - DEFAULT_WINDOW))
        )

    def data_received(self, data: bytes) -> None:
        if self._pending:
            self._pending += data
            if len(self._pending) < self._need:
                return
            data = bytes(self._pending)
            self._pending.clear()
        elif len(data) < self._need:
            self._pending += data
            return
        try:
            position = 0 if self._preface_seen else self._read_preface(data)
            position = self._read_frames(data, position)
        except Http2Error as error:
            self._fail(error)
            return
        if position < len(data):
            self._pending += data[position:]
        self._write_control()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        streams = list(self._streams.values())
        self._streams.clear()
        self._blocked.clear()
        for stream in streams:
            if stream.handler is not None:
                stream.handler.stream_reset()
        self._release_drain_waiters()
        self._on_closed(self)

    # -- reading ----------------------------------------------------------------------------

    def _read_preface(self, data: bytes) -> int:
        if data[: len(PREFACE)] != PREFACE:
            raise Http2Error(PROTOCOL_ERROR, "not an HTTP/2 connection preface")
        self._preface_seen = True
        self._need = 9
        return len(PREFACE)

    def _read_frames(self, data: bytes, position: int) -> int:
        end_of_data = len(data)
        while end_of_data - position >= 9:
            high, low, frame_type, flags, stream_id = _unpack_frame_header(data, position)
            length = (high << 16) | low
            if length > LOCAL_MAX_FRAME:
                raise Http2Error(FRAME_SIZE_ERROR, f"a frame of {length} bytes")
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
        size = len(payload)
        self._received += size
        if self._received >= LOCAL_WINDOW // 2:
            self._control.append(frame(WINDOW_UPDATE, 0, 0, _U32.pack(self._received)))
            self._received = 0
        stream = self._streams.get(stream_id)
        if stream is None or stream.remote_closed:
            if stream_id > self._last_stream_id:
                raise Http2Error(PROTOCOL_ERROR, f"DATA on idle stream {stream_id}")
            return  # a stream this side already finished: its data is dropped
        if flags & PADDED:
            payload = _strip_padding(payload)
        end_stream = bool(flags & END_STREAM)
        if not end_stream:
            stream.received += size
            if stream.received >= LOCAL_WINDOW // 2:
                self._control.append(frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(stream.received)))
                stream.received = 0
        else:
            stream.remote_closed = True
        if stream.handler is not None:
            stream.handler.data_received(payload, end_stream)
        if end_stream:
            self._forget_if_done(stream)

    def _on_headers(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id == 0:
            raise Http2Error(PROTOCOL_ERROR, "HEADERS on stream 0")
        if flags & PADDED:
            payload = _strip_padding(payload)
        if flags & PRIORITY_FLAG:
            payload = payload[5:]
        end_stream = bool(flags & END_STREAM)
        if flags & END_HEADERS:
            self._on_header_block(stream_id, end_stream, payload)
        else:
            self._continuing = (stream_id, end_stream, [payload])

    def _on_continuation(self, stream_id: int, flags: int, payload: bytes) -> None:
        if self._continuing is None or self._continuing[0] != stream_id:
            raise Http2Error(PROTOCOL_ERROR, "CONTINUATION without a header block")
        fragments = self._continuing[2]
        fragments.append(payload)
        if sum(map(len, fragments)) > LOCAL_MAX_HEADER_LIST:
            raise Http2Error(PROTOCOL_ERROR, "a header block beyond the header list limit")
        if flags & END_HEADERS:
            _, end_stream, _ = self._continuing
            self._continuing = None
            self._on_header_block(stream_id, end_stream, b"".join(fragments))

    def _on_header_block(self, stream_id: int, end_stream: bool, block: bytes) -> None:
        headers = self._decoder.decode(block)  # always: the dynamic table must stay in step
        stream = self._streams.get(stream_id)
        if stream is not None:
            # trailers from the client: gRPC has none, so only the end of the stream matters
            if not end_stream:
                raise Http2Error(PROTOCOL_ERROR, f"a second header block on stream {stream_id}")
            stream.remote_closed = True
            if stream.handler is not None:
                stream.handler.data_received(b"", True)
            self._forget_if_done(stream)
            return
        if stream_id % 2 == 0 or stream_id <= self._last_stream_id:
            raise Http2Error(PROTOCOL_ERROR, f"a client cannot open stream {stream_id}")
        self._last_stream_id = stream_id
        if self._going_away:
            self._control.append(frame(RST_STREAM, 0, stream_id, _U32.pack(REFUSED_STREAM)))
            return
        stream = _Stream(stream_id, self._peer_initial_window)
        stream.remote_closed = end_stream
        self._streams[stream_id] = stream
        stream.handler = self._open_stream(self, stream_id, headers, end_stream)

    def _on_window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise Http2Error(FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size")
        increment = _U32.unpack(payload)[0] & 0x7FFFFFFF
        if stream_id == 0:
            self._send_window += increment
            if self._send_window > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "connection window beyond 2^31-1")
            self._flush_blocked()
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        stream.send_window += increment
        if stream.send_window > MAX_WINDOW:
            self._reset(stream, FLOW_CONTROL_ERROR)
            return
        if stream.outbound:
            self._flush(stream)

    def _on_rst_stream(self, stream_id: int, payload: bytes) -> None:
        if stream_id == 0 or len(payload) != 4:
            raise Http2Error(PROTOCOL_ERROR, "malformed RST_STREAM")
        stream = self._streams.pop(stream_id, None)
        if stream is None:
            return
        self._blocked.pop(stream_id, None)
        self._release_drain_waiters(stream_id)
        if stream.handler is not None:
            stream.handler.stream_reset()
        self._close_if_idle()

    def _on_settings(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id != 0:
            raise Http2Error(PROTOCOL_ERROR, "SETTINGS on a stream")
        if flags & ACK:
            return
        if len(payload) % 6:
            raise Http2Error(FRAME_SIZE_ERROR, "SETTINGS of the wrong size")
        for offset in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, offset)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise Http2Error(FLOW_CONTROL_ERROR, "initial window beyond 2^31-1")
                delta = value - self._peer_initial_window
                self._peer_initial_window = value
                for stream in self._streams.values():
                    stream.send_window += delta
            elif key == SETTINGS_MAX_FRAME_SIZE:
                if not DEFAULT_MAX_FRAME <= value <= LOCAL_MAX_FRAME:
                    raise Http2Error(PROTOCOL_ERROR, f"max frame size {value}")
                self._peer_max_frame = value
            # the others do not change what this side sends: answers never index headers
        # the peer applies its new limits once it reads the ACK: send it before any data
        self._control.append(frame(SETTINGS, ACK, 0))
        self._write_control()
        self._flush_blocked()

    def _on_ping(self, stream_id: int, flags: int, payload: bytes) -> None:
        if stream_id != 0 or len(payload) != 8:
            raise Http2Error(PROTOCOL_ERROR, "malformed PING")
        if not flags & ACK:
            self._control.append(frame(PING, ACK, 0, payload))

    # -- writing ----------------------------------------------------------------------------

    def send_headers(self, stream_id: int, block: bytes, end_stream: bool = False) -> None:
        """Send a header block (answer headers or trailers) on a stream."""
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        if end_stream:
            stream.local_closed = True
        if stream.outbound:  # behind data that waits for window
            stream.outbound.append([block, end_stream, True])
            return
        self._write(self._header_frames(stream_id, block, end_stream))
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
        self._send_window -= size
        stream.send_window -= size
        pack = _pack_frame_header
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

    def reset_stream(self, stream_id: int, code: int = CANCEL) -> None:
        """End a stream at once, dropping what waits to be sent on it."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._reset(stream, code)

    def drained(self, stream_id: int) -> asyncio.Future[None] | None:
        """A future done once the stream's queued data is sent; None when nothing waits."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.outbound:
            return None
        future = asyncio.get_running_loop().create_future()
        self._drain_waiters.setdefault(stream_id, []).append(future)
        return future

    def go_away(self) -> None:
        """Refuse new streams; the connection closes once the open ones are done."""
        if self._closed or self._going_away:
            return
        self._going_away = True
        self._write(frame(GOAWAY, 0, 0, _GOAWAY.pack(self._last_stream_id, NO_ERROR)))
        self._close_if_idle()

    def close(self) -> None:
        """Close the connection now; open streams are reset."""
        if self.transport is not None and not self._closed:
            self.transport.close()

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def _header_frames(self, stream_id: int, block: bytes, end_stream: bool) -> bytes:
        flags = END_STREAM if end_stream else 0
        limit = self._peer_max_frame
        if len(block) <= limit:
            return frame(HEADERS, flags | END_HEADERS, stream_id, block)
        chunks = [block[i : i + limit] for i in range(0, len(block), limit)]
        frames = [frame(HEADERS, flags, stream_id, chunks[0])]
        frames += [frame(CONTINUATION, 0, stream_id, chunk) for chunk in chunks[1:-1]]
        frames.append(frame(CONTINUATION, END_HEADERS, stream_id, chunks[-1]))
        return b"".join(frames)

    def _flush(self, stream: _Stream) -> None:
        parts: list[bytes | memoryview] = []
        outbound = stream.outbound
        while outbound:
            item = outbound[0]
            payload, end_stream, is_headers = item
            if is_headers:
                parts.append(self._header_frames(stream.id, payload, end_stream))
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
            self._send_window -= allowed
            stream.send_window -= allowed
            if last:
                outbound.popleft()
            else:
                item[0] = payload[allowed:]
        if parts:
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

    def _finish_local(self, stream: _Stream) -> None:
        if stream.outbound:
            return
        if not stream.remote_closed:
            # the answer is complete: tell the client to stop sending (as gRPC servers do)
            self._write(frame(RST_STREAM, 0, stream.id, _U32.pack(NO_ERROR)))
        self._streams.pop(stream.id, None)
        self._close_if_idle()

    def _forget_if_done(self, stream: _Stream) -> None:
        if stream.local_closed and not stream.outbound:
            self._streams.pop(stream.id, None)
            self._close_if_idle()

    def _reset(self, stream: _Stream, code: int) -> None:
        self._streams.pop(stream.id, None)
        self._blocked.pop(stream.id, None)
        stream.outbound.clear()
        self._release_drain_waiters(stream.id)
        self._write(frame(RST_STREAM, 0, stream.id, _U32.pack(code)))
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

    def _close_if_idle(self) -> None:
        if self._going_away and not self._streams:
            self.close()

    def _write_control(self) -> None:
        if self._control:
            control, self._control = self._control, []
            self._write(b"".join(control))

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self._closed:
            self.transport.write(data)

    def _fail(self, error: Http2Error) -> None:
        log.debug("HTTP/2 connection error from %s: %s", self.peer, error.reason)
        self._write(
            frame(
                GOAWAY,
                0,
                0,
                _GOAWAY.pack(self._last_stream_id, error.code) + error.reason.encode()[:256],
            )
        )
        self.close()


def _strip_padding(payload: bytes) -> bytes:
    if not payload:
        raise Http2Error(PROTOCOL_ERROR, "a padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise Http2Error(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - pad]
