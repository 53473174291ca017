"""HTTP/2's frames (RFC 9113) as this side reads and writes them: the protocol's numbers
(frame types, flags, error codes, settings, window and frame sizes), frames packed and
parsed, and the connection error.

Functions of their arguments only; a connection's state lives in :mod:`.http2`.
"""

from __future__ import annotations

import struct
from typing import Final

from triton_core.frontends.grpc.limits import GrpcLimits

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
ENHANCE_YOUR_CALM: Final = 0xB

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
#: the largest frame size the protocol allows
PROTOCOL_MAX_FRAME: Final = (1 << 24) - 1

FRAME_HEADER: Final = struct.Struct(">BHBBL")
#: a frame's 9-byte header from (length >> 16, length & 0xFFFF, type, flags, stream id)
pack_frame_header = FRAME_HEADER.pack
unpack_frame_header = FRAME_HEADER.unpack_from
#: one entry of a SETTINGS frame: identifier, value
SETTING: Final = struct.Struct(">HL")
U32: Final = struct.Struct(">L")
_GOAWAY: Final = struct.Struct(">LL")


class Http2Error(Exception):
    """A connection error: the connection ends with GOAWAY carrying ``code``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def frame(frame_type: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: the 9-byte header and its payload."""
    length = len(payload)
    return pack_frame_header(length >> 16, length & 0xFFFF, frame_type, flags, stream_id) + payload


def frame_header(frame_type: int, flags: int, stream_id: int, length: int) -> bytes:
    """The 9-byte header of a frame whose payload is written separately."""
    return pack_frame_header(length >> 16, length & 0xFFFF, frame_type, flags, stream_id)


def header_frames(stream_id: int, block: bytes, end_stream: bool, max_frame: int) -> bytes:
    """A header block as HEADERS and, when it is over ``max_frame``, CONTINUATION frames."""
    flags = END_STREAM if end_stream else 0
    if len(block) <= max_frame:
        return frame(HEADERS, flags | END_HEADERS, stream_id, block)
    chunks = [block[i : i + max_frame] for i in range(0, len(block), max_frame)]
    frames = [frame(HEADERS, flags, stream_id, chunks[0])]
    frames += [frame(CONTINUATION, 0, stream_id, chunk) for chunk in chunks[1:-1]]
    frames.append(frame(CONTINUATION, END_HEADERS, stream_id, chunks[-1]))
    return b"".join(frames)


def goaway_frame(last_stream_id: int, code: int, reason: str) -> bytes:
    """GOAWAY: the last stream this side answers, the error code and the reason (its first
    256 bytes)."""
    return frame(GOAWAY, 0, 0, _GOAWAY.pack(last_stream_id, code) + reason.encode()[:256])


def initial_frames(limits: GrpcLimits) -> bytes:
    """What this side sends first: its SETTINGS, and a WINDOW_UPDATE that opens the
    connection's window to its size when that is over the protocol's initial 65,535."""
    settings = b"".join(
        SETTING.pack(key, value)
        for key, value in (
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_MAX_CONCURRENT_STREAMS, limits.max_concurrent_streams),
            (SETTINGS_INITIAL_WINDOW_SIZE, limits.stream_window_size),
            (SETTINGS_MAX_FRAME_SIZE, limits.max_frame_size),
            (SETTINGS_MAX_HEADER_LIST_SIZE, limits.max_header_list_size),
        )
    )
    out = frame(SETTINGS, 0, 0, settings)
    if limits.connection_window_size > DEFAULT_WINDOW:
        increment = limits.connection_window_size - DEFAULT_WINDOW
        out += frame(WINDOW_UPDATE, 0, 0, U32.pack(increment))
    return out


def read_settings(payload: bytes) -> tuple[int | None, int | None]:
    """The initial window size and the max frame size a SETTINGS payload sets (None: not
    set; the last entry of each counts); raises :class:`Http2Error` for a value out of range.

    The other settings do not change what this side sends: answers never index headers.
    """
    window = max_frame = None
    for offset in range(0, len(payload), 6):
        key, value = SETTING.unpack_from(payload, offset)
        if key == SETTINGS_INITIAL_WINDOW_SIZE:
            if value > MAX_WINDOW:
                raise Http2Error(FLOW_CONTROL_ERROR, "initial window beyond 2^31-1")
            window = value
        elif key == SETTINGS_MAX_FRAME_SIZE:
            if not DEFAULT_MAX_FRAME <= value <= PROTOCOL_MAX_FRAME:
                raise Http2Error(PROTOCOL_ERROR, f"max frame size {value}")
            max_frame = value
        elif key == SETTINGS_ENABLE_PUSH and value > 1:
            raise Http2Error(PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH {value}")
    return window, max_frame


def strip_padding(payload: bytes) -> bytes:
    """A padded frame's payload without its pad length and padding."""
    if not payload:
        raise Http2Error(PROTOCOL_ERROR, "a padded frame without its pad length")
    pad = payload[0]
    if pad >= len(payload):
        raise Http2Error(PROTOCOL_ERROR, "padding longer than the frame")
    return payload[1 : len(payload) - pad]
