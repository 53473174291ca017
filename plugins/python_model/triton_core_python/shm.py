"""Shared memory between the server and a stub process: segments that grow on demand.

Each side owns an :class:`Arena` it writes tensors into; the other side maps the arena's
segments and reads them in place (:class:`PeerSegments`). A segment is an anonymous memory
file (``memfd_create``) whose descriptor travels over the control socket the first time a
message refers to it, so segments have no names: nothing is left in ``/dev/shm`` when a
process dies, however it dies, and the size of ``/dev/shm`` does not limit them. With
``shm_directory`` set, segments are unlinked files in that directory instead (for hosts
without ``memfd_create``).

Allocation is per message: one block holds all tensors of a message. A block stays
allocated until the peer says it no longer references it (its numpy views died, see
:class:`Leases`); a segment whose blocks are all free is reset and reused, so a steady
request rate runs in one or two segments. A block that does not fit makes a bigger segment
(no fixed pool): segments up to ``REUSE_LIMIT`` are kept for reuse, larger ones are dropped
as soon as they are empty.

This module is imported by the stub process: it needs numpy and the standard library only.
"""

from __future__ import annotations

import collections
import itertools
import mmap
import os
import tempfile
import threading
import weakref
from collections.abc import Callable

import numpy as np

#: tensors start at multiples of this, so views are aligned for any dtype and for SIMD
ALIGN = 64
#: size of the first segment of an arena (Triton's ``shm-default-byte-size`` default)
DEFAULT_SEGMENT_SIZE = 1 << 20
#: empty segments up to this size are kept for reuse; bigger ones go back to the system
REUSE_LIMIT = 64 << 20


def align(size: int) -> int:
    return (size + ALIGN - 1) & ~(ALIGN - 1)


class SharedMemoryError(RuntimeError):
    """Shared memory could not be allocated; the message says what to do about it."""


def _describe(directory: str | None) -> str:
    return "anonymous shared memory (memfd)" if directory is None else f"'{directory}'"


def create_memory_file(size: int, directory: str | None = None) -> int:
    """A new shared-memory file of ``size`` bytes, reserved up front; returns its descriptor.

    Reserving (``posix_fallocate``) makes a full tmpfs fail here, with a message, instead of
    killing the process with SIGBUS on its first write.
    """
    try:
        if directory is None:
            fd = os.memfd_create("triton-python-model", os.MFD_CLOEXEC)
        else:
            fd = _unnamed_file(directory)
    except FileNotFoundError:
        raise SharedMemoryError(
            f"cannot allocate shared memory for tensors: directory '{directory}' does not "
            "exist; create it (mount a tmpfs there) or leave the Python backend's "
            "'shm-directory' setting unset to use anonymous shared memory, which needs no "
            "/dev/shm"
        ) from None
    except (AttributeError, OSError) as exc:
        raise SharedMemoryError(
            f"cannot allocate shared memory for tensors in {_describe(directory)}: {exc}; "
            + (
                "set --backend-config=python,shm-directory=/dev/shm to use a tmpfs "
                "directory instead"
                if directory is None
                else "leave 'shm-directory' unset to use anonymous shared memory"
            )
        ) from None
    try:
        os.ftruncate(fd, size)
        if size:
            os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        os.close(fd)
        hint = (
            "free memory or raise the memory limit of the server's container"
            if directory is None
            else f"make '{directory}' bigger (docker run --shm-size=..., or remount the "
            "tmpfs with a larger size=), or leave the Python backend's 'shm-directory' "
            "setting unset to use anonymous shared memory, which /dev/shm's size does "
            "not limit"
        )
        raise SharedMemoryError(
            f"cannot allocate {size} bytes of shared memory for tensors in "
            f"{_describe(directory)}: {exc.strerror or exc}; {hint}"
        ) from None
    return fd


def _unnamed_file(directory: str) -> int:
    if not os.path.isdir(directory):
        raise FileNotFoundError(directory)
    flags = os.O_RDWR | os.O_CLOEXEC
    tmpfile = getattr(os, "O_TMPFILE", 0)
    if tmpfile:
        try:
            return os.open(directory, flags | tmpfile, 0o600)
        except OSError:
            pass  # filesystems without O_TMPFILE: create, then unlink at once
    fd, path = tempfile.mkstemp(prefix=".triton-python-", dir=directory)
    os.unlink(path)
    return fd


