"""The gRPC frontend: Triton's ``inference.GRPCInferenceService`` on grpc.aio."""

from __future__ import annotations

from triton_core.frontends.grpc.server import create_grpc_server

__all__ = ["create_grpc_server"]
