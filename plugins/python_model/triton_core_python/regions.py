"""Clients' system shared-memory regions, mapped in the stub process itself.

A request whose input is in a registered system region reaches the stub as a reference
``(region, offset, byte size)`` instead of bytes copied through the server's transfer
memory; an output the client asked into such a region the stub writes there itself, and
the answer carries only its metadata. The server hands the stub the descriptor of the
object it opened and checked when the region was registered (``SCM_RIGHTS``, with the
first message that refers to the region), never a name to open: what the stub maps is the
very object the server registered, even if the client unlinked the name and made another.

* :class:`RegionAnnouncer` (server side) knows which regions a stub was sent, and tells it
  when one is closed (unregistered and no longer used) so it lets the mapping go.
* :class:`MappedRegions` (stub side) maps each region at most twice (read-only for inputs,
  read-write for outputs, on first use), and re-checks the object's real size (``fstat``)
  before every use: a region its owner truncated gives the request a clear error instead of
  a SIGBUS. As in the server, a truncation *during* a model's use of the memory cannot be
  caught; then only this process faults, and the instance restarts.

Imported by the stub process: the standard library and numpy only.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

#: (ident, name, key, offset in the object, byte size): a region as the stub learns it
Announcement = tuple[int, str, str, int, int]
#: pb_utils.TritonError.INVALID_ARG: what a request on a truncated region gets
INVALID_ARG = 3
#: regions one process maps at most (a descriptor each); tensors in more go as copies
REGIONS_PER_PROCESS = 256


class RegionError(Exception):
    """A request's tensor cannot be read from or written to its region; ``code`` is a
    pb_utils.TritonError code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class RegionAnnouncer:
    """The regions one stub process was sent (server side); thread-safe.

    ``announce`` picks, for a batch about to be sent, the regions the stub does not have yet
    (with their descriptors); the caller sends them under the same lock as the batch, so
    that a region is always announced before, or with, the first batch that uses it.
    """

    def __init__(self, on_dropped: Callable[[int], None]) -> None:
        self.lock = threading.Lock()
        self._sent: set[int] = set()
        self._on_dropped = on_dropped

    def can_map(self, region: Any) -> bool:
        """Whether the process maps ``region`` already, or may map one more."""
        sent = self._sent
        return region.ident in sent or len(sent) < REGIONS_PER_PROCESS

    def announce(self, regions: dict[int, Any]) -> tuple[list[Announcement], list[int]]:
        """(announcements, descriptors) of ``regions`` (ident -> region) not yet sent; call
        with :attr:`lock` held, and send them before releasing it."""
        announcements: list[Announcement] = []
        fds: list[int] = []
        for ident, region in regions.items():
            if ident in self._sent:
                continue
            self._sent.add(ident)
            announcements.append((ident, region.name, region.key, region.offset, region.byte_size))
            fds.append(region.fileno())
            region.on_close(_weak_callback(self._closed))
        return announcements, fds

    def _closed(self, region: Any) -> None:
        with self.lock:
            self._sent.discard(region.ident)
        self._on_dropped(region.ident)


def _weak_callback(method: Callable[[Any], None]) -> Callable[[Any], None]:
    """``method`` without keeping its object alive (a region may outlive the stub)."""
    reference = weakref.WeakMethod(method)  # type: ignore[arg-type]

    def call(region: Any) -> None:
        bound = reference()
        if bound is not None:
            bound(region)

    return call


class _Region:
    """One region in the stub: the server's descriptor and up to two mappings."""

    __slots__ = (
        "byte_size", "fd", "key", "name", "object", "offset", "reader", "reader_at", "writer"
    )  # fmt: skip

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int) -> None:
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self.fd = fd
        info = os.fstat(fd)
        #: which object: two regions may be spans of the same one
        self.object = (info.st_dev, info.st_ino)
        self.reader: tuple[mmap.mmap, int] | None = None
        #: the address of the region's byte 0 in the read-only mapping (0: not mapped)
        self.reader_at = 0
        self.writer: tuple[mmap.mmap, int] | None = None

    def check_size(self) -> None:
        """The object still holds the whole region (its owner may have truncated it)."""
        needed = self.offset + self.byte_size
        size = os.fstat(self.fd).st_size
        if size < needed:
            raise RegionError(
                INVALID_ARG,
                f"shared memory region '{self.name}' (key '{self.key}') is {size} bytes now, "
                f"less than the {needed} bytes it was registered with: it was truncated",
            )

    def mapping(self, writable: bool) -> tuple[mmap.mmap, int]:
        """(mapping, where byte 0 of the region is in it), made on first use."""
        current = self.writer if writable else self.reader
        if current is not None:
            return current
        start = self.offset - self.offset % mmap.ALLOCATIONGRANULARITY
        base = self.offset - start
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        made = (
            mmap.mmap(self.fd, base + self.byte_size, mmap.MAP_SHARED, prot, offset=start),
            base,
        )
        if writable:
            self.writer = made
        else:
            self.reader = made
            probe = np.frombuffer(made[0], np.uint8, 1)
            self.reader_at = probe.__array_interface__["data"][0] + base
            del probe  # the buffer export would keep the mapping from closing
        return made

    def holds(self, address: int) -> int | None:
        """Where in the object ``address`` is, when it is in this region's read-only
        mapping (a model's output that views one of its inputs); else None."""
        start = self.reader_at
        if start and start <= address < start + self.byte_size:
            return self.offset + address - start
        return None

    def close(self) -> None:
        # Not mmap.close(): a numpy view of a mapping refers to the mmap object, not to a
        # buffer export, so closing would unmap it under a view the model still holds.
        # Dropped, a mapping is unmapped when its last view dies.
        self.reader = self.writer = None
        self.reader_at = 0
        with contextlib.suppress(OSError):
            os.close(self.fd)


