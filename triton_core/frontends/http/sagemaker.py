"""Triton's SageMaker endpoint (``--allow-sagemaker``): ``GET /ping``, ``POST /invocations``.

``/invocations`` runs the model ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`` names, with a KServe v2
infer body (``SAGEMAKER_TRITON_INFERENCE_TYPE=infer``, the default) or a generate body. A
binary-extension body says its JSON header's size in its Content-Type,
``application/vnd.sagemaker-triton.binary+json;json-header-size=<n>``, and an answer with
binary outputs says it the same way; errors have the v2 endpoint's statuses. The multi-model
routes (``/models``) are :mod:`.sagemaker_mme`; their invoke answers every error 400, or 507
when its message says memory ran out.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final
from urllib.parse import quote

from triton_core.errors import TritonError
from triton_core.frontends.cloud import SageMakerOptions
from triton_core.frontends.http.cloud import CloudEndpoint, raw_path, respond
from triton_core.frontends.http.codec import HEADER_LENGTH
from triton_core.frontends.http.decoding import error_body
from triton_core.frontends.http.fast_path import ASGIApp, Receive, Scope, Send
from triton_core.frontends.http.sagemaker_mme import (
    MultiModelEndpoint,
    out_of_memory_status,
)
from triton_core.frontends.server_api import ServerAPI

logger = logging.getLogger(__name__)

BINARY_MIME: Final = "application/vnd.sagemaker-triton.binary+json;json-header-size="
#: Triton's multi-model routes: ``/models``, ``/models/<name>``, ``/models/<name>/invoke``
_MODELS: Final = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")
_JSON_CONTENT_TYPE: Final = (b"content-type", b"application/json")


class SageMakerApp(CloudEndpoint):
    """The SageMaker listener's ASGI app."""

    binary_mime = BINARY_MIME

    def __init__(
        self,
        server: ServerAPI,
        app: ASGIApp,
        options: SageMakerOptions,
        **limits: Any,
    ) -> None:
        super().__init__(server, app, **limits)
        self.options = options
        self.multi_model = MultiModelEndpoint(server, options.models_root, self.json_limits)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = raw_path(scope)
        if path == "/ping":
            await self.health(scope, send, live=self.options.ping_mode == "live")
        elif path == "/invocations":
            await self.invocations(scope, receive, send)
        elif (match := _MODELS.fullmatch(path)) is not None:
            await self.models_route(scope, receive, send, match.group(1) or "", match.group(2))
        else:
            logger.debug("SageMaker error: %s %s - 400", scope["method"], path)
            await respond(send, 400)

    async def invocations(self, scope: Scope, receive: Receive, send: Send) -> None:
        model = self.options.default_model
        kind = self.options.inference_type
        if kind == "infer":
            await self.infer(scope, receive, send, model)
            return
        # generate and generate_stream: as the v2 generate routes of the default model
        path = f"/v2/models/{model}/{kind}"
        raw = f"/v2/models/{quote(model, safe='')}/{kind}"
        await self.forward(scope, receive, send, path, scope["method"], raw)

    async def models_route(
        self, scope: Scope, receive: Receive, send: Send, name: str, invoke: str | None
    ) -> None:
        """The multi-model routes (:mod:`.sagemaker_mme`), by method as Triton routes them."""
        method = scope["method"]
        endpoint = self.multi_model
        if method == "GET":
            if await self.refused(scope, send, "model-repository"):
                return
            if name:
                await endpoint.get_model(send, name)
            else:
                await endpoint.list_models(send)
        elif method == "POST" and invoke:
            if name not in endpoint.models:
                await respond(send, 404)
                return
            target = endpoint.target(scope, name)
            logger.info("Invoking SageMaker TargetModel: %s", target)
            await self.infer(scope, receive, send, target, failure=invoke_failure)
        elif method == "POST":
            if not await self.refused(scope, send, "model-repository"):
                await endpoint.load(scope, receive, send, self.max_input_size)
        elif method == "DELETE":
            if not await self.refused(scope, send, "model-repository"):
                await endpoint.unload(scope, send, name)
        else:
            await respond(send, 400)

    def answer_headers(self, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
        size = headers.get(HEADER_LENGTH)
        if size is None:
            return [_JSON_CONTENT_TYPE]
        return [(b"content-type", f"{BINARY_MIME}{size}".encode())]


def invoke_failure(error: TritonError) -> tuple[int, bytes]:
    """A multi-model invoke's failure, whatever its kind: 400, or 507 when memory ran out."""
    return out_of_memory_status(error.message), error_body(error.message)
