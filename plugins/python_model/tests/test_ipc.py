"""Shared memory and messages between the server and a stub, in one process."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from triton_core_python import ipc
from triton_core_python.regions import MappedRegions, RegionAnnouncer, RegionError
from triton_core_python.shm import (
    REUSE_LIMIT,
    Arena,
    Leases,
    PeerSegments,
    SharedMemoryError,
    create_memory_file,
)
from triton_core_python.wire import (
    INLINE_BYTES,
    Packer,
    deserialize_bytes,
    serialize_bytes,
    unpack,
)


def test_a_steady_load_reuses_one_segment():
    arena = Arena(1 << 16)
    for _ in range(1000):
        segment, offset = arena.alloc(300)
        assert offset == 0  # freed before the next one: the segment starts over
        arena.free(segment.id)
    assert arena.stats() == (1, 1 << 16)
    arena.close()


def test_blocks_in_flight_grow_the_arena_and_it_settles_back():
    arena = Arena(1 << 12)
    held = [arena.alloc(1000) for _ in range(20)]  # 20 KiB in flight: more segments
    assert arena.stats()[0] > 1
    assert len({(segment.id, offset) for segment, offset in held}) == 20
    for segment, _ in held:
        arena.free(segment.id)
    count, _ = arena.stats()
    assert count <= 2  # the current segment and at most one spare stay
    assert list(arena.dropped)  # the peer is told to forget the others
    arena.close()


@pytest.mark.parametrize("held", [1, 2, 4])
def test_blocks_freed_a_few_late_settle_into_a_few_segments(held):
    """The answers of a busy frontend free their blocks some messages later. The segments
    must settle, not be sized for blocks long freed and made anew each time one fills:
    a new segment costs page faults on every first write into it."""
    arena = Arena(1 << 20)
    made = set()
    live: list[int] = []
    for _ in range(2000):
        segment, _ = arena.alloc((1 << 20) + 64)
        made.add(segment.id)
        live.append(segment.id)
        while len(live) > held:
            arena.free(live.pop(0))
    assert len(made) <= 4, sorted(made)
    assert arena.stats()[1] <= 32 << 20
    arena.close()


def test_a_giant_block_gets_its_own_segment_which_goes_away_when_freed():
    arena = Arena(1 << 16)
    segment, offset = arena.alloc(REUSE_LIMIT + 4096)
    assert offset == 0 and segment.size >= REUSE_LIMIT + 4096
    arena.free(segment.id)
    assert segment.id in arena.dropped
    assert all(size <= REUSE_LIMIT for size in [arena.stats()[1]])
    arena.close()


def test_memory_files_have_no_names():
    fd = create_memory_file(4096)
    try:
        assert os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")
    finally:
        os.close(fd)


def test_a_missing_directory_says_what_to_do(tmp_path):
    with pytest.raises(SharedMemoryError) as info:
        create_memory_file(4096, str(tmp_path / "missing"))
    message = str(info.value)
    assert "does not exist" in message and "shm-directory" in message


def test_a_directory_leaves_no_files(tmp_path):
    fd = create_memory_file(4096, str(tmp_path))
    os.close(fd)
    assert list(tmp_path.iterdir()) == []


DATATYPES = {
    "BOOL": np.array([[True, False]]),
    "UINT8": np.arange(6, dtype=np.uint8).reshape(2, 3),
    "INT64": np.array([-(2**62), 2**62]),
    "FP16": np.array([1.5, -2.25], dtype=np.float16),
    "FP32": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2],  # not contiguous
    "FP64": np.array([np.nan, np.inf]),
    "BF16": np.array([0x3F80], dtype=np.uint16),
    "BYTES": np.array([[b"a\x00b", b""], [b"\x00\x00", "é".encode()]], dtype=object),
    "INT32": np.zeros((0, 4), dtype=np.int32),  # zero elements
}


def test_tensors_round_trip_through_one_block():
    arena, peers = Arena(1 << 16), PeerSegments()
    packer = Packer()
    packer.add("FILL", "UINT8", np.zeros(INLINE_BYTES, np.uint8))  # too big to ride inline
    descriptors = [packer.add(name, name, array) for name, array in DATATYPES.items()]
    block = packer.write(arena)
    assert isinstance(block, tuple)
    segment = arena.segment(block[0])
    peers.add(segment.id, os.dup(segment.fd), segment.size)
    owner = peers.block(*block)
    for descriptor, (name, array) in zip(descriptors, DATATYPES.items(), strict=True):
        received = unpack(owner, descriptor)
        assert received.shape == array.shape, name
        assert received.tolist() == array.tolist() or name == "FP64", name
        if name not in ("BYTES", "INT32"):
            assert received.base is not None  # a view on shared memory, not a copy
            assert received.ctypes.data % 64 == 0
    arena.close()


@pytest.mark.parametrize(
    "array",
    [
        np.array([1, -2, 3], dtype=">i2"),  # big-endian
        np.asfortranarray(np.arange(6, dtype=np.uint32).reshape(2, 3)),
        np.array(7.5, dtype=np.float32),  # no dimensions
        np.arange(8, dtype=np.float32).reshape(8, 1)[::2],  # strided, a dimension of 1
        np.broadcast_to(np.arange(3, dtype=np.int64), (2, 3)),  # zero strides
        np.array(["2020-01-01", "2021-06-30"], dtype="M8[D]"),  # no buffer format
    ],
    ids=["big-endian", "fortran", "0-d", "strided", "broadcast", "no-buffer-format"],
)
def test_any_layout_is_packed_as_its_values(array):
    arena = Arena(1 << 16)
    packer = Packer()
    descriptor = packer.add("x", "INT32", array)  # the datatype name only labels it here
    block = packer.write(arena)
    assert isinstance(block, bytearray)  # a few bytes: inline, laid out as in a block
    _, _, shape, offset, nbytes = descriptor
    data = bytes(block[offset : offset + nbytes])
    expected = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<")))
    assert shape == array.shape and data == expected.tobytes()
    arena.close()


def test_bytes_encoding_is_tritons():
    data = np.array([b"ab", b"", "c"], dtype=object)
    encoded = serialize_bytes(data)
    assert encoded == b"\x02\x00\x00\x00ab\x00\x00\x00\x00\x01\x00\x00\x00c"
    assert deserialize_bytes(encoded, 3).tolist() == [b"ab", b"", b"c"]
    with pytest.raises(ValueError, match="cut short"):
        deserialize_bytes(encoded[:-1], 3)


def test_leases_free_a_block_when_its_last_view_dies():
    leases = Leases()
    owner = np.zeros(64, dtype=np.uint8)
    view = owner[8:16].view(np.float32)
    leases.hold(owner, 5)
    del owner
    gc.collect()
    assert leases.drain() == () and leases.held == 1  # the view keeps the block
    del view
    assert leases.drain() == (5,) and leases.held == 0


@pytest.fixture
def pair():
    ours, theirs = ipc.channel_pair()
    a_memory, b_memory = ipc.Memory(Arena(1 << 16)), ipc.Memory(Arena(1 << 16))
    a, b = ipc.Channel(ours, a_memory, 0), ipc.Channel(theirs, b_memory, 0)
    yield a, b
    for channel, memory in ((a, a_memory), (b, b_memory)):
        channel.close()
        memory.close()


def test_messages_carry_segments_tensors_and_frees(pair):
    a, b = pair
    packer = Packer()
    descriptor = packer.add("X", "FP32", np.arange(INLINE_BYTES, dtype=np.float32))
    block = packer.write(a.memory.arena)
    a.send(ipc.EXECUTE, 3, [descriptor], block)
    message = b.recv()
    assert (message.kind, message.ident) == (ipc.EXECUTE, 3)
    owner = b.memory.peers.block(*message.block)
    b.memory.leases.hold(owner, message.block[0])
    values = unpack(owner, message.body[0])
    assert values[:4].tolist() == [0, 1, 2, 3]
    segment = a.memory.arena.segment(block[0])
    assert segment.live == 1
    del owner, values
    b.send(ipc.EXECUTE_DONE, 3, None, None)  # carries the free back
    assert a.recv().kind == ipc.EXECUTE_DONE
    assert segment.live == 0
    # a second message on the same channel does not resend the segment's descriptor
    block = Packer()
    block.add("Y", "INT8", np.ones(3, np.int8))
    a.send(ipc.EXECUTE, 4, None, block.write(a.memory.arena))
    assert b.recv().ident == 4


def test_a_few_bytes_of_tensors_ride_in_the_message_and_arrive_writable(pair):
    a, b = pair
    packer = Packer()
    descriptors = [packer.add(name, name, array) for name, array in DATATYPES.items()]
    block = packer.write(a.memory.arena)
    assert isinstance(block, bytearray) and len(block) <= INLINE_BYTES
    assert not a.memory.arena._segments  # nothing allocated, announced or to free
    a.send(ipc.EXECUTE, 5, descriptors, block)
    message = b.recv()
    owner = b.memory.take_block(message.block)
    for descriptor, (name, array) in zip(message.body, DATATYPES.items(), strict=True):
        received = unpack(owner, descriptor)
        assert received.shape == array.shape, name
        assert received.tolist() == array.tolist() or name == "FP64", name
        if received.dtype != object and received.size:
            received[...] = received  # a model may write into its inputs
            assert received.flags.writeable, name
    assert not b.memory.leases.drain()


def test_big_messages_go_through_shared_memory(pair):
    a, b = pair
    body = {"names": ["x" * 100] * 2000}  # ~200 KiB: more than a socket message
    a.send(ipc.BLS_REQUEST, 9, body, None)
    message = b.recv()
    assert message.kind == ipc.BLS_REQUEST and message.body == body
    b.send(ipc.FREE, 0, None, None)
    a.recv()
    assert all(segment.live == 0 for segment in a.memory.arena._segments.values())


def test_a_closed_peer_is_reported(pair):
    a, b = pair
    b.sock.close()
    with pytest.raises(ipc.PeerClosed):
        a.recv()
    with pytest.raises(ipc.PeerClosed):
        a.send(ipc.LOG, 0, (20, "x"), None)


def test_inline_tensors_are_copies_and_blocks_are_viewed_until_dropped(pair):
    a, b = pair
    for size, inline in ((INLINE_BYTES // 4, True), (INLINE_BYTES, False)):
        packer = Packer()
        descriptor = packer.add("X", "FP32", np.arange(size, dtype=np.float32))
        block = packer.write(a.memory.arena)
        assert isinstance(block, bytearray) is inline
        a.send(ipc.EXECUTE, 1, [descriptor], block)
        message = b.recv()
        owner = b.memory.take_block(message.block)
        values = unpack(owner, message.body[0])
        del owner
        assert values.tolist() == list(range(size))
        values[0] = 7  # received tensors are writable either way
        if inline:
            assert b.memory.leases.held == 0
            continue
        segment = a.memory.arena.segment(block[0])
        assert b.memory.leases.held == 1
        b.send(ipc.EXECUTE_DONE, 1, None, None)
        a.recv()
        assert segment.live == 1  # a view still reads it
        del values
        b.send(ipc.EXECUTE_DONE, 1, None, None)
        a.recv()
        assert segment.live == 0


def test_extra_descriptors_ride_along_after_the_segments_even_in_a_big_message(pair):
    a, b = pair
    read_end, write_end = os.pipe()
    try:
        packer = Packer()
        packer.add("X", "INT8", np.ones(8, np.int8))
        body = ["y" * 100] * 2000  # through shared memory: its segment is announced too
        a.send(ipc.EXECUTE, 5, body, packer.write(a.memory.arena), [write_end])
        message = b.recv()
        assert message.body == body and len(message.fds) == 1
        os.write(message.fds[0], b"same pipe")  # the receiver got the sender's pipe
        os.close(message.fds[0])
        assert os.read(read_end, 64) == b"same pipe"
    finally:
        os.close(read_end)
        os.close(write_end)


def test_regions_are_mapped_once_checked_on_every_use_and_let_go(tmp_path):
    path = tmp_path / "object"
    path.write_bytes(np.arange(1024, dtype=np.int32).tobytes())
    regions = MappedRegions()
    # the region starts 40 bytes into the object: the mapping starts at the page before it
    regions.add([(7, "r", "/r", 40, 4000)], (os.open(path, os.O_RDWR),))
    view = regions.input(7, 8, 16, np.dtype("<i4"), (4,))
    assert view.tolist() == [12, 13, 14, 15] and not view.flags.writeable
    assert regions.write(7, 100, 16, np.array([-1, -2], np.int32))
    assert np.frombuffer(path.read_bytes(), np.int32)[35:37].tolist() == [-1, -2]
    assert not regions.write(7, 100, 4, np.array([-1, -2], np.int32))  # over its byte size
    with pytest.raises(RegionError, match="Invalid offset \\+ byte size"):
        regions.input(7, 3990, 16, np.dtype("<i4"), (4,))
    os.truncate(path, 1000)
    with pytest.raises(RegionError, match="'r' \\(key '/r'\\) is 1000 bytes now"):
        regions.input(7, 8, 16, np.dtype("<i4"), (4,))
    assert not regions.write(7, 100, 16, np.array([-1, -2], np.int32))
    del view
    regions.drop((7,))
    assert len(regions) == 0
    with pytest.raises(RegionError, match="unknown shared memory region 7"):
        regions.input(7, 8, 16, np.dtype("<i4"), (4,))


def test_a_region_is_announced_once_per_process_and_its_close_is_reported(monkeypatch):
    from triton_core_python import regions as regions_module

    from triton_core.shared_memory.system import SystemRegion

    monkeypatch.setattr(regions_module, "REGIONS_PER_PROCESS", 1)

    name = f"tcshm_unit_{os.getpid()}"
    fd = os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        os.ftruncate(fd, 8192)
        region = SystemRegion("unit", f"/{name}", 4096, 4096)
        closed: list[int] = []
        announcer = RegionAnnouncer(closed.append)
        with announcer.lock:
            announcements, fds = announcer.announce({region.ident: region})
        assert announcements == [(region.ident, "unit", f"/{name}", 4096, 4096)]
        assert os.path.samestat(os.fstat(fds[0]), os.fstat(fd))
        with announcer.lock:
            assert announcer.announce({region.ident: region}) == ([], [])
        # the process maps a bounded number of regions: tensors in others go as copies
        other = SystemRegion("other", f"/{name}", 0, 4096)
        assert announcer.can_map(region) and not announcer.can_map(other)
        region.close()
        assert closed == [region.ident]
        assert announcer.can_map(other)  # room again
        other.close()
    finally:
        os.close(fd)
        os.unlink(f"/dev/shm/{name}")


def test_an_output_that_views_an_input_of_the_same_object_is_written_right(tmp_path):
    path = tmp_path / "object"
    count = 1 << 16
    path.write_bytes(np.arange(2 * count, dtype=np.int32).tobytes())
    opened = tuple(os.open(path, os.O_RDWR) for _ in range(2))
    regions = MappedRegions()
    # two registrations of one object, as a client may make: input in one, output in other
    regions.add([(1, "in", "/o", 0, 8 * count), (2, "out", "/o", 0, 8 * count)], opened)
    values = regions.input(1, 0, 4 * count, np.dtype("<i4"), (count,))
    # the output overlaps the input it views, through another mapping of the same pages
    assert regions.write(2, 4096, 4 * count, values)
    assert np.array_equal(np.fromfile(path, np.int32)[1024 : 1024 + count], np.arange(count))
    same = regions.input(1, 4 * count, 4096, np.dtype("<i4"), (1024,))
    assert regions.write(2, 4 * count, 4096, same)  # exactly where it is: nothing to copy
    expected = np.fromfile(path, np.int32)[count : count + 1024][::-1]
    assert regions.write(2, 4 * count + 4096, 4096, same[::-1])  # a negative stride
    assert np.array_equal(np.fromfile(path, np.int32)[count + 1024 : count + 2048], expected)
    del values, same
    regions.drop((1, 2))


def test_a_region_closed_before_its_announcement_arrives_goes_after_its_batch(tmp_path):
    path = tmp_path / "object"
    path.write_bytes(bytes(4096))
    regions = MappedRegions()
    regions.drop((9,))  # the events socket outran the control socket
    regions.add([(9, "late", "/late", 0, 4096)], (os.open(path, os.O_RDWR),))
    assert regions.input(9, 0, 16, np.dtype("<i4"), (4,)).tolist() == [0, 0, 0, 0]
    regions.drop_stale()  # the batch ran: nothing is kept for a region the server closed
    assert len(regions) == 0
    regions.drop_stale()
    regions.add([(10, "next", "/next", 0, 4096)], (os.open(path, os.O_RDWR),))
    regions.drop_stale()
    assert len(regions) == 1  # an ordinary region stays
    regions.drop((10,))
