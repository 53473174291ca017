"""``triton_core.testing``: a pytest plugin and helpers for testing triton-core plugins.

Installed with ``pip install triton-core[testing]``, pytest loads it by itself (the
``pytest11`` entry point ``triton_core.testing``); ``-p triton_core.testing`` loads it
where the package is not installed. It needs no asyncio plugin: in-process servers run on
an event loop of their own (see :mod:`triton_core.testing.inprocess`).

Fixtures: ``model_repository``, ``triton_plugins``, ``triton_server``,
``triton_server_factory``, ``triton_process``, ``triton_process_factory``,
``triton_http_client``, ``triton_grpc_client``.
"""

from __future__ import annotations

from triton_core.testing.device_memory import HostCudaRegion, TorchCudaRegion
from triton_core.testing.fixtures import (
    model_repository,
    triton_grpc_client,
    triton_http_client,
    triton_plugins,
    triton_process,
    triton_process_factory,
    triton_server,
    triton_server_factory,
)
from triton_core.testing.inprocess import InProcessServer, plugin_manager
from triton_core.testing.inputs import grpc_inputs, http_inputs, inference_request
from triton_core.testing.process import ServerProcess
from triton_core.testing.repository import ModelRepository, render_config

__all__ = [
    "HostCudaRegion",
    "InProcessServer",
    "ModelRepository",
    "ServerProcess",
    "TorchCudaRegion",
    "grpc_inputs",
    "http_inputs",
    "inference_request",
    "model_repository",
    "plugin_manager",
    "render_config",
    "triton_grpc_client",
    "triton_http_client",
    "triton_plugins",
    "triton_process",
    "triton_process_factory",
    "triton_server",
    "triton_server_factory",
]
