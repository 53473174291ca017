"""Typed references to tensors in shared memory, as the frontends decode them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True, frozen=True)
class SharedMemoryRef:
    """``byte_size`` bytes at ``offset`` in the registered region named ``region``."""

    region: str
    byte_size: int
    offset: int = 0


@dataclass(slots=True, frozen=True)
class SharedMemoryInput:
    """An input whose values are in a region: its datatype and shape, and where they are."""

    datatype: str
    shape: tuple[int, ...]
    ref: SharedMemoryRef


@dataclass(slots=True)
class SharedMemoryTensors:
    """The tensors of one request that live in shared memory.

    ``inputs`` become numpy views on their regions before the request is scheduled;
    ``outputs`` are written into their regions once the response is ready.
    """

    inputs: dict[str, SharedMemoryInput] = field(default_factory=dict)
    outputs: dict[str, SharedMemoryRef] = field(default_factory=dict)
