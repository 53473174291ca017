"""What every kind of registered region provides (system now; CUDA plugs in the same way)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from triton_core.errors import invalid_arg


class RegionKind(enum.Enum):
    SYSTEM = "system"
    CUDA = "cuda"


@dataclass(slots=True, frozen=True)
class SystemRegionStatus:
    """One row of the system shared-memory status: ``{"name","key","offset","byte_size"}``."""

    name: str
    key: str
    offset: int
    byte_size: int


@dataclass(slots=True, frozen=True)
class CudaRegionStatus:
    """One row of the CUDA shared-memory status: ``{"name","device_id","byte_size"}``."""

    name: str
    device_id: int
    byte_size: int


RegionStatus = SystemRegionStatus | CudaRegionStatus


class Region(Protocol):
    """A registered region: ``byte_size`` bytes a client shares with the server.

    The registry counts the users of a region (requests whose tensors are in it); a region
    unregistered while in use is closed by its last user.
    """

    name: str
    kind: RegionKind
    byte_size: int
    #: requests using the region now
    users: int
    #: unregistered: closed once ``users`` drops to zero
    closing: bool

    def check_alive(self) -> None:
        """Raise INVALID_ARG when the region can no longer be read whole (e.g. truncated)."""
        ...

    def view(self, offset: int, byte_size: int) -> memoryview:
        """The bytes ``[offset, offset + byte_size)`` of the region, bounds already checked."""
        ...

    def write(self, offset: int, data: np.ndarray) -> None:
        """Copy ``data`` to ``offset`` in the region (row-major), bounds already checked."""
        ...

    def close(self) -> None: ...

    def status(self) -> RegionStatus: ...


def check_span(region: Region, offset: int, byte_size: int) -> None:
    """``[offset, offset + byte_size)`` inside ``region``, with Triton's messages."""
    name = region.name
    if offset < 0 or offset >= region.byte_size:
        raise invalid_arg(f"Invalid offset for shared memory region: '{name}'")
    if byte_size < 0 or offset + byte_size > region.byte_size:
        raise invalid_arg(f"Invalid offset + byte size for shared memory region: '{name}'")
