"""grpc.aio servicers: ``inference.GRPCInferenceService`` and ``grpc.health.v1.Health``.

They only translate: protobuf in, calls on the server (:class:`ServerAPI`), protobuf out. A
:class:`~triton_core.errors.TritonError` becomes the gRPC status of its Triton code (table 1.2
of the protocol notes) with its message; anything else becomes INTERNAL.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, NoReturn, Protocol, TypeVar

import grpc

from triton_core.backends.streaming import ResponsePool
from triton_core.errors import Status, TritonError, invalid_arg, unsupported
from triton_core.frontends import logging_extension
from triton_core.frontends.common import parse_version
from triton_core.frontends.grpc.codec import (
    decode_infer_request,
    decode_stream_request,
    encode_infer_answer,
    encode_statistics,
    encode_stream_error,
    encode_stream_response,
)
from triton_core.frontends.grpc.limits import DEFAULT_LIMITS
from triton_core.frontends.grpc.stream_order import (
    InOrder,
    Place,
    StreamRoom,
    Ticket,
    answered_in_order,
)
from triton_core.frontends.grpc.wire import EncodedMessage, SplitInferRequest
from triton_core.frontends.header_forwarding import HeaderForwarder
from triton_core.frontends.infer import DECOUPLED_MESSAGES, InferPath, Reply, unexpected
from triton_core.frontends.restricted import Restriction, Restrictions, first_value
from triton_core.frontends.server_api import ServerAPI
from triton_core.frontends.tracing import trace_setting
from triton_core.protos import grpc_service_pb2 as pb
from triton_core.protos import grpc_service_pb2_grpc as pb_grpc
from triton_core.protos import health_pb2, health_pb2_grpc

if TYPE_CHECKING:
    from triton_core.types import (
        InferenceRequest,
        InferenceResponse,
    )

log = logging.getLogger(__name__)

#: Triton's exact message for a decoupled model on the unary RPC (clients test for it)
DECOUPLED_MESSAGE: Final = DECOUPLED_MESSAGES["GRPC"]

#: client metadata that asks for a real gRPC status, ending the stream, on the first error
STREAM_ERROR_HEADER: Final = "triton_grpc_error"

_STATUS_CODES: Final[dict[Status, grpc.StatusCode]] = {
    status: grpc.StatusCode[status.grpc_code_name] for status in Status
}

_TensorMetadata = pb.ModelMetadataResponse.TensorMetadata


async def _abort(context: grpc.aio.ServicerContext, error: TritonError) -> NoReturn:
    await context.abort(_STATUS_CODES[error.status], error.message)
    raise AssertionError("unreachable: context.abort raises")  # for type checkers


#: what a unary RPC answers
_Answer = TypeVar("_Answer")


def _aborts_on_error(
    method: Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_Answer]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[_Answer]]:
    """A unary RPC whose errors end the call with their status: a TritonError's own, any
    other exception as INTERNAL (logged with its traceback)."""

    @functools.wraps(method)
    async def rpc(self: Any, request: Any, context: grpc.aio.ServicerContext) -> _Answer:
        try:
            return await method(self, request, context)
        except TritonError as exc:
            error = exc
        except Exception as exc:
            error = unexpected(exc)
        await _abort(context, error)

    return rpc


def _text_pairs(metadata: Any) -> list[tuple[str, str]]:
    """A call's metadata without its binary (``-bin``) values: what headers forward."""
    return [(key, value) for key, value in metadata or () if isinstance(value, str)]


class _CallReply:
    """Answers a callback handler's call (the built-in transport)."""

    __slots__ = ("_call",)

    def __init__(self, call: CallbackCall) -> None:
        self._call = call

    def respond(self, response: InferenceResponse, request: InferenceRequest) -> None:
        self._call.respond(encode_infer_answer(response, request))

    def fail(self, error: TritonError) -> None:
        self._call.fail(_STATUS_CODES[error.status], error.message)


