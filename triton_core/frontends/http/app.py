"""The HTTP/REST frontend: a falcon ASGI app speaking Triton's KServe v2 protocol.

Resources only translate between HTTP and ``triton_core`` types and call the server; every
error leaves as Triton's ``{"error": "<message>"}`` with the status of its error code.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import http
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import falcon
import falcon.asgi
import orjson

from triton_core.errors import TritonError, internal, invalid_arg, unsupported
from triton_core.frontends import logging_extension
from triton_core.frontends.common import parse_version
from triton_core.frontends.header_forwarding import HeaderForwarder
from triton_core.frontends.http import compression
from triton_core.frontends.http.answers import encode_statistics
from triton_core.frontends.http.codec import (
    DEFAULT_JSON_LIMITS,
    JsonLimits,
    parse_json,
)
from triton_core.frontends.http.decoding import (  # the names other modules import from here
    error_body,
)
from triton_core.frontends.http.generate import GenerateResource
from triton_core.frontends.http.infer import HttpInfer
from triton_core.frontends.http.restricted import RestrictedApiMiddleware
from triton_core.frontends.http.routing import DigitsConverter, RawPathRequest, Router, routed_name
from triton_core.frontends.http.trace import TraceSettingResource
from triton_core.frontends.restricted import Restrictions
from triton_core.frontends.server_api import ServerAPI
from triton_core.shared_memory.cuda import BAD_HANDLE as CUDA_BAD_HANDLE

if TYPE_CHECKING:
    from triton_core.types import (
        TensorMetadata,
    )

logger = logging.getLogger(__name__)

#: bodies (compressed or not) above this are (de)compressed off the event loop
_OFFLOAD_BYTES: Final = 1 << 20

_JSON: Final = "application/json"
#: base64 of a 64-byte cudaIpcMemHandle_t
_CUDA_HANDLE_B64_CHARS: Final = 88
#: a CUDA register body is a handle and two numbers: far less than this
_CUDA_REGISTER_BODY_BYTES: Final = 1 << 16


def create_app(
    server: ServerAPI,
    *,
    max_input_size: int = 1 << 26,
    restrictions: Restrictions | None = None,
    json_limits: JsonLimits = DEFAULT_JSON_LIMITS,
    header_forwarder: HeaderForwarder | None = None,
) -> falcon.asgi.App:
    """Build the ASGI app serving ``server`` over Triton's HTTP/REST protocol.

    ``max_input_size`` caps request bodies, before and after decompression
    (``--http-max-input-size``); ``json_limits`` caps the JSON of infer and repository
    requests. ``restrictions``: the API groups that answer only requests with a header
    (``--http-restricted-api``).
    """
    app = falcon.asgi.App(request_type=RawPathRequest, router=Router())
    if restrictions:
        app.add_middleware(RestrictedApiMiddleware(restrictions))
    app.router_options.converters["digits"] = DigitsConverter
    app.set_error_serializer(_serialize_http_error)
    app.add_error_handler(TritonError, _handle_triton_error)
    app.add_error_handler(Exception, _handle_unexpected_error)

    health = _HealthResource(server)
    app.add_route("/v2", _ServerMetadataResource(server))
    app.add_route("/v2/health/live", health, suffix="live")
    app.add_route("/v2/health/ready", health, suffix="ready")

    model = _ModelResource(server, max_input_size, json_limits, header_forwarder)
    generate_routes = {
        kind: GenerateResource(
            server,
            max_input_size,
            streaming=kind.endswith("stream"),
            json_limits=json_limits,
            header_forwarder=header_forwarder,
        )
        for kind in ("generate", "generate_stream")
    }
    for prefix in ("/v2/models/{model_name}", "/v2/models/{model_name}/versions/{version:digits}"):
        app.add_route(prefix, model)
        app.add_route(prefix + "/ready", model, suffix="ready")
        app.add_route(prefix + "/config", model, suffix="config")
        app.add_route(prefix + "/infer", model, suffix="infer")
        app.add_route(prefix + "/stats", model, suffix="stats")
        for kind, resource in generate_routes.items():
            app.add_route(f"{prefix}/{kind}", resource)
    # checked before the model routes by Triton: a model named 'stats' has no metadata URL
    app.add_route("/v2/models/stats", _AllStatisticsResource(server))

    trace = TraceSettingResource(server, _read_body)
    app.add_route("/v2/trace/setting", trace)
    app.add_route("/v2/models/{model_name}/trace/setting", trace)  # no version form (404)
    app.add_route("/v2/logging", _LoggingResource(max_input_size, json_limits))

    repository = _RepositoryResource(server, max_input_size, json_limits)
    named_repository = _Unsupported("'repository_name' specification", "POST")
    app.add_route("/v2/repository/index", repository, suffix="index")
    app.add_route("/v2/repository/models/{model_name}/load", repository, suffix="load")
    app.add_route("/v2/repository/models/{model_name}/unload", repository, suffix="unload")
    app.add_route("/v2/repository/{repository_name}/index", named_repository)
    app.add_route("/v2/repository/{repository_name}/models/{model_name}/load", named_repository)
    app.add_route("/v2/repository/{repository_name}/models/{model_name}/unload", named_repository)

    system = _SystemSharedMemoryResource(server, max_input_size, json_limits)
    app.add_route("/v2/systemsharedmemory/status", system, suffix="status")
    app.add_route("/v2/systemsharedmemory/region/{region}/status", system, suffix="status")
    app.add_route("/v2/systemsharedmemory/register", system, suffix="register")
    app.add_route("/v2/systemsharedmemory/region/{region}/register", system, suffix="register")
    app.add_route("/v2/systemsharedmemory/unregister", system, suffix="unregister")
    app.add_route("/v2/systemsharedmemory/region/{region}/unregister", system, suffix="unregister")
    cuda = _CudaSharedMemoryResource(server, max_input_size, json_limits)
    app.add_route("/v2/cudasharedmemory/status", cuda, suffix="status")
    app.add_route("/v2/cudasharedmemory/region/{region}/status", cuda, suffix="status")
    app.add_route("/v2/cudasharedmemory/register", cuda, suffix="register")
    app.add_route("/v2/cudasharedmemory/region/{region}/register", cuda, suffix="register")
    app.add_route("/v2/cudasharedmemory/unregister", cuda, suffix="unregister")
    app.add_route("/v2/cudasharedmemory/region/{region}/unregister", cuda, suffix="unregister")
    return app


# ------------------------------------------------------------------------------------------
# resources


class _HealthResource:
    """``/v2/health/live|ready``: 200 or 400, empty bodies."""

    def __init__(self, server: ServerAPI) -> None:
        self._server = server

    async def on_get_live(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.status = 200 if self._server.is_live() else 400

    async def on_get_ready(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.status = 200 if await self._server.check_ready() else 400


class _ServerMetadataResource:
    """``/v2``: server name, version and extensions."""

    def __init__(self, server: ServerAPI) -> None:
        self._server = server

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        metadata = self._server.metadata()
        resp.content_type = _JSON
        resp.data = orjson.dumps(
            {
                "name": metadata.name,
                "version": metadata.version,
                "extensions": list(metadata.extensions),
            }
        )


class _ModelResource:
    """``/v2/models/{m}[/versions/{v}][/ready|/config|/infer]``."""

    def __init__(
        self,
        server: ServerAPI,
        max_input_size: int,
        json_limits: JsonLimits,
        header_forwarder: HeaderForwarder | None = None,
    ) -> None:
        self._server = server
        self._max_input_size = max_input_size
        self._json_limits = json_limits
        self._infer = HttpInfer(
            server,
            max_input_size=max_input_size,
            json_limits=json_limits,
            header_forwarder=header_forwarder,
        )

    async def on_get(
        self,
        req: falcon.asgi.Request,
        resp: falcon.asgi.Response,
        model_name: str,
        version: str = "",
    ) -> None:
        model_name = routed_name(req, model_name)
        metadata = self._server.model_metadata(model_name, parse_version(version))
        resp.content_type = _JSON
        resp.data = orjson.dumps(
            {
                "name": metadata.name,
                "versions": list(metadata.versions),
                "platform": metadata.platform,
                "inputs": [_tensor_metadata(t) for t in metadata.inputs],
                "outputs": [_tensor_metadata(t) for t in metadata.outputs],
            }
        )

    async def on_get_ready(
        self,
        req: falcon.asgi.Request,
        resp: falcon.asgi.Response,
        model_name: str,
        version: str = "",
    ) -> None:
        model_name = routed_name(req, model_name)
        if not await self._server.check_model_ready(model_name, parse_version(version)):
            resp.status = 400
            resp.content_type = _JSON
            resp.data = b'{"error":"Model version not ready"}'

    async def on_get_stats(
        self,
        req: falcon.asgi.Request,
        resp: falcon.asgi.Response,
        model_name: str,
        version: str = "",
    ) -> None:
        model_name = routed_name(req, model_name)
        statistics = self._server.statistics(model_name, parse_version(version))
        resp.content_type = _JSON
        resp.data = encode_statistics(statistics)

    async def on_get_config(
        self,
        req: falcon.asgi.Request,
        resp: falcon.asgi.Response,
        model_name: str,
        version: str = "",
    ) -> None:
        model_name = routed_name(req, model_name)
        config = self._server.model_config_json(model_name, parse_version(version))
        resp.content_type = _JSON
        resp.data = orjson.dumps(config)

    async def on_post_infer(
        self,
        req: falcon.asgi.Request,
        resp: falcon.asgi.Response,
        model_name: str,
        version: str = "",
    ) -> None:
        """Through the one infer path, as the protocol and :class:`~.fast_path.InferRoute`
        answer it (this route serves the app when it runs alone)."""
        infer = self._infer
        since = infer.received()
        body = await self._read_body(req)
        target = (routed_name(req, model_name), version)
        headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in req.headers.items()
        ]
        status, headers_out, parts = await infer.answered(target, headers, body, since)
        resp.status = status
        resp.set_headers(headers_out)
        resp.data = b"".join(parts)

    async def _read_body(self, req: falcon.asgi.Request) -> bytes:
        return await _read_body(req, self._max_input_size)


async def _read_body(req: falcon.asgi.Request, limit: int) -> bytes:
    """The request body, refused when over ``limit`` bytes (declared or counted)."""
    length = req.content_length
    if length is not None:
        if length > limit:
            raise compression.too_large("request body", length, limit)
        return await req.stream.readall() if length else b""
    # chunked transfer: count as we go
    chunks = []
    size = 0
    async for chunk in req.stream:
        size += len(chunk)
        if size > limit:
            raise compression.too_large("request body", None, limit)
        chunks.append(chunk)
    return b"".join(chunks)


class _RepositoryResource:
    """The model repository extension: index, load (with overrides), unload."""

    def __init__(self, server: ServerAPI, max_input_size: int, json_limits: JsonLimits) -> None:
        self._server = server
        self._max_input_size = max_input_size
        self._json_limits = json_limits

    async def _json_body(self, req: falcon.asgi.Request) -> dict[str, Any]:
        """The body as a JSON object; what is not answers INTERNAL (500), as Triton's
        repository routes do."""
        body = await _read_body(req, self._max_input_size)
        if not body.strip():
            return {}
        try:
            parsed = parse_json(body, self._json_limits, "the request JSON buffer")
        except TritonError as error:
            raise internal(error.message) from None
        if not isinstance(parsed, dict):
            raise internal("the request body must be a JSON object")
        return parsed

    async def on_post_index(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await self._json_body(req)
        ready = body.get("ready", False)
        if not isinstance(ready, bool):
            raise internal("'ready' must be a boolean in a repository index request")
        entries = []
        for entry in self._server.repository_index(ready):
            item: dict[str, Any] = {"name": entry.name}
            if entry.version >= 0:
                item["version"] = str(entry.version)
            if entry.state:
                item["state"] = entry.state
            if entry.reason:
                item["reason"] = entry.reason
            entries.append(item)
        resp.content_type = _JSON
        resp.data = orjson.dumps(entries)

    async def on_post_load(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, model_name: str
    ) -> None:
        model_name = routed_name(req, model_name)
        parameters = _parameters_of(await self._json_body(req))
        config = None
        files: dict[str, bytes] = {}
        for key, value in parameters.items():
            if not isinstance(value, str):
                raise internal(f"load parameter '{key}' must be a string")
            if key == "config":
                config = value
            elif key.startswith("file:"):
                try:
                    files[key[5:]] = base64.b64decode(value, validate=True)
                except ValueError:
                    raise invalid_arg(f"load parameter '{key}' is not valid base64") from None
            else:
                raise internal(f"unrecognized load parameter '{key}'")
        await self._server.load_model(model_name, config, files or None)

    async def on_post_unload(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, model_name: str
    ) -> None:
        model_name = routed_name(req, model_name)
        parameters = _parameters_of(await self._json_body(req))
        dependents = parameters.get("unload_dependents", False)
        if not isinstance(dependents, bool):
            raise invalid_arg("unload parameter 'unload_dependents' must be a boolean")
        await self._server.unload_model(model_name, dependents)


def _parameters_of(body: dict[str, Any]) -> dict[str, Any]:
    parameters = body.get("parameters", {})
    if not isinstance(parameters, dict):
        raise internal("'parameters' must be a JSON object")
    return parameters


class _SharedMemoryResource:
    """``status`` and ``unregister`` of one kind of region: rows as Triton writes them; and
    the steps every kind's ``register`` starts with."""

    def __init__(
        self,
        status: Callable[[str], list[Any]],
        unregister: Callable[[str], None],
        server: ServerAPI,
        max_input_size: int,
        json_limits: JsonLimits,
    ) -> None:
        self._status = status
        self._unregister = unregister
        self._server = server
        self._max_input_size = max_input_size
        self._json_limits = json_limits

    def _check_register(self, region: str, kind: str) -> None:
        self._server.check_client_shm()  # before anything else, as Triton
        if not region:
            raise invalid_arg(f"'region name' is necessary to register {kind} shared memory region")

    async def _register_body(self, req: falcon.asgi.Request, limit: int) -> dict[str, Any]:
        """The register request's JSON object, read and parsed within ``limit`` bytes."""
        body = await _read_body(req, limit)
        parsed = parse_json(body, self._json_limits, "the request JSON body") if body else {}
        if not isinstance(parsed, dict):
            raise invalid_arg("the shared memory register request must be a JSON object")
        return parsed

    async def on_get_status(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, region: str = ""
    ) -> None:
        resp.content_type = _JSON
        rows = self._status(routed_name(req, region))
        resp.data = orjson.dumps([dataclasses.asdict(row) for row in rows])

    async def on_post_unregister(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, region: str = ""
    ) -> None:
        self._unregister(routed_name(req, region))


