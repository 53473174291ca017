"""triton-core: an inference server that speaks Triton's protocol, as a small core plus plugins."""

from __future__ import annotations

__version__ = "0.1.0"

from triton_core.backend import Backend, BackendModel, InstanceSpec, ModelContext, ModelInstance
from triton_core.errors import Status, TritonError
from triton_core.hookspecs import hookimpl
from triton_core.server import Server, ServerOptions
from triton_core.types import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    RequestFlag,
    Tensor,
)

__all__ = [
    "Backend",
    "BackendModel",
    "InferenceRequest",
    "InferenceResponse",
    "InstanceSpec",
    "ModelContext",
    "ModelInstance",
    "RequestFlag",
    "RequestedOutput",
    "Server",
    "ServerOptions",
    "Status",
    "Tensor",
    "TritonError",
    "__version__",
    "hookimpl",
]
