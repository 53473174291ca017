"""Build the grpc.aio server that carries the gRPC frontend."""

from __future__ import annotations

import logging
from typing import Final

import grpc

from triton_core.frontends.grpc.servicer import GRPCInferenceServicer, HealthServicer, ServerAPI
from triton_core.protos import grpc_service_pb2_grpc, health_pb2_grpc

log = logging.getLogger(__name__)

#: Triton's message size limit in both directions (INT32_MAX)
MAX_MESSAGE_LENGTH: Final = 2**31 - 1


def create_grpc_server(
    server: ServerAPI, address: str, port: int, *, reuse_port: bool = False
) -> grpc.aio.Server:
    """A grpc.aio server with the inference and health services, bound but not started.

    Call it from the event loop that will run it (grpc.aio binds the server to the loop
    current at creation), then ``await grpc_server.start()`` and, on shutdown,
    ``await grpc_server.stop(grace)`` on that same loop. ``reuse_port`` lets several worker
    processes share the port; it is off by default so that a port already in use is an error.

    Raises ``RuntimeError`` when the address cannot be bound.
    """
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
        ("grpc.max_receive_message_length", MAX_MESSAGE_LENGTH),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
    ]
    grpc_server = grpc.aio.server(options=options)
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(
        GRPCInferenceServicer(server), grpc_server
    )
    health_pb2_grpc.add_HealthServicer_to_server(HealthServicer(server), grpc_server)
    # an IPv6 literal needs brackets before the port
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    target = f"{host}:{port}"
    bound = grpc_server.add_insecure_port(target)
    if bound == 0:  # older grpcio reports failure this way instead of raising
        raise RuntimeError(f"failed to bind the gRPC server to {target}")
    log.info("gRPC frontend bound to %s (port %d)", target, bound)
    return grpc_server