class _SystemSharedMemoryResource(_SharedMemoryResource):
    """``/v2/systemsharedmemory[/region/{r}]/status|register|unregister``."""

    def __init__(self, server: ServerAPI, max_input_size: int, json_limits: JsonLimits) -> None:
        super().__init__(
            lambda region: server.system_shared_memory_status(region),
            lambda region: server.unregister_system_shared_memory(region),
            server,
            max_input_size,
            json_limits,
        )

    async def on_post_register(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, region: str = ""
    ) -> None:
        self._check_register(region, "system")
        parsed = await self._register_body(req, self._max_input_size)
        if "key" not in parsed:
            raise invalid_arg("Shared memory register request has no 'key' field")
        key = parsed["key"]
        if not isinstance(key, str):
            raise invalid_arg("Unable to parse 'key' of the shared memory register request")
        offset = _register_uint(parsed.get("offset", 0), "offset")
        if "byte_size" not in parsed:
            raise invalid_arg("Shared memory register request has no 'byte_size' field")
        byte_size = _register_uint(parsed["byte_size"], "byte_size")
        name = routed_name(req, region)
        self._server.register_system_shared_memory(name, key, byte_size, offset)


class _CudaSharedMemoryResource(_SharedMemoryResource):
    """``/v2/cudasharedmemory[/region/{r}]/status|unregister``, ``/region/{r}/register``."""

    def __init__(self, server: ServerAPI, max_input_size: int, json_limits: JsonLimits) -> None:
        super().__init__(
            lambda region: server.cuda_shared_memory_status(region),
            lambda region: server.unregister_cuda_shared_memory(region),
            server,
            max_input_size,
            json_limits,
        )

    async def on_post_register(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, region: str = ""
    ) -> None:
        """``{"raw_handle": {"b64": <cudaIpcMemHandle_t>}, "device_id", "byte_size"}``."""
        self._check_register(region, "cuda")
        limit = min(self._max_input_size, _CUDA_REGISTER_BODY_BYTES)
        if (req.content_length or 0) > limit:
            raise invalid_arg(
                f"the CUDA shared memory register request body is {req.content_length} bytes; "
                f"such a request needs far less than {limit}"
            )
        parsed = await self._register_body(req, limit)
        if "raw_handle" not in parsed:
            raise invalid_arg("Shared memory register request has no 'raw_handle' field")
        handle = parsed["raw_handle"]
        b64 = handle.get("b64") if isinstance(handle, dict) else None
        if not isinstance(b64, str):
            raise invalid_arg("Unable to parse 'b64' of the shared memory register request")
        if "byte_size" not in parsed:
            raise invalid_arg("Shared memory register request has no 'byte_size' field")
        byte_size = _register_uint(parsed["byte_size"], "byte_size")
        if "device_id" not in parsed:
            raise invalid_arg("Shared memory register request has no 'device_id' field")
        device_id = _register_uint(parsed["device_id"], "device_id")
        # opening a handle can take a while (the device's context starts on first use)
        register = self._server.register_cuda_shared_memory
        await asyncio.to_thread(register, region, _raw_handle(b64), device_id, byte_size)


