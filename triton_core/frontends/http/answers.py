"""KServe v2 HTTP answers: inference responses as JSON plus binary tensor data (outputs
written by orjson straight from numpy arrays, binary ones as views, not copies), and the
statistics extension's document. Requests are decoded in :mod:`.codec`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import orjson

from triton_core.errors import internal, invalid_arg
from triton_core.frontends.http.codec import HEADER_LENGTH, NO_JSON
from triton_core.observability.statistics import Duration, ModelStatistics
from triton_core.tensors.dtypes import (
    NUMPY_DTYPES,
    serialize_bytes,
)
from triton_core.types import (
    InferenceResponse,
)

_OPT_NUMPY: Final = orjson.OPT_SERIALIZE_NUMPY
_FLOATS: Final = frozenset({"FP16", "FP32", "FP64", "BF16"})
_JSON_CONTENT_TYPE: Final = "application/json"
_BINARY_CONTENT_TYPE: Final = "application/octet-stream"


def encode_response(
    response: InferenceResponse,
    binary_outputs: Mapping[str, bool],
    default_binary: bool,
) -> tuple[bytes, dict[str, str]]:
    """Encode a response as (body, headers): JSON, then the binary outputs' bytes in order.

    A listed output is binary iff ``binary_outputs[name]``; any other output iff
    ``default_binary``. Headers are Content-Type and, when any output is binary,
    Inference-Header-Content-Length. Raises INVALID_ARG for FP16/BF16 outputs asked in JSON.
    """
    parts, headers = encode_response_parts(response, binary_outputs, default_binary)
    return b"".join(parts), headers  # one part: that same object, not a copy


def encode_response_parts(
    response: InferenceResponse,
    binary_outputs: Mapping[str, bool],
    default_binary: bool,
) -> tuple[list[bytes | memoryview], dict[str, str]]:
    """:func:`encode_response` with the body as its parts: the JSON, then each binary
    output's bytes (viewing the output array where it holds them as sent), not joined."""
    try:
        return _encode(response, binary_outputs, default_binary, False)
    except _NonFinite:
        # orjson writes NaN/Inf as null; Triton (rapidjson) writes NaN/Infinity/-Infinity,
        # which Python's json and rapidjson clients read back as floats
        return _encode(response, binary_outputs, default_binary, True)


class _NonFinite(Exception):
    pass


def _encode(
    response: InferenceResponse,
    binary_outputs: Mapping[str, bool],
    default_binary: bool,
    nonfinite: bool,
) -> tuple[list[bytes | memoryview], dict[str, str]]:
    outputs: list[dict[str, Any]] = []
    blobs: list[bytes | memoryview] = []
    has_binary = False
    json_floats = False
    in_shm = response.shared_memory_outputs
    for tensor in response.outputs:
        name = tensor.name
        datatype = tensor.datatype
        array = tensor.data
        output: dict[str, Any] = {"name": name, "datatype": datatype, "shape": array.shape}
        if in_shm is not None and name in in_shm:
            pass  # written into its region: the answer carries its metadata only
        elif binary_outputs.get(name, default_binary):
            raw, size = _output_bytes(array, datatype, name)
            output["parameters"] = {"binary_data_size": size}
            has_binary = True
            if size:
                blobs.append(raw)
        else:
            output["data"] = _output_json(array, datatype, name, nonfinite)
            if datatype in _FLOATS:
                json_floats = True
        outputs.append(output)

    head: dict[str, Any] = {}
    if response.id:
        head["id"] = response.id
    head["model_name"] = response.model_name
    head["model_version"] = str(response.model_version)
    if response.parameters:
        head["parameters"] = response.parameters
    head["outputs"] = outputs
    try:
        text = orjson.dumps(head, option=_OPT_NUMPY)
    except TypeError as exc:
        raise internal(f"failed to serialize the response JSON: {exc}") from None
    if json_floats and not nonfinite and b"null" in text:
        raise _NonFinite
    if has_binary:
        headers = {"Content-Type": _BINARY_CONTENT_TYPE, HEADER_LENGTH: str(len(text))}
        blobs.insert(0, text)
        return blobs, headers
    return [text], {"Content-Type": _JSON_CONTENT_TYPE}


