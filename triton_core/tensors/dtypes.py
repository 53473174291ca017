"""Triton datatypes: wire names, config enum names, numpy dtypes and the BYTES encoding.

Tensors are numpy arrays everywhere in the server. BF16 has no numpy dtype, so its values
are carried as ``uint16`` bit patterns; BYTES tensors are object arrays of ``bytes``.
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np

#: wire datatype -> numpy dtype used to hold its values
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

#: wire datatype -> bytes per element (BYTES is variable: 0 here)
ELEMENT_SIZE: Final[dict[str, int]] = {
    name: (0 if name == "BYTES" else dtype.itemsize) for name, dtype in NUMPY_DTYPES.items()
}

#: config enum name (``TYPE_FP32``) -> wire datatype (``FP32``)
CONFIG_TO_WIRE: Final[dict[str, str]] = {
    **{f"TYPE_{name}": name for name in NUMPY_DTYPES if name != "BYTES"},
    "TYPE_STRING": "BYTES",
}
WIRE_TO_CONFIG: Final[dict[str, str]] = {wire: cfg for cfg, wire in CONFIG_TO_WIRE.items()}

_NUMPY_KIND_TO_WIRE: Final[dict[np.dtype, str]] = {
    dtype: name for name, dtype in NUMPY_DTYPES.items() if name not in ("BF16", "BYTES")
}


def is_valid(datatype: str) -> bool:
    return datatype in NUMPY_DTYPES


def wire_datatype_of(array: np.ndarray) -> str:
    """Wire datatype for a numpy array (object, str and bytes arrays are BYTES)."""
    dtype = array.dtype
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    try:
        return _NUMPY_KIND_TO_WIRE[dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype]
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no Triton datatype") from None


def element_count(shape: tuple[int, ...] | list[int]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


_LEN = struct.Struct("<I")


def serialize_bytes(array: np.ndarray) -> bytes:
    """Encode a BYTES tensor: each element as a uint32 little-endian length, then its bytes."""
    parts: list[bytes] = []
    append = parts.append
    pack = _LEN.pack
    for item in array.flat:
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, bytes | bytearray):
            item = str(item).encode("utf-8")
        append(pack(len(item)))
        append(item)
    return b"".join(parts)


def deserialize_bytes(
    buffer: bytes | bytearray | memoryview, count: int | None = None
) -> np.ndarray:
    """Decode length-prefixed BYTES elements into a flat object array.

    Raises ``ValueError`` when a length prefix is cut short or runs past the end, or when
    ``count`` is given and the buffer holds a different number of elements.
    """
    view = memoryview(buffer).cast("B")
    total = len(view)
    items: list[bytes] = []
    offset = 0
    unpack = _LEN.unpack_from
    while offset < total:
        if len(items) == count:  # more than expected: stop before decoding them all
            raise ValueError(f"holds more than {count} elements, expected {count}")
        if offset + 4 > total:
            raise ValueError(f"element {len(items)} has a truncated length prefix at byte {offset}")
        (length,) = unpack(view, offset)
        offset += 4
        end = offset + length
        if end > total:
            raise ValueError(
                f"element {len(items)} declares {length} bytes but only {total - offset} remain"
            )
        items.append(bytes(view[offset:end]))
        offset = end
    if count is not None and len(items) != count:
        raise ValueError(f"holds {len(items)} elements, expected {count}")
    result = np.empty(len(items), dtype=object)
    result[:] = items
    return result


def serialized_byte_size(array: np.ndarray, datatype: str) -> int:
    if datatype == "BYTES":
        return len(serialize_bytes(array))
    return array.nbytes


def to_bytes(array: np.ndarray, datatype: str) -> bytes | memoryview:
    """Raw little-endian row-major bytes of a tensor, without a copy where possible."""
    if datatype == "BYTES":
        return serialize_bytes(array)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    if datatype == "BOOL" and array.dtype != np.bool_:
        array = array.astype(np.bool_)
    return array.data.cast("B") if array.size else b""


def from_bytes(
    buffer: bytes | bytearray | memoryview, datatype: str, shape: tuple[int, ...]
) -> np.ndarray:
    """View raw tensor bytes as a shaped array (no copy for fixed-size types).

    Raises ``ValueError`` when the byte count does not match the shape.
    """
    count = element_count(shape)
    if datatype == "BYTES":
        return deserialize_bytes(buffer, count).reshape(shape)
    dtype = NUMPY_DTYPES[datatype]
    expected = count * dtype.itemsize
    size = buffer.nbytes if isinstance(buffer, memoryview) else len(buffer)
    if size != expected:
        raise ValueError(f"expected {expected} bytes, got {size}")
    return np.frombuffer(buffer, dtype=dtype).reshape(shape)