class _FutureReply:
    """Resolves the future a grpc.aio ModelInfer coroutine awaits."""

    __slots__ = ("_answered",)

    def __init__(self, answered: asyncio.Future[Any]) -> None:
        self._answered = answered

    def respond(self, response: InferenceResponse, request: InferenceRequest) -> None:
        if not self._answered.done():
            self._answered.set_result(encode_infer_answer(response, request))

    def fail(self, error: TritonError) -> None:
        if not self._answered.done():
            self._answered.set_exception(error)


def _setting_value(value: pb.LogSettingsRequest.SettingValue) -> Any:
    kind = value.WhichOneof("parameter_choice")
    return None if kind is None else getattr(value, kind)


def _set_setting_value(target: pb.LogSettingsResponse.SettingValue, value: Any) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.uint32_param = value
    else:
        target.string_param = value


class CallbackCall(Protocol):
    """How a callback handler answers its call (see ``transport.RpcMethod``)."""

    def respond(self, message: Any) -> None: ...
    def fail(self, code: grpc.StatusCode, details: str) -> None: ...
    def cancel_with(self, future: asyncio.Future[Any]) -> None: ...
    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]: ...


#: the restricted-protocol group of every RPC (``--grpc-restricted-protocol``), as Triton
RPC_GROUPS: Final = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}
#: ``grpc.health.v1.Health/Check`` is in the health group too (Triton)
HEALTH_CHECK_GROUP: Final = "health"


def restricted_message(restriction: Restriction) -> str:
    """Triton's words for a call without the metadata (or with another value)."""
    return f"This protocol is restricted, expecting header '{restriction.header}'"


def _allows(restriction: Restriction, metadata: Any) -> bool:
    return first_value(metadata or (), restriction.key) == restriction.value


def _guarded(handler: Callable[..., Any], restriction: Restriction) -> Callable[..., Any]:
    """``handler`` (unary or streaming), answering UNAVAILABLE to calls without the header."""
    message = restricted_message(restriction)

    async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if not _allows(restriction, context.invocation_metadata()):
            await context.abort(grpc.StatusCode.UNAVAILABLE, message)
        return await handler(request, context)

    guarded.__name__ = getattr(handler, "__name__", "guarded")
    return guarded


def _guarded_callback(
    handler: Callable[[Any, CallbackCall], None], restriction: Restriction
) -> Callable[[Any, CallbackCall], None]:
    """A callback handler, answering UNAVAILABLE to calls without the header."""
    message = restricted_message(restriction)

    def guarded(request: Any, call: CallbackCall) -> None:
        if _allows(restriction, call.invocation_metadata()):
            handler(request, call)
        else:
            call.fail(grpc.StatusCode.UNAVAILABLE, message)

    return guarded


