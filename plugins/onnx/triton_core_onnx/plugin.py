"""Hook implementations of the ONNX Runtime plugin (entry point ``onnx``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core import hookimpl

if TYPE_CHECKING:
    from triton_core import BackendRegistry


@hookimpl
def triton_register_backends(registry: BackendRegistry) -> None:
    """Register :class:`~triton_core_onnx.backend.OnnxRuntimeBackend`."""
    # Imported here so that listing plugins does not pay for importing onnxruntime.
    from triton_core_onnx.backend import OnnxRuntimeBackend

    registry.add(OnnxRuntimeBackend)