class MappedRegions:
    """The regions the server sent this stub, by ident (stub side); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._regions: dict[int, _Region] = {}
        #: closed by the server before the batch announcing them arrived (a request that
        #: was cancelled while its batch waited): let go once that batch has run
        self._closed_early: set[int] = set()
        self._stale: list[int] = []

    def add(self, announcements: list[Announcement], fds: tuple[int, ...]) -> None:
        """Keep the regions of a message (takes ownership of ``fds``)."""
        with self._lock:
            for (ident, name, key, offset, byte_size), fd in zip(announcements, fds, strict=True):
                old = self._regions.pop(ident, None)
                if old is not None:
                    old.close()
                self._regions[ident] = _Region(name, key, offset, byte_size, fd)
                if ident in self._closed_early:
                    self._closed_early.discard(ident)
                    self._stale.append(ident)

    def drop(self, idents: tuple[int, ...]) -> None:
        """The server closed these regions: let them go (a mapping a view still uses is
        unmapped when the last such view dies)."""
        with self._lock:
            for ident in idents:
                region = self._regions.pop(ident, None)
                if region is None:
                    self._closed_early.add(ident)  # its announcement is still on its way
                else:
                    region.close()

    def drop_stale(self) -> None:
        """Let go the regions closed before the batch that announced them ran (after it)."""
        if self._stale:
            with self._lock:
                stale, self._stale = self._stale, []
            self.drop(tuple(stale))

    def __len__(self) -> int:
        return len(self._regions)

    def _get(self, ident: int, offset: int, nbytes: int) -> _Region:
        region = self._regions.get(ident)
        if region is None:
            raise RegionError(INVALID_ARG, f"unknown shared memory region {ident}")
        if offset < 0 or nbytes < 0 or offset + nbytes > region.byte_size:
            raise RegionError(
                INVALID_ARG,
                f"Invalid offset + byte size for shared memory region: '{region.name}'",
            )
        return region

    def input(
        self, ident: int, offset: int, nbytes: int, dtype: np.dtype, shape: tuple[int, ...]
    ) -> np.ndarray:
        """A read-only view of ``nbytes`` at ``offset`` of region ``ident``."""
        # under the lock: a region the server closes meanwhile is let go after the view
        # exists (its mapping then lives as long as the view)
        with self._lock:
            region = self._get(ident, offset, nbytes)
            region.check_size()
            try:
                return _view(region.mapping(writable=False), offset, dtype, shape)
            except (OSError, ValueError) as exc:  # truncated right after the check, say
                raise RegionError(
                    INVALID_ARG, f"cannot map shared memory region '{region.name}': {exc}"
                ) from None

    def write(self, ident: int, offset: int, byte_size: int, array: np.ndarray) -> bool:
        """Copy ``array`` (little-endian numbers) to ``offset`` of region ``ident`` when it
        fits in ``byte_size``; False when it does not or the region cannot take it now (the
        server then writes it, and says why when it cannot either)."""
        nbytes = array.nbytes
        with self._lock:
            region = self._regions.get(ident)
            if region is None or nbytes > byte_size or offset + byte_size > region.byte_size:
                return False
            try:
                region.check_size()
            except RegionError:
                return False
            if not nbytes:
                return True
            low, high = _byte_bounds(array)
            source = self._in_object(low, region) if array.base is not None else None
            if source is not None:
                destination = region.offset + offset
                if source == destination and array.flags.c_contiguous:
                    return True  # the output is its input, already where it is asked to be
                if source < destination + nbytes and destination < source + (high - low):
                    # the same bytes through another mapping: numpy cannot see the overlap
                    array = array.copy()
            try:
                target = _view(region.mapping(writable=True), offset, array.dtype, array.shape)
            except (OSError, ValueError):
                return False
        np.copyto(target, array, casting="no")
        return True

    def _in_object(self, address: int, region: _Region) -> int | None:
        """Where ``address`` is in ``region``'s object, when it is in a region of the same
        object mapped here (an output that views an input); else None."""
        for other in list(self._regions.values()):
            if other.object == region.object:
                found = other.holds(address)
                if found is not None:
                    return found
        return None


def _view(
    mapped: tuple[mmap.mmap, int], offset: int, dtype: np.dtype, shape: tuple[int, ...]
) -> np.ndarray:
    """An array over a mapping; it refers to the mmap object, which stays mapped while it
    lives."""
    mapping, base = mapped
    return np.ndarray(shape, dtype, mapping, base + offset)


def _byte_bounds(array: np.ndarray) -> tuple[int, int]:
    """The first and one past the last byte address ``array`` spans (numpy's byte_bounds,
    which moved between numpy versions)."""
    low = high = array.__array_interface__["data"][0]
    for dim, stride in zip(array.shape, array.strides, strict=True):
        if stride < 0:
            low += (dim - 1) * stride
        else:
            high += (dim - 1) * stride
    return low, high + array.itemsize
