"""The registered regions: one namespace of names for every kind, bounded in count and bytes."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final, TypeVar

from triton_core.errors import Status, TritonError, invalid_arg, not_found, unsupported
from triton_core.shared_memory import cuda
from triton_core.shared_memory.region import (
    CudaRegionStatus,
    Region,
    RegionKind,
    RegionStatus,
    SystemRegionStatus,
    check_span,
)
from triton_core.shared_memory.system import SystemRegion

#: Triton's answer to register/unregister while ``--allow-client-shm`` is off
CLIENT_SHM_DISABLED: Final = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
_Row = TypeVar("_Row", SystemRegionStatus, CudaRegionStatus)

#: ``--shm-max-regions`` default
DEFAULT_MAX_REGIONS: Final = 128
#: ``--shm-max-total-byte-size`` default: 4 GiB of mappings at most
DEFAULT_MAX_TOTAL_BYTE_SIZE: Final = 1 << 32


@dataclass(slots=True, frozen=True)
class SharedMemoryOptions:
    """``--allow-client-shm``, ``--shm-max-regions``, ``--shm-max-total-byte-size``."""

    allow_client_shm: bool = False
    #: regions registered at once, all kinds together
    max_regions: int = DEFAULT_MAX_REGIONS
    #: bytes of all registered regions together: what clients may make the server map
    max_total_byte_size: int = DEFAULT_MAX_TOTAL_BYTE_SIZE

    def __post_init__(self) -> None:
        if self.max_regions < 0:
            raise ValueError(f"--shm-max-regions must not be negative, got {self.max_regions}")
        if self.max_total_byte_size < 0:
            raise ValueError(
                f"--shm-max-total-byte-size must not be negative, got {self.max_total_byte_size}"
            )


class SharedMemoryRegistry:
    """Registered regions by name; requests hold a region (:meth:`acquire`) while they use it.

    Thread-safe: frontends register on the event loop while output writes may run in threads.
    """

    def __init__(self, options: SharedMemoryOptions | None = None) -> None:
        self.options = options if options is not None else SharedMemoryOptions()
        self._regions: dict[str, Region] = {}
        self._total = 0
        self._lock = threading.Lock()

    # -- registration ----------------------------------------------------------------------

    def check_allowed(self) -> None:
        if not self.options.allow_client_shm:
            raise unsupported(CLIENT_SHM_DISABLED)

    def register_system(self, name: str, key: str, byte_size: int, offset: int = 0) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the POSIX object ``key`` as ``name``."""
        self.check_allowed()
        if not name:
            raise invalid_arg("'region name' is necessary to register system shared memory region")
        with self._lock:
            self._check_room(name, byte_size)
        region = SystemRegion(name, key, offset, byte_size)
        try:
            self.add(region)
        except BaseException:
            region.close()
            raise

    def register_cuda(self, name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
        """Open the CUDA IPC handle ``raw_handle`` (``byte_size`` bytes on ``device_id``) as
        ``name``; every field is checked before any CUDA call."""
        self.check_allowed()
        cuda.check_request(name, raw_handle, device_id, byte_size)
        with self._lock:
            self._check_room(name, byte_size)
        region = cuda.CudaRegion(name, raw_handle, device_id, byte_size, cuda.cuda_support())
        try:
            self.add(region)
        except BaseException:
            region.close()
            raise

    def add(self, region: Region) -> None:
        """Register an opened region of any kind (its name unique across kinds)."""
        with self._lock:
            self._check_room(region.name, region.byte_size)
            self._regions[region.name] = region
            self._total += region.byte_size

    def _check_room(self, name: str, byte_size: int) -> None:
        if name in self._regions:
            raise TritonError(
                Status.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
            )
        options = self.options
        if len(self._regions) >= options.max_regions:
            raise invalid_arg(
                f"failed to register shared memory region '{name}': {len(self._regions)} "
                f"regions are registered, the limit (--shm-max-regions) is {options.max_regions}"
            )
        if self._total + byte_size > options.max_total_byte_size:
            raise invalid_arg(
                f"failed to register shared memory region '{name}': {byte_size} more bytes "
                f"would make {self._total + byte_size}, over the limit "
                f"(--shm-max-total-byte-size) of {options.max_total_byte_size}"
            )

    def unregister(self, kind: RegionKind, name: str = "") -> None:
        """Unregister ``name`` (every region of ``kind`` when empty); in use: its last user
        closes it. Unknown names are not an error, as in Triton."""
        self.check_allowed()
        with self._lock:
            if name:
                region = self._regions.get(name)
                names = [name] if region is not None and region.kind is kind else []
            else:
                names = [n for n, r in self._regions.items() if r.kind is kind]
            closed = [self._remove(n) for n in names]
        for region in closed:
            if region is not None:
                region.close()

    def _remove(self, name: str) -> Region | None:
        """Take ``name`` out of the namespace; the region when nobody uses it (to close)."""
        region = self._regions.pop(name)
        self._total -= region.byte_size
        region.closing = True
        return region if region.users == 0 else None

    def close(self) -> None:
        """Unregister everything (the server stops)."""
        with self._lock:
            closed = [self._remove(name) for name in list(self._regions)]
        for region in closed:
            if region is not None:
                region.close()

    def status(self, kind: RegionKind, name: str = "") -> list[RegionStatus]:
        """Every region of ``kind``, or the one named (NOT_FOUND, in Triton's words)."""
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values() if r.kind is kind]
            region = self._regions.get(name)
        if region is None:
            kind_word = "cuda" if kind is RegionKind.CUDA else "system"
            raise not_found(f"Unable to find {kind_word} shared memory region: '{name}'")
        if region.kind is not kind:
            raise not_found(
                f"The region named '{name}' is registered as {_registered_as(region.kind)} "
                f"shared memory, not {_registered_as(kind)} shared memory"
            )
        return [region.status()]

    def status_of(self, row: type[_Row], kind: RegionKind, name: str = "") -> list[_Row]:
        """:meth:`status`, typed: the rows of ``kind`` are ``row`` objects."""
        return [status for status in self.status(kind, name) if isinstance(status, row)]

    def __len__(self) -> int:
        return len(self._regions)

    # -- use by requests -------------------------------------------------------------------

    def acquire(self, name: str, offset: int, byte_size: int) -> Region:
        """The region ``name`` with ``[offset, offset + byte_size)`` inside it, held by one
        more user until :meth:`release`."""
        with self._lock:
            region = self._regions.get(name)
            if region is None:
                raise not_found(f"Unable to find shared memory region: '{name}'")
            check_span(region, offset, byte_size)
            region.users += 1
        return region

    def release(self, region: Region) -> None:
        with self._lock:
            region.users -= 1
            last = region.users == 0 and region.closing
        if last:
            region.close()


def _registered_as(kind: RegionKind) -> str:
    return "CUDA" if kind is RegionKind.CUDA else "system"
