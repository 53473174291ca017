"""Typed references to tensors in shared memory, as the frontends decode them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from triton_core.shared_memory.system import SystemRegion


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


@dataclass(slots=True, frozen=True)
class SystemSpan:
    """``byte_size`` bytes at ``offset`` of a registered system region."""

    region: SystemRegion
    offset: int
    byte_size: int


@dataclass(slots=True)
class SharedMemorySpans:
    """Where a scheduled request's tensors are in system regions, for a backend that runs
    models in other processes: it maps the regions there (``region.fileno()``) instead of
    copying the tensors through the server.

    ``inputs``: input name -> (the view the server made, its span); the span holds only
    while ``request.inputs[name].data`` is that very array (a scheduler may replace it).
    ``outputs``: output name -> its span. A backend that writes an output there itself
    answers it as a view of the region at that span (``region.view``), and the server
    then copies nothing; any other answer the server writes into the region as usual.
    """

    inputs: dict[str, tuple[np.ndarray, SystemSpan]] = field(default_factory=dict)
    outputs: dict[str, SystemSpan] = field(default_factory=dict)
