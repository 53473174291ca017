"""Triton's Vertex AI endpoint (``--allow-vertex-ai``): the health and predict routes that
``AIP_HEALTH_ROUTE`` and ``AIP_PREDICT_ROUTE`` name.

Predict runs the default model (``--vertex-ai-default-model``, else the repository's only
model) with a KServe v2 infer body; a binary-extension body says its JSON header's size in
its Content-Type, ``application/vnd.vertex-ai-triton.binary+json;json-header-size=<n>``.
A predict request with ``X-Vertex-Ai-Triton-Redirect: <v2 path>`` is answered as that v2
route instead: metadata, health, readiness, config, statistics, infer, metrics, shared-memory
status and the repository index. As current Triton, changes (shared-memory registration,
load, unload) are refused through the redirect (403): they belong to the v2 endpoint.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final

from triton_core.frontends.common import parse_version
from triton_core.frontends.http.cloud import CloudEndpoint, header, raw_path, respond
from triton_core.frontends.http.fast_path import ASGIApp, Receive, Scope, Send, infer_failure
from triton_core.frontends.server_api import ServerAPI

logger = logging.getLogger(__name__)

BINARY_MIME: Final = "application/vnd.vertex-ai-triton.binary+json;json-header-size="
REDIRECT_HEADER: Final = "X-Vertex-Ai-Triton-Redirect"
_REDIRECT_KEY: Final = REDIRECT_HEADER.lower().encode()
#: Triton's v2 routes, as its HTTP endpoint matches them
_MODEL: Final = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([0-9]+))?"
    r"(?:/(infer|generate|generate_stream|ready|config|stats|trace/setting))?"
)
_SERVER: Final = re.compile(r"/v2(?:/health/(live|ready))?")
_SHARED_MEMORY: Final = re.compile(
    r"/v2/(systemsharedmemory|cudasharedmemory)(?:/region/([^/]+))?/(status|register|unregister)"
)
_REPOSITORY: Final = re.compile(r"/v2/repository(?:/([^/]+))?/(index|models/([^/]+)/(load|unload))")
#: the model routes a redirect reaches, by their last segment ("" is the model's metadata)
_MODEL_GETS: Final = frozenset(("", "ready", "config", "stats"))


def default_model(server: ServerAPI, name: str) -> str:
    """The model predict runs; raises ValueError with Triton's words when there is none."""
    ready = [entry.name for entry in server.repository_index(ready_only=True)]
    if not name:
        if len(ready) != 1:
            raise ValueError(
                "Expect the model repository contains only a single model if default model "
                "is not specified"
            )
        return ready[0]
    if name not in ready:
        raise ValueError(f"Expect the default model '{name}' is loaded")
    return name


class VertexAiApp(CloudEndpoint):
    """The Vertex AI listener's ASGI app."""

    binary_mime = BINARY_MIME

    def __init__(
        self,
        server: ServerAPI,
        app: ASGIApp,
        *,
        predict_route: re.Pattern[str],
        health_route: re.Pattern[str],
        model_name: str,
        metrics_app: ASGIApp | None,
        **limits: Any,
    ) -> None:
        super().__init__(server, app, **limits)
        self.predict_route = predict_route
        self.health_route = health_route
        self.model_name = model_name
        #: the metrics endpoint's app; None when metrics are off
        self.metrics_app = metrics_app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = raw_path(scope)
        if self.health_route.fullmatch(path):
            await self.health(scope, send, live=False)
            return
        if self.predict_route.fullmatch(path):
            target = header(scope, _REDIRECT_KEY)
            if target is None:
                await self.infer(scope, receive, send, self.model_name)
                return
            if await self.redirect(scope, receive, send, "/" + target):
                return
        logger.debug("Vertex AI error: %s %s - 400", scope["method"], path)
        await respond(send, 400)

    async def infer_version(
        self, scope: Scope, receive: Receive, send: Send, model: str, version: str
    ) -> None:
        try:
            number = parse_version(version)
        except Exception as exc:
            await respond(send, *infer_failure(exc, model))
            return
        await self.infer(scope, receive, send, model, number)

    async def redirect(self, scope: Scope, receive: Receive, send: Send, target: str) -> bool:
        """Answer as the v2 route ``target``; False when it names none (Triton: 400)."""
        # every redirect arrives as a POST to predict; the v2 handler wants its own method
        if scope["method"] != "POST":
            await respond(send, 405)
            return True
        logger.debug("Redirecting Vertex AI request: %s", target)
        if target == "/metrics":
            if self.metrics_app is None:
                await respond(send, 400)  # Triton: no metrics to format
            else:
                await self.forward(scope, receive, send, target, "GET", app=self.metrics_app)
            return True
        if target == "/v2/models/stats":
            await self.forward(scope, receive, send, target, "GET")
            return True
        match = _MODEL.fullmatch(target)
        if match is not None:
            model, version, kind = match.group(1), match.group(2) or "", match.group(3) or ""
            if kind == "infer":
                await self.infer_version(scope, receive, send, model, version)
                return True
            if kind in _MODEL_GETS:
                await self.forward(scope, receive, send, target, "GET")
                return True
        if _SERVER.fullmatch(target):
            await self.forward(scope, receive, send, target, "GET")
            return True
        return await self.redirect_guarded(scope, receive, send, target)

    async def redirect_guarded(
        self, scope: Scope, receive: Receive, send: Send, target: str
    ) -> bool:
        """Shared-memory status and the repository index; their changes are refused."""
        memory = _SHARED_MEMORY.fullmatch(target)
        if memory is not None:
            await self.redirect_read_only(scope, receive, send, target, memory.group(3) == "status")
            return True
        repository = _REPOSITORY.fullmatch(target)
        if repository is not None:
            index = repository.group(2) == "index"
            await self.redirect_read_only(scope, receive, send, target, index, "POST")
            return True
        return False

    async def redirect_read_only(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        target: str,
        reads: bool,
        method: str = "GET",
    ) -> None:
        """Forward a route that only reads; refuse one that changes something (403)."""
        if reads:
            await self.forward(scope, receive, send, target, method)
            return
        logger.debug("Vertex AI redirect blocked: %s", target)
        await respond(send, 403)