def _raw_handle(b64: str) -> bytes:
    """The handle's bytes; a string longer than a base64 handle is refused undecoded."""
    if len(b64) > _CUDA_HANDLE_B64_CHARS:
        raise invalid_arg(CUDA_BAD_HANDLE)
    try:
        return base64.b64decode(b64, validate=True)
    except ValueError:
        raise invalid_arg(CUDA_BAD_HANDLE) from None


def _register_uint(value: Any, field: str) -> int:
    if type(value) is not int or not 0 <= value < 1 << 64:
        raise invalid_arg(f"Unable to parse '{field}' of the shared memory register request")
    return value


class _LoggingResource:
    """The logging extension: GET the log settings, POST changes to some of them."""

    def __init__(self, max_input_size: int, json_limits: JsonLimits) -> None:
        self._max_input_size = max_input_size
        self._json_limits = json_limits

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.content_type = _JSON
        resp.data = orjson.dumps(logging_extension.current())

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = await _read_body(req, self._max_input_size)
        parsed = parse_json(body, self._json_limits, "dynamic logging") if body.strip() else {}
        settings = logging_extension.update(logging_extension.changes_from_json(parsed))
        resp.content_type = _JSON
        resp.data = orjson.dumps(settings)


class _AllStatisticsResource:
    """``/v2/models/stats``: every ready model version."""

    def __init__(self, server: ServerAPI) -> None:
        self._server = server

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        resp.content_type = _JSON
        resp.data = encode_statistics(self._server.statistics())


