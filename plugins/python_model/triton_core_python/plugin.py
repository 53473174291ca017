"""Hook implementations of the Python model plugin (entry point ``python``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core import hookimpl

if TYPE_CHECKING:
    from triton_core import BackendRegistry


@hookimpl
def triton_register_backends(registry: BackendRegistry) -> None:
    """Register :class:`~triton_core_python.backend.PythonBackend` (backend ``python``)."""
    from triton_core_python.backend import PythonBackend

    registry.add(PythonBackend)
