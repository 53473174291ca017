"""Tensors in device (GPU) memory: what a GPU-capable backend gets instead of a host copy.

An input in a CUDA shared-memory region reaches a backend as a :class:`DeviceBuffer` (a
pointer into the region, with the tensor's datatype and shape) only when the instance that
runs it says ``accepts_device_tensors`` and the batch is one request; everyone else gets host
arrays, copied device to host once, as for any CUDA-region input. A buffer exposes
``__cuda_array_interface__`` (version 3), so PyTorch, CuPy or Numba wrap it without a copy,
and ``pointer``/``device_id`` for APIs that take raw addresses (ONNX Runtime's IO binding).

An output asked into a CUDA region is offered to such a backend in
``InferenceRequest.device_outputs`` as a writable buffer spanning the client's bytes; the
backend writes its result there (:meth:`DeviceBuffer.laid_out` sizes it and checks it fits)
and returns that buffer as the output's data, so the server copies nothing afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from math import prod
from typing import Any, Final, Protocol

import numpy as np

from triton_core.errors import internal
from triton_core.tensors.dtypes import NUMPY_DTYPES

#: datatypes that can stay on the device: fixed-size elements numpy (and so the CUDA array
#: interface) can describe. BYTES is serialized with lengths; BF16 has no typestr.
DEVICE_DATATYPES: Final = frozenset(NUMPY_DTYPES) - {"BYTES", "BF16"}


class DeviceMemory(Protocol):
    """Where a buffer's bytes live (a registered CUDA region): offsets are bounds-checked
    by the caller, against the region's registered size, before any of these is called."""

    name: str
    device_id: int

    def device_pointer(self, offset: int) -> int:
        """The device address of byte ``offset`` of the region."""
        ...

    def view(self, offset: int, byte_size: int) -> memoryview:
        """A host copy of ``[offset, offset + byte_size)`` (one device-to-host copy)."""
        ...

    def copy_from_device(self, offset: int, source: int, byte_size: int) -> None:
        """``byte_size`` bytes at device address ``source`` copied to ``offset``."""
        ...


class Lease(Protocol):
    """Keeps a buffer's region open while an instance may use it (see
    :func:`release_leases`): a region unregistered meanwhile closes after, not under it."""

    def end(self) -> None:
        """Let the region go; idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class DeviceBuffer:
    """``byte_size`` bytes of ``memory`` at ``offset``, holding ``datatype`` values in
    ``shape`` (row-major, contiguous) on GPU ``device_id``."""

    memory: DeviceMemory
    offset: int
    byte_size: int
    datatype: str
    shape: tuple[int, ...]
    #: a client's input: models read it, never write it
    readonly: bool = True
    #: holds the region while the request executes (set by the server; None: nothing held)
    lease: Lease | None = field(default=None, repr=False, compare=False)

    @property
    def device_id(self) -> int:
        return self.memory.device_id

    @property
    def pointer(self) -> int:
        return self.memory.device_pointer(self.offset)

    @property
    def dtype(self) -> np.dtype:
        return NUMPY_DTYPES[self.datatype]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        # stream None: the bytes are complete (clients fill regions with synchronous copies,
        # and backends synchronise before returning what they wrote)
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.pointer if self.size else 0, self.readonly),
            "version": 3,
            "strides": None,
            "stream": None,
        }

    def reshape(self, shape: tuple[int, ...] | list[int]) -> DeviceBuffer:
        """The same bytes in another shape (one dimension may be -1), as numpy's reshape."""
        target = tuple(int(dim) for dim in shape)
        if target.count(-1) == 1:
            known = prod(dim for dim in target if dim != -1)
            if known == 0 or self.size % known:
                raise ValueError(f"cannot reshape {list(self.shape)} into {list(target)}")
            target = tuple(self.size // known if dim == -1 else dim for dim in target)
        if any(dim < 0 for dim in target) or prod(target) != self.size:
            raise ValueError(f"cannot reshape {list(self.shape)} into {list(target)}")
        return replace(self, shape=target)

    def laid_out(self, name: str, datatype: str, shape: tuple[int, ...]) -> DeviceBuffer:
        """This span holding output ``name`` as ``datatype`` values in ``shape``: raises,
        with the server's message, when the client's span is too small for them."""
        if datatype not in DEVICE_DATATYPES:
            raise internal(f"output '{name}' of datatype '{datatype}' cannot be device memory")
        size = prod(shape) * NUMPY_DTYPES[datatype].itemsize
        if size > self.byte_size:
            raise output_too_small(name, self.byte_size, size)
        return DeviceBuffer(self.memory, self.offset, size, datatype, tuple(shape), False)

    def same_bytes(self, other: DeviceBuffer) -> bool:
        """Whether ``other`` starts at this buffer's first byte of the same memory."""
        return other.memory is self.memory and other.offset == self.offset

    def copy_from_device(self, source: int, byte_size: int) -> None:
        """``byte_size`` bytes at device address ``source`` (same device) copied here."""
        if self.readonly:
            raise internal(f"device buffer of region '{self.memory.name}' is read-only")
        if byte_size > self.byte_size:
            raise internal(
                f"{byte_size} bytes do not fit a device buffer of {self.byte_size} bytes"
            )
        if byte_size:
            self.memory.copy_from_device(self.offset, source, byte_size)

    def to_host(self) -> np.ndarray:
        """A read-only host copy, in ``dtype`` and ``shape`` (one device-to-host copy)."""
        if not self.size:
            return np.empty(self.shape, self.dtype)
        array = np.ndarray(self.shape, self.dtype, self.memory.view(self.offset, self.nbytes))
        array.flags.writeable = False
        return array

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        # code that reads host memory must ask for the copy (to_host), never get it by accident
        raise TypeError(
            f"tensor data of region '{self.memory.name}' is device memory (GPU "
            f"{self.device_id}); use to_host() for a host copy"
        )


def output_too_small(name: str, byte_size: int, needed: int) -> Exception:
    """Triton 2.51's answer, INTERNAL (500) as it sends it, to an output region too small."""
    return internal(
        f"shared memory size specified with the request for output '{name}' "
        f"({byte_size} bytes) should be at least {needed} bytes to hold the results"
    )
