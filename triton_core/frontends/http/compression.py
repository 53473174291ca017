"""gzip/deflate bodies for ``/infer`` (PROTOCOL 1.7): request decompression with a size cap
and response encoding chosen from ``Accept-Encoding`` q-weights as Triton does."""

from __future__ import annotations

import functools
import gzip
import zlib
from typing import Final

from triton_core.errors import TritonError, invalid_arg, unsupported
from triton_core.frontends.inflate import DEFLATE, GZIP, InflatedTooLarge, inflate

IDENTITY: Final = "identity"

#: sent with the 501 answer to an unknown Content-Encoding
SUPPORTED_ENCODINGS: Final = "gzip, deflate"


def request_encoding(content_encoding: str | None) -> str:
    """The request body's encoding; UNSUPPORTED for anything but gzip, deflate, identity."""
    if not content_encoding:
        return IDENTITY
    encoding = content_encoding.strip().lower()
    if encoding in (GZIP, DEFLATE, IDENTITY):
        return encoding
    raise unsupported("Unsupported compression type")


def decompress(body: bytes, encoding: str, max_size: int) -> bytearray:
    """Inflate a gzip or deflate (zlib stream) body, refusing more than ``max_size`` bytes."""
    try:
        return inflate(body, encoding, max_size)
    except InflatedTooLarge:
        raise too_large("decompressed request body", None, max_size) from None
    except zlib.error as exc:
        raise invalid_arg(f"failed to decompress the {encoding} request body: {exc}") from None


def decompress_within(body: bytes, encoding: str, max_size: int, budget: int) -> bytearray | None:
    """:func:`decompress`, or None as soon as the output passes ``budget`` bytes (when that
    is below ``max_size``): the caller inflates it again where the work may take long."""
    if budget >= max_size:
        return decompress(body, encoding, max_size)
    try:
        return inflate(body, encoding, budget)
    except InflatedTooLarge:
        return None
    except zlib.error as exc:
        raise invalid_arg(f"failed to decompress the {encoding} request body: {exc}") from None


def compress(body: bytes, encoding: str) -> bytes:
    """Compress a whole response body (JSON and binary blobs together)."""
    if encoding == GZIP:
        return gzip.compress(body, compresslevel=6)
    return zlib.compress(body)


@functools.lru_cache(maxsize=64)
def response_encoding(accept_encoding: str) -> str:
    """Best of identity/gzip/deflate by q-weight (ties keep the first); identity by default.

    Clients send the same header on every request, hence the cache.
    """
    best = IDENTITY
    best_weight = 0.0
    for part in accept_encoding.split(","):
        coding, _, params = part.partition(";")
        coding = coding.strip().lower()
        weight = 1.0
        params = params.strip()
        if params:
            if not params.startswith("q="):
                continue
            try:
                weight = float(params[2:])
            except ValueError:
                continue
        if coding in (IDENTITY, GZIP, DEFLATE) and weight > best_weight:
            best = coding
            best_weight = weight
    return best


def too_large(what: str, size: int | None, max_size: int) -> TritonError:
    """The INVALID_ARG answer for a body over ``--http-max-input-size``."""
    actual = f" ({size} bytes)" if size is not None else ""
    return invalid_arg(
        f"{what} size{actual} exceeds the maximum allowed value of {max_size} bytes. "
        "Use --http-max-input-size to increase the limit."
    )
