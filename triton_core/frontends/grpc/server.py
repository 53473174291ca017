"""Build the server that carries the gRPC frontend."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Final, Literal

import grpc

from triton_core.frontends.common import listen_socket
from triton_core.frontends.grpc.limits import DEFAULT_LIMITS, GrpcLimits, grpcio_options
from triton_core.frontends.grpc.servicer import GRPCInferenceServicer, HealthServicer
from triton_core.frontends.grpc.transport import DEFAULT_INFER_THREADS, GrpcServer, method_table
from triton_core.frontends.grpc.wire import EncodedMessage, parse_infer_request
from triton_core.frontends.header_forwarding import HeaderForwarder
from triton_core.frontends.receive_buffers import DEFAULT_COUNT
from triton_core.frontends.restricted import Restrictions
from triton_core.frontends.server_api import ServerAPI
from triton_core.frontends.tls import TlsOptions
from triton_core.protos import grpc_service_pb2, grpc_service_pb2_grpc, health_pb2, health_pb2_grpc

log = logging.getLogger(__name__)

#: Triton's message size limit in both directions (INT32_MAX)
MAX_MESSAGE_LENGTH: Final = 2**31 - 1

#: the inference RPCs whose answers ``--grpc-infer-response-compression-level`` compresses
INFER_PATHS: Final = (
    "/inference.GRPCInferenceService/ModelInfer",
    "/inference.GRPCInferenceService/ModelStreamInfer",
)
#: gRPC core's compression levels, as Triton passes them (none: not compressed)
GRPC_CORE_LEVELS: Final = {"low": 1, "medium": 2, "high": 3}

#: ``http2``: this project's HTTP/2 transport (the default, and the faster one);
#: ``grpcio``: grpc.aio, gRPC's own server
Transport = Literal["http2", "grpcio"]
TRANSPORTS: Final = ("http2", "grpcio")


#: the unary infer RPC's path: answered by a callback, its request parsed in place
INFER_METHOD: Final = "/inference.GRPCInferenceService/ModelInfer"


def create_grpc_server(
    server: ServerAPI,
    address: str,
    port: int,
    *,
    reuse_port: bool = False,
    transport: Transport = "http2",
    restrictions: Restrictions | None = None,
    tls: TlsOptions | None = None,
    limits: GrpcLimits = DEFAULT_LIMITS,
    compression_level: str = "none",
    header_forwarder: HeaderForwarder | None = None,
    infer_threads: int | None = None,
    allocation_pool: int | None = None,
) -> GrpcServer | grpc.aio.Server:
    """A gRPC server with the inference and health services, bound but not started.

    Its ``port`` attribute is the bound port (the one the system chose for port 0).

    Call it from the event loop that will run it, then ``await grpc_server.start()`` and, on
    shutdown, ``await grpc_server.stop(grace)`` on that same loop. ``reuse_port`` lets several
    worker processes share the port; it is off by default so that a port already in use is an
    error. Both transports run the same servicers, within the same ``limits``.
    ``restrictions``: the RPC groups that need a metadata header
    (``--grpc-restricted-protocol``); ``tls``: the ``--grpc-use-ssl*`` flags.
    ``compression_level`` (``--grpc-infer-response-compression-level``): none, or how hard
    to compress inference answers (gRPC core picks gzip or deflate from the level and what
    the client accepts, as in Triton; grpcio: every answer).
    ``header_forwarder``: metadata that infer requests carry as parameters
    (``--grpc-header-forward-pattern``). ``infer_threads`` (``--grpc-infer-thread-count``):
    the threads that inflate compressed requests off the event loop (None: 2);
    ``allocation_pool`` (``--grpc-infer-allocation-pool-size``): how many buffers of large
    request messages are kept for reuse (None: 8). Both for the built-in transport only
    (grpcio inflates and allocates in gRPC core).

    Raises ``RuntimeError`` when the address cannot be bound, ``ValueError`` for TLS flags or
    files that cannot be used.
    """
    inference = GRPCInferenceServicer(
        server,
        restrictions,
        header_forwarder,
        limits.max_response_pool_size,
        limits.max_stream_requests_in_flight,
    )
    health = HealthServicer(server, restrictions)
    tls = tls or TlsOptions("--grpc")
    ssl_context = tls.server_context(["h2"])  # on both transports: the same checks of the files
    if transport == "http2":
        methods = method_table(
            [
                (grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"], inference),
                (health_pb2.DESCRIPTOR.services_by_name["Health"], health),
            ],
            callbacks={
                "/inference.GRPCInferenceService/ModelInfer": inference.model_infer_callback
            },
            parsers={"/inference.GRPCInferenceService/ModelInfer": parse_infer_request},
        )
        level = GRPC_CORE_LEVELS.get(compression_level)
        if level is not None:
            for path in INFER_PATHS:
                methods[path] = replace(methods[path], compress_level=level)
        try:
            sock = listen_socket(address, port, "gRPC", reuse_port)
        except OSError as exc:
            raise RuntimeError(str(exc)) from exc
        grpc_server = GrpcServer(
            methods,
            sock,
            limits,
            ssl=ssl_context,
            ssl_handshake_timeout=tls.handshake_timeout_secs,
            infer_threads=infer_threads or DEFAULT_INFER_THREADS,
            allocation_pool=DEFAULT_COUNT if allocation_pool is None else allocation_pool,
        )
        log.info("gRPC frontend bound to %s:%d", address, grpc_server.port)
        return grpc_server
    if transport != "grpcio":
        raise ValueError(f"unknown gRPC transport '{transport}'; choose one of {TRANSPORTS}")
    if infer_threads is not None:
        raise ValueError("--grpc-infer-thread-count applies to --grpc-transport http2 only")
    if allocation_pool is not None:
        raise ValueError("--grpc-infer-allocation-pool-size applies to --grpc-transport http2 only")
    return _create_grpcio_server(
        inference, health, address, port, reuse_port, tls, limits, compression_level
    )


def _create_grpcio_server(
    inference: GRPCInferenceServicer,
    health: HealthServicer,
    address: str,
    port: int,
    reuse_port: bool,
    tls: TlsOptions,
    limits: GrpcLimits,
    compression_level: str = "none",
) -> grpc.aio.Server:
    options = [
        ("grpc.max_send_message_length", MAX_MESSAGE_LENGTH),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        *grpcio_options(limits),
    ]
    if compression_level != "none":
        # gRPC core's levels (1 low, 2 medium, 3 high), as Triton sets them
        options.append(("grpc.default_compression_level", GRPC_CORE_LEVELS[compression_level]))
    if tls.enabled:
        timeout_ms = int(tls.handshake_timeout_secs * 1000)
        options.append(("grpc.server_handshake_timeout_ms", timeout_ms))
    grpc_server = grpc.aio.server(options=options)
    _add_inference_service(inference, grpc_server)
    health_pb2_grpc.add_HealthServicer_to_server(health, grpc_server)
    # an IPv6 literal needs brackets before the port
    host = f"[{address}]" if ":" in address and not address.startswith("[") else address
    target = f"{host}:{port}"
    if tls.enabled:
        bound = grpc_server.add_secure_port(target, _credentials(tls))
    else:
        bound = grpc_server.add_insecure_port(target)
    if bound == 0:  # older grpcio reports failure this way instead of raising
        raise RuntimeError(f"failed to bind the gRPC server to {target}")
    log.info("gRPC frontend (grpcio) bound to %s (port %d)", target, bound)
    grpc_server.port = bound  # type: ignore[attr-defined]  # as GrpcServer.port
    return grpc_server


class _Handlers:
    """What a generated ``add_..._to_server`` registers, kept to be changed first."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        pass  # made again from the registered handlers below

    def add_registered_method_handlers(
        self, service: str, handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self.service, self.handlers = service, dict(handlers)


def _add_inference_service(inference: GRPCInferenceServicer, grpc_server: grpc.aio.Server) -> None:
    """The generated service, but ModelInfer with the wire-level parse and encoding of large
    tensors (views in, and one join out instead of protobuf serializer's copies)."""
    generated = _Handlers()
    grpc_service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(inference, generated)
    handlers = generated.handlers
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        inference.ModelInfer,
        request_deserializer=parse_infer_request,
        response_serializer=_serialize_answer,
    )
    grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(generated.service, handlers),)
    )
    grpc_server.add_registered_method_handlers(generated.service, handlers)


def _serialize_answer(message: grpc_service_pb2.ModelInferResponse | EncodedMessage) -> bytes:
    return message.SerializeToString()


def _credentials(tls: TlsOptions) -> grpc.ServerCredentials:
    """gRPC's server credentials from the ``--grpc-use-ssl*`` files (TLS 1.2 or newer)."""
    chain, key, root = tls.pem_files()
    return grpc.ssl_server_credentials(
        [(key, chain)],
        root_certificates=root if tls.use_ssl_mutual else None,
        require_client_auth=tls.use_ssl_mutual,
    )