def _output_bytes(array: np.ndarray, datatype: str, name: str) -> tuple[bytes | memoryview, int]:
    """The wire bytes of an output (little-endian, row-major; BYTES length-prefixed) and
    their size: a C-contiguous array is itself a buffer ``bytes.join`` copies from."""
    if datatype == "BYTES":
        raw = serialize_bytes(array)
        return raw, len(raw)
    expected = NUMPY_DTYPES.get(datatype)
    if expected is None:
        raise invalid_arg(f"invalid datatype '{datatype}' for output '{name}'")
    dtype = array.dtype
    if dtype is not expected and dtype != expected:
        if datatype == "BF16" and dtype.itemsize == 2:
            array = array.view(expected)  # bfloat16 bit patterns, e.g. from ml_dtypes
        else:
            array = array.astype(expected)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array.data, array.nbytes


def _output_json(array: np.ndarray, datatype: str, name: str, nonfinite: bool) -> Any:
    """The flat JSON ``data`` of an output: a numpy array orjson serializes, or a list."""
    if datatype in NO_JSON:
        raise invalid_arg(
            f"sending {datatype} data via JSON is not supported. Please use the binary data "
            f"format for output '{name}'"
        )
    if datatype == "BYTES":
        return _bytes_json(array)
    if datatype == "BOOL" and array.dtype != np.bool_:
        array = array.astype(np.bool_)
    flat = array.ravel()  # contiguous, as orjson requires
    if flat.dtype.kind == "O":
        return flat.tolist()
    if nonfinite and datatype in _FLOATS:
        return _nonfinite_fragment(flat)
    return flat


def _nonfinite_fragment(flat: np.ndarray) -> Any:
    items = orjson.dumps(flat, option=_OPT_NUMPY)[1:-1].split(b",")
    for index in np.flatnonzero(~np.isfinite(flat)).tolist():
        value = flat[index]
        items[index] = b"NaN" if value != value else (b"Infinity" if value > 0 else b"-Infinity")
    return orjson.Fragment(b"[" + b",".join(items) + b"]")


def _bytes_json(array: np.ndarray) -> Any:
    """BYTES elements as JSON strings.

    Elements that are not UTF-8 are written as their raw bytes, as Triton does (rapidjson
    does not validate); the stock client then reports a UTF-8 error suggesting binary_data.
    """
    items = [_as_bytes(item) for item in array.ravel().tolist()]
    try:
        return [item.decode("utf-8") for item in items]
    except UnicodeDecodeError:
        # latin-1 maps each byte to one code point, so json.dumps escapes only '"', '\\' and
        # control characters and encoding back to latin-1 restores the other bytes as they were
        return orjson.Fragment(
            b"["
            + b",".join(
                json.dumps(item.decode("latin-1"), ensure_ascii=False).encode("latin-1")
                for item in items
            )
            + b"]"
        )


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, bytearray | memoryview):
        return bytes(item)
    return str(item).encode("utf-8")


def _duration(duration: Duration) -> dict[str, int]:
    return {"count": duration.count, "ns": duration.ns}


def encode_statistics(statistics: list[ModelStatistics]) -> bytes:
    """The statistics extension's JSON body (``{"model_stats": [...]}``)."""
    return orjson.dumps(
        {
            "model_stats": [
                {
                    "name": stats.name,
                    "version": str(stats.version),
                    "last_inference": stats.last_inference_ms,
                    "inference_count": stats.inference_count,
                    "execution_count": stats.execution_count,
                    "inference_stats": {
                        "success": _duration(stats.success),
                        "fail": _duration(stats.fail),
                        "queue": _duration(stats.queue),
                        "compute_input": _duration(stats.compute_input),
                        "compute_infer": _duration(stats.compute_infer),
                        "compute_output": _duration(stats.compute_output),
                        "cache_hit": _duration(stats.cache_hit),
                        "cache_miss": _duration(stats.cache_miss),
                    },
                    "response_stats": {},
                    "batch_stats": [
                        {
                            "batch_size": size,
                            "compute_input": _duration(batch.compute_input),
                            "compute_infer": _duration(batch.compute_infer),
                            "compute_output": _duration(batch.compute_output),
                        }
                        for size, batch in sorted(stats.batches.items())
                    ],
                    "memory_usage": [],
                }
                for stats in statistics
            ]
        }
    )
