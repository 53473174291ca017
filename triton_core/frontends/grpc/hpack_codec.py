"""Header compression (HPACK, RFC 7541) on this side of HTTP/2.

Answers' fields are encoded as literals that never enter the dynamic table, so the peer's
table size never matters to this side. Blocks are decoded with ``hpack``; a block made only
of references to the tables (what a gRPC client sends for every call after its first on a
connection) decodes from a cache, which stays valid while the dynamic table is unchanged.
"""

from __future__ import annotations

from typing import Final, cast

import hpack
from hpack.table import HeaderTable

from triton_core.frontends.grpc.frames import COMPRESSION_ERROR, ENHANCE_YOUR_CALM, Http2Error
from triton_core.frontends.grpc.limits import DEFAULT_LIMITS

#: header blocks a connection's decode cache keeps, and their decoded bytes at most
_CACHE_ENTRIES: Final = 64
_CACHE_BYTES: Final = 1 << 16

#: a header list: (name, value) pairs
Headers = tuple[tuple[str, str], ...]


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


class _CountedTable(HeaderTable):
    """hpack's dynamic table, counting its changes so that a cache can tell when it moved.

    Every insertion (and the evictions it causes) and every resize bumps ``generation``; a
    block decoded at one generation decodes the same while the generation stays.
    """

    def __init__(self) -> None:
        super().__init__()
        self.generation = 0

    def add(self, name: bytes, value: bytes) -> None:
        self.generation += 1
        super().add(name, value)

    @property
    def maxsize(self) -> int:
        return self._maxsize

    @maxsize.setter
    def maxsize(self, newmax: int) -> None:
        self.generation += 1
        HeaderTable.maxsize.fset(self, newmax)  # type: ignore[attr-defined]


class HeaderDecoder:
    """HPACK decoding with a cache for blocks that leave the dynamic table as it was."""

    __slots__ = ("_cache", "_cache_bytes", "_decoder", "_limit", "_table")

    def __init__(self, max_header_list_size: int = DEFAULT_LIMITS.max_header_list_size) -> None:
        self._decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._table = _CountedTable()
        self._decoder.header_table = self._table
        self._limit = max_header_list_size
        self._cache: dict[bytes, Headers] = {}
        self._cache_bytes = 0

    def decode(self, block: bytes) -> Headers:
        """The header fields of one complete block; raises :class:`Http2Error` when invalid."""
        cached = self._cache.get(block)
        if cached is not None:
            return cached
        before = self._table.generation
        try:
            # str pairs: decode() without raw=True; hpack's annotation covers both
            headers = cast(Headers, tuple(self._decoder.decode(block)))
        except hpack.OversizedHeaderListError as exc:
            raise Http2Error(
                ENHANCE_YOUR_CALM,
                f"a header list over {self._limit} bytes (--grpc-max-header-list-size)",
            ) from exc
        except hpack.HPACKError as exc:
            raise Http2Error(COMPRESSION_ERROR, f"invalid header block: {exc}") from exc
        if self._table.generation != before:
            self._cache.clear()  # cached blocks may refer to entries that moved
            self._cache_bytes = 0
        else:
            self._remember(block, headers)
        return headers

    def _remember(self, block: bytes, headers: Headers) -> None:
        size = len(block) + sum(len(name) + len(value) for name, value in headers)
        if len(self._cache) < _CACHE_ENTRIES and self._cache_bytes + size <= _CACHE_BYTES:
            self._cache[block] = headers
            self._cache_bytes += size
