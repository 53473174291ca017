"""Hook implementations of the PyTorch plugin (entry point ``torch``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core import hookimpl

if TYPE_CHECKING:
    from triton_core import BackendRegistry


@hookimpl
def triton_register_backends(registry: BackendRegistry) -> None:
    """Register :class:`~triton_core_torch.backend.PyTorchBackend`."""
    # backend.py does not import torch at module level: registering stays cheap.
    from triton_core_torch.backend import PyTorchBackend

    registry.add(PyTorchBackend)
