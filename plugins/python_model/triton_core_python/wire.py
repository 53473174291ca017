"""Tensors in shared memory: how a message's tensors are laid out in its block, both ways.

A tensor travels as a descriptor ``(name, datatype, shape, offset, nbytes)`` in the message
and its bytes at ``offset`` in the message's block: row-major little-endian values, or for
BYTES the length-prefixed elements of Triton's wire format (uint32 length, then the bytes),
so embedded NUL bytes survive. The receiver views fixed-size tensors in place.

Imported by the stub process: numpy and the standard library only.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import numpy as np

from triton_core_python.shm import Arena, align

#: wire datatype -> numpy dtype of its values (as triton_core.tensors.dtypes; BF16 as uint16 bits)
NUMPY_DTYPES: Final[dict[str, np.dtype]] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
    "BF16": np.dtype("<u2"),
    "BYTES": np.dtype(object),
}
_WIRE_OF: Final[dict[np.dtype, str]] = {
    dtype: name for name, dtype in NUMPY_DTYPES.items() if name not in ("BF16", "BYTES")
}

#: (name, datatype, shape, offset in the block, byte size)
Descriptor = tuple[str, str, tuple[int, ...], int, int]
#: (segment id, offset, length) of a message's block
BlockRef = tuple[int, int, int]

_LEN = struct.Struct("<I")
#: a message's tensors up to this many bytes travel in the message, not in shared memory
INLINE_BYTES = 4096


def datatype_of(array: np.ndarray) -> str:
    """The wire datatype of a numpy array; object, bytes and str arrays are BYTES."""
    dtype = array.dtype
    if dtype.kind in "OSU":
        return "BYTES"
    if dtype.byteorder == ">":
        dtype = dtype.newbyteorder("<")
    try:
        return _WIRE_OF[dtype]
    except KeyError:
        raise TypeError(f"numpy dtype {array.dtype} has no Triton datatype") from None


def serialize_bytes(array: np.ndarray) -> bytes:
    """BYTES elements as uint32-LE length + bytes each (str elements as UTF-8)."""
    parts: list[bytes] = []
    append = parts.append
    pack = _LEN.pack
    for item in array.reshape(-1).tolist() if array.dtype.kind != "O" else array.flat:
        if type(item) is not bytes:
            if isinstance(item, str):
                item = item.encode("utf-8")
            elif isinstance(item, bytes | bytearray | memoryview | np.bytes_):
                item = bytes(item)
            else:
                item = str(item).encode("utf-8")
        append(pack(len(item)))
        append(item)
    return b"".join(parts)


def deserialize_bytes(buffer: Any, count: int) -> np.ndarray:
    """A flat object array of ``count`` bytes elements from length-prefixed data."""
    view = memoryview(buffer).cast("B")
    result = np.empty(count, dtype=object)
    offset = 0
    unpack = _LEN.unpack_from
    total = len(view)
    for index in range(count):
        (length,) = unpack(view, offset)
        offset += 4
        end = offset + length
        if end > total:
            raise ValueError("BYTES tensor data is cut short")
        result[index] = bytes(view[offset:end])
        offset = end
    return result


class Packer:
    """Collects the tensors of one message, then writes them into one block of an arena."""

    __slots__ = ("_items", "size")

    def __init__(self) -> None:
        self._items: list[tuple[int, Any]] = []
        self.size = 0

    def add(self, name: str, datatype: str, array: Any) -> Descriptor:
        """Plan one tensor; returns its descriptor (the bytes are written by :meth:`write`)."""
        if type(array) is not np.ndarray:
            array = np.asarray(array)
        shape = array.shape
        if datatype == "BYTES":
            data: Any = serialize_bytes(array)
            nbytes = len(data)
        else:
            if array.dtype.byteorder == ">":
                array = array.astype(array.dtype.newbyteorder("<"))
            if not array.flags.c_contiguous:
                array = np.ascontiguousarray(array)
            nbytes = array.nbytes
            data = _byte_view(array) if nbytes else None
        offset = self.size
        if nbytes:
            self._items.append((offset, data))
            self.size = align(offset + nbytes)
        return (name, datatype, shape, offset, nbytes)

    def write(self, arena: Arena) -> BlockRef | bytearray | None:
        """Copy the planned tensors into a new block; None when there are no bytes.

        Up to :data:`INLINE_BYTES` they ride in the message itself instead: the receiver
        would copy so few bytes out of shared memory anyway, and neither side then allocates,
        announces or frees a block for them."""
        if not self.size:
            return None
        if self.size <= INLINE_BYTES:
            inline = bytearray(self.size)
            view = memoryview(inline)  # takes any byte buffer, numpy's included
            for offset, data in self._items:
                view[offset : offset + len(data)] = data
            view.release()
            self._items = []
            return inline
        segment, base = arena.alloc(self.size)
        view = segment.view
        for offset, data in self._items:
            start = base + offset
            view[start : start + len(data)] = data
        self._items = []
        return (segment.id, base, self.size)


def _byte_view(array: np.ndarray) -> Any:
    """The bytes of a C-contiguous array, flat, without a copy."""
    try:
        return array.data.cast("B")  # cheaper than numpy's reshape and view
    except (TypeError, ValueError):  # a buffer format or strides memoryview refuses
        return array.reshape(-1).view(np.uint8)


def unpack(owner: np.ndarray | None, descriptor: Descriptor) -> np.ndarray:
    """One received tensor: a view on ``owner`` (BYTES: a new object array)."""
    _, datatype, shape, offset, nbytes = descriptor
    if datatype == "BYTES":
        count = 1
        for dim in shape:
            count *= dim
        if not count:
            return np.empty(shape, dtype=object)
        assert owner is not None
        return deserialize_bytes(owner[offset : offset + nbytes], count).reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    if not nbytes:
        return np.empty(shape, dtype=dtype)
    return np.ndarray(shape, dtype, owner, offset)
