"""The one bounded inflate that HTTP bodies and gRPC messages go through."""

from __future__ import annotations

import gzip
import subprocess
import sys
import zlib

import pytest

from triton_core.frontends.inflate import CHUNK, InflatedTooLarge, inflate

LIMIT = 16 << 20


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_round_trip_up_to_the_limit(encoding: str) -> None:
    data = bytes(range(256)) * 4096 + b"tail"
    packed = gzip.compress(data) if encoding == "gzip" else zlib.compress(data)
    assert inflate(packed, encoding, len(data)) == data
    assert inflate(memoryview(packed), encoding, len(data) + 1) == data
    with pytest.raises(InflatedTooLarge):
        inflate(packed, encoding, len(data) - 1)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_truncated_and_corrupt_data_are_errors(encoding: str) -> None:
    packed = gzip.compress(b"x" * 100_000) if encoding == "gzip" else zlib.compress(b"x" * 100_000)
    for broken in (packed[: len(packed) // 2], packed[:-1], b"", b"not compressed at all"):
        with pytest.raises(zlib.error):
            inflate(broken, encoding, LIMIT)


def test_bytes_after_the_stream_are_ignored() -> None:
    assert inflate(zlib.compress(b"abc") + b"junk", "deflate", 10) == b"abc"


_BOMB_PROBE = """
import resource, sys, zlib
from triton_core.frontends.inflate import InflatedTooLarge, inflate
encoding, limit = sys.argv[1], int(sys.argv[2])
packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
block = bytes(1 << 20)
bomb = b"".join(packer.compress(block) for _ in range(4 * limit >> 20)) + packer.flush()
del block
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    inflate(bomb, encoding, limit)
except InflatedTooLarge:
    print(len(bomb), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_bomb_stops_at_the_limit_holding_the_limit_and_a_chunk(encoding: str) -> None:
    """Peak resident memory, in a fresh interpreter: a 64 MiB limit and a bomb of 256 MiB."""
    limit = 64 << 20
    probe = [sys.executable, "-c", _BOMB_PROBE, encoding, str(limit)]
    bomb_size, peak_rise = map(int, subprocess.check_output(probe, timeout=120).split())
    assert bomb_size < limit // 200
    # zlib's own bounded decompress holds the output twice at its peak (2 x the limit)
    assert peak_rise < limit + 4 * CHUNK, peak_rise