class Segment:
    """One shared-memory file of an arena, mapped by its owner."""

    __slots__ = (
        "announced", "fd", "handed", "handed_bytes", "id", "live", "map", "size", "top", "view",
    )  # fmt: skip

    def __init__(self, segment_id: int, size: int, directory: str | None) -> None:
        self.id = segment_id
        self.size = size
        self.fd = create_memory_file(size, directory)
        try:
            self.map = mmap.mmap(self.fd, size) if size else None
        except OSError:
            os.close(self.fd)
            raise
        self.view = memoryview(self.map) if self.map is not None else memoryview(b"")
        self.top = 0  # next free offset
        self.live = 0  # blocks handed out and not yet freed
        #: blocks, and their bytes, handed out since the segment was last empty (freed or not)
        self.handed = 0
        self.handed_bytes = 0
        #: channels (by index) on which the peer has been sent this segment's descriptor
        self.announced = 0

    def destroy(self) -> None:
        self.view.release()
        if self.map is not None:
            self.map.close()
        os.close(self.fd)


def _still_live_bytes(segment: Segment) -> int:
    """About how many bytes of a segment's blocks are not freed yet.

    Frees name only the segment, so this prorates the bytes handed out by the blocks still
    live: a full segment with one block left holds about one block's bytes, not all of
    them (else each new segment would be sized for what is long gone, and be dropped)."""
    if not segment.handed:
        return 0
    return segment.handed_bytes * segment.live // segment.handed


class Arena:
    """The segments one side writes into; thread-safe.

    ``alloc`` hands out a block (segment, offset); ``free`` takes back one block of a
    segment, when the peer reports that it no longer references it.
    """

    def __init__(
        self, default_size: int = DEFAULT_SEGMENT_SIZE, directory: str | None = None
    ) -> None:
        self.default_size = max(ALIGN, align(default_size))
        self.directory = directory
        self._lock = threading.Lock()
        self._segments: dict[int, Segment] = {}
        self._current: Segment | None = None
        self._ids = itertools.count(1)
        #: ids of destroyed segments the peer must forget; sent with the next message
        self.dropped: collections.deque[int] = collections.deque()
        self.closed = False

    def alloc(self, nbytes: int) -> tuple[Segment, int]:
        """A block of at least ``nbytes``; raises :class:`SharedMemoryError` if none can be had."""
        nbytes = align(max(nbytes, 1))
        with self._lock:
            current = self._current
            if current is not None and current.top + nbytes <= current.size:
                return self._take(current, nbytes)
            for segment in self._segments.values():
                if segment.live == 0 and segment.size >= nbytes:
                    self._current = segment
                    return self._take(segment, nbytes)
            return self._take(self._grow(nbytes), nbytes)

    def _take(self, segment: Segment, nbytes: int) -> tuple[Segment, int]:
        offset = segment.top
        segment.top = offset + nbytes
        segment.live += 1
        segment.handed += 1
        segment.handed_bytes += nbytes
        return segment, offset

    def _grow(self, nbytes: int) -> Segment:
        # Size for the block and for what is still in flight, so that a steady load settles
        # into a segment it fits in instead of making a new one per message.
        in_flight = sum(_still_live_bytes(segment) for segment in self._segments.values())
        size = self.default_size
        while size < 2 * nbytes or size < 2 * in_flight:
            size *= 2
        if nbytes > REUSE_LIMIT // 2:
            size = align(nbytes)  # a one-off giant: exactly its size, dropped once freed
        segment = Segment(next(self._ids), size, self.directory)
        self._segments[segment.id] = segment
        if size <= REUSE_LIMIT:
            self.default_size = max(self.default_size, size)
            self._current = segment
        return segment

    def free(self, segment_id: int, count: int = 1) -> None:
        """The peer released ``count`` blocks of segment ``segment_id``."""
        with self._lock:
            segment = self._segments.get(segment_id)
            if segment is None:
                return
            segment.live -= count
            if segment.live > 0:
                return
            segment.live = 0
            segment.handed_bytes = 0
            segment.handed = 0
            segment.top = 0
            if segment is self._current and segment.size <= REUSE_LIMIT:
                return
            # keep one empty segment besides the current one, to switch to when it fills
            spare = any(
                other is not segment and other is not self._current and other.live == 0
                for other in self._segments.values()
            )
            if segment.size > REUSE_LIMIT or spare or segment.size < self.default_size:
                if segment is self._current:
                    self._current = None
                del self._segments[segment_id]
                segment.destroy()
                self.dropped.append(segment_id)

    def segment(self, segment_id: int) -> Segment:
        return self._segments[segment_id]

    def free_bytes(self) -> int:
        """Bytes of the arena not held by a live block (Triton's ``free_memory``); an arena
        that has mapped nothing yet counts its first segment's size, as Triton's region is
        there from the start."""
        with self._lock:
            segments = self._segments.values()
            mapped = sum(s.size for s in segments) or self.default_size
            return mapped - sum(s.handed_bytes for s in segments)

    def stats(self) -> tuple[int, int]:
        """(segments, bytes mapped), for tests and logs."""
        with self._lock:
            return len(self._segments), sum(s.size for s in self._segments.values())

    def close(self) -> None:
        """Destroy every segment (the peer's mappings live on until their views die)."""
        with self._lock:
            self.closed = True
            for segment in self._segments.values():
                segment.destroy()
            self._segments.clear()
            self._current = None