class GRPCInferenceServicer(pb_grpc.GRPCInferenceServiceServicer):
    """``inference.GRPCInferenceService`` on grpc.aio, delegating to a :class:`ServerAPI`.

    ``restrictions``: the RPC groups that answer only calls with a metadata header
    (``--grpc-restricted-protocol``). Only the restricted RPCs are wrapped: the others,
    and every RPC when nothing is restricted, run as they are.
    """

    def __init__(
        self,
        server: ServerAPI,
        restrictions: Restrictions | None = None,
        header_forwarder: HeaderForwarder | None = None,
        response_pool_size: int | None = None,
        stream_requests_in_flight: int = DEFAULT_LIMITS.max_stream_requests_in_flight,
    ) -> None:
        self._server = server
        #: ``--grpc-max-response-pool-size``: a streamed request's responses produced but
        #: not yet written, at most (None: no bound)
        self.response_pool_size = response_pool_size
        #: ``--grpc-max-stream-requests-in-flight``: requests of one stream read and not yet
        #: answered in full, at most
        self.stream_requests_in_flight = stream_requests_in_flight
        #: every infer RPC answers through it: forwarding, tracing, submission
        self._infer = InferPath(server, "GRPC", forwarder=header_forwarder)
        for rpc, group in RPC_GROUPS.items():
            restriction = (restrictions or {}).get(group)
            if restriction is None:
                continue
            # an instance attribute: both transports look handlers up on the instance
            setattr(self, rpc, _guarded(getattr(self, rpc), restriction))
            if rpc == "ModelInfer":
                # mypy checks an instance attribute that shadows a method against the
                # unbound method (with self)
                self.model_infer_callback = _guarded_callback(  # type: ignore[method-assign, assignment]
                    self.model_infer_callback, restriction
                )

    # -- health and metadata --------------------------------------------------------------

    @_aborts_on_error
    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerLiveResponse:
        """Whether the server is live."""
        return pb.ServerLiveResponse(live=self._server.is_live())

    @_aborts_on_error
    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerReadyResponse:
        """Whether the server is ready."""
        return pb.ServerReadyResponse(ready=await self._server.check_ready())

    @_aborts_on_error
    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelReadyResponse:
        """Whether a model (version) is ready; an unknown model is an error status."""
        version = parse_version(request.version)
        ready = await self._server.check_model_ready(request.name, version)
        return pb.ModelReadyResponse(ready=ready)

    @_aborts_on_error
    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ServerMetadataResponse:
        """Server name, version and extensions."""
        meta = self._server.metadata()
        return pb.ServerMetadataResponse(
            name=meta.name, version=meta.version, extensions=meta.extensions
        )

    @_aborts_on_error
    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelMetadataResponse:
        """A model's versions, platform and tensor metadata."""
        version = parse_version(request.version)
        meta = self._server.model_metadata(request.name, version)
        return pb.ModelMetadataResponse(
            name=meta.name,
            versions=meta.versions,
            platform=meta.platform,
            inputs=[
                _TensorMetadata(name=t.name, datatype=t.datatype, shape=t.shape)
                for t in meta.inputs
            ],
            outputs=[
                _TensorMetadata(name=t.name, datatype=t.datatype, shape=t.shape)
                for t in meta.outputs
            ],
        )

    @_aborts_on_error
    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelConfigResponse:
        """A model's (auto-completed) configuration."""
        version = parse_version(request.version)
        config = self._server.model_config(request.name, version)
        response = pb.ModelConfigResponse()
        response.config.CopyFrom(config)
        return response

    @_aborts_on_error
    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelStatisticsResponse:
        """Inference statistics of all models, one model, or one version."""
        version = parse_version(request.version)
        return encode_statistics(self._server.statistics(request.name, version))

    # -- model repository -----------------------------------------------------------------

    @_aborts_on_error
    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepositoryIndexResponse:
        """Models in the repository with their versions' states."""
        _check_repository_name(request.repository_name)
        response = pb.RepositoryIndexResponse()
        for entry in self._server.repository_index(request.ready):
            item = response.models.add(name=entry.name, state=entry.state)
            if entry.version >= 0:
                item.version = str(entry.version)
            item.reason = entry.reason
        return response

    @_aborts_on_error
    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepositoryModelLoadResponse:
        """Load or reload a model, with an optional config and file overrides."""
        _check_repository_name(request.repository_name)
        config = None
        files: dict[str, bytes] = {}
        for key, parameter in request.parameters.items():
            choice = parameter.WhichOneof("parameter_choice")
            if key == "config" and choice == "string_param":
                config = parameter.string_param
            elif key.startswith("file:") and choice == "bytes_param":
                files[key[5:]] = parameter.bytes_param
            elif key == "config" or key.startswith("file:"):
                expected = "string_param" if key == "config" else "bytes_param"
                raise invalid_arg(
                    f"invalid value type for load parameter '{key}', expected {expected}."
                )
            else:
                raise invalid_arg(f"unrecognized load parameter '{key}'.")
        await self._server.load_model(request.model_name, config, files or None)
        return pb.RepositoryModelLoadResponse()

    @_aborts_on_error
    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: grpc.aio.ServicerContext
    ) -> pb.RepositoryModelUnloadResponse:
        """Unload a model (and with unload_dependents, what an ensemble loaded with it)."""
        _check_repository_name(request.repository_name)
        dependents = False
        parameter = request.parameters.get("unload_dependents")
        if parameter is not None:
            if parameter.WhichOneof("parameter_choice") != "bool_param":
                raise invalid_arg(
                    "invalid value type for 'unload_dependents' parameter, expected bool_param."
                )
            dependents = parameter.bool_param
        await self._server.unload_model(request.model_name, dependents)
        return pb.RepositoryModelUnloadResponse()

    # -- inference ------------------------------------------------------------------------

    async def ModelInfer(
        self, request: pb.ModelInferRequest | SplitInferRequest, context: grpc.aio.ServicerContext
    ) -> pb.ModelInferResponse | EncodedMessage:
        """One request, one response; decoupled models are refused as Triton does. grpc.aio
        runs this coroutine; the built-in transport calls :meth:`model_infer_callback`."""
        answered: asyncio.Future[pb.ModelInferResponse | EncodedMessage] = (
            asyncio.get_running_loop().create_future()
        )
        submitted = self._answer(request, _FutureReply(answered), context.invocation_metadata)
        try:
            return await answered
        except TritonError as error:
            await _abort(context, error)
        finally:
            if submitted is not None:
                submitted.cancel()  # the call ended first: the work is not wanted any more

    def model_infer_callback(
        self, request: pb.ModelInferRequest | SplitInferRequest, call: CallbackCall
    ) -> None:
        """ModelInfer for transports that take callback handlers: no task per request; the
        answer is sent from the response future's callback."""
        submitted = self._answer(request, _CallReply(call), call.invocation_metadata)
        if submitted is not None:
            call.cancel_with(submitted)

    def _answer(
        self,
        request: pb.ModelInferRequest | SplitInferRequest,
        reply: Reply,
        metadata: Callable[[], Any],
    ) -> asyncio.Future[InferenceResponse] | None:
        since = self._infer.received()
        try:
            infer_request = decode_infer_request(request)
        except Exception as exc:
            reply.fail(unexpected(exc))
            return None
        return self._infer.answer(infer_request, lambda: _text_pairs(metadata()), since, reply)

    async def ModelStreamInfer(
        self,
        request_iterator: AsyncIterator[pb.ModelInferRequest],
        context: grpc.aio.ServicerContext,
    ) -> None:
        """Requests on one stream run concurrently; answers to requests for models that are
        not decoupled are written in the order of the requests, as Triton does (an error
        does not overtake the answer of a request before it); a decoupled model's answers
        are written as it sends them.

        Every answer carries ``triton_final_response``: always true for ordinary models; a
        decoupled model's answers stream as it sends them, and its flag-only completion is
        sent as an empty final response only when the request set
        ``triton_enable_empty_final_response``. Errors are sent as
        ``error_message`` (with the request id) and the stream stays open, unless the client
        sent the metadata ``triton_grpc_error: true``: then the first error ends the stream
        with its real status.

        With ``--grpc-max-response-pool-size N`` a request's model waits to send while N of
        its responses wait for the writer; each gives its room back as its write begins.
        """
        server = self._server
        raise_errors = _wants_grpc_errors(context)
        infer_path = self._infer

        def metadata() -> list[tuple[str, str]]:
            return _text_pairs(context.invocation_metadata())

        pool_size = self.response_pool_size
        # this coroutine is the only writer: grpc.aio allows one write at a time per call;
        # each item goes with the ticket of the request that produced it
        queue: asyncio.Queue[tuple[_StreamItem, Ticket | None]] = asyncio.Queue()
        in_order = InOrder(queue.put_nowait)
        room = StreamRoom(self.stream_requests_in_flight)
        tasks: set[asyncio.Task[None]] = set()

        async def answer(
            message: pb.ModelInferRequest, place: Place | None, ticket: Ticket
        ) -> None:
            sink = queue.put_nowait if place is None else place.items.append

            def emit(item: Any) -> None:
                ticket.unwritten += 1
                sink((item, ticket))

            try:
                await respond(message, emit)
            finally:
                if place is not None:
                    in_order.complete(place)
                ticket.done()

        async def respond(message: pb.ModelInferRequest, emit: Callable[[Any], None]) -> None:
            request_id = message.id
            since = infer_path.received()
            trace = None
            try:
                infer_request, empty_final = decode_stream_request(message)
                trace = infer_path.prepare(infer_request, metadata, since, one_answer=False)
                deliver: Callable[[Any], None]
                if pool_size is None:
                    pool = None
                    responses = server.infer_stream(infer_request)
                    deliver = emit
                else:
                    pool = ResponsePool(pool_size)
                    responses = server.infer_stream(infer_request, pool=pool)
                    deliver = _Pooled.putter(emit, pool)
                async for response in responses:
                    if response.final and not response.outputs and not response.parameters:
                        # a flag-only completion: sent only when the client asked for it
                        if empty_final:
                            deliver(encode_stream_response(response, infer_request, True))
                        elif pool is not None:
                            pool.release()
                        continue
                    deliver(encode_stream_response(response, infer_request, response.final))
                return
            except TritonError as exc:
                error = exc
            except Exception as exc:
                error = unexpected(exc)
            finally:
                if trace is not None:  # the stream's writer sends: no send timestamps here
                    trace.timestamp("INFER_RESPONSE_COMPLETE")
                    trace.end()
            emit(error if raise_errors else encode_stream_error(error.message, request_id))

        async def read() -> None:
            messages = aiter(request_iterator)
            try:
                while True:
                    # at the bound the stream is not read: flow control holds the client
                    ticket = await room.take()
                    try:
                        message = await anext(messages)
                    except StopAsyncIteration:
                        break
                    ordered = answered_in_order(server, message.model_name, message.model_version)
                    place = in_order.reserve() if ordered else None
                    task = asyncio.create_task(answer(message, place, ticket))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                # the client closed its side: finish what is in flight, then end the stream
                if tasks:
                    await asyncio.wait(set(tasks))
            except grpc.aio.AbortError:
                pass  # an error status already ended the stream: nothing more to read
            except Exception as exc:
                queue.put_nowait((unexpected(exc), None))
            queue.put_nowait((_END, None))

        reader = asyncio.create_task(read())
        try:
            while True:
                item, ticket = await queue.get()
                try:
                    if item is _END:
                        return
                    if isinstance(item, TritonError):
                        await _abort(context, item)
                    if item.__class__ is _Pooled:
                        # its room is free once its write begins, as Triton pops a response
                        # from the pool when it hands it to gRPC's Write
                        item.pool.release()
                        await context.write(item.message)
                        continue
                    await context.write(item)
                finally:
                    if ticket is not None:
                        ticket.written()
        finally:
            # the client went away, or an error ended the stream: stop the work in flight
            reader.cancel()
            for task in list(tasks):
                task.cancel()

    # -- system shared memory --------------------------------------------------------------

    @_aborts_on_error
    async def SystemSharedMemoryStatus(
        self, request: pb.SystemSharedMemoryStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.SystemSharedMemoryStatusResponse:
        """Every registered system region (or the one named), by name."""
        response = pb.SystemSharedMemoryStatusResponse()
        _fill_regions(response.regions, self._server.system_shared_memory_status(request.name))
        return response

    @_aborts_on_error
    async def SystemSharedMemoryRegister(
        self, request: pb.SystemSharedMemoryRegisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.SystemSharedMemoryRegisterResponse:
        self._server.register_system_shared_memory(
            request.name, request.key, request.byte_size, request.offset
        )
        return pb.SystemSharedMemoryRegisterResponse()

    @_aborts_on_error
    async def SystemSharedMemoryUnregister(
        self, request: pb.SystemSharedMemoryUnregisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.SystemSharedMemoryUnregisterResponse:
        """One region, or every system region when no name is given."""
        self._server.unregister_system_shared_memory(request.name)
        return pb.SystemSharedMemoryUnregisterResponse()

    # -- CUDA shared memory ----------------------------------------------------------------

    @_aborts_on_error
    async def CudaSharedMemoryRegister(
        self, request: pb.CudaSharedMemoryRegisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.CudaSharedMemoryRegisterResponse:
        """Open a client's CUDA IPC handle (64 bytes, checked before any CUDA call)."""
        # opening a handle can take a while (the device's context starts on first use)
        await asyncio.to_thread(
            self._server.register_cuda_shared_memory,
            request.name,
            request.raw_handle,
            request.device_id,
            request.byte_size,
        )
        return pb.CudaSharedMemoryRegisterResponse()

    @_aborts_on_error
    async def CudaSharedMemoryStatus(
        self, request: pb.CudaSharedMemoryStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.CudaSharedMemoryStatusResponse:
        response = pb.CudaSharedMemoryStatusResponse()
        _fill_regions(response.regions, self._server.cuda_shared_memory_status(request.name))
        return response

    @_aborts_on_error
    async def CudaSharedMemoryUnregister(
        self, request: pb.CudaSharedMemoryUnregisterRequest, context: grpc.aio.ServicerContext
    ) -> pb.CudaSharedMemoryUnregisterResponse:
        self._server.unregister_cuda_shared_memory(request.name)
        return pb.CudaSharedMemoryUnregisterResponse()

    @_aborts_on_error
    async def TraceSetting(
        self, request: pb.TraceSettingRequest, context: grpc.aio.ServicerContext
    ) -> pb.TraceSettingResponse:
        """Triton's trace settings, global or of one model; an empty value list clears."""
        update = {key: list(value.value) or None for key, value in request.settings.items()}
        settings = trace_setting(self._server, request.model_name, update, grpc=True)
        response = pb.TraceSettingResponse()
        for key, values in settings.items():
            response.settings[key].value.extend(values)
        return response

    # -- logging extension ---------------------------------------------------------------

    @_aborts_on_error
    async def LogSettings(
        self, request: pb.LogSettingsRequest, context: grpc.aio.ServicerContext
    ) -> pb.LogSettingsResponse:
        """The log settings, after applying the ones the request sets."""
        given = {
            key: (value.WhichOneof("parameter_choice"), _setting_value(value))
            for key, value in request.settings.items()
        }
        settings = logging_extension.update(logging_extension.changes_from_grpc(given))
        response = pb.LogSettingsResponse()
        for key, value in settings.items():
            _set_setting_value(response.settings[key], value)
        return response


class HealthServicer(health_pb2_grpc.HealthServicer):
    """``grpc.health.v1.Health/Check``: SERVING while the server is ready.

    Restricted with the health group, as Triton restricts it.
    """

    def __init__(self, server: ServerAPI, restrictions: Restrictions | None = None) -> None:
        self._server = server
        restriction = (restrictions or {}).get(HEALTH_CHECK_GROUP)
        if restriction is not None:
            self.Check = _guarded(self.Check, restriction)  # type: ignore[method-assign]

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext
    ) -> health_pb2.HealthCheckResponse:
        """SERVING when ready, NOT_SERVING otherwise (whatever the service name, as Triton)."""
        try:
            ready = await self._server.check_ready()
        except Exception:
            log.exception("readiness check failed")
            ready = False
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if ready
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        return health_pb2.HealthCheckResponse(status=status)


class _End:
    """Marks the end of a stream's answers."""


_END: Final = _End()


class _Pooled(NamedTuple):
    """A response that holds room in its request's pool until its write begins."""

    message: Any
    pool: ResponsePool

    @staticmethod
    def putter(put: Callable[[_StreamItem], None], pool: ResponsePool) -> Callable[[Any], None]:
        return lambda message: put(_Pooled(message, pool))


_StreamItem = pb.ModelStreamInferResponse | TritonError | _End | _Pooled


def _fill_regions(regions: Any, statuses: Sequence[Any]) -> None:
    """A status response's ``regions`` map from status rows (same field names)."""
    for status in statuses:
        region = regions[status.name]
        for field in dataclasses.fields(status):
            setattr(region, field.name, getattr(status, field.name))


def _check_repository_name(name: str) -> None:
    if name:
        raise unsupported("'repository_name' specification is not supported")


def _wants_grpc_errors(context: grpc.aio.ServicerContext) -> bool:
    metadata = context.invocation_metadata()
    if not metadata:
        return False
    for key, value in metadata:
        if key == STREAM_ERROR_HEADER:
            return value == "true"
    return False
