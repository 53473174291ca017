"""The OpenAI-compatible HTTP API as a falcon ASGI app, behind a thin ASGI gate.

Routes (Triton's ``python/openai`` frontend):

=======  =====================================  ==================================
GET      ``/v1/models``, ``/v1/models/{id}``    model-repository
POST     ``/v1/models/{id}/load`` ``/unload``   model-repository
POST     ``/v1/completions``                    inference
POST     ``/v1/chat/completions``               inference
POST     ``/v1/embeddings``                     inference
GET      ``/health/ready``                      health
GET      ``/metrics``                           metrics (the server's Prometheus text)
=======  =====================================  ==================================

The gate checks ``--openai-restricted-api`` (by API group, 401 with OpenAI's error object)
and ``--openai-api-key`` (``Authorization: Bearer``, every ``/v1`` route), both with
:func:`hmac.compare_digest`, before falcon sees the request. The HTTP protocol in front of
it has already held the client to every limit of docs/security.md (body size from
``--http-max-input-size``, header sizes, deadlines, connections); bodies are parsed here
with the JSON element and depth limits of ``--http-max-json-elements`` and
``--http-max-json-depth``, and checked against the schema before anything else.

A streamed answer is written as server-sent events; when the client goes away the
generation is cancelled (the model sees ``is_cancelled()``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import falcon
import falcon.asgi
import orjson
from triton_core_openai import schema
from triton_core_openai.errors import OpenAIError, server_error
from triton_core_openai.service import OpenAIService

logger = logging.getLogger("triton_core_openai")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: --openai-restricted-api groups: the (method, path prefix) pairs each one guards
API_GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "inference": (
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/embeddings"),
    ),
    "model-repository": (("GET", "/v1/models"), ("POST", "/v1/models/")),
    "metrics": (("GET", "/metrics"),),
    "health": (("GET", "/health/ready"),),
}

#: bodies larger than this are parsed off the event loop
_OFF_LOOP_BYTES = 1 << 20
#: the scope key under which the gate leaves the connection's receive()
_RECEIVE = "triton_core_openai.receive"


class Restrictions:
    """``--openai-restricted-api <apis> <header> <value>`` groups, checked at start."""

    def __init__(self, groups: list[list[str]] | None) -> None:
        self._by_api: dict[str, tuple[str, bytes]] = {}
        for apis, header, value in groups or ():
            for api in apis.split(","):
                if api not in API_GROUPS:
                    raise ValueError(
                        f"--openai-restricted-api: Unknown API '{api}'. Available APIs: "
                        f"{list(API_GROUPS)}"
                    )
                if api in self._by_api:
                    raise ValueError(
                        f"--openai-restricted-api: restricted api '{api}' can not be specified "
                        "in multiple config groups"
                    )
                self._by_api[api] = (header.lower(), value.encode())

    def summary(self) -> dict[str, str]:
        """Each restricted API and its header's name (never the value), for the log."""
        return {api: header for api, (header, _) in self._by_api.items()}

    def guard(self, method: str, path: str) -> tuple[str, bytes] | None:
        for api, (header, value) in self._by_api.items():
            for guarded_method, prefix in API_GROUPS[api]:
                if method == guarded_method and path.startswith(prefix):
                    return header, value
        return None


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def _answer(send: Send, error: OpenAIError, headers: list[tuple[bytes, bytes]] = []) -> None:  # noqa: B006
    body = error.encode()
    await send(
        {
            "type": "http.response.start",
            "status": error.status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Gate:
    """API restrictions and the API key, then ``/metrics`` or the falcon app."""

    def __init__(
        self,
        app: ASGIApp,
        metrics: ASGIApp,
        restrictions: Restrictions,
        api_key: str | None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.restrictions = restrictions
        self.api_key = None if api_key is None else f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        guard = self.restrictions.guard(method, path)
        if guard is not None:
            header, expected = guard
            given = _header(scope, header.encode())
            if given is None or not hmac.compare_digest(given, expected):
                message = f"This API is restricted, expecting header '{header}' with valid value"
                error = OpenAIError(401, message, code="invalid_auth", with_detail=False)
                await _answer(send, error)
                return
        if self.api_key is not None and path.startswith("/v1/"):
            given = _header(scope, b"authorization") or b""
            if not hmac.compare_digest(given, self.api_key):
                error = OpenAIError(
                    401,
                    "Incorrect API key provided: expecting 'Authorization: Bearer <key>' with "
                    "the key of --openai-api-key",
                    code="invalid_api_key",
                )
                await _answer(send, error, [(b"www-authenticate", b"Bearer")])
                return
        if path == "/metrics":
            await self.metrics(scope, receive, send)
            return
        scope[_RECEIVE] = receive
        await self.app(scope, receive, send)


class JsonLimits:
    def __init__(self, max_elements: int, max_depth: int) -> None:
        self.max_elements = max_elements
        self.max_depth = max_depth


def _check_depth(doc: Any, max_depth: int) -> None:
    """Refuse JSON nested deeper than ``max_depth`` (without recursion)."""
    stack = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value
        if depth > max_depth:
            raise OpenAIError(
                400,
                f"the request JSON is nested deeper than {max_depth}, the limit "
                "(--http-max-json-depth)",
            )
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _json_error(message: str) -> OpenAIError:
    problem = {"type": "json_invalid", "loc": ["body", 0], "msg": "JSON decode error", "input": {}}
    return OpenAIError(
        422, f"JSON decode error: {message}", detail=[{**problem, "ctx": {"error": message}}]
    )


async def read_json(req: falcon.asgi.Request, limits: JsonLimits) -> Any:
    """The request's JSON body, within the element and depth limits."""
    text = await req.stream.read()
    if len(text) > limits.max_elements:
        count = text.count(b",") + text.count(b"[") + text.count(b"{")
        if count > limits.max_elements:
            raise OpenAIError(
                400,
                f"the request JSON has {count} elements, more than the limit of "
                f"{limits.max_elements} (--http-max-json-elements)",
            )
    try:
        if len(text) > _OFF_LOOP_BYTES:
            doc = await asyncio.to_thread(orjson.loads, text)
        else:
            doc = orjson.loads(text)
    except orjson.JSONDecodeError as error:
        raise _json_error(str(error)) from error
    if isinstance(doc, dict | list):
        _check_depth(doc, limits.max_depth)
    return doc


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def events_until_disconnect(
    events: AsyncIterator[bytes], receive: Receive | None
) -> AsyncIterator[bytes]:
    """``events`` until they end or the client goes away, which cancels the generation; an
    error while streaming is sent as an ``error`` event (the status is already 200).

    A task reads ``events`` into a queue, and the client's going away puts its own item
    there: a chunk costs one queue hand-over, not a task and a wait on two futures."""
    if receive is None:
        async with contextlib.aclosing(events) as source:
            try:
                async for event in source:
                    yield event
            except OpenAIError as error:
                yield _error_event(error)
        return
    queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()

    async def read() -> None:
        try:
            async with contextlib.aclosing(events) as source:
                async for event in source:
                    queue.put_nowait((_EVENT, event))
        except Exception as error:  # handed to the reader below, which raises or reports it
            queue.put_nowait((_FAILED, error))
        else:
            queue.put_nowait((_ENDED, None))

    reader = asyncio.ensure_future(read())
    gone = asyncio.ensure_future(_wait_disconnect(receive))
    gone.add_done_callback(lambda _: queue.put_nowait((_GONE, None)))
    try:
        while True:
            kind, item = await queue.get()
            if kind == _EVENT:
                yield item
            elif kind == _ENDED:
                return
            elif kind == _GONE:
                logger.debug("client disconnected: generation cancelled")
                return
            elif isinstance(item, OpenAIError):
                yield _error_event(item)
                return
            else:
                raise item
    finally:
        gone.cancel()
        if not reader.done():
            reader.cancel()  # stops the model (its stream is closed)
            with contextlib.suppress(asyncio.CancelledError):
                await reader


#: what the reader task of :func:`events_until_disconnect` queues
_EVENT, _ENDED, _FAILED, _GONE = range(4)


def _error_event(error: OpenAIError) -> bytes:
    return b"data: " + orjson.dumps({"error": error.body()["error"]}) + b"\n\n"


def _json(resp: falcon.asgi.Response, document: Any, status: int = 200) -> None:
    resp.status = status
    resp.content_type = falcon.MEDIA_JSON
    resp.data = orjson.dumps(document)


def _sse(
    req: falcon.asgi.Request, resp: falcon.asgi.Response, events: AsyncIterator[bytes]
) -> None:
    resp.content_type = "text/event-stream; charset=utf-8"
    resp.set_header("Cache-Control", "no-cache")
    resp.stream = events_until_disconnect(events, req.scope.get(_RECEIVE))


def _named(model: str) -> str:
    """A route's model name: an empty path segment matches no route (as in FastAPI)."""
    if not model:
        raise OpenAIError(404, "Not Found")
    return model


class _Models:
    def __init__(self, service: OpenAIService) -> None:
        self.service = service

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        _json(resp, self.service.models())

    async def on_get_one(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, model: str
    ) -> None:
        _json(resp, self.service.model(_named(model)))

    async def on_post_load(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, model: str
    ) -> None:
        await req.stream.exhaust()  # a body is not used, but held to the size limit
        _json(resp, await self.service.load_model(_named(model)))

    async def on_post_unload(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, model: str
    ) -> None:
        await req.stream.exhaust()  # a body is not used, but held to the size limit
        _json(resp, await self.service.unload_model(_named(model)))


class _Generate:
    """``/v1/completions``, ``/v1/chat/completions`` or ``/v1/embeddings``."""

    def __init__(
        self,
        check: schema.Check,
        answer: Callable[[dict[str, Any]], Awaitable[Any]],
        limits: JsonLimits,
    ) -> None:
        self.check = check
        self.answer = answer
        self.limits = limits

    async def on_post(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        body = schema.validate(self.check, await read_json(req, self.limits))
        answer = await self.answer(body)
        if isinstance(answer, dict):
            _json(resp, answer)
        else:
            _sse(req, resp, answer)


class _Ready:
    def __init__(self, service: OpenAIService) -> None:
        self.service = service

    async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
        if not self.service.server.is_ready():
            raise OpenAIError(400, "Attached inference engine is not ready for inference requests.")
        resp.status = 200
        resp.data = b""


async def _openai_error(
    req: falcon.asgi.Request, resp: falcon.asgi.Response, error: OpenAIError, params: Any
) -> None:
    resp.status = error.status
    resp.content_type = falcon.MEDIA_JSON
    resp.data = error.encode()


async def _http_error(
    req: falcon.asgi.Request, resp: falcon.asgi.Response, error: falcon.HTTPError, params: Any
) -> None:
    status = error.status_code
    message = {404: "Not Found", 405: "Method Not Allowed"}.get(status, error.title or "Error")
    await _openai_error(req, resp, OpenAIError(status, message), params)
    for name, value in (error.headers or {}).items():
        resp.set_header(name, value)


async def _unexpected(
    req: falcon.asgi.Request, resp: falcon.asgi.Response, error: Exception, params: Any
) -> None:
    logger.exception("error answering %s %s", req.method, req.path)
    await _openai_error(req, resp, server_error(str(error)), params)


def create_app(service: OpenAIService, limits: JsonLimits) -> falcon.asgi.App:
    app = falcon.asgi.App(media_type=falcon.MEDIA_JSON)
    app.req_options.strip_url_path_trailing_slash = True
    models = _Models(service)
    app.add_route("/v1/models", models)
    app.add_route("/v1/models/{model}", models, suffix="one")
    app.add_route("/v1/models/{model}/load", models, suffix="load")
    app.add_route("/v1/models/{model}/unload", models, suffix="unload")
    app.add_route("/v1/completions", _Generate(schema.COMPLETION, service.completion, limits))
    app.add_route("/v1/chat/completions", _Generate(schema.CHAT, service.chat, limits))
    app.add_route("/v1/embeddings", _Generate(schema.EMBEDDING, service.embedding, limits))
    app.add_route("/health/ready", _Ready(service))
    app.add_error_handler(Exception, _unexpected)
    app.add_error_handler(falcon.HTTPError, _http_error)
    app.add_error_handler(OpenAIError, _openai_error)
    return app
