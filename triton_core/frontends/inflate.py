"""Bounded gzip and deflate inflation, for HTTP request bodies and gRPC messages alike.

A compression bomb stops at the limit holding at most the limit plus one chunk: output grows a
chunk at a time into one buffer, instead of zlib's own growing output joined at the end (which
holds the output twice at its peak).
"""

from __future__ import annotations

import zlib
from typing import Final

GZIP: Final = "gzip"
DEFLATE: Final = "deflate"
#: zlib's window bits for each encoding (gzip's header and trailer, or zlib's)
WBITS: Final = {GZIP: 16 + zlib.MAX_WBITS, DEFLATE: zlib.MAX_WBITS}
#: output inflated per step; the most held beyond the limit
CHUNK: Final = 1 << 20


class InflatedTooLarge(Exception):
    """The inflated data would exceed the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"inflated data exceeds {limit} bytes")
        self.limit = limit


def inflate(data: bytes | memoryview, encoding: str, limit: int) -> bytearray:
    """``data`` (gzip or deflate) inflated, ``limit`` bytes at most.

    Raises :class:`InflatedTooLarge` past the limit and ``zlib.error`` for corrupt or truncated
    data. Bytes after the end of the compressed stream are ignored, as zlib does.
    """
    inflater = zlib.decompressobj(WBITS[encoding])
    out = bytearray()
    pending: bytes | memoryview = data
    while not inflater.eof:
        piece = inflater.decompress(pending, CHUNK)
        tail = inflater.unconsumed_tail
        if not piece and len(tail) == len(pending):
            raise zlib.error("incomplete or truncated stream")
        if len(out) + len(piece) > limit:
            raise InflatedTooLarge(limit)
        out += piece
        pending = tail
    return out
