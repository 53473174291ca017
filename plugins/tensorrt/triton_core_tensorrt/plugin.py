"""Hook implementations of the TensorRT plugin (entry point ``tensorrt``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core import hookimpl

if TYPE_CHECKING:
    from triton_core import BackendRegistry


@hookimpl
def triton_register_backends(registry: BackendRegistry) -> None:
    """Register :class:`~triton_core_tensorrt.backend.TensorRTBackend`."""
    # backend.py imports neither tensorrt nor CUDA: registering works without them.
    from triton_core_tensorrt.backend import TensorRTBackend

    registry.add(TensorRTBackend)