class PeerSegments:
    """The peer's segments, mapped here on first sight; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: dict[int, mmap.mmap] = {}

    def add(self, segment_id: int, fd: int, size: int) -> None:
        """Map a segment the peer announced (a second announcement is ignored); closes ``fd``."""
        try:
            with self._lock:
                if segment_id not in self._maps:
                    self._maps[segment_id] = mmap.mmap(fd, size)
        finally:
            os.close(fd)

    def drop(self, segment_id: int) -> None:
        # unmapped by the mmap object itself once no array refers to it any more
        with self._lock:
            self._maps.pop(segment_id, None)

    def block(self, segment_id: int, offset: int, length: int) -> np.ndarray:
        """A uint8 array over one block of a peer segment (no copy)."""
        return np.frombuffer(self._maps[segment_id], np.uint8, length, offset)

    def clear(self) -> None:
        with self._lock:
            self._maps.clear()


class Leases:
    """Blocks of the peer's arena that this side still reads, freed when their arrays die.

    ``hold(owner, segment_id)`` ties a block to the array that views it (every tensor of the
    block is a view of ``owner``); when the last view is gone, the segment id is queued in
    ``pending``, and the next message to the peer carries it back. ``on_pending`` is called
    with the queue's length after each release (from whatever thread dropped the last view),
    so the owner of the channel can flush a long queue when no message is due.
    """

    def __init__(self) -> None:
        self._refs: dict[int, tuple[weakref.ref[np.ndarray], int]] = {}
        self.pending: collections.deque[int] = collections.deque()
        self.on_pending: Callable[[int], None] | None = None

    def hold(self, owner: np.ndarray, segment_id: int) -> None:
        ref = weakref.ref(owner, self._release)
        self._refs[id(ref)] = (ref, segment_id)

    def _release(self, ref: weakref.ref[np.ndarray]) -> None:
        entry = self._refs.pop(id(ref), None)
        if entry is not None:
            self.release(entry[1])

    def release(self, segment_id: int) -> None:
        """Queue the free of one block of ``segment_id`` for the next message to the peer."""
        self.pending.append(segment_id)
        callback = self.on_pending
        if callback is not None:
            callback(len(self.pending))

    def drain(self) -> tuple[int, ...]:
        """The queued segment ids (one per freed block), emptying the queue."""
        pending = self.pending
        if not pending:
            return ()
        items = []
        popleft = pending.popleft
        try:
            while True:
                items.append(popleft())
        except IndexError:
            pass
        return tuple(items)

    @property
    def held(self) -> int:
        return len(self._refs)
