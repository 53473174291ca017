"""The plugin module that the ``triton_core`` entry point names."""

from __future__ import annotations

from triton_core import BackendRegistry, hookimpl
from triton_core_example_numpy.backend import LinearBackend


@hookimpl
def triton_register_backends(registry: BackendRegistry) -> None:
    registry.add(LinearBackend)
