"""The response-cache contract and the cache key."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triton_core.tensors.dtypes import serialize_bytes

if TYPE_CHECKING:
    from triton_core.types import InferenceRequest, InferenceResponse


@dataclass(slots=True)
class CacheStatistics:
    """Server-wide numbers of one cache (Triton's ``nv_cache_*`` families)."""

    entries: int = 0
    used_bytes: int = 0
    capacity_bytes: int = 0
    lookups: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    lookup_ns: int = 0
    insert_ns: int = 0


class ResponseCache(ABC):
    """Maps request keys to complete responses. Methods are called on the event loop."""

    @abstractmethod
    async def lookup(self, key: bytes) -> InferenceResponse | None:
        """The cached response for ``key``, or None. The caller does not modify it."""

    @abstractmethod
    async def insert(self, key: bytes, response: InferenceResponse) -> None:
        """Keep ``response`` (which the caller will not modify) under ``key``, if it fits."""

    @abstractmethod
    def statistics(self) -> CacheStatistics:
        """Current numbers, read when metrics are scraped."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections or memory at server stop."""


def request_key(model_name: str, version: int, request: InferenceRequest) -> bytes:
    """Triton's key (model, version, inputs by name with their bytes), made safer.

    Datatypes, shapes and the requested outputs are hashed too, so requests whose bytes match
    but mean something else never share an entry.
    """
    digest = hashlib.blake2b(digest_size=32)
    digest.update(f"{model_name}\0{version}\0".encode())
    for name in sorted(request.inputs):
        tensor = request.inputs[name]
        data = tensor.data
        digest.update(f"{name}\0{tensor.datatype}\0{data.shape}\0".encode())
        if tensor.datatype == "BYTES":
            digest.update(serialize_bytes(data))
        else:
            digest.update((data if data.flags.c_contiguous else data.copy()).data.cast("B"))
    if request.outputs is not None:
        for output in request.outputs:
            digest.update(f"out\0{output.name}\0{output.classification}\0".encode())
    return digest.digest()


def response_size(response: InferenceResponse) -> int:
    """Bytes a cached response holds (its tensors, plus a small fixed overhead)."""
    size = 256
    for tensor in response.outputs:
        data = tensor.data
        if tensor.datatype == "BYTES":
            size += sum(len(item) if isinstance(item, bytes | str) else 8 for item in data.flat)
            size += 8 * data.size
        else:
            size += data.nbytes
        size += 64
    return size
