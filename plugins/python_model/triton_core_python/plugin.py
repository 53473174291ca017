"""Hook implementations of the Python model plugin (entry point ``python``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core import hookimpl

if TYPE_CHECKING:
    from triton_core import BackendRegistry


@hookimpl(trylast=True)
def triton_register_backends(registry: BackendRegistry) -> None:
    """Register :class:`~triton_core_python.backend.PythonBackend` (backend ``python``),
    then each of Triton's Python-based backends in the ``--backend-directory`` folders that
    no other plugin provides (last, so that the others have registered theirs)."""
    from triton_core_python.backend import PythonBackend, python_based_backends

    registry.add(PythonBackend)
    for backend in python_based_backends(registry.directories, taken=registry.names()):
        registry.add(backend)
