"""gRPC's header fields over HTTP/2: status trailers (with percent-encoded messages and
metadata), ``grpc-timeout``, the compression algorithm an answer uses, and what the transport
reads of a call's headers."""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import Final

import grpc

from triton_core.frontends.grpc.hpack_codec import Headers, encode_literal
from triton_core.frontends.inflate import WBITS

OK: Final = grpc.StatusCode.OK
#: the trailers of a call that succeeded
STATUS_OK: Final = encode_literal("grpc-status", "0")
_TIMEOUT_UNITS: Final = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def encode_status(code: grpc.StatusCode, details: str, metadata: Iterable = ()) -> bytes:
    """The trailers of a call: status, message (percent-encoded), trailing metadata."""
    if code is OK and not details and not metadata:
        return STATUS_OK
    block = encode_literal("grpc-status", str(code.value[0]))
    if details:
        block += encode_literal("grpc-message", percent_encode(details))
    return block + encode_metadata(metadata)


def percent_encode(text: str) -> str:
    """gRPC's encoding of ``grpc-message``: UTF-8, with '%' and bytes outside 0x20-0x7E escaped."""
    raw = text.encode("utf-8")
    if all(0x20 <= byte <= 0x7E and byte != 0x25 for byte in raw):
        return text
    return "".join(
        chr(byte) if 0x20 <= byte <= 0x7E and byte != 0x25 else f"%{byte:02X}" for byte in raw
    )


def encode_metadata(metadata: Iterable) -> bytes:
    block = b""
    for key, value in metadata:
        name = key.lower()
        if name.endswith("-bin"):
            raw = value if isinstance(value, bytes) else str(value).encode()
            text = base64.b64encode(raw).decode("ascii").rstrip("=")
        else:
            text = str(value)
        block += encode_literal(name, text)
    return block


def parse_timeout(value: str) -> float | None:
    """Seconds from a ``grpc-timeout`` value (``<digits><unit>``), None when malformed."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not digits.isdigit() or len(digits) > 8:
        return None
    return int(digits) * unit


#: algorithm -> (zlib wbits, the grpc-encoding header)
COMPRESSORS: Final = {
    encoding: (wbits, encode_literal("grpc-encoding", encoding))
    for encoding, wbits in WBITS.items()
}


def algorithm_for_level(level: int, headers: Headers) -> str | None:
    """gRPC core's choice for a compression level (1 low, 2 medium, 3 high): of the
    algorithms the client accepts, ranked gzip then deflate, the first for low, the middle
    one for medium, the last for high; None when it accepts neither."""
    accepted: tuple[str, ...] = ()
    for name, value in headers:
        if name == "grpc-accept-encoding":
            accepted = tuple(part.strip() for part in value.split(","))
            break
    ranked = [algorithm for algorithm in ("gzip", "deflate") if algorithm in accepted]
    if not ranked or level <= 0:
        return None
    if level == 1:
        return ranked[0]
    if level == 2:
        return ranked[len(ranked) // 2]
    return ranked[-1]


def call_fields(headers: Headers) -> tuple[str | None, ...]:
    """What the transport reads of a call's headers: path, content type, encoding, timeout."""
    path = content_type = encoding = timeout = None
    for name, value in headers:
        if name == ":path":
            path = value
        elif name == "content-type":
            content_type = value
        elif name == "grpc-encoding":
            encoding = value
        elif name == "grpc-timeout":
            timeout = value
    return path, content_type, encoding, timeout
