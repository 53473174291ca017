"""Buffers of large request messages kept for reuse (--grpc-infer-allocation-pool-size)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import wait_until_async
from tests.unit.test_grpc_http2 import (
    INFER,
    RawClient,
    assert_echoed,
    echo_request,
    message,
)
from tests.unit.test_grpc_servicer import StandInServer
from triton_core.frontends import receive_buffers
from triton_core.frontends.grpc import create_grpc_server
from triton_core.frontends.receive_buffers import BufferPool, join_into

MIB = 1 << 20


def test_a_buffer_is_reused_only_once_nothing_refers_to_it() -> None:
    pool = BufferPool(count=2)
    first = pool.take(5 * MIB)
    first[:] = 1
    view = first[10:20]
    del first
    second = pool.take(5 * MIB)  # the first is still viewed: fresh memory
    assert pool.reused == 0 and len(pool) == 2
    assert not np.shares_memory(second, view)
    del view
    third = pool.take(5 * MIB - 7)
    assert pool.reused == 1 and third.nbytes == 5 * MIB - 7
    assert not np.shares_memory(third, second)
    third[:] = 3  # writable


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def test_the_smallest_free_buffer_that_fits_is_taken() -> None:
    pool = BufferPool(count=3)
    small, large = pool.take(5 * MIB), pool.take(9 * MIB)
    small_at, large_at = address(small), address(large)  # no references: they go free
    del small, large
    taken = pool.take(4 * MIB)
    assert address(taken) == small_at
    taken_large = pool.take(6 * MIB)  # the small one is in use, and too small anyway
    assert address(taken_large) == large_at
    assert pool.reused == 2


def test_count_and_bytes_bound_what_is_kept() -> None:
    pool = BufferPool(count=2, max_bytes=12 * MIB)
    held = [pool.take(5 * MIB), pool.take(5 * MIB)]
    assert len(pool) == 2 and pool.kept_bytes == 10 * MIB
    held.append(pool.take(5 * MIB))  # both kept ones in use: this one is not kept
    assert len(pool) == 2 and pool.kept_bytes == 10 * MIB
    too_large = pool.take(13 * MIB)  # over max_bytes: never kept
    assert len(pool) == 2 and too_large.nbytes == 13 * MIB
    del held[0]
    replaced = pool.take(6 * MIB)  # the free 5 MiB one gives way to it
    assert len(pool) == 2 and pool.kept_bytes == 11 * MIB and replaced.nbytes == 6 * MIB


def test_count_zero_keeps_nothing() -> None:
    pool = BufferPool(count=0)
    for _ in range(3):
        pool.take(5 * MIB)
    assert len(pool) == 0 and pool.reused == 0 and pool.kept_bytes == 0


def test_an_idle_buffer_is_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(receive_buffers.time, "monotonic", lambda: now[0])
    pool = BufferPool(count=2, idle_seconds=60.0)
    pool.take(5 * MIB)
    now[0] += 30
    pool.take(5 * MIB)  # reuses it: used 30 s ago
    assert pool.reused == 1 and len(pool) == 1
    now[0] += 61
    pool.take(1 * MIB)
    assert pool.reused == 1 and len(pool) == 1 and pool.kept_bytes == 1 * MIB


async def test_an_idle_server_gives_its_buffers_back() -> None:
    """On the event loop a timer lets idle buffers go, with no message to trigger it."""
    pool = BufferPool(count=2, idle_seconds=0.05)
    pool.take(5 * MIB)
    in_use = pool.take(6 * MIB)
    assert len(pool) == 2
    # both go, the one in use too: its last user frees it
    await wait_until_async(lambda: len(pool) == 0, timeout=5.0)
    assert pool.kept_bytes == 0 and pool._trim_timer is None
    in_use[:] = 1  # still the caller's, whole
    pool.take(5 * MIB)
    assert pool._trim_timer is not None
    pool.close()
    assert len(pool) == 0 and pool._trim_timer is None


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        BufferPool(count=-1)


def test_join_into_copies_the_parts_in_order() -> None:
    parts = [bytes([index]) * (1000 + index) for index in range(50)]
    size = sum(map(len, parts))
    for pool in (None, BufferPool(count=1)):
        joined = join_into(parts, size, pool)
        assert joined.readonly and bytes(joined) == b"".join(parts)


async def _echo_server(stand_in: StandInServer, count: int) -> object:
    server = create_grpc_server(stand_in, "127.0.0.1", 0, transport="http2", allocation_pool=count)
    await server.start()
    return server


@pytest.mark.parametrize("count", [0, 2])
async def test_large_requests_answer_right_with_buffers_reused(count: int) -> None:
    """Echoed answers view their request's buffer: each is right, sent one after the other
    and two at a time, and the buffers are reused only with the pool on."""
    stand_in = StandInServer()
    server = await _echo_server(stand_in, count)
    client = await RawClient.connect(server.port)
    try:
        rng = np.random.default_rng(count)
        stream_id = 1
        for _ in range(3):
            values = rng.random(2 * MIB, dtype=np.float32)  # an 8 MiB message
            client.call(stream_id, INFER, message(echo_request(values)))
            assert_echoed(await client.answer(stream_id, window_updates=True), values)
            stand_in.requests.clear()  # the stand-in keeps what it served, views included
            stream_id += 2
        both = [rng.random(2 * MIB, dtype=np.float32) for _ in range(2)]
        for offset, values in enumerate(both):
            client.call(stream_id + 2 * offset, INFER, message(echo_request(values)))
        answers = [
            await client.answer(stream_id, window_updates=True),
            await client.answer(stream_id + 2, window_updates=True),
        ]
        for answer, values in zip(answers, both, strict=True):
            assert_echoed(answer, values)
        pool = server.message_buffers  # type: ignore[attr-defined]
        if count:
            assert pool.reused >= 2 and len(pool) <= count
        else:
            assert pool.reused == 0 and len(pool) == 0
    finally:
        await client.close()
        await server.stop(None)  # type: ignore[attr-defined]