class _Unsupported:
    """An endpoint of an extension this server does not implement (yet): 501."""

    def __init__(self, feature: str, *methods: str) -> None:
        self._message = f"{feature} is not supported"
        for method in methods:
            setattr(self, f"on_{method.lower()}", self._respond)

    async def _respond(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, **params: str
    ) -> None:
        raise unsupported(self._message)


def _tensor_metadata(tensor: TensorMetadata) -> dict[str, Any]:
    return {"name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape)}


async def _offload(size: int, function: Any, *args: Any) -> bytes:
    """Run a (de)compression inline when small, in a thread when it would stall the loop."""
    if size < _OFFLOAD_BYTES:
        return function(*args)
    return await asyncio.to_thread(function, *args)


# ------------------------------------------------------------------------------------------
# routing and errors


def _header_pairs(req: falcon.asgi.Request) -> list[tuple[str, str]]:
    return [(name.lower(), value) for name, value in req.headers.items()]


def _serialize_http_error(
    req: falcon.Request, resp: falcon.Response, exception: falcon.HTTPError
) -> None:
    """falcon's own errors (404 routing, 405, bad headers) in Triton's shape."""
    message = exception.description or http.HTTPStatus(exception.status_code).phrase
    resp.content_type = _JSON
    resp.data = error_body(message)


async def _handle_triton_error(
    req: falcon.asgi.Request, resp: falcon.asgi.Response, error: TritonError, params: Any
) -> None:
    resp.status = error.status.http_status
    resp.content_type = _JSON
    resp.data = error_body(error.message)


async def _handle_unexpected_error(
    req: falcon.asgi.Request, resp: falcon.asgi.Response, error: Exception, params: Any
) -> None:
    # falcon.HTTPError keeps falcon's own handler (more specific), so this is a real bug
    logger.exception("unexpected error handling %s %s", req.method, req.path, exc_info=error)
    resp.status = 500
    resp.content_type = _JSON
    resp.data = error_body(str(error) or type(error).__name__)
