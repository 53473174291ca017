"""System (POSIX) shared memory: an object in ``/dev/shm`` that a client created and named.

The key is checked to name such an object and nothing else: no path, no ``..``, no symlink
(``O_NOFOLLOW``), a regular file only, opened relative to ``/dev/shm``. The object's real size
is checked when registering and again on every use (``fstat``), because its owner may
truncate it at any time and touching a mapping past the end of its file is a SIGBUS.
A client that truncates its object while a request is using it (after the check) can still
fault the process, as with Triton: the flag ``--allow-client-shm`` is for trusted clients.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import mmap
import os
import stat
from collections.abc import Callable
from typing import Final

import numpy as np

from triton_core.errors import internal, invalid_arg
from triton_core.shared_memory.region import RegionKind, SystemRegionStatus

#: where POSIX shared-memory objects live (shm_open's namespace on Linux)
SHM_DIRECTORY: Final = "/dev/shm"
#: keys Triton keeps for its Python backend's own regions
RESERVED_PREFIX: Final = "triton_python_backend_shm_region_"
_NAME_MAX: Final = 255
_OPEN_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
#: one number per registration, never reused: a region registered again is another region
_IDENTS = itertools.count(1)


def object_name(name: str, key: str) -> str:
    """The file name in ``/dev/shm`` that ``key`` names (shm_open's rules, strictly)."""
    stripped = key.lstrip("/")
    if not stripped:
        raise _bad_key(name, key, "")
    if stripped.startswith(RESERVED_PREFIX):
        raise invalid_arg(
            f"cannot register shared memory region '{name}' with key '{key}' as the key "
            f"contains the reserved prefix '{RESERVED_PREFIX}'"
        )
    if "/" in stripped:
        raise _bad_key(name, key, "a key names an object in /dev/shm and has no '/' inside")
    if stripped in (".", "..") or "\0" in stripped or len(stripped.encode()) > _NAME_MAX:
        raise _bad_key(name, key, "not the name of a shared memory object")
    return stripped


def _bad_key(name: str, key: str, why: str) -> Exception:
    reason = f": {why}" if why else ""
    return invalid_arg(
        f"cannot register shared memory region '{name}' - invalid shm key '{key}'{reason}"
    )


class SystemRegion:
    """A registered system region: ``byte_size`` bytes at ``offset`` of the object ``key``.

    A backend that runs models in other processes may hand them the descriptor
    (:meth:`fileno`) to map the same object there; ``ident`` names this registration to
    them, and :meth:`on_close` tells them when to let their mappings go.
    """

    kind = RegionKind.SYSTEM

    def __init__(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self.users = 0
        self.closing = False
        self.ident = next(_IDENTS)
        self._close_callbacks: list[Callable[[SystemRegion], None]] = []
        self._fd = _open_object(name, key)
        try:
            self._check_size(offset, byte_size)
            # mmap offsets are page multiples: map from the page that holds ``offset``
            start = offset - offset % mmap.ALLOCATIONGRANULARITY
            self._base = offset - start
            self._map: mmap.mmap | None = mmap.mmap(
                self._fd,
                self._base + byte_size,
                flags=mmap.MAP_SHARED,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
                offset=start,
            )
        except BaseException:
            os.close(self._fd)
            raise
        # where byte 0 of the region is in this process (a buffer export, released at once)
        self._address = ctypes.addressof(ctypes.c_char.from_buffer(self._map)) + self._base

    def _check_size(self, offset: int, byte_size: int) -> None:
        size = os.fstat(self._fd).st_size
        if byte_size <= 0 or offset < 0 or offset + byte_size > size:
            raise invalid_arg(
                f"failed to register shared memory region '{self.name}': invalid args"
            )

    def check_alive(self) -> None:
        if self._map is None:
            raise internal(f"shared memory region '{self.name}' is closed")
        needed = self.offset + self.byte_size
        size = os.fstat(self._fd).st_size
        if size < needed:
            raise invalid_arg(truncated_message(self.name, self.key, size, needed))

    def fileno(self) -> int:
        """The open descriptor of the object (valid while the region is held)."""
        return self._fd

    def holds(self, offset: int, data: np.ndarray) -> bool:
        """Whether ``data`` is row-major and starts at ``offset`` of this region's mapping:
        its bytes are already where a write to ``offset`` would put them."""
        return (
            self._map is not None
            and data.flags.c_contiguous
            and data.__array_interface__["data"][0] == self._address + offset
        )

    def on_close(self, callback: Callable[[SystemRegion], None]) -> None:
        """Call ``callback(region)`` once the region is closed (unregistered and unused)."""
        self._close_callbacks.append(callback)

    def view(self, offset: int, byte_size: int) -> memoryview:
        assert self._map is not None
        start = self._base + offset
        return memoryview(self._map)[start : start + byte_size]

    def write(self, offset: int, data: np.ndarray) -> None:
        # one copy into the mapping (pwrite on the descriptor, which a truncation could not
        # fault, moves tmpfs pages at a third of memcpy's speed)
        target = np.ndarray(data.shape, data.dtype, self.view(offset, data.nbytes))
        np.copyto(target, data, casting="no")

    def close(self) -> None:
        # Not mmap.close(): a numpy view of the mapping refers to the mmap object and holds
        # no buffer export, so closing would unmap it under a view still in use (a SIGSEGV
        # on the next read). Dropped, the mapping is unmapped when the last view goes.
        self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        callbacks, self._close_callbacks = self._close_callbacks, []
        for callback in callbacks:
            with contextlib.suppress(Exception):  # a backend's bookkeeping; the region is gone
                callback(self)

    def status(self) -> SystemRegionStatus:
        return SystemRegionStatus(self.name, self.key, self.offset, self.byte_size)


def truncated_message(name: str, key: str, size: int, needed: int) -> str:
    """What a request on a region whose owner truncated its object is told."""
    return (
        f"shared memory region '{name}' (key '{key}') is {size} bytes now, "
        f"less than the {needed} bytes it was registered with: it was truncated"
    )


def _open_object(name: str, key: str) -> int:
    """A descriptor of the regular file ``/dev/shm/<key>``, never of anything else."""
    filename = object_name(name, key)
    try:
        directory = os.open(SHM_DIRECTORY, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise internal(f"Unable to open shared memory region: '{key}'") from None
    try:
        fd = os.open(filename, _OPEN_FLAGS, dir_fd=directory)
    except OSError:
        raise internal(f"Unable to open shared memory region: '{key}'") from None
    finally:
        os.close(directory)
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise internal(f"Invalid shared memory region: '{key}'") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _bad_key(name, key, "not a shared memory object")
    return fd
