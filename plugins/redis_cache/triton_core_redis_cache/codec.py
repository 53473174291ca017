"""The bytes a response is kept as in Redis: versioned, compact, checked when read back.

Layout: ``TCRC`` ``<version: u8>`` ``<header length: u32 LE>`` ``<header: JSON>`` ``<tensor
bytes>...``. The header holds the model name and version, the response parameters and, per
output, ``[name, datatype, shape, byte count]``; the tensors' bytes follow in that order (raw
little-endian, BYTES as length-prefixed elements). Redis is shared: whatever is read back is
untrusted, so every field is checked and anything that does not add up is refused
(:class:`CorruptEntry`), never unpickled or trusted.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson

from triton_core import (
    NUMPY_DTYPES,
    InferenceResponse,
    ParameterValue,
    Tensor,
    deserialize_bytes,
    serialize_bytes,
)

MAGIC = b"TCRC"
VERSION = 1
_PREFIX = struct.Struct("<4sBI")
#: bounds on what a header may declare (a response has a handful of outputs)
MAX_OUTPUTS = 1024
MAX_DIMS = 64
_MAX_DIM = 1 << 62


class CorruptEntry(ValueError):
    """A value read back from Redis that is not a response this codec wrote."""


def tensor_bytes(tensor: Tensor) -> bytes | memoryview:
    data = tensor.data
    if tensor.datatype == "BYTES":
        return serialize_bytes(data)
    if data.dtype != NUMPY_DTYPES[tensor.datatype]:
        data = data.astype(NUMPY_DTYPES[tensor.datatype])
    if not data.flags.c_contiguous:
        data = np.ascontiguousarray(data)
    return data.data.cast("B") if data.size else b""


def encode(response: InferenceResponse) -> bytes:
    """The response's bytes; its ``id`` is not kept (each hit gets its request's id)."""
    payloads = [tensor_bytes(tensor) for tensor in response.outputs]
    header = orjson.dumps(
        {
            "model_name": response.model_name,
            "model_version": response.model_version,
            "parameters": response.parameters,
            "outputs": [
                [tensor.name, tensor.datatype, list(tensor.data.shape), len(payload)]
                for tensor, payload in zip(response.outputs, payloads, strict=True)
            ],
        }
    )
    return b"".join([_PREFIX.pack(MAGIC, VERSION, len(header)), header, *payloads])


def decode(value: bytes) -> InferenceResponse:
    """The response ``value`` holds; :class:`CorruptEntry` if it is not one."""
    view = memoryview(value)
    if len(view) < _PREFIX.size:
        raise CorruptEntry(f"{len(view)} bytes is shorter than the entry prefix")
    magic, version, header_length = _PREFIX.unpack_from(view)
    if magic != MAGIC or version != VERSION:
        raise CorruptEntry(f"not a version {VERSION} entry (starts {bytes(view[:5])!r})")
    body_start = _PREFIX.size + header_length
    if body_start > len(view):
        raise CorruptEntry(f"header of {header_length} bytes runs past the entry's end")
    try:
        header = orjson.loads(view[_PREFIX.size : body_start])
    except orjson.JSONDecodeError as exc:
        raise CorruptEntry(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise CorruptEntry("header is not an object")
    outputs = _outputs(header.get("outputs"), view[body_start:])
    return InferenceResponse(
        outputs=outputs,
        parameters=_parameters(header.get("parameters")),
        model_name=_typed(header.get("model_name"), str, "model_name"),
        model_version=_typed(header.get("model_version"), int, "model_version"),
    )


def _typed(value: Any, kind: type, field: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool) is not (kind is bool):
        raise CorruptEntry(f"header field '{field}' is not a {kind.__name__}")
    return value


def _parameters(value: Any) -> dict[str, ParameterValue]:
    if not isinstance(value, dict):
        raise CorruptEntry("header field 'parameters' is not an object")
    for name, item in value.items():
        if not isinstance(item, bool | int | float | str):
            raise CorruptEntry(f"parameter '{name}' is not a bool, number or string")
    return value


def _outputs(value: Any, body: memoryview) -> list[Tensor]:
    if not isinstance(value, list) or len(value) > MAX_OUTPUTS:
        raise CorruptEntry(f"header field 'outputs' is not a list of at most {MAX_OUTPUTS}")
    tensors = []
    offset = 0
    for index, item in enumerate(value):
        if not isinstance(item, list) or len(item) != 4:
            raise CorruptEntry(f"output {index} is not [name, datatype, shape, byte count]")
        name, datatype, shape, size = item
        size = _typed(size, int, f"outputs[{index}] byte count")
        if size < 0 or offset + size > len(body):
            raise CorruptEntry(f"output {index} declares {size} bytes past the entry's end")
        data = _array(datatype, shape, body[offset : offset + size], index)
        tensors.append(Tensor(_typed(name, str, f"outputs[{index}] name"), datatype, data))
        offset += size
    if offset != len(body):
        raise CorruptEntry(f"{len(body) - offset} bytes follow the last output")
    return tensors


def _array(datatype: Any, shape: Any, payload: memoryview, index: int) -> np.ndarray:
    if not isinstance(datatype, str) or datatype not in NUMPY_DTYPES:
        raise CorruptEntry(f"output {index} has an unknown datatype {datatype!r}")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(type(dim) is int and 0 <= dim <= _MAX_DIM for dim in shape)
    ):
        raise CorruptEntry(f"output {index} has an invalid shape")
    count = 1
    for dim in shape:
        count *= dim
    try:
        if datatype == "BYTES":
            return deserialize_bytes(payload, count).reshape(shape)
        dtype = NUMPY_DTYPES[datatype]
        if count * dtype.itemsize != len(payload):
            raise CorruptEntry(f"output {index}: {len(payload)} bytes do not fill shape {shape}")
        if datatype == "BOOL" and payload and np.frombuffer(payload, np.uint8).max() > 1:
            raise CorruptEntry(f"output {index}: a BOOL byte is neither 0 nor 1")
        return np.frombuffer(payload, dtype=dtype).reshape(shape)
    except (ValueError, OverflowError) as exc:
        if isinstance(exc, CorruptEntry):
            raise
        raise CorruptEntry(f"output {index}: {exc}") from None
